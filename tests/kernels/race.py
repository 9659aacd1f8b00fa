"""PE 0 rewrites x in its slice while PE 1 reads it: nothing orders the two."""

PARAMS = {"n": 256}


def setup(host, p):
    x = host.random("x", (p["n"],), "f32")
    return {"x": host.place("x", x, 0), "n": p["n"]}


def kernel(tl, x, n):
    if tl.pid == 0:
        t = tl.load(x, (n,), "f32")
        tl.store(x, t * 2.0)  # line 14
    elif tl.pid == 1:
        tl.load(x, (n,), "f32")  # line 16


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
