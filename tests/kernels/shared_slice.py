"""PEs 1, 2 and 3 each load 64 KiB from PE 0's HBM slice at once: they share the slice."""

PARAMS = {"n": 16384}


def setup(host, p):
    x = host.random("x", (p["n"],), "f32")
    return {"x": host.place("x", x, 0), "n": p["n"]}


def kernel(tl, x, n):
    if tl.pid in (1, 2, 3):
        tl.load(x, (n,), "f32")  # line 13


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
