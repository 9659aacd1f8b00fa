"""Two composites issued back to back while a tensor holds all the TCM but 16 KiB: the first
plans its tiles into those 16 KiB, so PE_SCHEDULER holds the second until the first ends."""

import numpy as np

PARAMS = {"M": 16, "K": 2048, "N": 256}
BIG = (2 * 1024 * 1024 - 16 * 1024) // 4  # f32 elements: all of a 2 MiB TCM but 16 KiB


def setup(host, p):
    a = host.random("a", (p["M"], p["K"]), "f16")
    b = host.random("b", (p["K"], p["N"]), "f16")
    big = host.random("big", (BIG,), "f32")
    return {"a": host.place("a", a, 0), "b": host.place("b", b, 0),
            "big": host.place("big", big, 0),
            "c": host.place("c", np.zeros((p["M"], p["N"]), np.float16), 0),
            "d": host.place("d", np.zeros((p["M"], p["N"]), np.float16), 0), "p": p}


def kernel(tl, a, b, big, c, d, p):
    if tl.pid != 0:
        return
    held = tl.load(big, (BIG,), "f32")  # alive to the end
    refs = (tl.ref(a, (p["M"], p["K"]), "f16"), tl.ref(b, (p["K"], p["N"]), "f16"))
    first = tl.composite(op="gemm", a=refs[0], b=refs[1], out_ptr=c)
    second = tl.composite(op="gemm", a=refs[0], b=refs[1], out_ptr=d)  # line 24
    tl.wait(first)
    tl.wait(second)
    del held


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
