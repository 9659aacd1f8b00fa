"""A load 2 bytes past an f32 boundary: an error naming the alignment f32 needs."""

PARAMS = {}


def setup(host, p):
    return {"x": host.place("x", host.random("x", (64,), "f32"), 0)}


def kernel(tl, x):
    if tl.pid == 0:
        tl.load(x + 2, (8,), "f32")  # line 12


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
