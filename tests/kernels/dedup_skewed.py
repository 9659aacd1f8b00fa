"""A kernel without symmetry: PE p does p + 1 loads and dots, so every stream differs."""

PARAMS = {"n": 1}


def setup(host, p):
    x = host.random("x", (host.num_pes * 32, 64), "f16")
    return {"x": host.scatter("x", x, axis=0)}


def kernel(tl, x):
    for _ in range(tl.pid + 1):
        t = tl.load(tl.shard(x), (32, 64), "f16")
        tl.dot(t, t, trans_b=True)


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
