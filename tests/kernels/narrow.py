"""PE 0 stores, loads and multiplies a narrow dtype (`fmt`), each value checked against a
numpy reference computed in that dtype (`kernbench_cli.lang.narrow`).

Inputs: activations A (M x K, bf16) and a weight W (N x K, `fmt`, blocks along K).
- ``op=store``: W loaded and stored back (`copy`, its bytes unchanged), and A quantised
  to `fmt` on PE_MATH and stored (`quant`);
- ``op=dot``: A @ W^T by `tl.dot`, W loaded into TCM (bf16 x `fmt`: W dequantised on
  PE_MATH first, to bf16);
- ``op=composite``: the same by a composite streaming W from memory (`tl.ref`), its
  tiles dequantised by the scheduler; ``op=composite_tcm``: by a composite of W loaded
  into TCM, dequantised on PE_MATH before it (the copy held while its handle lives);
- ``op=native``: A quantised to `fmt` too, then `tl.dot` of two `fmt` operands (the
  array's narrow datapath, no dequantisation).
"""

import ml_dtypes
import numpy as np

from kernbench_cli.lang import narrow

PARAMS = {"fmt": "mxfp4", "op": "dot", "M": 16, "K": 64, "N": 64}


def setup(host, p):
    fmt, m, k, n = p["fmt"], p["M"], p["K"], p["N"]
    a = host.random("a", (m, k), "bf16")
    w = host.random("w", (n, k), fmt)
    return {"a": host.place("a", a, 0), "w": host.place("w", w, 0, dtype=fmt),
            "copy": host.place("copy", np.zeros((n, k), np.float32), 0, dtype=fmt),
            "quant": host.place("quant", np.zeros((m, k), np.float32), 0, dtype=fmt),
            "out": host.place("out", np.zeros((m, n), np.float32), 0), **p}


def kernel(tl, a, w, copy, quant, out, fmt, op, M, K, N):
    if tl.pid != 0:
        return
    x = tl.load(a, (M, K), "bf16")
    if op == "store":
        tl.store(copy, tl.load(w, (N, K), fmt))
        tl.store(quant, x.to(fmt))
    elif op.startswith("composite"):
        rhs = tl.ref(w, (N, K), fmt) if op == "composite" else tl.load(w, (N, K), fmt)
        tl.wait(tl.composite(op="gemm", a=x, b=rhs, trans_b=True, out_ptr=out,
                             out_dtype="f32"))
    else:
        lhs = x.to(fmt) if op == "native" else x
        tl.store(out, tl.dot(lhs, tl.load(w, (N, K), fmt), trans_b=True))


def reference(host, p):
    fmt = narrow.NARROW[p["fmt"]]
    a, w = host.inputs["a"].astype(np.float32), host.inputs["w"]
    if p["op"] == "store":
        return {"copy": w, "quant": narrow.rounded(a, fmt)}
    if p["op"] == "native":
        lhs, rhs = narrow.rounded(a, fmt), w
    else:  # the narrow weight dequantised to bf16 for the bf16 array
        lhs, rhs = a, w.astype(ml_dtypes.bfloat16).astype(np.float32)
    return {"out": (lhs.astype(np.float64) @ rhs.astype(np.float64).T).astype(np.float32)}


def outputs(host, args, p):
    m, k, n = p["M"], p["K"], p["N"]
    if p["op"] == "store":
        return {"copy": host.read(args["copy"], (n, k), p["fmt"]),
                "quant": host.read(args["quant"], (m, k), p["fmt"])}
    return {"out": host.read(args["out"], (m, n), "f32")}
