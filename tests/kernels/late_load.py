"""A long composite, then an unrelated small load: the load need not wait for the tiles."""

import numpy as np

PARAMS = {"M": 64, "K": 1024, "N": 2048}


def setup(host, p):
    a = host.random("a", (p["M"], p["K"]), "f16")
    b = host.random("b", (p["K"], p["N"]), "f16")
    x = host.random("x", (256,), "f32")
    return {"a": host.place("a", a, 0), "b": host.place("b", b, 0), "x": host.place("x", x, 0),
            "c": host.place("c", np.zeros((p["M"], p["N"]), np.float16), 0), "p": p}


def kernel(tl, a, b, x, c, p):
    if tl.pid != 0:
        return
    h = tl.composite(op="gemm", a=tl.ref(a, (p["M"], p["K"]), "f16"),
                     b=tl.ref(b, (p["K"], p["N"]), "f16"), out_ptr=c)
    tl.cycles(5000)  # the tiles stream meanwhile
    tl.load(x, (256,), "f32")  # line 23
    tl.wait(h)


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
