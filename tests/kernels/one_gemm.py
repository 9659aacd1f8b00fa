"""PE 0 runs one composite GEMM, A (M x K) and B (K x N, or N x K with `trans_b`) in its
slice, the output stored there too: the tile planner's estimate against the model's time.
With `resident`, A is loaded into TCM first (and long done when the composite comes); with
`in_tcm`, the f32 result stays in TCM (as gqa_attention's scores and P·V do)."""

PARAMS = {"M": 64, "K": 64, "N": 512, "dtype": "f16", "trans_b": 0, "resident": 0,
          "in_tcm": 0}


def setup(host, p):
    a = host.random("a", (p["M"], p["K"]), p["dtype"])
    b_shape = (p["N"], p["K"]) if p["trans_b"] else (p["K"], p["N"])
    b = host.random("b", b_shape, p["dtype"])
    out = host.random("out", (p["M"], p["N"]), p["dtype"])  # overwritten
    return {"a": host.place("a", a, 0), "b": host.place("b", b, 0),
            "out": host.place("out", out, 0), **p}


def kernel(tl, a, b, out, M, K, N, dtype, trans_b, resident, in_tcm):
    if tl.pid != 0:
        return
    if resident:
        x = tl.load(a, (M, K), dtype)
        tl.cycles(5000)  # A is in TCM well before the composite is issued
    else:
        x = tl.ref(a, shape=(M, K), dtype=dtype)
    y = tl.ref(b, shape=(N, K) if trans_b else (K, N), dtype=dtype)
    if in_tcm:
        h = tl.composite(op="gemm", a=x, b=y, trans_b=bool(trans_b), out_dtype="f32")
    else:
        h = tl.composite(op="gemm", a=x, b=y, trans_b=bool(trans_b), out_ptr=out)
    tl.wait(h)


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
