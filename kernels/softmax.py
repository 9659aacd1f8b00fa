"""Row-wise softmax: Y = softmax(X) along each row, the rows split over every PE.

X and Y are [rows, cols]; PE k's HBM slice holds rows k*R .. (k+1)*R - 1
(R = rows / PEs). Each PE streams its rows in blocks of `block` rows:

    t = load(X block) as f32                         PE_DMA, PE_MATH (cast)
    e = exp(t - max(t, axis=1))                      PE_MATH: reduce, add, exp
    y = e * reciprocal(sum(e, axis=1))               PE_MATH: reduce, div (per row), mul
    store(y as dtype)                                PE_MATH (cast), PE_DMA

One reciprocal per row and a multiply per element, instead of a divide per
element: the divider is 4x slower than the multiplier in the default cost
table. The PEs share nothing, so the run is bound by whichever of HBM and
PE_MATH is slower per block (see `bounds`).
"""

import numpy as np

PARAMS = {"rows": 1024, "cols": 512, "block": 8, "dtype": "f16"}
CHOICES = {"dtype": ("f16", "bf16", "f32")}
PARAM_INFO = {
    "rows": ("rows of X, split over the PEs; default 1024, or one per PE on grids of more "
             "than 1024 PEs", "rows"),
    "cols": ("columns of X: the softmax runs along them", "elements"),
    "block": ("rows a PE loads at once (at most its share)", "rows"),
    "dtype": "element type of X and Y (f32 arithmetic)",
}


def scaled_defaults(num_pes):
    """At least one row per PE, so the default runs on any topology."""
    return {"rows": max(1024, num_pes)}


def _block(topology, p):
    """(a PE's rows, its block) of `p` on `topology`; ValueError (bad parameters) if they
    cannot run there: `setup` and `bounds` both check them."""
    for name in ("rows", "cols", "block"):
        if p[name] <= 0:
            raise ValueError(f"{name} must be positive, got {p[name]}")
    pes = topology.num_pes
    if p["rows"] % pes:
        raise ValueError(f"rows = {p['rows']} does not divide over the {pes} PEs "
                         f"(try -p rows={pes * max(1, p['rows'] // pes)})")
    share = p["rows"] // pes
    block = min(p["block"], share)
    if share % block:
        raise ValueError(f"a PE's {share} rows are not a multiple of block = {block}")
    need = block * p["cols"] * 4 * 3  # t, e and y in f32 at once
    if need > topology.pe.tcm.size:
        raise ValueError(f"a block of {block} x {p['cols']} needs {need} B of TCM, more than "
                         f"the {topology.pe.tcm.size} B a PE has; lower -p block")
    return share, block


def setup(host, p):
    share, block = _block(host.topology, p)
    x = host.random("x", (p["rows"], p["cols"]), p["dtype"], scale=2.0)
    return {"x": host.scatter("x", x, axis=0),
            "y": host.empty("y", (share, p["cols"]), p["dtype"]),
            "rows": share, "cols": p["cols"], "block": block, "dtype": p["dtype"]}


def kernel(tl, x, y, rows, cols, block, dtype):
    x_ptr, y_ptr = tl.shard(x), tl.shard(y)
    step = block * cols * tl.itemsize(dtype)
    for i in range(rows // block):
        t = tl.load(x_ptr + i * step, shape=(block, cols), dtype=dtype)
        if dtype != "f32":
            t = t.to("f32")
        e = tl.exp(t - tl.max(t, axis=1, keepdims=True))
        out = e * tl.reciprocal(tl.sum(e, axis=1, keepdims=True))
        tl.store(y_ptr + i * step, out if dtype == "f32" else out.to(dtype))


def reference(host, p):
    x = host.inputs["x"].astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"y": (e / e.sum(axis=1, keepdims=True)).astype(host.inputs["x"].dtype)}


def outputs(host, args, p):
    return {"y": host.gather(args["y"], axis=0)}


def bounds(topology, p):
    """Lower bound on the latency, in ps: a PE reading its rows of X and writing its rows of
    Y once through its HBM slice at the slice's stream rate (every PE's share is alike)."""
    from kernbench_cli.lang import bounds as lb

    share, _ = _block(topology, p)  # parameters a run refuses have no bound either
    nbytes = 2 * share * p["cols"] * (4 if p["dtype"] == "f32" else 2)
    return {"memory": (lb.hbm_ps(topology, nbytes), f"a PE's {share} rows of X and of Y, "
                       f"{nbytes:,} B, at {lb.stream_how(topology)}")}
