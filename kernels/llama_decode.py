"""One decode step of a Hugging Face decoder (Llama, Mistral, Qwen2), on every PE.

`batch` sequences, each with `context` tokens already in its KV cache, take one new
token (given as `inputs_embeds`) through `layers` decoder layers, the final norm and
the LM head, and pick the next token (argmax). The model is a shipped one or a
Hugging Face config.json (`kernbench_cli.models.hf`: every key modelled or refused);
its float64 reference is `kernbench_cli.models.reference`. Weights are seeded random,
placed once in the PEs' HBM as a weight-stationary near-memory design keeps them:

- The grid is one tensor-parallel group (`-p pp=N`: N pipeline stages, each one
  with its share of the layers, handing the hidden state on). Its PEs split into
  one *head group* per KV head (hkv of them, PEs in ring order, so a head group is
  a cube where the sizes allow); a head group owns its KV head, its G = heads_q /
  heads_kv query heads, and their slices of the QKV and O projections.
- QKV projection (and its bias): column-parallel inside the head group (each member
  computes its share of the group's (G + 2) x head_dim columns, in
  `collectives.layout`'s split), then an all-gather inside the group (with `algo`, as
  the all-reduces); RoPE (rotate-half, the new token at position `context`, the
  config's scaling) on every member.
- KV append and attention: the group's KV cache (the whole context, or on a
  sliding-window layer its W latest positions, the new one's included) is split along
  the sequence over its members (shards may be uneven or empty); the member holding
  the new position appends its K and V. Each member computes a flash-decoding partial
  (running max, sum, output) over its shard; the partials merge up a binomial tree by
  the log-sum-exp rule to the group's first member, which divides and broadcasts the
  heads' output to the group.
- O projection: row-parallel (each member multiplies its slice of the group's
  output dims by its rows of W_o), then an all-reduce over every PE; its bias and the
  residual on every PE.
- MLP: gate and up column-parallel over every PE (with their biases), act(gate) x up,
  down row-parallel, all-reduce, its bias; residual. RMSNorms run on every PE (the
  hidden state is replicated).
- LM head: vocab-parallel; each PE's logits and its local argmax, then an all-gather
  of (max, index) pairs and the argmax of those on every PE.

Placement (`Layout`): per PE, its layers' blocks one after another, each weight, bias,
norm and cache shard at the start of a DRAM page, so every layer's commands are the
same up to relocation, page openings included; buffers the PEs share in a symmetric
region first; the embedding table (unless tied to the LM head) as space only, split
over the first stage. The whole model is checked against each PE's HBM slice before
anything runs, the layers a scaled run does not time included.

Regions (`tl.region`) name each operator per layer, so the report times them.
Dtype: weights, activations handed to the GEMM array and the KV cache in `dtype`;
the residual stream, norms, softmax and accumulation in f32.
"""

import contextlib
import math

import numpy as np

from kernbench_cli.lang import collectives as coll
from kernbench_cli.models.decoder import (
    Layout,
    Maker,
    Run,
    largest,
    run_of,
    weights,
)
from kernbench_cli.models.reference import decode_step
from kernbench_cli.models.rope import cos_sin

PARAMS = {
    "model": "tiny",
    "config": "",
    "batch": 1,
    "context": 64,
    "layers": 0,
    "scale_to": 0,
    "pp": 1,
    "dtype": "bf16",
    "algo": "hier",
    "chunk": 512,
}
CHOICES = {"model": ("tiny", "llama3-8b", "llama3-70b"), "dtype": ("bf16", "f16"),
           "algo": ("ring", "direct", "tree", "rhd", "hier")}
PARAM_INFO = {
    "model": "a shipped model: tiny (for tests), llama3-8b, llama3-70b",
    "config": "a Hugging Face config.json instead of -p model (model_type llama, mistral "
              "or qwen2; every key modelled or refused: docs/workloads.md)",
    "batch": ("sequences decoded at once, one new token each (0: the largest batch the "
              "HBM holds at this context)", "sequences"),
    "context": ("tokens already in each sequence's KV cache (the new one is at this "
                "position)", "tokens"),
    "layers": ("decoder layers to run (0: all of the model's)", "layers"),
    "scale_to": ("representative layers: time `layers` (4 or more) and report the step "
                 "of this many (0: the step as run), each layer not timed at a middle "
                 "layer's time and energy, with a bound from how much the timed middle "
                 "layers differ", "layers"),
    "pp": ("pipeline stages: the grid's PEs (in ring order) split into this many "
           "tensor-parallel groups, each running a share of the layers; one step, no "
           "micro-batches, so stages run one after another", "stages"),
    "dtype": "weights, KV cache and GEMM operands (f32 accumulation)",
    "algo": "the all-reduces' and all-gathers' algorithm (collectives; an all-gather "
            "takes ring where its group does not allow it); hier: a ring per level, the "
            "fewest steps for the small vectors of a decode step",
    "chunk": ("KV positions a PE's attention takes at once", "tokens"),
}
# ---------------------------------------------------------------------- setup


def setup(host, p):
    run = run_of(host.topology, p)
    lay = Layout(host.topology, run)
    lay.check(host.grid)
    host.expect(len(lay.shared) * host.num_pes + sum(
        sum(len(lay.block(pid, w)) for _, w in plan["layers"]) + len(lay.extra[pid])
        for pid, plan in enumerate(lay.plans)))
    cfg, b, dt = run.cfg, run.batch, run.dtype
    w = weights(host, run)
    cos, sin = cos_sin(cfg.rope, cfg.head_dim, run.context)
    values = {"x": w["inputs_embeds"], "rope": np.stack([cos, sin]).astype(np.float32)}
    shared = {piece.key: host.replicate(piece.label or piece.key, values[piece.key])
              if piece.key in values else
              host.empty(piece.label or piece.key, piece.shape, piece.dtype)
              for piece in lay.shared}
    plans = []
    for pid, plan in enumerate(lay.plans):
        made = Maker(host, w, run, plan)
        placed = {k: v for k, v in plan.items() if k != "seq"}
        placed["layers"] = []
        for i, window in plan["layers"]:  # its layers' blocks one after another, then the rest
            layer = dict.fromkeys(("qkv_bias", "o_bias", "gate_bias", "up_bias",
                                   "down_bias", "k", "v"))
            layer["seq"] = plan["seq"][window]
            for piece in lay.block(pid, window):
                layer[piece.key] = made.place(pid, piece, lay.page, i)
            placed["layers"].append((i, layer))
        for key in ("norm_final", "lm_w", "iota"):
            placed[key] = None
        for piece in lay.extra[pid]:
            placed[piece.key] = made.place(pid, piece, lay.page)
        plans.append(placed)
    dims = {"b": b, "hidden": cfg.hidden, "g": cfg.group, "d": cfg.head_dim,
            "layers": run.timed, "dt": dt, "per_layer": run.scaled or bool(p["scale_to"]),
            "eps": cfg.eps, "ctx": run.context, "chunk": run.chunk, "algo": run.algo,
            "act": cfg.act, "vocab_share": lay.share}
    return {"plans": plans, "shared": shared, "dims": dims}


# ---------------------------------------------------------------------- the kernel

NEG = -1e30  # the running max of an empty shard: finite, so that two empty partials merge


def _rmsnorm(tl, x, weight_ptr, hidden, eps):
    w = tl.load(weight_ptr, shape=(1, hidden), dtype="f32")
    r = tl.rsqrt(tl.sum(x * x, axis=1, keepdims=True) * (1.0 / hidden) + eps)
    return x * r * w


def _gemv(tl, a, ptr, k, n, dt, out_dtype="f32"):
    """a [b, k] @ the [k, n] weight at `ptr`, streamed by PE_SCHEDULER."""
    return tl.composite(op="gemm", a=a, b=tl.ref(ptr, shape=(k, n), dtype=dt),
                        out_dtype=out_dtype).out


def _bias(tl, y, ptr, n, dt):
    """y (f32) plus the [1, n] bias at `ptr` (none: y)."""
    return y if ptr is None else y + tl.load(ptr, shape=(1, n), dtype=dt)


def _qkv(tl, plan, layer, h, shared, dims):
    """This member's columns of the group's q, k, v (with their biases), all-gathered in
    the group; then each sequence's q (scaled by 1/sqrt(d)) and new k in halves, RoPE'd,
    and its new v."""
    b, g, d, dt, hidden = dims["b"], dims["g"], dims["d"], dims["dt"], dims["hidden"]
    item = tl.itemsize(dt)
    e0, n, c0, c1 = plan["qkv"]
    buf = tl.shard(shared["qkvbuf"])
    if n:
        bias = layer.get("qkv_bias")
        cols = _gemv(tl, h, layer["qkv"], hidden, c1 - c0, dt,
                     out_dtype="f32" if bias is not None else dt)
        if bias is not None:
            cols = _bias(tl, cols, bias, c1 - c0, dt).to(dt)
        flat = cols.T.reshape((c1 - c0) * b)
        tl.store(buf + e0 * item, flat[e0 - c0 * b:e0 - c0 * b + n])
    coll.all_gather(tl, buf, (g + 2) * d * b, dt, group=plan["group"], algo=plan["qkv_algo"])
    rope = tl.load(tl.shard(shared["rope"]), shape=(2, d // 2), dtype="f32")
    cos, sin, half = rope[0], rope[1], d // 2
    out = []
    for j in range(b):  # column c of sequence j is at c * b + j
        q = tl.load(buf + j * item, shape=(g * d, 1), dtype=dt, stride=b).reshape(g, d)
        k = tl.load(buf + (g * d * b + j) * item, shape=(d, 1), dtype=dt, stride=b)
        v = tl.load(buf + ((g + 1) * d * b + j) * item, shape=(d, 1), dtype=dt, stride=b)
        q, k = q.to("f32") * (1.0 / math.sqrt(d)), k.reshape(1, d).to("f32")
        q1, q2, k1, k2 = q[:, :half], q[:, half:], k[:, :half], k[:, half:]
        out.append(((q1 * cos - q2 * sin).to(dt), (q2 * cos + q1 * sin).to(dt),
                    (k1 * cos - k2 * sin).to(dt), (k2 * cos + k1 * sin).to(dt),
                    v.reshape(1, d)))
    return out


def _append(tl, layer, new, dims):
    """The member holding the new position writes each sequence's new K and V row."""
    lo, s0, sn = layer["seq"]
    at, d, dt = dims["ctx"] - lo, dims["d"], dims["dt"]  # the new one among the cached
    if not s0 <= at < s0 + sn:
        return
    item = tl.itemsize(dt)
    for j, (_, _, k1, k2, v) in enumerate(new):
        row = (j * sn + at - s0) * d * item
        tl.store(layer["k"] + row, k1)
        tl.store(layer["k"] + row + d // 2 * item, k2)
        tl.store(layer["v"] + row, v)


def _partial(tl, layer, q1, q2, j, dims):
    """Flash-decoding over this member's shard of sequence j: (max, sum, output)."""
    _lo, _s0, sn = layer["seq"]
    g, d, dt, chunk = dims["g"], dims["d"], dims["dt"], dims["chunk"]
    item = tl.itemsize(dt)
    if not sn:
        return tl.full((g,), NEG), tl.zeros((g,)), tl.zeros((g, d))
    m = lsum = o = None
    for c0 in range(0, sn, chunk):
        n = min(chunk, sn - c0)
        rows = (j * sn + c0) * d * item
        k1 = tl.ref(layer["k"] + rows, shape=(n, d // 2), dtype=dt, stride=d)
        k2 = tl.ref(layer["k"] + rows + d // 2 * item, shape=(n, d // 2), dtype=dt, stride=d)
        scores = tl.composite(op="gemm", a=q1, b=k1, trans_b=True, out_dtype="f32").out + \
            tl.composite(op="gemm", a=q2, b=k2, trans_b=True, out_dtype="f32").out
        m_c = tl.max(scores, axis=1)
        m_new = m_c if m is None else tl.maximum(m, m_c)
        p = tl.exp(scores - m_new[:, None])
        pv = _gemv(tl, p.to(dt), layer["v"] + rows, n, d, dt)
        if m is None:
            lsum, o = tl.sum(p, axis=1), pv
        else:
            alpha = tl.exp(m - m_new)
            lsum, o = lsum * alpha + tl.sum(p, axis=1), o * alpha[:, None] + pv
        m = m_new
    return m, lsum, o


def _merge(tl, a, b):
    """Log-sum-exp merge of two partials (m, l, o), as gqa_attention merges them."""
    m = tl.maximum(a[0], b[0])
    e1, e2 = tl.exp(a[0] - m), tl.exp(b[0] - m)
    return m, a[1] * e1 + b[1] * e2, a[2] * e1[:, None] + b[2] * e2[:, None]


def _attention(tl, plan, layer, new, shared, dims):
    """Partials per sequence, merged up a binomial tree of the head group to its first
    member, which divides and stores the heads' output; broadcast to the group."""
    members, rank = plan["group"], plan["rank"]
    b, g, d, dt = dims["b"], dims["g"], dims["d"], dims["dt"]
    parts = [_partial(tl, layer, q1, q2, j, dims) for j, (q1, q2, *_) in enumerate(new)]
    step = 1
    while step < len(members) and parts is not None:
        if rank % (2 * step) == step:
            for part in parts:
                for x in part:
                    tl.send(x, to=members[rank - step])
            parts = None
        elif rank + step < len(members):
            frm = members[rank + step]
            parts = [_merge(tl, part, (tl.recv(frm=frm, shape=(g,), dtype="f32"),
                                       tl.recv(frm=frm, shape=(g,), dtype="f32"),
                                       tl.recv(frm=frm, shape=(g, d), dtype="f32")))
                     for part in parts]
        step *= 2
    obuf = tl.shard(shared["obuf"])
    if rank == 0:
        for j, (_, lsum, o) in enumerate(parts):
            tl.store(obuf + j * g * d * tl.itemsize(dt), (o / lsum[:, None]).to(dt))
    coll.broadcast(tl, obuf, b * g * d, dt, root=members[0], group=members, algo="tree")


def _all_reduce_into(tl, plan, y, shared, dims):
    """Sum `y` [b, hidden] (f32) over the PEs of the stage, through the `ybuf` buffer."""
    b, hidden = dims["b"], dims["hidden"]
    buf = tl.shard(shared["ybuf"])
    tl.store(buf, y)
    coll.all_reduce(tl, buf, b * hidden, "f32", group=plan["stage"], algo=dims["algo"])
    return tl.load(buf, shape=(b, hidden), dtype="f32")


def _act(tl, gate, name):
    """The MLP's activation of `gate` (f32): SiLU, exact GELU or its tanh form."""
    if name == "silu":
        return gate * tl.reciprocal(tl.exp(-gate) + 1.0)
    if name == "gelu":
        return gate * (tl.erf(gate * (1.0 / math.sqrt(2.0))) + 1.0) * 0.5
    inner = (gate * gate * gate * 0.044715 + gate) * math.sqrt(2.0 / math.pi)
    return gate * (tl.tanh(inner) + 1.0) * 0.5


def _layer(tl, plan, layer, i, x, shared, dims):
    b, g, d, dt, hidden, eps = (dims[k] for k in ("b", "g", "d", "dt", "hidden", "eps"))
    with tl.region("rmsnorm"):
        h = _rmsnorm(tl, x, layer["norm_in"], hidden, eps).to(dt)
    with tl.region("qkv"):
        new = _qkv(tl, plan, layer, h, shared, dims)
    with tl.region("kv_append"):
        _append(tl, layer, new, dims)
    with tl.region("attention"):
        _attention(tl, plan, layer, new, shared, dims)
    with tl.region("o_proj"):
        r0, rn = plan["o"]
        if rn:
            o = tl.load(tl.shard(shared["obuf"]) + r0 * tl.itemsize(dt), shape=(b, rn),
                        dtype=dt, stride=g * d)
            y = _gemv(tl, o, layer["o"], rn, hidden, dt)
        else:
            y = tl.zeros((b, hidden))
    with tl.region("attn_all_reduce"):
        x = x + _bias(tl, _all_reduce_into(tl, plan, y, shared, dims), layer.get("o_bias"),
                      hidden, dt)
    with tl.region("rmsnorm"):
        h = _rmsnorm(tl, x, layer["norm_post"], hidden, eps).to(dt)
    with tl.region("mlp"):
        _f0, fn = plan["mlp"]
        if fn:
            gate = _bias(tl, _gemv(tl, h, layer["gate"], hidden, fn, dt),
                         layer.get("gate_bias"), fn, dt)
            up = _bias(tl, _gemv(tl, h, layer["up"], hidden, fn, dt), layer.get("up_bias"),
                       fn, dt)
            act = (_act(tl, gate, dims["act"]) * up).to(dt)
            y = _gemv(tl, act, layer["down"], fn, hidden, dt)
        else:
            y = tl.zeros((b, hidden))
    with tl.region("mlp_all_reduce"):
        return x + _bias(tl, _all_reduce_into(tl, plan, y, shared, dims),
                         layer.get("down_bias"), hidden, dt)


def _is_max(tl, x, m):
    """1 where `x` equals its maximum `m` (broadcast), else 0: 1 - min((m - x) * 1e30, 1),
    exact in f32, as the language has no comparisons."""
    return 1.0 - tl.minimum((m - x) * 1e30, 1.0)


def _lm_head(tl, plan, x, shared, dims):
    """Vocab-parallel logits, the local argmax, the all-gathered (max, index) pairs and
    their argmax (the lowest index among equal maxima, as numpy's)."""
    b, hidden, dt, eps = dims["b"], dims["hidden"], dims["dt"], dims["eps"]
    _v0, vn = plan["lm"]
    h = _rmsnorm(tl, x, plan["norm_final"], hidden, eps).to(dt)
    if vn:
        logits = _gemv(tl, h, plan["lm_w"], hidden, vn, dt)
        tl.store(tl.shard(shared["logits"]), logits)
        iota = tl.load(plan["iota"], shape=(1, vn), dtype="f32")
        m = tl.max(logits, axis=1)
        idx = -tl.max(tl.where(_is_max(tl, logits, m[:, None]), -iota, NEG), axis=1)
    else:  # no share of a vocabulary smaller than the stage: a pair that never wins
        m, idx = tl.zeros((b,)) + NEG, tl.zeros((b,))
    buf, pes = tl.shard(shared["argbuf"]), len(plan["stage"])
    at, _ = plan["arg"]
    tl.store(buf + 4 * at, m)
    tl.store(buf + 4 * (at + b), idx)
    coll.all_gather(tl, buf, pes * b * 2, "f32", group=plan["stage"], algo=plan["arg_algo"])
    pairs = tl.load(buf, shape=(pes, 2 * b), dtype="f32")
    best = tl.max(pairs[:, :b], axis=0)
    token = -tl.max(tl.where(_is_max(tl, pairs[:, :b], best[None, :]), -pairs[:, b:], NEG),
                    axis=0)
    if tl.pid == plan["stage"][0]:
        tl.store(tl.shard(shared["token"]), token)


def kernel(tl, plans, shared, dims):
    plan = plans[tl.pid]
    b, hidden = dims["b"], dims["hidden"]
    if plan["prev"] is None:
        x = tl.load(tl.shard(shared["x"]), shape=(b, hidden), dtype=dims["dt"]).to("f32")
    else:
        with tl.region("pp_handoff"):  # the hidden state from the stage before
            x = tl.recv(frm=plan["prev"], shape=(b, hidden), dtype="f32")
    out = tl.shard(shared["hidden_out"])
    for i, layer in plan["layers"]:
        with tl.region(f"layer{i}") if dims["per_layer"] else contextlib.nullcontext():
            x = _layer(tl, plan, layer, i, x, shared, dims)
            if tl.pid == plan["stage"][0]:  # the hidden state after the layer, for the check
                tl.store(out + i * b * hidden * 4, x)
    if plan["next"] is not None:
        with tl.region("pp_handoff"):
            tl.send(x, to=plan["next"])
        return
    with tl.region("lm_head"):
        _lm_head(tl, plan, x, shared, dims)


# ---------------------------------------------------------------------- the reference


def reference(host, p):
    """The same step in float64, as transformers computes it
    (`kernbench_cli.models.reference`), rounded to `dtype` where the kernel hands values
    to the GEMM array or the KV cache."""
    run = run_of(host.topology, p)
    return decode_step(run.cfg, host.inputs, range(run.timed), run.context,
                       host.inputs["inputs_embeds"].dtype)


def outputs(host, args, p):
    dims, shared, plans = args["dims"], args["shared"], args["plans"]
    b, hidden = dims["b"], dims["hidden"]
    dt = host.inputs["inputs_embeds"].dtype
    out = {}
    for pid, plan in enumerate(plans):  # each stage's first PE keeps its layers' states
        if plan["stage"][0] == pid:
            states = host.read_shard(shared["hidden_out"], pid)
            for i, _ in plan["layers"]:
                out[f"hidden_states.{i}"] = states[i].reshape(b, hidden).astype(dt)
    out = dict(sorted(out.items(), key=lambda kv: int(kv[0].split(".")[1])))
    last = [pid for pid, plan in enumerate(plans) if plan["next"] is None]
    pieces = sorted(((plans[pid]["lm"][0], host.read_shard(shared["logits"], pid)
                      [:b * plans[pid]["lm"][1]].reshape(b, plans[pid]["lm"][1]))
                     for pid in last), key=lambda piece: piece[0])
    out["logits"] = np.concatenate([piece for _, piece in pieces], axis=1).astype(dt)
    out["next_token"] = host.read_shard(shared["token"], plans[last[0]]["stage"][0]) \
        .astype(np.float32)
    return out


# ---------------------------------------------------------------------- bounds, metrics


_GEMV = ("qkv", "o", "gate", "up", "down", "lm_w")


def _macs(lay: Layout) -> int:
    """The step's multiply-accumulates: every GEMV weight element once per sequence, and
    attention's two products (q k^T, p v) over each head group's cached positions, the
    layers a scaled run does not time included."""
    run = lay.run

    def of(pieces) -> int:
        return sum(run.batch * math.prod(p.shape) if p.key in _GEMV else
                   2 * run.cfg.group * math.prod(p.shape) if p.key == "k" else 0
                   for p in pieces)

    return sum(sum(count * of(lay.block(pid, window)) for window, count in lay.layers(pid))
               + of(lay.extra[pid]) for pid in range(len(lay.plans)))


def _stream(topology):
    hbm = topology.hbm
    return hbm.bandwidth * (hbm.refresh_interval - hbm.refresh_time) // hbm.refresh_interval


def bounds(topology, p):
    """The step as run cannot be faster than its busiest PE reading its weights and KV
    cache once from its own HBM slice at the slice's stream rate (weight-stationary: no
    other PE reads them for it)."""
    lay = Layout(topology, run_of(topology, _asrun_of(p)))
    read = [lay.read(pid) for pid in range(topology.num_pes)]
    worst = max(range(len(read)), key=lambda pid: (read[pid], -pid))
    return {"memory": (-(-read[worst] * 10**12 // _stream(topology)),
                       f"PE {worst}'s weights and KV cache, {read[worst]:,} B, at its HBM "
                       "slice's stream bandwidth")}


def _asrun_of(p):
    """`p` for the step as run (bounds() states the run's bounds, not the scaled step's)."""
    return {**p, "scale_to": 0}


def metrics(topology, p, run):
    """Time per output token (TPOT), tokens/s, energy per token, TPOT against the HBM bound
    of the whole step, and the HBM the model takes; with `scale_to`, the step of that many
    layers from the timed ones, with its error bound."""
    step = run_of(topology, p)
    lay = Layout(topology, step)
    read = sum(lay.read(pid) for pid in range(topology.num_pes))
    rate = topology.num_pes * _stream(topology)
    hbm_bound = read / rate * 1e12
    tpot, energy, how, out = float(run.latency_ps), float(run.energy_aj), \
        f"{step.timed} layers as run", {}
    if step.scaled:
        tpot, energy, how, out = _scaled(step, lay, run)
    if tpot < hbm_bound:
        raise RuntimeError(f"TPOT {tpot:.0f} ps is below the step's HBM bound {hbm_bound:.0f} "
                           "ps: a bug in kernbench, please report it")
    b = step.batch
    used = [sum(lay.need(pid).values()) for pid in range(topology.num_pes)]
    most_batch = largest(topology, p, "batch")
    most_context = largest(topology, {**p, "batch": b}, "context")
    have = topology.hbm.slice_size
    macs = _macs(lay)
    return {"tpot_ps": (tpot, f"({how})"),
            "tokens_per_s": (b * 1e12 / tpot if tpot else 0.0, f"(batch {b} / TPOT" + (
                ": the largest batch that fits)" if p["batch"] == 0 else ")")),
            "hbm_bound_ps": (hbm_bound, f"(weights and KV cache {read:,} B / aggregate HBM "
                                        "stream bandwidth)"),
            "tpot_over_hbm_bound": (tpot / hbm_bound if hbm_bound else 0.0, ""),
            "energy_per_token_uj": (energy / 1e12 / b, "(the step's energy / batch" + (
                ": each layer not timed at a middle layer's counted energy, static power "
                "over the TPOT)" if step.scaled else ")")),
            "hbm_used_bytes": (float(sum(used)), f"(the whole model over {len(used)} PEs; "
                               f"the fullest slice {max(used) / have:.1%} used)"),
            "hbm_free_bytes": (float(len(used) * have - sum(used)), ""),
            "max_batch": (float(most_batch), f"(at context {step.context}: the largest batch "
                                             "whose weights, KV cache and buffers fit)"),
            "max_context": (float(most_context), f"(at batch {b})"),
            "macs": (float(macs), ""), **out}


def _scaled(step: Run, lay: Layout, run) -> tuple[float, float, str, dict]:
    """(TPOT, energy, how, more metrics) of the step of `step.layers` layers from the
    `step.timed` timed: each layer not timed takes a middle layer's time and energy.

    A layer's time is from the end of the layer before (the last of its commands on any
    PE; the start of the step for the first) to the end of its own. Middle layers are
    neither the first of their stage (it fills the pipeline, or takes the hand-off from
    the stage before) nor the last (the LM head or the hand-off follows it). The layers
    not timed are middle ones; they take the mean of
    the timed middle ones, and the bound is their spread (the largest less the
    smallest) times their number: the full step lies within it when the layers not timed
    differ no more than the timed ones do. Dynamic energy is counted per layer (every
    action its commands issued, `sim.energy.by_region`); static energy is the run's
    static power over the step's time."""
    names = [f"layer{i}" for i in range(step.timed)]
    ends = [run.region_bounds[n][1] for n in names]
    starts = [run.region_bounds[names[0]][0], *ends[:-1]]
    edges = {i for k in range(step.pp) for i in (coll.part(step.timed, step.pp, k)[0],
                                                 sum(coll.part(step.timed, step.pp, k)) - 1)}
    middle = [i for i in range(step.timed) if i not in edges]
    times = [ends[i] - starts[i] for i in middle]
    joules = [run.region_energy_aj[names[i]] for i in middle]
    extra = step.layers - step.timed
    t_mid, e_mid = sum(times) / len(times), sum(joules) / len(joules)
    spread = max(times) - min(times)
    tpot = run.latency_ps + extra * t_mid
    power = run.static_aj / run.latency_ps if run.latency_ps else 0.0  # aJ per ps
    energy = run.energy_aj + extra * e_mid + power * (tpot - run.latency_ps)
    bound = extra * spread
    e_bound = extra * (max(joules) - min(joules)) + power * bound
    how = (f"{step.timed} layers timed, {extra} more at a middle layer's "
           f"{t_mid / 1e6:.3f} us, within +/- {bound / 1e6:.3f} us: the timed middle layers "
           f"took {min(times) / 1e6:.3f} to {max(times) / 1e6:.3f} us")
    return tpot, energy, how, {
        "tpot_bound_ps": (float(bound), "(+/-: the layers not timed times the timed middle "
                                        "layers' spread)"),
        "energy_per_token_bound_uj": (e_bound / 1e12 / step.batch, ""),
        "layers_timed": (float(step.timed), f"(of {step.layers})")}


def quality(host, p, outputs):
    """How far the step's logits are from the exact model's: the same weights and cache,
    computed in float64 with no rounding anywhere (`reference` instead rounds where the
    kernel stores a value in `dtype`, to verify the kernel). Relative L2 error of the
    logits over the batch, their largest absolute error, and the share of sequences whose
    next token (the argmax) is the exact model's."""
    run = run_of(host.topology, p)
    exact = decode_step(run.cfg, host.inputs, range(run.timed), run.context, np.float64)
    want, got = exact["logits"], outputs["logits"].astype(np.float64)
    norm = float(np.linalg.norm(want))
    agree = float(np.mean(got.argmax(axis=1) == want.argmax(axis=1)))
    return {"logits_rel_l2": (float(np.linalg.norm(got - want)) / norm if norm else 0.0,
                              "(against the exact model in float64)"),
            "logits_max_abs_err": (float(np.abs(got - want).max()), ""),
            "top1_agreement": (agree, f"(of {run.batch} sequences, the exact model's next "
                                      "token)")}
