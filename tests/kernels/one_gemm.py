"""PE 0 runs one composite GEMM, A (M x K) and B (K x N) in its slice, the output stored
there too: the tile planner's estimate against the model's time."""

PARAMS = {"M": 64, "K": 64, "N": 512, "dtype": "f16"}


def setup(host, p):
    a = host.random("a", (p["M"], p["K"]), p["dtype"])
    b = host.random("b", (p["K"], p["N"]), p["dtype"])
    out = host.random("out", (p["M"], p["N"]), p["dtype"])  # overwritten
    return {"a": host.place("a", a, 0), "b": host.place("b", b, 0),
            "out": host.place("out", out, 0), **p}


def kernel(tl, a, b, out, M, K, N, dtype):
    if tl.pid == 0:
        h = tl.composite(op="gemm", a=tl.ref(a, shape=(M, K), dtype=dtype),
                         b=tl.ref(b, shape=(K, N), dtype=dtype), out_ptr=out)
        tl.wait(h)


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
