"""Shared pieces of the small test kernels: one input `x` on every PE, no outputs."""

PARAMS = {"n": 64}


def setup(host, p):
    x = host.random("x", (p["n"],), "f32")
    return {"x": host.replicate("x", x), "n": p["n"]}


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
