"""A composite whose tile buffers take a quarter of the TCM, then a 1.75 MiB load while it
runs: tensors and tile buffers together would not fit, so the load waits for the composite."""

import numpy as np

PARAMS = {"M": 16, "K": 16384, "N": 256}


def setup(host, p):
    a = host.random("a", (p["M"], p["K"]), "f16")
    b = host.random("b", (p["K"], p["N"]), "f16")
    big = host.random("big", (448 * 1024,), "f32")  # 1.75 MiB
    return {"a": host.place("a", a, 0), "b": host.place("b", b, 0),
            "big": host.place("big", big, 0),
            "c": host.place("c", np.zeros((p["M"], p["N"]), np.float16), 0), "p": p}


def kernel(tl, a, b, big, c, p):
    if tl.pid != 0:
        return
    h = tl.composite(op="gemm", a=tl.ref(a, (p["M"], p["K"]), "f16"),
                     b=tl.ref(b, (p["K"], p["N"]), "f16"), out_ptr=c)
    tl.load(big, (448 * 1024,), "f32")  # line 23
    tl.wait(h)


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
