"""Every tl op on one PE, against numpy: -p op=NAME -p dtype=f16|bf16|f32."""

import numpy as np

PARAMS = {"op": "add", "dtype": "f32", "rows": 24, "cols": 40, "inner": 32}

# op -> (kernel side, numpy side, result dtype or None for the input dtype)
OPS = {
    "add": (lambda tl, x, y, w: x + y, lambda x, y, w: x + y, None),
    "sub": (lambda tl, x, y, w: x - y, lambda x, y, w: x - y, None),
    "mul": (lambda tl, x, y, w: x * y, lambda x, y, w: x * y, None),
    "div": (lambda tl, x, y, w: x / (tl.maximum(y, 0.5)), lambda x, y, w: x / np.maximum(y, 0.5),
            None),
    "neg": (lambda tl, x, y, w: -x, lambda x, y, w: -x, None),
    "scalar": (lambda tl, x, y, w: 2.0 * x - 1.5 + x / 4, lambda x, y, w: 2.0 * x - 1.5 + x / 4,
               None),
    "rsub": (lambda tl, x, y, w: 1.0 - x, lambda x, y, w: 1.0 - x, None),
    "exp": (lambda tl, x, y, w: tl.exp(x), lambda x, y, w: np.exp(x), None),
    "log": (lambda tl, x, y, w: tl.log(tl.maximum(x, 0.1)),
            lambda x, y, w: np.log(np.maximum(x, 0.1)), None),
    "sqrt": (lambda tl, x, y, w: tl.sqrt(tl.maximum(x, 0.0)),
             lambda x, y, w: np.sqrt(np.maximum(x, 0.0)), None),
    "maximum": (lambda tl, x, y, w: tl.maximum(x, y), lambda x, y, w: np.maximum(x, y), None),
    "minimum": (lambda tl, x, y, w: tl.minimum(x, y), lambda x, y, w: np.minimum(x, y), None),
    "max_rows": (lambda tl, x, y, w: tl.max(x, axis=1), lambda x, y, w: x.max(axis=1), None),
    "sum_cols": (lambda tl, x, y, w: tl.sum(x, axis=0), lambda x, y, w: x.sum(axis=0), None),
    "max_keep": (lambda tl, x, y, w: x - tl.max(x, axis=1, keepdims=True),
                 lambda x, y, w: x - x.max(axis=1, keepdims=True), None),
    "broadcast": (lambda tl, x, y, w: x * tl.sum(y, axis=1)[:, None],
                  lambda x, y, w: x * y.sum(axis=1)[:, None], None),
    "slice": (lambda tl, x, y, w: x[2:10, ::2] + 1.0, lambda x, y, w: x[2:10, ::2] + 1.0, None),
    "transpose": (lambda tl, x, y, w: x.T * 1.0, lambda x, y, w: x.T * 1.0, None),
    "reshape": (lambda tl, x, y, w: x.reshape(40, 24) * 1.0,
                lambda x, y, w: x.reshape(40, 24) * 1.0, None),
    "cast": (lambda tl, x, y, w: x.to("f32"), lambda x, y, w: x, "f32"),
    "full": (lambda tl, x, y, w: tl.full((3, 5), 2.5, "f32"),
             lambda x, y, w: np.full((3, 5), 2.5, np.float32), "f32"),
    "dot": (lambda tl, x, y, w: tl.dot(x, w), lambda x, y, w: x @ w, "f32"),
    "dot_t": (lambda tl, x, y, w: tl.dot(x, y, trans_b=True), lambda x, y, w: x @ y.T, "f32"),
    "rsqrt": (lambda tl, x, y, w: tl.rsqrt(tl.maximum(x, 0.25)),
              lambda x, y, w: 1 / np.sqrt(np.maximum(x, 0.25)), None),
    "reciprocal": (lambda tl, x, y, w: tl.reciprocal(tl.maximum(x, 0.25)),
                   lambda x, y, w: 1 / np.maximum(x, 0.25), None),
    "abs": (lambda tl, x, y, w: tl.abs(x - 0.5), lambda x, y, w: np.abs(x - 0.5), None),
    "tanh": (lambda tl, x, y, w: tl.tanh(x * 3.0 - 1.5), lambda x, y, w: np.tanh(x * 3.0 - 1.5),
             None),
    "where": (lambda tl, x, y, w: tl.where(tl.maximum(x - 0.5, 0.0), x, y),
              lambda x, y, w: np.where(np.maximum(x - 0.5, 0.0) != 0, x, y), None),
    "where_scalar": (lambda tl, x, y, w: tl.where(tl.maximum(x - 0.5, 0.0), y, -1.0),
                     lambda x, y, w: np.where(x > 0.5, y, -1.0), None),
    "where_rows": (lambda tl, x, y, w: tl.where(tl.max(x, axis=1, keepdims=True) - 0.9, x, 0.0),
                   lambda x, y, w: np.where(x.max(axis=1, keepdims=True) - 0.9 != 0, x, 0.0),
                   None),
    "composite_tcm": (lambda tl, x, y, w: tl.wait(tl.composite(op="gemm", a=x, b=w)),
                      lambda x, y, w: x @ w, None),
}


def setup(host, p):
    r, c, k, dt = p["rows"], p["cols"], p["inner"], p["dtype"]
    x = host.random("x", (r, c), dt)
    y = host.random("y", (r, c), dt)
    w = host.random("w", (c, k), dt, scale=0.25)
    op = OPS[p["op"]]
    want = op[1](*(a.astype(np.float32) for a in (x, y, w)))
    out_dt = op[2] or dt
    return {"x": host.place("x", x, 0), "y": host.place("y", y, 0), "w": host.place("w", w, 0),
            "out": host.place("out", np.zeros(want.shape, np.float32).astype(
                host.inputs["x"].dtype if out_dt == dt else np.float32), 0),
            "shapes": ((r, c), (c, k), want.shape), "dt": dt, "op": p["op"], "out_dt": out_dt}


def kernel(tl, x, y, w, out, shapes, dt, op, out_dt):
    xy_shape, w_shape, out_shape = shapes
    xt = tl.load(x, xy_shape, dt)
    yt = tl.load(y, xy_shape, dt)
    wt = tl.load(w, w_shape, dt)
    result = OPS[op][0](tl, xt, yt, wt)
    assert result.shape == tuple(out_shape), (result.shape, out_shape)
    tl.store(out, result if result.dtype_name == out_dt else result.to(out_dt))


def reference(host, p):
    x, y, w = (host.inputs[n].astype(np.float32) for n in ("x", "y", "w"))
    op = OPS[p["op"]]
    want = op[1](x, y, w)
    out_dt = op[2] or p["dtype"]
    return {"out": want.astype(np.float32 if out_dt == "f32" else host.inputs["x"].dtype)}


def outputs(host, args, p):
    want = reference(host, p)["out"]
    out_dt = "f32" if want.dtype == np.float32 else p["dtype"]
    return {"out": host.read(args["out"], want.shape, out_dt)}
