"""GQA fused attention for LLM decoding (ADR-0060), next to the KV cache.

One query token per sequence: Q is [batch, heads_q, head_dim]; the KV cache
K, V are [batch, heads_kv, seq_len, head_dim], split along seq_len over every
PE of the grid, each shard in that PE's own HBM slice. A KV head serves
G = heads_q / heads_kv query heads.

Each PE, for each (batch, KV head), streams its shard in chunks of at most
`chunk` positions:
  scores = (Q_group / sqrt(D)) . K_chunk^T   tl.composite (PE_SCHEDULER streams K)
  m, l, p = running max, running sum, exp(scores - m)      PE_MATH, in the kernel
  o = o * exp(m_old - m) + p . V_chunk      tl.composite (streams V)
giving a partial (m, l, o) (`lsum` in the code for l). Partials merge by
the log-sum-exp rule
  m = max(m1, m2);  l = l1 e^(m1 - m) + l2 e^(m2 - m);  o = o1 e^(m1 - m) + o2 e^(m2 - m)
over a tree: within each cube along the PE mesh over IPCQ, then across the
cubes of a SIP over UCIe, then across SIPs, ceil(log2 n) steps per level.
PE 0 of the grid divides o by l and stores the output [batch, heads_q, D].

`-p model=llama3-8b` (Hq 32, Hkv 8, D 128) and `llama3-70b` (Hq 64, Hkv 8,
D 128) set the heads; `seq_len` and `batch` stay free. `skew` > 0 plants one
key that dominates its group's scores, so that every other shard's
probabilities underflow to zero (a test of the merge).
"""

import math

import numpy as np

PARAMS = {
    "model": "custom",
    "batch": 1,
    "seq_len": 4096,
    "heads_q": 8,
    "heads_kv": 2,
    "head_dim": 64,
    "chunk": 1024,
    "dtype": "f16",
    "skew": 0.0,
}
CHOICES = {"dtype": ("f16", "bf16", "f32")}
PARAM_INFO = {
    "model": "a preset of heads_q, heads_kv, head_dim (custom: as given)",
    "batch": ("sequences decoded at once, one query token each", "sequences"),
    "seq_len": ("KV-cache length, split over the PEs; default 4096, or 2 per PE on grids "
                "of more than 2048 PEs", "tokens"),
    "heads_q": ("query heads", "heads"),
    "heads_kv": ("KV heads (a group of heads_q / heads_kv query heads shares one)", "heads"),
    "head_dim": ("dimension of a head", "elements"),
    "chunk": ("KV positions a PE streams per step (at most its shard)", "tokens"),
    "dtype": "element type of Q, K, V and the output (f32 softmax)",
    "skew": "> 0 plants one dominant key per group (tests the log-sum-exp merge)",
}
PRESETS = {
    "model": {
        "custom": {},
        "llama3-8b": {"heads_q": 32, "heads_kv": 8, "head_dim": 128},
        "llama3-70b": {"heads_q": 64, "heads_kv": 8, "head_dim": 128},
    }
}


def scaled_defaults(num_pes):
    """seq_len keeps at least 2 positions per PE, so the default runs on any topology."""
    return {"seq_len": max(4096, 2 * num_pes)}


def _check(host, p):
    b, hq, hkv, d, s = p["batch"], p["heads_q"], p["heads_kv"], p["head_dim"], p["seq_len"]
    for name in ("batch", "seq_len", "heads_q", "heads_kv", "head_dim", "chunk"):
        if p[name] <= 0:
            raise ValueError(f"{name} must be positive, got {p[name]}")
    if hq % hkv:
        raise ValueError(f"heads_q = {hq} is not a multiple of heads_kv = {hkv}")
    if s % host.num_pes:
        raise ValueError(f"seq_len = {s} does not divide over the {host.num_pes} PEs of the grid "
                         f"({s} % {host.num_pes} = {s % host.num_pes})")
    shard = s // host.num_pes
    chunk = min(shard, p["chunk"])
    if shard % chunk:
        raise ValueError(f"a PE's {shard} positions are not a multiple of chunk = {chunk}")
    g = hq // hkv
    item = np.dtype("float16").itemsize if p["dtype"] != "f32" else 4
    # per chunk in TCM: scores f32, p f32 and p cast, the running o and the group of Q
    need = g * chunk * (4 + 4 + item) + 2 * g * d * 4 + g * d * item
    tcm = host.topology.pe.tcm.size
    if need > tcm // 2:
        raise ValueError(f"a chunk of {chunk} positions needs {need} B of TCM for {g} query "
                         f"heads (scores, probabilities, output): more than half of the {tcm} B "
                         "TCM (the other half streams K and V); lower -p chunk")
    del b
    return g, shard, chunk


def setup(host, p):
    g, shard, chunk = _check(host, p)
    b, hq, hkv, d, s = p["batch"], p["heads_q"], p["heads_kv"], p["head_dim"], p["seq_len"]
    dt = p["dtype"]
    q = host.random("q", (b, hq, d), dt)
    k = host.random("k", (b, hkv, s, d), dt)
    v = host.random("v", (b, hkv, s, d), dt)
    if p["skew"] and not host.timing_only:
        # one key per group, aligned with its queries and scaled: it takes the whole softmax
        where = (s // host.num_pes) // 2 + 3 * (s // host.num_pes)  # in PE 3's shard
        for bi in range(b):
            for h in range(hkv):
                mean = q[bi, h * g:(h + 1) * g].astype(np.float32).mean(axis=0)
                unit = mean / np.linalg.norm(mean)
                k[bi, h, where] = (unit * p["skew"]).astype(k.dtype)
    return {
        "q": host.replicate("q", q),
        "k": host.scatter("k", k, axis=2),
        "v": host.scatter("v", v, axis=2),
        "out": host.place("out", np.zeros((b, hq, d), q.dtype), 0),
        "dims": (b, hkv, g, d, shard, chunk),
        "dt": dt,
    }


def _merge(tl, a, b):
    """Log-sum-exp merge of two partials (m, l, o)."""
    m1, lsum1, o1 = a
    m2, lsum2, o2 = b
    m = tl.maximum(m1, m2)
    e1, e2 = tl.exp(m1 - m), tl.exp(m2 - m)
    return m, lsum1 * e1 + lsum2 * e2, o1 * e1[:, None] + o2 * e2[:, None]


def _tree(tl, parts, index, size, pid_of, g, d):
    """One tree level: stride-doubling pairs; returns the merged parts at index 0, else None."""
    step = 1
    while step < size:
        if index % (2 * step) == step:
            partner = pid_of(index - step)
            for part in parts:
                for tensor in part:  # m, lsum, o
                    tl.send(tensor, to=partner)
            return None
        if index % (2 * step) == 0 and index + step < size:
            partner = pid_of(index + step)
            parts = [_merge(tl, part, (tl.recv(frm=partner, shape=(g,), dtype="f32"),
                                       tl.recv(frm=partner, shape=(g,), dtype="f32"),
                                       tl.recv(frm=partner, shape=(g, d), dtype="f32")))
                     for part in parts]
        step *= 2
    return parts


def kernel(tl, q, k, v, out, dims, dt):
    b, hkv, g, d, shard, chunk = dims
    size = tl.itemsize(dt)
    scale = 1.0 / math.sqrt(d)
    q_ptr, k_ptr, v_ptr = tl.shard(q), tl.shard(k), tl.shard(v)

    parts = []
    for bi in range(b):
        for h in range(hkv):
            qg = tl.load(q_ptr + (bi * hkv + h) * g * d * size, shape=(g, d), dtype=dt) * scale
            kv = ((bi * hkv + h) * shard) * d * size  # this (batch, head)'s rows of the shard
            m = lsum = o = None
            for c0 in range(0, shard, chunk):
                rows = kv + c0 * d * size
                scores = tl.composite(op="gemm", a=qg, b=tl.ref(
                    k_ptr + rows, shape=(chunk, d), dtype=dt), trans_b=True, out_dtype="f32").out
                m_c = tl.max(scores, axis=1)
                m_new = m_c if m is None else tl.maximum(m, m_c)
                p = tl.exp(scores - m_new[:, None])
                pv = tl.composite(op="gemm", a=p.to(dt), b=tl.ref(
                    v_ptr + rows, shape=(chunk, d), dtype=dt), out_dtype="f32").out
                if m is None:
                    lsum, o = tl.sum(p, axis=1), pv
                else:
                    alpha = tl.exp(m - m_new)
                    lsum = lsum * alpha + tl.sum(p, axis=1)
                    o = o * alpha[:, None] + pv
                m = m_new
            parts.append((m, lsum, o))

    pes, cubes = tl.num_programs(0), tl.num_programs(1)
    pe, cube, sip = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    base = (sip * cubes + cube) * pes
    parts = _tree(tl, parts, pe, pes, lambda i: base + i, g, d)  # the cube's PEs, over the NoC
    if parts is not None and pe == 0:
        parts = _tree(tl, parts, cube, cubes, lambda i: (sip * cubes + i) * pes, g, d)  # UCIe
    if parts is not None and pe == 0 and cube == 0:
        parts = _tree(tl, parts, sip, tl.num_programs(2), lambda i: i * cubes * pes, g, d)
    if parts is not None and tl.pid == 0:
        for i, (_, lsum, o) in enumerate(parts):
            tl.store(out + i * g * d * size, (o / lsum[:, None]).to(dt))


def reference(host, p):
    """softmax(Q K^T / sqrt(D)) V for every query head with its group's KV head.

    In float64, so that the reference does not depend on the machine's BLAS; one
    (batch, KV head) at a time, and within it K and V converted `_REF_CHUNK`
    positions at a time, so that a long KV cache is never copied whole (a
    128k-token head of K is 128 MiB in float64; a chunk is 4 MiB).
    """
    q, k, v = host.inputs["q"], host.inputs["k"], host.inputs["v"]
    b, hq, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    g = hq // hkv
    out = np.empty((b, hkv, g, d))
    chunks = [slice(c0, c0 + _REF_CHUNK) for c0 in range(0, s, _REF_CHUNK)]
    for bi in range(b):
        for h in range(hkv):
            qg = q[bi, h * g:(h + 1) * g].astype(np.float64)  # the heads of this KV head
            scores = np.empty((g, s))
            for c in chunks:
                scores[:, c] = qg @ k[bi, h, c].astype(np.float64).T
            scores /= math.sqrt(d)
            w = np.exp(scores - scores.max(axis=1, keepdims=True))
            w /= w.sum(axis=1, keepdims=True)
            o = np.zeros((g, d))
            for c in chunks:
                o += w[:, c] @ v[bi, h, c].astype(np.float64)
            out[bi, h] = o
    return {"out": out.reshape(b, hq, d).astype(q.dtype)}


_REF_CHUNK = 4096  # KV positions the reference converts to float64 at a time


def outputs(host, args, p):
    return {"out": host.read(args["out"], (p["batch"], p["heads_q"], p["head_dim"]), p["dtype"])}


def bounds(topology, p):
    """Lower bounds on the latency, in ps (every PE holds an equal shard of the KV cache):

    - `memory`: PE 0's loads (each query group once, its K and V shard) and its store of
      the output, through its HBM slice at the slice's stream rate;
    - `gemm`: a PE's Q.K^T and P.V GEMMs, each (batch, KV head)'s shard untiled, on its
      array (chunks only add folds);
    - `merge`: a chain no run is shorter than: a PE's partials are done once its loads
      have streamed and arrived (HBM latency) and its GEMMs have run (one in-order engine
      each); then each hop of the log-sum-exp tree from that PE to PE 0 (the last part's o
      sent at the route's slowest link, the route's latency, its last chunk copied out of
      the ring), then PE 0's last store and its HBM latency. The PE is the one furthest
      from PE 0.
    """
    from types import SimpleNamespace

    from kernbench_cli.config.units import format_time_ps
    from kernbench_cli.lang import bounds as lb

    g, shard, _ = _check(SimpleNamespace(num_pes=topology.num_pes, topology=topology), p)
    b, hkv, d = p["batch"], p["heads_kv"], p["head_dim"]
    item, parts = 4 if p["dtype"] == "f32" else 2, b * hkv
    loads = parts * g * d * item + 2 * parts * shard * d * item  # Q groups, K and V shards
    store = g * d * item  # a part's output
    cycles = parts * (lb.gemm_cycles_of(topology, g, d, shard, item)
                      + lb.gemm_cycles_of(topology, g, shard, d, item))
    hops, leaf, tree_ps = _merge_chain(topology, g * d * 4)
    gemm_ps = lb.gemm_ps(topology, cycles)
    ready = max(lb.hbm_ps(topology, loads) + topology.hbm.latency, gemm_ps)
    chain = ready + tree_ps + lb.hbm_ps(topology, store) + topology.hbm.latency
    pe0 = loads + parts * store
    return {
        "memory": (lb.hbm_ps(topology, pe0), f"PE 0's query groups, KV shard and output, "
                                             f"{pe0:,} B, at {lb.stream_how(topology)}"),
        "gemm": (gemm_ps,
                 f"a PE's {parts} x 2 GEMMs of its {shard}-position shard: {cycles:,} cycles "
                 f"on a {lb.gemm_how(topology, item)}"),
        "merge": (chain, f"PE {leaf}'s partials, done after its loads and their HBM latency "
                         f"or its GEMMs ({format_time_ps(ready)}), then {hops} tree hops to "
                         f"PE 0 ({format_time_ps(tree_ps)}: each the last part's o at its "
                         "route's slowest link, the route's latency, its last chunk copied "
                         "out), then PE 0's last store and its HBM latency"),
    }


def _merge_chain(topology, o_bytes):
    """(hops, leaf PE, ps) of the longest path to PE 0 in the merge tree (`_tree`'s levels:
    the PEs of a cube, the cubes of a SIP, the SIPs): each hop the last message (`o_bytes`)
    streamed at its route's slowest link, the route's latency, and the copy of its last
    chunk out of the receiver's ring at the NoC rate."""
    from kernbench_cli.address.physaddr import PeCoord
    from kernbench_cli.hw.network import Network
    from kernbench_cli.lang import bounds as lb

    s = topology.system
    pes, cubes, sips = s.pes_per_cube, s.cubes_per_sip, s.racks * s.sips_per_rack
    network, slot = Network(topology), topology.pe.ipcq.slot_size
    last_chunk = o_bytes - (-(-o_bytes // slot) - 1) * slot
    copy = lb.link_ps(last_chunk, lb.copy_bandwidth(topology))

    def coord(pid):
        sip, rest = divmod(pid, cubes * pes)
        return PeCoord(sip // s.sips_per_rack, sip % s.sips_per_rack, *divmod(rest, pes))

    def hop(src, dst):
        route = network.route(coord(src), coord(dst))
        bandwidth = min((c.bandwidth for c in route.resources), default=lb.copy_bandwidth(
            topology))
        return lb.link_ps(o_bytes, bandwidth) + route.latency_ps + copy

    def longest(size, pid_of):  # (hops, index, ps) of the costliest path to index 0
        best = (0, 0, 0)
        for i in range(1, size):
            at, n, ps = i, 0, 0
            while at:
                up = at - (at & -at)
                n, ps, at = n + 1, ps + hop(pid_of(at), pid_of(up)), up
            best = max(best, (n, i, ps), key=lambda x: (x[2], -x[1]))
        return best

    h3, sip, ps3 = longest(sips, lambda i: i * cubes * pes)
    h2, cube, ps2 = longest(cubes, lambda i: (sip * cubes + i) * pes)
    h1, pe, ps1 = longest(pes, lambda i: (sip * cubes + cube) * pes + i)
    return h1 + h2 + h3, (sip * cubes + cube) * pes + pe, ps1 + ps2 + ps3
