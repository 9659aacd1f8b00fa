"""PE 1 loads what the host placed in PE 0's HBM slice: over PE 0's slice and a NoC link."""

PARAMS = {"n": 256}


def setup(host, p):
    x = host.random("x", (p["n"],), "f32")
    return {"x": host.place("x", x, 0), "n": p["n"]}


def kernel(tl, x, n):
    if tl.pid == 1:
        tl.load(x, (n,), "f32")


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
