"""Every PE multiplies its bf16 activations by its own copy of an `fmt` weight (a
composite streaming the weight, `host.replicate(..., dtype=fmt)`) and stores the result:
dedup times one PE per class, the same as timing every PE; the composite's dequantisation
is counted in its region."""

import ml_dtypes
import numpy as np

PARAMS = {"fmt": "mxfp4", "M": 4, "K": 128, "N": 64}


def setup(host, p):
    fmt, m, k, n = p["fmt"], p["M"], p["K"], p["N"]
    a = host.random("a", (m, k), "bf16")
    w = host.random("w", (n, k), fmt)
    return {"a": host.replicate("a", a), "w": host.replicate("w", w, dtype=fmt),
            "out": host.empty("out", (m, n), "f32"), **p}


def kernel(tl, a, w, out, fmt, M, K, N):
    x = tl.load(tl.shard(a), (M, K), "bf16")
    with tl.region("gemm"):  # its dequantisation counted in the region's energy
        tl.wait(tl.composite(op="gemm", a=x, b=tl.ref(tl.shard(w), (N, K), fmt),
                             trans_b=True, out_ptr=tl.shard(out), out_dtype="f32"))


def reference(host, p):
    a = host.inputs["a"].astype(np.float64)
    w = host.inputs["w"].astype(ml_dtypes.bfloat16).astype(np.float64)
    return {"out": np.concatenate([(a @ w.T).astype(np.float32)] * host.num_pes)}


def outputs(host, args, p):
    return {"out": host.gather(args["out"], axis=0)}
