"""f16 A @ B on PE 0, accumulated in f32 over K in tiles (a `tl.dot` per tile, the partial
products added on PE_MATH) and stored as f32: each element is a sum in another order than
the float64 reference's, off by more than f32's default atol of 1e-5 on summation order
alone. A kernel declares the tolerance it can meet with ``TOLERANCE``; the tests write it in.
"""

import numpy as np

PARAMS = {"M": 64, "K": 512, "N": 256, "tile_k": 64}


def setup(host, p):
    a = host.random("a", (p["M"], p["K"]), "f16", scale=4.0)
    b = host.random("b", (p["K"], p["N"]), "f16", scale=4.0)
    out = np.zeros((p["M"], p["N"]), np.float32)
    return {"a": host.place("a", a, 0), "b": host.place("b", b, 0),
            "out": host.place("out", out, 0), **p}


def kernel(tl, a, b, out, M, K, N, tile_k):
    if tl.pid != 0:
        return
    acc = None
    for k0 in range(0, K, tile_k):
        a_t = tl.load(a + k0 * 2, shape=(M, tile_k), dtype="f16", stride=K)
        b_t = tl.load(b + k0 * N * 2, shape=(tile_k, N), dtype="f16")
        part = tl.dot(a_t, b_t)
        acc = part if acc is None else acc + part
    tl.store(out, acc)


def reference(host, p):
    a, b = host.inputs["a"].astype("float64"), host.inputs["b"].astype("float64")
    return {"out": (a @ b).astype("float32")}


def outputs(host, args, p):
    return {"out": host.read(args["out"], (p["M"], p["N"]), "f32")}
