"""RMSNorm, the rows split over every PE: Y = X / sqrt(mean(X^2, axis=1) + eps) * w.

X and Y are [rows, cols] (tokens x hidden size); the weight w [cols] is in
every PE's slice. Each PE loads w once, then streams its rows in blocks of
`block` rows:

    t = load(X block) as f32                          PE_DMA, PE_MATH (cast)
    r = rsqrt(sum(t * t, axis=1) / cols + eps)        PE_MATH: mul, reduce, mul, add, sqrt
    y = t * r * w                                     PE_MATH: two multiplies, broadcast
    store(y as dtype)                                 PE_MATH (cast), PE_DMA

`-p model=llama3-8b` sets cols = 4096 (its hidden size) and eps = 1e-5.
"""

import numpy as np

PARAMS = {"model": "custom", "rows": 512, "cols": 1024, "block": 4, "eps": 1e-6,
          "dtype": "f16"}
CHOICES = {"dtype": ("f16", "bf16", "f32")}
PRESETS = {"model": {"custom": {}, "llama3-8b": {"cols": 4096, "eps": 1e-5}}}
PARAM_INFO = {
    "model": "a preset of cols and eps (custom: as given)",
    "rows": ("rows (tokens) of X, split over the PEs; default 512, or one per PE on grids "
             "of more than 512 PEs", "rows"),
    "cols": ("columns of X (the hidden size): the norm runs along them", "elements"),
    "block": ("rows a PE loads at once (at most its share)", "rows"),
    "eps": "added to the mean square before the square root",
    "dtype": "element type of X, w and Y (f32 arithmetic)",
}


def scaled_defaults(num_pes):
    """At least one row per PE, so the default runs on any topology."""
    return {"rows": max(512, num_pes)}


def _block(topology, p):
    """(a PE's rows, its block) of `p` on `topology`; ValueError (bad parameters) if they
    cannot run there: `setup` and `bounds` both check them."""
    for name in ("rows", "cols", "block"):
        if p[name] <= 0:
            raise ValueError(f"{name} must be positive, got {p[name]}")
    if p["eps"] < 0:
        raise ValueError(f"eps must not be negative, got {p['eps']}")
    pes = topology.num_pes
    if p["rows"] % pes:
        raise ValueError(f"rows = {p['rows']} does not divide over the {pes} PEs "
                         f"(try -p rows={pes * max(1, p['rows'] // pes)})")
    share = p["rows"] // pes
    block = min(p["block"], share)
    if share % block:
        raise ValueError(f"a PE's {share} rows are not a multiple of block = {block}")
    need = block * p["cols"] * 4 * 3 + p["cols"] * 4  # t, t*t, y in f32; w
    if need > topology.pe.tcm.size:
        raise ValueError(f"a block of {block} x {p['cols']} needs {need} B of TCM, more than "
                         f"the {topology.pe.tcm.size} B a PE has; lower -p block")
    return share, block


def setup(host, p):
    share, block = _block(host.topology, p)
    x = host.random("x", (p["rows"], p["cols"]), p["dtype"])
    w = host.random("w", (1, p["cols"]), p["dtype"], scale=0.5)
    return {"x": host.scatter("x", x, axis=0), "w": host.replicate("w", w),
            "y": host.empty("y", (share, p["cols"]), p["dtype"]),
            "rows": share, "cols": p["cols"], "block": block, "eps": p["eps"],
            "dtype": p["dtype"]}


def kernel(tl, x, w, y, rows, cols, block, eps, dtype):
    x_ptr, y_ptr = tl.shard(x), tl.shard(y)
    weight = tl.load(tl.shard(w), shape=(1, cols), dtype=dtype)
    if dtype != "f32":
        weight = weight.to("f32")
    step = block * cols * tl.itemsize(dtype)
    for i in range(rows // block):
        t = tl.load(x_ptr + i * step, shape=(block, cols), dtype=dtype)
        if dtype != "f32":
            t = t.to("f32")
        r = tl.rsqrt(tl.sum(t * t, axis=1, keepdims=True) * (1.0 / cols) + eps)
        out = t * r * weight
        tl.store(y_ptr + i * step, out if dtype == "f32" else out.to(dtype))


def reference(host, p):
    x = host.inputs["x"].astype(np.float64)
    w = host.inputs["w"].astype(np.float64)
    r = 1 / np.sqrt((x * x).mean(axis=1, keepdims=True) + p["eps"])
    return {"y": (x * r * w).astype(host.inputs["x"].dtype)}


def outputs(host, args, p):
    return {"y": host.gather(args["y"], axis=0)}


def bounds(topology, p):
    """Lower bound on the latency, in ps: a PE reading its rows of X and w, and writing its
    rows of Y, once through its HBM slice at the slice's stream rate (every PE's share is
    alike)."""
    from kernbench_cli.lang import bounds as lb

    share, _ = _block(topology, p)  # parameters a run refuses have no bound either
    nbytes = (2 * share + 1) * p["cols"] * (4 if p["dtype"] == "f32" else 2)
    return {"memory": (lb.hbm_ps(topology, nbytes), f"a PE's {share} rows of X and of Y and "
                       f"w, {nbytes:,} B, at {lb.stream_how(topology)}")}
