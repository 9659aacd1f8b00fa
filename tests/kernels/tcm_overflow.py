from _base import outputs, reference  # noqa: F401

PARAMS = {"n": 1 << 20}


def setup(host, p):
    x = host.random("x", (p["n"],), "f32")
    return {"x": host.replicate("x", x), "n": p["n"]}


def kernel(tl, x, n):
    a = tl.load(tl.shard(x), (n,), "f32")  # 4 MiB: more than the 2 MiB TCM
    del a
