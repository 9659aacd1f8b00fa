"""Column-sharded GEMM (ADR-0022): C[M, N] = A[M, K] @ B[K, N] over every PE.

Each PE owns N / PEs columns of B and of C, placed in its own HBM slice;
A is replicated into every slice. The PE finds its columns from the
program ids, as ADR-0022's example does (extended by the SIP axis).

mode=composite (default): load A into TCM, then one `tl.composite` GEMM
with B streamed from HBM by PE_SCHEDULER's tile plan, stored straight to C.

mode=primitive: the same GEMM written by hand in tile_m x tile_n x tile_k
tiles: load, dot, accumulate on PE_MATH, cast, store, every tile a command
the CPU issues. It shows what the composite offloads (ADR-0064).
"""

PARAMS = {
    "M": 64,
    "K": 512,
    "N": 4096,
    "dtype": "f16",
    "mode": "composite",
    "tile_m": 16,
    "tile_n": 16,
    "tile_k": 64,
}
CHOICES = {"mode": ("composite", "primitive"), "dtype": ("f16", "bf16", "f32")}
PARAM_INFO = {
    "M": ("rows of A and C", "elements"),
    "K": ("columns of A, rows of B (the reduction)", "elements"),
    "N": ("columns of B and C, split over the PEs; default 4096, or 16 per PE on grids "
          "of more than 256 PEs", "elements"),
    "dtype": "element type of A, B and C (f32 accumulation)",
    "mode": "composite: one tl.composite GEMM per PE; primitive: hand-tiled load/dot/store",
    "tile_m": ("tile rows (mode=primitive)", "elements"),
    "tile_n": ("tile columns (mode=primitive)", "elements"),
    "tile_k": ("tile depth (mode=primitive)", "elements"),
}


def scaled_defaults(num_pes):
    """N keeps 16 columns per PE on large grids, so the default runs on any topology."""
    return {"N": max(4096, 16 * num_pes)}


def setup(host, p):
    m, k, n_total = p["M"], p["K"], p["N"]
    for name in ("M", "K", "N", "tile_m", "tile_n", "tile_k"):
        if p[name] <= 0:
            raise ValueError(f"{name} must be positive, got {p[name]}")
    a = host.random("a", (m, k), p["dtype"])
    b = host.random("b", (k, n_total), p["dtype"])
    b_cols = host.scatter("b", b, axis=1)
    n = b_cols.shape[1]
    if p["mode"] == "primitive":
        for dim, size, tile in (("M", m, "tile_m"), ("K", k, "tile_k"), ("N / PEs", n, "tile_n")):
            if size % p[tile]:
                raise ValueError(f"{dim} = {size} is not a multiple of {tile} = {p[tile]}")
    return {
        "a": host.replicate("a", a), "b": b_cols, "out": host.empty("out", (m, n), p["dtype"]),
        "M": m, "K": k, "n": n, "dtype": p["dtype"], "mode": p["mode"],
        "tiles": (p["tile_m"], p["tile_n"], p["tile_k"]),
    }


def kernel(tl, a, b, out, M, K, n, dtype, mode, tiles):
    # ADR-0022's global program id, PEs of a cube fastest, then cubes; then SIPs.
    cube = tl.program_id(axis=2) * tl.num_programs(axis=1) + tl.program_id(axis=1)
    global_pid = cube * tl.num_programs(axis=0) + tl.program_id(axis=0)
    a_ptr = tl.shard(a, pid=global_pid)
    b_ptr = tl.shard(b, pid=global_pid)  # this PE's n columns of B, K x n
    out_ptr = tl.shard(out, pid=global_pid)

    if mode == "composite":
        a_tile = tl.load(a_ptr, shape=(M, K), dtype=dtype)
        h = tl.composite(op="gemm", a=a_tile, b=tl.ref(b_ptr, shape=(K, n), dtype=dtype),
                         out_ptr=out_ptr)
        tl.wait(h)
        return

    tm, tn, tk = tiles
    size = tl.itemsize(dtype)
    for m0 in range(0, M, tm):
        for n0 in range(0, n, tn):
            acc = None
            for k0 in range(0, K, tk):
                a_t = tl.load(a_ptr + (m0 * K + k0) * size, shape=(tm, tk), dtype=dtype, stride=K)
                b_t = tl.load(b_ptr + (k0 * n + n0) * size, shape=(tk, tn), dtype=dtype, stride=n)
                part = tl.dot(a_t, b_t)
                acc = part if acc is None else acc + part
            tl.store(out_ptr + (m0 * n + n0) * size, acc.to(dtype), stride=n)


def reference(host, p):
    # float64: exact products and sums, so the reference does not depend on the BLAS
    a = host.inputs["a"].astype("float64")
    b = host.inputs["b"].astype("float64")
    return {"out": (a @ b).astype("float32").astype(host.inputs["a"].dtype)}


def outputs(host, args, p):
    return {"out": host.gather(args["out"], axis=1)}


def tolerances(topology, p):
    """A primitive f32 GEMM's: its output is summed in f32 in another order than the float64
    reference's: each tile's dot is exact, rounded once to f32, and the K / tile_k tiles'
    partial sums are added one after another, 2 K / tile_k - 1 roundings. Each may move a
    partial sum by f32's unit roundoff (2^-24) of it, and for normal(0, 1) inputs a partial
    sum lies within 3 sqrt(K) (three standard deviations of the whole sum): atol =
    roundings x 2^-24 x 3 sqrt(K), at least f32's 1e-5. With K = 512 in tiles of 1 the
    output was 8.4e-5 off, past f32's 1e-5 on summation order alone; this allows 4.1e-3.
    Other modes and dtypes keep their dtype's."""
    import math

    from kernbench_cli.lang.dtypes import TOLERANCE

    if p["mode"] != "primitive" or p["dtype"] != "f32":
        return {}
    k, tile = p["K"], p["tile_k"]
    roundings = 2 * max(1, k // tile) - 1
    atol, rtol = TOLERANCE["f32"]
    return {"out": (max(atol, roundings * 2.0**-24 * 3 * math.sqrt(k)), rtol)}


def bounds(topology, p):
    """Lower bounds on the latency, in ps, of any PE (each computes its n = N / PEs columns of
    C, all alike): `memory`, the bytes its loads and stores move through its HBM slice at
    the slice's stream rate (composite: A, its B columns and its C columns once each; the
    tile plan may read more; primitive: A once per column tile, B once per row tile, as
    its loads do); `gemm`, its GEMM's folds on the PE's array (primitive: the folds of
    every tile's dot)."""
    from kernbench_cli.lang import bounds as lb

    m, k, n = p["M"], p["K"], _columns(p, topology.num_pes)
    item = 4 if p["dtype"] == "f32" else 2
    if p["mode"] == "primitive":
        tm, tn, tk = p["tile_m"], p["tile_n"], p["tile_k"]
        a, b = m * k * (n // tn), k * n * (m // tm)
        tiles = (m // tm) * (n // tn) * (k // tk)
        cycles = tiles * lb.gemm_cycles_of(topology, tm, tk, tn, item)
        gemms = f"{tiles:,} dots of [{tm}x{tk}] @ [{tk}x{tn}]"
        loads = f"A {n // tn}x and B {m // tm}x"
    else:
        a, b, cycles = m * k, k * n, lb.gemm_cycles_of(topology, m, k, n, item)
        gemms, loads = f"[{m}x{k}] @ [{k}x{n}]", "A, B columns and C columns once each"
    nbytes = (a + b + m * n) * item
    return {
        "memory": (lb.hbm_ps(topology, nbytes),
                   f"a PE's {loads}, {nbytes:,} B, at {lb.stream_how(topology)}"),
        "gemm": (lb.gemm_ps(topology, cycles),
                 f"a PE's {gemms}: {cycles:,} cycles on a {lb.gemm_how(topology, item)}"),
    }


def _columns(p, pes):
    """N / PEs, once the parameters are what setup takes (ValueError as it raises)."""
    for name in ("M", "K", "N", "tile_m", "tile_n", "tile_k"):
        if p[name] <= 0:
            raise ValueError(f"{name} must be positive, got {p[name]}")
    if p["N"] % pes:
        raise ValueError(f"N = {p['N']} does not divide over the {pes} PEs of the grid "
                         f"({p['N']} % {pes} = {p['N'] % pes})")
    n = p["N"] // pes
    if p["mode"] == "primitive":
        for dim, size, tile in (("M", p["M"], "tile_m"), ("K", p["K"], "tile_k"),
                                ("N / PEs", n, "tile_n")):
            if size % p[tile]:
                raise ValueError(f"{dim} = {size} is not a multiple of {tile} = {p[tile]}")
    return n
