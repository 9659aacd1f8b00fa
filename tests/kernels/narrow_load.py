"""PE 0 loads `N` elements of `fmt` from its slice: one transfer of the dtype's bytes (a
narrow dtype's packed elements and block scales), nothing else to wait for."""

import numpy as np

PARAMS = {"fmt": "fp8", "N": 8192}


def setup(host, p):
    return {"x": host.place("x", np.zeros(p["N"], np.float32), 0, dtype=p["fmt"]), **p}


def kernel(tl, x, fmt, N):
    if tl.pid == 0:
        tl.load(x, (N,), fmt)


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
