"""PE 0 misuses a narrow dtype one way (`case`): each is a kernel error naming the rule."""

import numpy as np

PARAMS = {"case": "load_shape"}


def setup(host, p):
    return {"w": host.place("w", np.zeros((4, 64), np.float32), 0, dtype="mxfp4"),
            "a": host.place("a", np.zeros((4, 64), np.float32), 0, dtype="bf16"), **p}


def kernel(tl, w, a, case):
    if tl.pid != 0:
        return
    x = tl.load(a, (4, 64), "bf16")
    if case == "load_shape":
        tl.load(w, (4, 48), "mxfp4")
    elif case == "stride":
        tl.load(w, (2, 32), "mxfp4", stride=48)
    elif case == "itemsize":
        tl.itemsize("mxfp4")
    elif case == "nbytes":
        tl.nbytes("int4", 40)
    elif case == "cast_shape":
        x[:, 0:16].to("mxfp4")
    elif case == "full_shape":
        tl.full((2, 40), 1.0, "int8")
    elif case == "out_dtype":
        tl.dot(x, tl.load(w, (4, 64), "mxfp4"), trans_b=True, out_dtype="fp8")
    elif case == "transpose":
        tl.store(w, tl.load(w, (4, 64), "mxfp4").T)
    elif case == "split_view":
        tl.load(w, (4, 64), "mxfp4")[:, 16:48]
    elif case == "ref_shape":
        tl.ref(w, (8, 16), "mxfp4")


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
