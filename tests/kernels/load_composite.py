"""A load into TCM, then a composite GEMM of it and a weight streamed from HBM: the
composite's first weight tiles load from its dispatch, while the TCM operand is still
landing, so the critical path runs through PE_CPU's issue of the composite to them."""

PARAMS = {"n": 1}


def setup(host, p):
    a = host.random("a", (16, 64), "f16")  # 2 KiB, to TCM
    w = host.random("w", (64, 1024), "f16")  # 128 KiB, streamed tile by tile
    return {"a": host.place("a", a, 0), "w": host.place("w", w, 0)}


def kernel(tl, a, w):
    if tl.pid == 0:
        t = tl.load(a, (16, 64), "f16")
        tl.composite(op="gemm", a=t, b=tl.ref(w, shape=(64, 1024), dtype="f16"),  # line 17
                     out_dtype="f32")


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
