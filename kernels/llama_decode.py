"""One decode step of a Hugging Face decoder (Llama, Mistral, Qwen2), on every PE.

`batch` sequences, each with `context` tokens already in its KV cache, take one new
token (given as `inputs_embeds`) through `layers` decoder layers, the final norm and
the LM head, and pick the next token (argmax). The model is a shipped one or a
Hugging Face config.json (`kernbench_cli.models.hf`: every key modelled or refused);
its float64 reference is `kernbench_cli.models.reference`. Weights are seeded random,
placed once in the PEs' HBM as a weight-stationary near-memory design keeps them:

- The grid is one tensor-parallel group (`-p pp=N`: N pipeline stages, each one
  with its share of the layers, handing the hidden state on: each PE sends its peer
  in the next stage the part that peer gathers, and the next stage all-gathers them,
  so the state crosses between the stages once). Its PEs split into
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
region first; the embedding table (unless tied to the LM head, and there is one stage)
as space only, split over the first stage. The whole model is checked against each
PE's HBM slice before anything runs, the layers a scaled run does not time included.

Regions (`tl.region`) name each operator per layer, so the report times them.
Dtype: weights, activations handed to the GEMM array and the KV cache in `dtype`;
the residual stream, norms, softmax and accumulation in f32. `-p weights` stores the
projections' weights narrow (as [N, K], multiplied with `trans_b`, each tile dequantised
to bf16 on PE_MATH as it lands), `-p kv` the cache (each new row quantised by a cast as
it is stored).
"""

import contextlib
import math

import numpy as np

from kernbench_cli.lang import collectives as coll
from kernbench_cli.lang.bounds import stream_bandwidth
from kernbench_cli.models.decoder import (
    MAX_CONTEXT,
    Layout,
    Maker,
    Run,
    as_stored,
    check_request,
    check_rows,
    largest,
    limit_of,
    run_of,
    tcm_rows,
    weights,
)
from kernbench_cli.models.reference import step
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
    "kv_chunk": 512,
    "prompt": 0,
    "chunk": 64,
    "new_tokens": 128,
    "microbatches": 1,
    "passes": 0,
    "weights": "",
    "kv": "",
    "steps": 1,
}
#: -p model or -p config, not both (the one given is the model; the other reads empty)
ONE_OF = (("model", "config"),)
#: a prefill's pass size and a request's length mean something only with a prompt
NEEDS = {"chunk": "prompt", "new_tokens": "prompt"}
#: -p config names a file the kernel reads
FILES = ("config",)
#: The tokens are the logits' argmax: a near-tie in the reference may go either way
ARGMAX = {"next_token": "logits", "prefill.next_token": "prefill.logits"}
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
           "tensor-parallel groups, each running a share of the layers; without "
           "micro-batches the stages run one after another", "stages"),
    "microbatches": ("the decode step's batch in this many equal parts, each through the "
                     "stages in turn, so that the stages overlap; on one stage, one after "
                     "another (for a batch whose rows the TCM does not hold at once; each "
                     "part reads the weights again)", "parts"),
    "passes": ("representative prefill passes (timing only): run this many (5 or more; "
               "as many as the prompt's passes or more: every pass) "
               "spread over the prompt, the first and the last among them, and take each "
               "pass between at the time and energy interpolated from its neighbours, "
               "with a bound from how far a timed pass is off its neighbours' line; 0: "
               "every pass", "passes"),
    "dtype": "weights, KV cache and GEMM operands (f32 accumulation; `weights` and `kv` "
             "may narrow the first two)",
    "algo": "the all-reduces' and all-gathers' algorithm (collectives; an all-gather "
            "takes ring where its group does not allow it); hier: a ring per level, the "
            "fewest steps for the small vectors of a decode step",
    "kv_chunk": ("KV positions a PE's attention takes at once", "tokens"),
    "prompt": ("prefill: tokens of each sequence's prompt, run through the model (chunk "
               "by chunk) after its `context` cached tokens and before the decode step, "
               "writing their KV cache; 0: the decode step alone", "tokens"),
    "chunk": ("prompt tokens a prefill pass takes at once (the GEMMs' M is batch x "
              "chunk)", "tokens"),
    "weights": "the decoder layers' projection weights' format: empty for dtype, or fp8, "
               "fp8e5m2 (the element alone: no per-tensor scale), int8, int4, mxfp8, "
               "mxfp4 (a scale per 32) (stored narrow, dequantised on PE_MATH tile by "
               "tile; the embedding table and LM head stay in dtype)",
    "kv": "the KV cache's format: empty for dtype, or a narrow one as for weights (each new "
          "row quantised by a PE_MATH cast as it is stored)",
    "steps": ("decode steps one after another, each sequence's next tokens, each step's "
              "input given (teacher-forced) and its first command issued once the step "
              "before has chosen its token (a store of it, fenced): TPOT is their mean, "
              "and quality counts every step's token (one pipeline stage, no "
              "micro-batches or scale_to)", "steps"),
    "new_tokens": ("tokens a request generates, for the request figure (the first from "
                   "the prefill, each next one a decode step)", "tokens"),
}
# ---------------------------------------------------------------------- setup


def _placed(host, w, run, lay, pid: int, plan: dict) -> dict:
    """PE `pid`'s `plan` with its tensors placed: its layers' blocks one after another,
    then the rest (a piece a PE does not hold is None)."""
    made = Maker(host, w, run, plan)
    placed = {k: v for k, v in plan.items() if k != "seq"}
    placed["layers"] = []
    for i, window in plan["layers"]:
        layer = dict.fromkeys(("qkv_bias", "o_bias", "gate_bias", "up_bias", "down_bias",
                               "k", "v"))
        layer["seq"] = plan["seq"][window]
        for piece in lay.block(pid, window):
            layer[piece.key] = made.place(pid, piece, lay.page, i)
        placed["layers"].append((i, layer))
    for key in ("norm_final", "lm_w", "iota"):
        placed[key] = None
    for piece in lay.extra[pid]:
        placed[piece.key] = made.place(pid, piece, lay.page)
    return placed


def setup(host, p):
    run = run_of(host.topology, p)
    lay = Layout(host.topology, run)
    lay.check(host.grid)  # HBM first: a batch it cannot hold is not to be split for TCM
    check_request(host.topology, run, host.grid)
    check_rows(host.topology, run, chosen=p["batch"] == 0)
    if run.sampled and not host.timing_only:
        raise ValueError(f"passes = {run.passes}: representative passes need --timing-only "
                         "(the passes not run would leave their rows out of the cache the "
                         "values are checked against)")
    if run.kv and run.prompt and not host.timing_only:
        raise ValueError(f"kv = {run.kv} with a prompt needs --timing-only: the prompt's "
                         "cached rows, quantised, can land a step of the narrow format away "
                         "from the reference's (one bf16 unit apart before), and what reads "
                         "them then differs by more than bf16's tolerance")
    if host.bounds_only:  # nothing runs: what follows fits, as `lay.check` found
        return {}
    host.expect(len(lay.shared) * host.num_pes + sum(
        sum(len(lay.block(pid, w)) for _, w in plan["layers"]) + len(lay.extra[pid])
        for pid, plan in enumerate(lay.plans)))
    cfg, b, dt = run.cfg, run.batch, run.dtype
    w = weights(host, run)
    first = run.positions - run.steps  # the first decode step's position
    embeds = w["inputs_embeds"]  # [b, hidden], or [b, steps, hidden]: step-major rows
    values = {"x": embeds if run.steps == 1 else
              embeds.transpose(1, 0, 2).reshape(-1, cfg.hidden),
              "rope": _rope(cfg, range(first, run.positions)).transpose(1, 0, 2)}
    if run.prompt:
        values["prompt_rope"] = _rope(cfg, range(run.context, run.context + run.prompt))
        values["positions"] = np.arange(run.positions, dtype=np.float32)
    shared = {}
    for piece in lay.shared:
        name = piece.label or piece.key
        shared[piece.key] = (
            host.distribute(name, piece.shape, piece.dtype, _prompt_parts(
                lay, run, w["prompt_embeds"])) if piece.key == "prompt" else
            host.replicate(name, values[piece.key]) if piece.key in values else
            host.empty(name, piece.shape, piece.dtype))
    plans = [_placed(host, w, run, lay, pid, plan) for pid, plan in enumerate(lay.plans)]
    dims = {"b": b, "hidden": cfg.hidden, "g": cfg.group, "d": cfg.head_dim,
            "layers": run.timed, "dt": dt, "wdt": run.wdt, "kvdt": run.kvdt,
            "per_layer": run.scaled or bool(p["scale_to"]),
            "eps": cfg.eps, "ctx": first, "step": 0, "steps": run.steps,
            "kv_chunk": run.kv_chunk,
            "algo": run.algo, "act": cfg.act, "vocab_share": lay.share,
            "chunks": run.timed_chunks, "context": run.context, "prompt": run.prompt,
            "sampled": run.sampled, "every": run.chunks, "prompt_slot": lay.prompt_slot,
            "state_slot": lay.state_slot, "state_stride": lay.state_stride,
            "prefill_stride": lay.prefill_stride,
            "m": run.microbatches, "mb": run.rows}
    return {"plans": plans, "shared": shared, "dims": dims}


def _prompt_parts(lay, run, embeds: np.ndarray):
    """PE k's prompt: pass by pass, its part of the pass's rows [b x tokens, hidden] (the
    part it gathers, `Layout.gathered`), each in a slot of `lay.prompt_slot` elements."""
    slot, parts = lay.prompt_slot, lay.gathered(0)
    rows = [embeds[:, p0 - run.context:p0 - run.context + t].reshape(-1)
            for p0, t in run.chunks]

    def part(pid: int) -> np.ndarray:
        out = np.zeros(len(rows) * slot, embeds.dtype)
        for c, values in enumerate(rows):
            e0, n = parts[len(values) // run.cfg.hidden].get(pid, (0, 0))
            out[c * slot:c * slot + n] = values[e0:e0 + n]
        return out

    return part


def _rope(cfg, positions) -> np.ndarray:
    """cos and sin of RoPE at each of `positions`: [2, positions, head_dim / 2], f32."""
    pairs = [cos_sin(cfg.rope, cfg.head_dim, q) for q in positions]
    return np.stack([np.stack([c for c, _ in pairs]), np.stack([s for _, s in pairs])]) \
        .astype(np.float32)


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


def _project(tl, a, ptr, k, n, dims, out_dtype="f32"):
    """a [rows, k] @ a projection's [k, n] weight at `ptr`: stored [k, n] in dtype, or
    narrow as [n, k] (its scales' blocks along K) and multiplied with `trans_b`, its tiles
    dequantised on PE_MATH as they land."""
    wdt = dims["wdt"]
    if wdt == dims["dt"]:
        return _gemv(tl, a, ptr, k, n, wdt, out_dtype)
    return tl.composite(op="gemm", a=a, b=tl.ref(ptr, shape=(n, k), dtype=wdt),
                        trans_b=True, out_dtype=out_dtype).out


def _bias(tl, y, ptr, n, dt):
    """y (f32) plus the [1, n] bias at `ptr` (none: y)."""
    return y if ptr is None else y + tl.load(ptr, shape=(1, n), dtype=dt)


def _columns(tl, plan, layer, h, shared, dims, rows):
    """This member's columns of the group's q, k, v (with their biases) for a pass of
    `rows` rows (h: [rows, hidden]; a prefill pass's row j x t + k is sequence j's token k),
    all-gathered in the group: the buffer, column c of row r at c x rows + r."""
    g, d, dt, hidden = dims["g"], dims["d"], dims["dt"], dims["hidden"]
    item = tl.itemsize(dt)
    e0, n, c0, c1 = plan["qkv"][rows]
    w0, w1 = plan["qkv_cols"]  # the columns this PE holds, of every pass
    buf = tl.shard(shared["qkvbuf"])
    if n:
        bias = layer.get("qkv_bias")
        out_dtype = "f32" if bias is not None else dt
        if dims["wdt"] == dt:
            weight = tl.ref(layer["qkv"] + (c0 - w0) * item, shape=(hidden, c1 - c0),
                            dtype=dt, stride=w1 - w0 if w1 - w0 != c1 - c0 else None)
            cols = tl.composite(op="gemm", a=h, b=weight, out_dtype=out_dtype).out
        else:  # narrow: [columns, hidden], these columns' rows
            cols = _project(tl, h, layer["qkv"] + tl.nbytes(dims["wdt"], (c0 - w0) * hidden),
                            hidden, c1 - c0, dims, out_dtype)
        if bias is not None:
            cols = _bias(tl, cols, bias + (c0 - w0) * item, c1 - c0, dt).to(dt)
        flat = cols.T.reshape((c1 - c0) * rows)
        tl.store(buf + e0 * item, flat[e0 - c0 * rows:e0 - c0 * rows + n])
    coll.all_gather(tl, buf, (g + 2) * d * rows, dt, group=plan["group"],
                    algo=plan["qkv_algo"])
    return buf


def _qkv(tl, plan, layer, h, shared, dims):
    """The decode step's q, k, v for a micro-batch: each sequence's q (scaled by
    1/sqrt(d)) and new k in halves, RoPE'd at the new position, and its new v."""
    b, g, d, dt = dims["mb"], dims["g"], dims["d"], dims["dt"]
    item = tl.itemsize(dt)
    buf = _columns(tl, plan, layer, h, shared, dims, b)
    rope = tl.load(tl.shard(shared["rope"]) + dims["step"] * d * 4, shape=(2, d // 2),
                   dtype="f32")
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


def _qkv_pass(tl, plan, layer, h, shared, dims, p0, t):
    """A prefill pass's q, k, v, per sequence: its `t` tokens' k in halves and v ([t, ...]),
    RoPE'd at positions p0 ..; and per query head its q (scaled by 1/sqrt(d)) in halves."""
    b, g, d, dt = dims["b"], dims["g"], dims["d"], dims["dt"]
    item, rows, half = tl.itemsize(dt), b * t, d // 2
    buf = _columns(tl, plan, layer, h, shared, dims, rows)
    table = tl.shard(shared["prompt_rope"]) + (p0 - dims["context"]) * half * 4
    cos = tl.load(table, shape=(t, half), dtype="f32")
    sin = tl.load(table + dims["prompt"] * half * 4, shape=(t, half), dtype="f32")

    def rotated(x):  # [t, d] f32 -> its halves, RoPE'd, in dt
        x1, x2 = x[:, :half], x[:, half:]
        return (x1 * cos - x2 * sin).to(dt), (x2 * cos + x1 * sin).to(dt)

    out = []
    for j in range(b):  # sequence j's token k of column c is at c * rows + j * t + k
        qs = tl.load(buf + j * t * item, shape=(g * d, t), dtype=dt, stride=rows)
        k = tl.load(buf + (g * d * rows + j * t) * item, shape=(d, t), dtype=dt, stride=rows)
        v = tl.load(buf + ((g + 1) * d * rows + j * t) * item, shape=(d, t), dtype=dt,
                    stride=rows)
        heads = [rotated(qs[hq * d:(hq + 1) * d].T.to("f32") * (1.0 / math.sqrt(d)))
                 for hq in range(g)]
        out.append((heads, *rotated(k.T.to("f32")), v.T))
    return out


def _append(tl, layer, new, dims, j0):
    """The member holding the new position writes each sequence's new K and V row (the
    micro-batch's sequences from `j0`)."""
    lo, s0, sn = layer["seq"]
    at, d = dims["ctx"] - lo, dims["d"]  # the new one among the cached
    if not s0 <= at < s0 + sn:
        return
    kvdt = dims["kvdt"]
    for j, (_, _, k1, k2, v) in enumerate(new, j0):
        row = tl.nbytes(kvdt, (j * sn + at - s0) * d)
        tl.store(layer["k"] + row, _cached(k1, dims))
        tl.store(layer["k"] + row + tl.nbytes(kvdt, d // 2), _cached(k2, dims))
        tl.store(layer["v"] + row, _cached(v, dims))


def _cached(x, dims):
    """`x` as the KV cache holds it: in dtype, or quantised (a PE_MATH cast) to `kv`."""
    return x if dims["kvdt"] == dims["dt"] else x.to(dims["kvdt"])


def _append_pass(tl, layer, new, dims, p0, t):
    """Each member writes the K and V rows of the pass's positions p0 .. p0 + t - 1 it holds
    (rows `d` elements apart: K's halves interleave)."""
    lo, s0, sn = layer["seq"]
    first = lo + s0  # the first position this shard holds
    a, e = max(p0, first), min(p0 + t, first + sn)
    if a >= e:
        return
    d, kvdt = dims["d"], dims["kvdt"]
    k0, n = a - p0, e - a
    for j, (_, k1, k2, v) in enumerate(new):
        row = tl.nbytes(kvdt, (j * sn + a - first) * d)
        tl.store(layer["k"] + row, _cached(k1[k0:k0 + n], dims), stride=d)
        tl.store(layer["k"] + row + tl.nbytes(kvdt, d // 2), _cached(k2[k0:k0 + n], dims),
                 stride=d)
        tl.store(layer["v"] + row, _cached(v[k0:k0 + n], dims))


def _flash(tl, layer, q1, q2, j, rows, n_keys, dims, masks=None):
    """Flash attention of `rows` queries (q in halves) over the first `n_keys` rows of this
    member's shard of sequence j, `kv_chunk` keys at a time: (max, sum, output). `masks`
    pairs a block's first row with its mask (1 where a key is after the query); a block
    not in them has no key after any query."""
    g_rows, d, dt, chunk, kvdt = rows, dims["d"], dims["dt"], dims["kv_chunk"], dims["kvdt"]
    _lo, _s0, sn = layer["seq"]
    if n_keys <= 0:
        return tl.full((g_rows,), NEG), tl.zeros((g_rows,)), tl.zeros((g_rows, d))
    m = lsum = o = None
    masks = dict(masks or ())
    for c0 in range(0, n_keys, chunk):
        n = min(chunk, n_keys - c0)
        at = tl.nbytes(kvdt, (j * sn + c0) * d)
        k1 = tl.ref(layer["k"] + at, shape=(n, d // 2), dtype=kvdt, stride=d)
        k2 = tl.ref(layer["k"] + at + tl.nbytes(kvdt, d // 2), shape=(n, d // 2), dtype=kvdt,
                    stride=d)
        scores = tl.composite(op="gemm", a=q1, b=k1, trans_b=True, out_dtype="f32").out + \
            tl.composite(op="gemm", a=q2, b=k2, trans_b=True, out_dtype="f32").out
        future = masks.get(c0)
        if future is not None:
            scores = scores + future * NEG
        m_c = tl.max(scores, axis=1)
        m_new = m_c if m is None else tl.maximum(m, m_c)
        p = tl.exp(scores - m_new[:, None])
        pv = _gemv(tl, p.to(dt), layer["v"] + at, n, d, kvdt)
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


def _tree(tl, plan, parts, rows, d):
    """Partials (m [rows], l [rows], o [rows, d]) merged up a binomial tree of the head
    group: the group's first member's merged list (None on the others)."""
    members, rank = plan["group"], plan["rank"]
    step = 1
    while step < len(members) and parts is not None:
        if rank % (2 * step) == step:
            for part in parts:
                for x in part:
                    tl.send(x, to=members[rank - step])
            parts = None
        elif rank + step < len(members):
            frm = members[rank + step]
            parts = [_merge(tl, part, (tl.recv(frm=frm, shape=(rows,), dtype="f32"),
                                       tl.recv(frm=frm, shape=(rows,), dtype="f32"),
                                       tl.recv(frm=frm, shape=(rows, d), dtype="f32")))
                     for part in parts]
        step *= 2
    return parts


def _attention(tl, plan, layer, new, shared, dims, j0):
    """The decode step's partials per sequence of the micro-batch (from `j0`; its heads as
    rows), merged to the head group's first member, which divides and stores the heads'
    output; broadcast to the group."""
    b, g, d, dt = dims["mb"], dims["g"], dims["d"], dims["dt"]
    lo, s0, sn = layer["seq"]
    seen = min(sn, dims["ctx"] + 1 - (lo + s0))  # the shard's rows up to this step's
    parts = _tree(tl, plan, [_flash(tl, layer, q1, q2, j, g, seen, dims)
                             for j, (q1, q2, *_) in enumerate(new, j0)], g, d)
    obuf = tl.shard(shared["obuf"])
    if parts is not None:
        for j, (_, lsum, o) in enumerate(parts):
            tl.store(obuf + j * g * d * tl.itemsize(dt), (o / lsum[:, None]).to(dt))
    coll.broadcast(tl, obuf, b * g * d, dt, root=plan["group"][0], group=plan["group"],
                   algo="tree")


def _attention_pass(tl, plan, layer, new, shared, dims, p0, t, masks):
    """A prefill pass's attention: per sequence and query head, each member's partial over
    the rows of its shard written by the end of the pass (the tokens before, and those
    of the pass up to each query: causal), merged to the head group's first member, which
    divides and stores each head's [t, d] output in place (rows g x d apart); broadcast."""
    b, g, d, dt = dims["b"], dims["g"], dims["d"], dims["dt"]
    lo, s0, sn = layer["seq"]
    n_keys = min(sn, p0 + t - (lo + s0))
    parts = _tree(tl, plan, [_flash(tl, layer, q1, q2, j, t, n_keys, dims, masks)
                             for j, (heads, *_) in enumerate(new) for q1, q2 in heads], t, d)
    obuf, item = tl.shard(shared["obuf"]), tl.itemsize(dt)
    if parts is not None:
        for n, (_, lsum, o) in enumerate(parts):
            j, hq = divmod(n, g)
            tl.store(obuf + (j * t * g * d + hq * d) * item, (o / lsum[:, None]).to(dt),
                     stride=g * d)
    coll.broadcast(tl, obuf, b * t * g * d, dt, root=plan["group"][0], group=plan["group"],
                   algo="tree")


def _future(tl, shared, layer, dims, p0, t):
    """The masks of a prefill pass's attention blocks, made before its first layer for
    every layer and head: (first row of a block of this member's shard, its mask: 1 where
    a key is after the query, else 0) for each block with a key after a query. Made
    before the layers, not in the first's attention when it first needs them, so that
    every layer is given them alike (`tl.repeat`)."""
    lo, s0, sn = layer["seq"]
    first, chunk = lo + s0, dims["kv_chunk"]
    positions = tl.shard(shared["positions"])
    n_keys = min(sn, p0 + t - first)
    masks = []
    for c0 in range(0, max(n_keys, 0), chunk):
        n = min(chunk, n_keys - c0)
        if first + c0 + n - 1 <= p0:  # every key at or before the first query
            continue
        keys = tl.load(positions + (first + c0) * 4, shape=(1, n), dtype="f32")
        queries = tl.load(positions + p0 * 4, shape=(t, 1), dtype="f32")
        masks.append((c0, tl.minimum(tl.maximum(keys - queries, 0.0) * 1e30, 1.0)))
    return tuple(masks)


def _all_reduce(tl, plan, y, shared, dims, rows):
    """Sum `y` [rows, hidden] (f32) over the PEs of the stage, in the `ybuf` buffer; the
    caller drops `y` before it loads the sum (`_summed`), so that the two are not in TCM
    at once (at 16 rows of llama3-70b each is 512 KiB, a quarter of a 2 MiB TCM)."""
    buf = tl.shard(shared["ybuf"])
    tl.store(buf, y)
    coll.all_reduce(tl, buf, rows * dims["hidden"], "f32", group=plan["stage"],
                    algo=dims["algo"])


def _summed(tl, shared, dims, rows):
    """The sum `_all_reduce` left in `ybuf`: [rows, hidden] (f32)."""
    return tl.load(tl.shard(shared["ybuf"]), shape=(rows, dims["hidden"]), dtype="f32")


def _hand_on(tl, plan, x, rows):
    """Hand the hidden state `x` [rows, hidden] (f32, the same on every PE of the stage) to
    the next stage: each PE sends its peer there the part that peer gathers (Megatron's
    scatter/gather hand-off), so the state crosses between the stages once, not once a
    PE."""
    e0, n = plan["give"][rows]
    if n:
        with tl.region("pp_handoff"):
            tl.send(x.reshape(x.numel)[e0:e0 + n], to=plan["next"])


def _keep(tl, plan, x, at, rows):
    """Store this PE's part of the hidden state `x` [rows, hidden] (the part it gathers) at
    `at`: the check's copy, spread over the stage as the state is handed on."""
    e0, n = plan["take"][rows]
    if n:
        tl.store(at, x.reshape(x.numel)[e0:e0 + n])


def _take(tl, plan, shared, dims, rows):
    """The hidden state [rows, hidden] (f32) the stage before hands on: this PE's part from
    its peer there, gathered."""
    _, n = plan["take"][rows]
    with tl.region("pp_handoff"):
        return _gathered(tl, plan, shared, dims, rows, tl.recv(
            frm=plan["prev"], shape=(n,), dtype="f32") if n else None)


def _gathered(tl, plan, shared, dims, rows, part):
    """A hidden state [rows, hidden] (f32) from the parts the stage's PEs hold (`part`,
    this PE's, at its offset in `plan["take"]`; None: an empty one): the stage's
    all-gather of them, through the `ybuf` buffer."""
    e0, _ = plan["take"][rows]
    buf = tl.shard(shared["ybuf"])
    if part is not None:
        tl.store(buf + e0 * 4, part)
    coll.all_gather(tl, buf, rows * dims["hidden"], "f32", group=plan["stage"],
                    algo=plan["gather_algo"])
    return tl.load(buf, shape=(rows, dims["hidden"]), dtype="f32")


def _act(tl, gate, name):
    """The MLP's activation of `gate` (f32): SiLU, exact GELU or its tanh form."""
    if name == "silu":
        return gate * tl.reciprocal(tl.exp(-gate) + 1.0)
    if name == "gelu":
        return gate * (tl.erf(gate * (1.0 / math.sqrt(2.0))) + 1.0) * 0.5
    inner = (gate * gate * gate * 0.044715 + gate) * math.sqrt(2.0 / math.pi)
    return gate * (tl.tanh(inner) + 1.0) * 0.5


def _layer(tl, layer, residual, plan, shared, dims, pas=None, masks=None, j0=0):
    """A layer (`layer`: its weights and KV cache) of the decode step for the micro-batch
    from sequence `j0` (`pas` None), or of a prefill pass (`pas`: its first position and
    tokens a sequence), on the residual stream [rows, hidden] (f32), which it takes from
    the list `residual` and replaces there with its output: so the input leaves TCM as
    soon as the first residual add has used it (a caller's variable would hold it across
    the layer: a second [rows, hidden] f32, 512 KiB of a 2 MiB TCM at 16 rows of
    llama3-70b). Called through `tl.repeat`: in a timing-only run a layer alike to two
    before it is copied, not run; what differs between layers is `layer` alone."""
    b, g, d, dt, hidden, eps = (dims[k] for k in ("b", "g", "d", "dt", "hidden", "eps"))
    x = residual.pop()
    rows = b * pas[1] if pas else dims["mb"]
    with tl.region("rmsnorm"):
        h = _rmsnorm(tl, x, layer["norm_in"], hidden, eps).to(dt)
    if pas is None:
        with tl.region("qkv"):
            new = _qkv(tl, plan, layer, h, shared, dims)
        with tl.region("kv_append"):
            _append(tl, layer, new, dims, j0)
        with tl.region("attention"):
            _attention(tl, plan, layer, new, shared, dims, j0)
    else:
        with tl.region("qkv"):
            new = _qkv_pass(tl, plan, layer, h, shared, dims, *pas)
        with tl.region("kv_append"):
            _append_pass(tl, layer, new, dims, *pas)
        with tl.region("attention"):
            _attention_pass(tl, plan, layer, new, shared, dims, *pas, masks)
    del h, new  # past their last use: their TCM is free for the projections
    with tl.region("o_proj"):
        r0, rn = plan["o"]
        if rn:
            o = tl.load(tl.shard(shared["obuf"]) + r0 * tl.itemsize(dt), shape=(rows, rn),
                        dtype=dt, stride=g * d)
            y = _project(tl, o, layer["o"], rn, hidden, dims)
        else:
            y = tl.zeros((rows, hidden))
    with tl.region("attn_all_reduce"):
        _all_reduce(tl, plan, y, shared, dims, rows)
        del y  # its TCM is free before the sum lands
        x = x + _bias(tl, _summed(tl, shared, dims, rows), layer.get("o_bias"), hidden, dt)
    with tl.region("rmsnorm"):
        h = _rmsnorm(tl, x, layer["norm_post"], hidden, eps).to(dt)
    with tl.region("mlp"):
        _f0, fn = plan["mlp"]
        if fn:
            gate = _bias(tl, _project(tl, h, layer["gate"], hidden, fn, dims),
                         layer.get("gate_bias"), fn, dt)
            up = _bias(tl, _project(tl, h, layer["up"], hidden, fn, dims),
                       layer.get("up_bias"), fn, dt)
            act = (_act(tl, gate, dims["act"]) * up).to(dt)
            del h, gate, up
            y = _project(tl, act, layer["down"], fn, hidden, dims)
        else:
            y = tl.zeros((rows, hidden))
    with tl.region("mlp_all_reduce"):
        _all_reduce(tl, plan, y, shared, dims, rows)
        del y
        residual.append(x + _bias(tl, _summed(tl, shared, dims, rows),
                                  layer.get("down_bias"), hidden, dt))


def _is_max(tl, x, m):
    """1 where `x` equals its maximum `m` (broadcast), else 0: 1 - min((m - x) * 1e30, 1),
    exact in f32, as the language has no comparisons."""
    return 1.0 - tl.minimum((m - x) * 1e30, 1.0)


def _lm_head(tl, plan, x, shared, dims, out=("logits", "token"), j0=0):
    """Vocab-parallel logits of `x`'s sequences (those from `j0`), the local argmax, the
    all-gathered (max, index) pairs and their argmax (the lowest index among equal
    maxima, as numpy's); kept in the buffers `out` names."""
    hidden, dt, eps = dims["hidden"], dims["dt"], dims["eps"]
    b = x.shape[0]
    _v0, vn = plan["lm"]
    h = _rmsnorm(tl, x, plan["norm_final"], hidden, eps).to(dt)
    if vn:
        logits = _gemv(tl, h, plan["lm_w"], hidden, vn, dt)
        tl.store(tl.shard(shared[out[0]]) + j0 * vn * 4, logits)
        iota = tl.load(plan["iota"], shape=(1, vn), dtype="f32")
        m = tl.max(logits, axis=1)
        idx = -tl.max(tl.where(_is_max(tl, logits, m[:, None]), -iota, NEG), axis=1)
    else:  # no share of a vocabulary smaller than the stage: a pair that never wins
        m, idx = tl.zeros((b,)) + NEG, tl.zeros((b,))
    buf, pes = tl.shard(shared["argbuf"]), len(plan["stage"])
    at, _ = plan["arg"][b]
    tl.store(buf + 4 * at, m)
    tl.store(buf + 4 * (at + b), idx)
    coll.all_gather(tl, buf, pes * b * 2, "f32", group=plan["stage"], algo=plan["gather_algo"])
    pairs = tl.load(buf, shape=(pes, 2 * b), dtype="f32")
    best = tl.max(pairs[:, :b], axis=0)
    token = -tl.max(tl.where(_is_max(tl, pairs[:, :b], best[None, :]), -pairs[:, b:], NEG),
                    axis=0)
    if tl.pid == plan["stage"][0]:
        tl.store(tl.shard(shared[out[1]]) + j0 * 4, token)
    return token


def _prefill(tl, plan, shared, dims):
    """The prompt, pass by pass through this stage's layers (each pass's hidden state
    handed on to the next stage, which takes it while this one goes on to the next
    pass); the last stage's LM head makes the first token from the prompt's last one (on
    its PEs, the token; on the others, None)."""
    prompt, out = tl.shard(shared["prompt"]), tl.shard(shared["prefill_out"])
    slot_bytes = dims["prompt_slot"] * tl.itemsize(dims["dt"])
    x = t = None
    for c, (p0, t) in enumerate(dims["chunks"]):
        k = dims["every"].index((p0, t))  # the pass's place in the prompt
        x = None  # the pass before's output (only the last one's is used): its TCM is free
        with tl.region(f"pass{k}") if dims["sampled"] else contextlib.nullcontext():
            x = _pass(tl, plan, shared, dims, p0, t, prompt + k * slot_bytes, out,
                      c == len(dims["chunks"]) - 1)
    if plan["next"] is None:
        with tl.region("lm_head"):
            return _lm_head(tl, plan, x[t - 1::t], shared, dims,
                            ("prefill_logits", "prefill_token"))
    return None


def _first_token(tl, plan, token, dims):
    """With stages, the decode step after the prompt starts when the prompt's token,
    which the last stage's LM head chose, reaches the first stage: each PE of the last
    stage sends it to its peer there, which waits for it (else the first stage would
    start the step while the last still drains the prefill)."""
    if plan["wrap"] is None:
        return
    with tl.region("pp_handoff"):
        if plan["next"] is None:
            tl.send(token, to=plan["wrap"])
        else:
            tl.recv(frm=plan["wrap"], shape=(dims["b"],), dtype="f32")


def _pass(tl, plan, shared, dims, p0, t, prompt, out, last):
    """One prefill pass: `t` tokens of each sequence, at positions p0 .. (`prompt`: this
    PE's part of their rows), through this stage's layers; handed to the next stage. The
    last pass keeps each layer's output at each sequence's last token, for the check."""
    b, hidden, dt = dims["b"], dims["hidden"], dims["dt"]
    rows = b * t
    if plan["prev"] is None:  # the pass's prompt rows: this PE's part, gathered
        _, n = plan["take"][rows]
        residual = [_gathered(tl, plan, shared, dims, rows, tl.load(
            prompt, shape=(n,), dtype=dt).to("f32") if n else None)]
    else:
        residual = [_take(tl, plan, shared, dims, rows)]
    masks = _future(tl, shared, plan["layers"][0][1], dims, p0, t)
    for i, layer in plan["layers"]:
        with tl.region(f"layer{i}") if dims["per_layer"] else contextlib.nullcontext():
            tl.repeat(_layer, layer, residual, plan, shared, dims, (p0, t), masks)
            if last:  # each sequence's last token, checked: each PE keeps its part
                e0, n = plan["kept"]
                if n:
                    tl.store(out + i * dims["prefill_stride"] * 4,
                             residual[0][t - 1::t].reshape(b * hidden)[e0:e0 + n])
    x = residual.pop()
    if plan["next"] is not None:
        _hand_on(tl, plan, x, rows)
    return x


def kernel(tl, plans, shared, dims):
    plan = plans[tl.pid]
    if dims["chunks"]:
        with tl.region("prefill"):
            token = _prefill(tl, plan, shared, dims)
        _first_token(tl, plan, token, dims)
        del token  # its TCM is free before the step, as it was when it was not kept
    for s in range(dims["steps"]):
        token = _decode(tl, plan, shared, {**dims, "ctx": dims["ctx"] + s, "step": s}
                        if s else dims)
        if s + 1 < dims["steps"]:  # the next step's input is this one's token, embedded:
            if tl.pid != plan["stage"][0]:  # PE_CPU waits for it (the input itself is given)
                tl.store(tl.shard(shared["token"]) + s * dims["b"] * 4, token)
            tl.fence()


def _decode(tl, plan, shared, dims):
    """One decode step (`dims["step"]`, at position `dims["ctx"]`) of the batch, micro-batch
    by micro-batch; the last stage's tokens (its last micro-batch's)."""
    b, hidden = dims["b"], dims["hidden"]
    rows, out = dims["mb"], tl.shard(shared["hidden_out"])
    last = dims["step"] + 1 == dims["steps"]
    at = dims["step"] * b  # this step's rows of the inputs, logits and tokens
    token = None
    for j0 in range(0, b, rows):  # micro-batch by micro-batch: the stages overlap
        token = None  # the micro-batch before's is stored already: its TCM is free
        if plan["prev"] is None:
            residual = [tl.load(
                tl.shard(shared["x"]) + (at + j0) * hidden * tl.itemsize(dims["dt"]),
                shape=(rows, hidden), dtype=dims["dt"]).to("f32")]
        else:  # the hidden state from the stage before
            residual = [_take(tl, plan, shared, dims, rows)]
        for i, layer in plan["layers"]:
            with tl.region(f"layer{i}") if dims["per_layer"] else contextlib.nullcontext():
                tl.repeat(_layer, layer, residual, plan, shared, dims, j0=j0)
                if last:  # the state after the layer, checked: each PE keeps its part
                    _keep(tl, plan, residual[0], out + (i * dims["state_stride"] + j0 // rows
                                                       * dims["state_slot"]) * 4, rows)
        x = residual.pop()
        if plan["next"] is not None:
            _hand_on(tl, plan, x, rows)
        else:
            with tl.region("lm_head"):
                token = _lm_head(tl, plan, x, shared, dims, j0=at + j0)
        del x  # its TCM is free before the next micro-batch's state lands
    return token


# ---------------------------------------------------------------------- the reference


def reference(host, p):
    """The same step in float64, as transformers computes it
    (`kernbench_cli.models.reference`), rounded to `dtype` where the kernel hands values
    to the GEMM array or the KV cache."""
    run = run_of(host.topology, p)
    held, cached = as_stored(run, host.inputs)
    out = step(run.cfg, held, range(run.timed), run.context,
               host.inputs["inputs_embeds"].dtype, cached)
    if run.kv:  # see `_prefill_outputs`
        out = {k: v for k, v in out.items() if not k.startswith("prefill.layers.")}
    return out


def tolerances(topology, p):
    """Layer i's hidden state at the dtype's tolerance with its atol grown by sqrt(1 + i),
    the logits after L layers by sqrt(1 + L).
    The kernel rounds where the reference does, but a value a hair from a rounding
    boundary may round the other way, a unit apart, and what each layer adds passes on
    to the next: at 10 layers and batch 8, elements near zero of a stream whose RMS is
    some 2.4 were 0.0625 from the reference's at layer 9, past bf16's 0.03 + 0.03 x |ref|,
    in a run whose logits are 1.7 bf16 units from float64 and whose tokens all agree.
    Summed over layers as independent roundings are, the spread grows as the square root
    of the depth (the logits of batch 32 were 0.0352 off after 10). Layer 0 keeps the
    dtype's tolerance."""
    from kernbench_cli.lang.dtypes import TOLERANCE

    run = run_of(topology, p)
    atol, rtol = TOLERANCE[run.dtype]
    pre = ("", "prefill.") if run.prompt else ("",)
    return {name: (atol * math.sqrt(1 + depth), rtol) for kind in pre for name, depth in [
        *((f"{kind}hidden_states.{i}", i) for i in range(run.timed)),
        (f"{kind}logits", run.timed)]}


def outputs(host, args, p):
    dims, shared, plans = args["dims"], args["shared"], args["plans"]
    b, hidden = dims["b"], dims["hidden"]
    dt = host.inputs["inputs_embeds"].dtype
    out = {}
    m, slot = dims["m"], dims["state_slot"]
    for pid, plan in enumerate(plans):  # each stage's PEs keep their parts of its states
        if plan["stage"][0] != pid:
            continue
        parts = [(plans[q]["take"][dims["mb"]], host.read_shard(shared["hidden_out"], q))
                 for q in plan["stage"]]
        for i, _ in plan["layers"]:
            state = np.empty((m, dims["mb"] * hidden), np.float32)
            for (e0, n), states in parts:
                state[:, e0:e0 + n] = states[i][:m * slot].reshape(m, slot)[:, :n]
            out[f"hidden_states.{i}"] = state.reshape(b, hidden).astype(dt)
    out = dict(sorted(out.items(), key=lambda kv: int(kv[0].split(".")[1])))
    last = [pid for pid, plan in enumerate(plans) if plan["next"] is None]
    steps = dims["steps"]
    rows = (steps, b) if steps > 1 else (b,)  # with steps: [steps, batch, ...]
    pieces = sorted(((plans[pid]["lm"][0], host.read_shard(shared["logits"], pid)
                      [:steps * b * plans[pid]["lm"][1]].reshape(*rows, plans[pid]["lm"][1]))
                     for pid in last), key=lambda piece: piece[0])
    out["logits"] = np.concatenate([piece for _, piece in pieces], axis=-1).astype(dt)
    out["next_token"] = host.read_shard(shared["token"], plans[last[0]]["stage"][0]) \
        .reshape(rows).astype(np.float32)
    if dims["chunks"]:
        out.update(_prefill_outputs(host, args))
    return out


def _prefill_outputs(host, args) -> dict[str, np.ndarray]:
    """What the prefill left: the prompt's last token's hidden state after each layer and
    its logits and token, and the prompt's K and V as cached, read from every member's
    shard ([batch, kv heads, prompt, head_dim] per layer)."""
    dims, shared, plans = args["dims"], args["shared"], args["plans"]
    b, hidden, d = dims["b"], dims["hidden"], dims["d"]
    dt = host.inputs["inputs_embeds"].dtype
    p_first = dims["context"]
    prompt = sum(t for _, t in dims["chunks"])
    out = {}
    for pid, plan in enumerate(plans):  # each stage's PEs keep their parts of its states
        if plan["stage"][0] != pid:
            continue
        parts = [(plans[q]["kept"], host.read_shard(shared["prefill_out"], q))
                 for q in plan["stage"]]
        for i, _ in plan["layers"]:
            state = np.empty(b * hidden, np.float32)
            for (e0, n), states in parts:
                state[e0:e0 + n] = states[i][:n]
            out[f"prefill.hidden_states.{i}"] = state.reshape(b, hidden).astype(dt)
    heads = max(plan["head"] for plan in plans) + 1
    # A narrow cache's rows are not compared: a value within bf16's tolerance of the
    # reference's before it is quantised can land one step of the narrow format away (the
    # hidden states and logits that read them are compared)
    for kind in ("key", "value") if dims["kvdt"] == dims["dt"] else ():
        cache: dict[int, np.ndarray] = {}
        for plan in plans:
            for i, layer in plan["layers"]:
                lo, s0, sn = layer["seq"]
                a, e = max(p_first, lo + s0), min(p_first + prompt, lo + s0 + sn)
                if a >= e:
                    continue
                shard = host.read(layer["k" if kind == "key" else "v"], (b, sn, d),
                                  dims["kvdt"])
                got = cache.setdefault(i, np.zeros((b, heads, prompt, d), np.float32))
                got[:, plan["head"], a - p_first:e - p_first] = \
                    shard[:, a - lo - s0:e - lo - s0]
        for i, got in cache.items():
            out[f"prefill.layers.{i}.{kind}"] = got.astype(dt)
    pieces = sorted(((plan["lm"][0], host.read_shard(shared["prefill_logits"], pid)
                      [:b * plan["lm"][1]].reshape(b, plan["lm"][1]))
                     for pid, plan in enumerate(plans) if plan["next"] is None),
                    key=lambda piece: piece[0])
    out["prefill.logits"] = np.concatenate([piece for _, piece in pieces], axis=1).astype(dt)
    first = next(pid for pid, plan in enumerate(plans) if plan["next"] is None)
    out["prefill.next_token"] = host.read_shard(shared["prefill_token"],
                                                plans[first]["stage"][0]).astype(np.float32)
    return out


# ---------------------------------------------------------------------- bounds, metrics


_GEMV = ("qkv", "o", "gate", "up", "down", "lm_w")


def _macs_how(step: Run, lay: Layout) -> str:
    notes = [*(["performed: a QKV column two PEs of a head group share is computed on "
                "both"] if _straddles(lay) else []),
             *([f"a step's, the mean of {step.steps}"] if step.steps > 1 else [])]
    return f"({'; '.join(notes)})" if notes else ""


def _straddles(lay: Layout) -> bool:
    """Whether a head group's QKV columns split unevenly over its PEs in the decode step,
    so that a column straddling two PEs' parts is multiplied on both (`_macs` counts it
    twice: the MACs performed, above the model's)."""
    rows = lay.run.rows  # a decode micro-batch's
    return any(e0 % rows or n % rows for e0, n, _, _ in (plan["qkv"][rows]
                                                         for plan in lay.plans))


def _macs(lay: Layout) -> int:
    """The step's multiply-accumulates performed: every GEMV weight element a PE multiplies
    once per sequence (the model's, but for a QKV column two PEs share, `_straddles`),
    and attention's two products (q k^T, p v) over each head group's cached positions, the
    layers a scaled run does not time included."""
    run = lay.run

    def of(pieces, plan) -> int:
        _, n, c0, c1 = plan["qkv"][run.rows]  # the step's columns (a PE holds every
        # pass's), none where its share of the gather is empty (it multiplies nothing)
        return sum(run.batch * run.cfg.hidden * (c1 - c0 if n else 0) if p.key == "qkv" else
                   run.batch * math.prod(p.shape) if p.key in _GEMV else
                   2 * run.cfg.group * math.prod(p.shape) if p.key == "k" else 0
                   for p in pieces)

    return sum(sum(count * of(lay.block(pid, window), plan)
                   for window, count in lay.layers(pid)) + of(lay.extra[pid], plan)
               for pid, plan in enumerate(lay.plans))


def bounds(topology, p):
    """The step as run cannot be faster than its busiest PE reading its weights and KV
    cache once from its own HBM slice at the slice's stream rate (weight-stationary: no
    other PE reads them for it; a load waits for no other stage, so these do not add
    up along the pipeline), nor than its projection GEMMs (QKV, O and the MLP of each
    layer a PE holds, for each pass: each decode step's micro-batches and each prefill
    pass run), each GEMM untiled (a composite's tiles only add folds and fills) at the
    16-bit rate the array runs them at (a narrow weight is dequantised first);
    attention and the LM head left out. The GEMMs add up along the pipeline
    (`_pipeline_cycles`)."""
    from kernbench_cli.lang import bounds as lb

    lay = Layout(topology, run_of(topology, _asrun_of(p)))
    pes = range(topology.num_pes)
    read = [lay.read(pid) for pid in pes]
    worst = max(pes, key=lambda pid: (read[pid], -pid))
    cycles, how = _pipeline_cycles(topology, lay)
    return {"memory": (lb.hbm_ps(topology, read[worst]),
                       f"PE {worst}'s weights and KV cache, {read[worst]:,} B, at its HBM "
                       "slice's stream bandwidth"),
            "gemm": (lb.gemm_ps(topology, cycles),
                     f"{how}, {cycles:,} cycles untiled on a {lb.gemm_how(topology, 2)}")}


def _pipeline_cycles(topology, lay) -> tuple[int, str]:
    """Array cycles the step's projection GEMMs take at least, and what they are.

    Each pass (a decode micro-batch or step, a prefill pass) goes through the stages in
    order, and a stage's GEMMs of a pass need the pass's hidden state from the stage
    before, which needs every PE of that stage (its all-reduces): a pass spends at least
    its busiest PE's GEMMs on each stage, one stage after another. A PE's array runs one
    GEMM at a time. So for any stage s, the step takes at least: the least any pass
    takes to reach s, then every pass's GEMMs on s's busiest PE, then the least any pass
    takes from s to the end (a flow shop's bound; with one stage, the busiest PE's
    GEMMs)."""
    run = lay.run
    rows = [run.rows] * (run.microbatches * run.steps) + \
        [run.batch * t for _, t in run.timed_chunks]
    gemms: dict[tuple, int] = {}  # PEs with the same parts run the same GEMMs
    per = [_pass_cycles(topology, lay, pid, rows, gemms) for pid in range(len(lay.plans))]
    # per stage, each pass's cycles on the stage's busiest PE for it
    through = [[max(per[pid][i] for pid in stage) for i in range(len(rows))]
               for stage in lay.stages]
    before, after = [0] * len(rows), [sum(col) for col in zip(*through, strict=True)]
    total = -1
    for k, stage in enumerate(lay.stages):
        after = [t - here for t, here in zip(after, through[k], strict=True)]
        pid = max(stage, key=lambda pid: (sum(per[pid]), -pid))
        bound = min(before) + sum(per[pid]) + min(after)
        if bound > total:
            total, at, busiest = bound, k, pid
        before = [t + here for t, here in zip(before, through[k], strict=True)]
    if len(lay.stages) == 1:
        return total, f"PE {busiest}'s projection GEMMs"
    if len(rows) == 1:
        return total, (f"{len(lay.stages)} pipeline stages one after another (each takes "
                       "the stage before's output), on each its busiest PE's projection "
                       "GEMMs")
    return total, (f"the projection GEMMs of {len(rows)} passes through {len(lay.stages)} "
                   f"pipeline stages, each in order: every pass's on stage {at}'s busiest PE "
                   f"({busiest}), and the least any pass takes on the busiest PEs of the "
                   "stages before and after it")


def _pass_cycles(topology, lay, pid, passes, gemms: dict) -> list[int]:
    """Array cycles of PE `pid`'s projection GEMMs in each pass (of `passes`' rows)
    through its layers, each GEMM untiled (`gemms`: those worked out, by shape)."""
    from kernbench_cli.lang.bounds import gemm_cycles_of

    def gemm(m: int, k: int, n: int) -> int:
        if (m, k, n) not in gemms:
            gemms[m, k, n] = gemm_cycles_of(topology, m, k, n, 2)
        return gemms[m, k, n]

    plan, hidden = lay.plans[pid], lay.run.cfg.hidden
    _r0, rn = plan["o"]
    _f0, fn = plan["mlp"]
    out = []
    for rows in passes:
        _e0, n, c0, c1 = plan["qkv"][rows]
        per_layer = gemm(rows, hidden, c1 - c0) if n else 0
        if rn:
            per_layer += gemm(rows, rn, hidden)
        if fn:
            per_layer += 2 * gemm(rows, hidden, fn) + gemm(rows, fn, hidden)
        out.append(per_layer * len(plan["layers"]))
    return out


def resolved(topology, p):
    """`p` as the run took it, for its trace: ``batch = 0`` made the largest batch that fits
    `topology`; a replay (on a topology of more HBM, say) re-times that batch's step, and
    states its figures."""
    return {**p, "batch": run_of(topology, p).batch} if p["batch"] == 0 else p


def _asrun_of(p):
    """`p` for the step as run (bounds() states the run's bounds, not the scaled step's)."""
    return {**p, "scale_to": 0}


def metrics(topology, p, run):
    """Time per output token (TPOT), tokens/s, energy per token, TPOT against the HBM bound
    of the whole step, and the HBM the model takes; with a prompt, the time to the first
    token (TTFT), the prefill's rate and energy, and a request's figures; with `scale_to`,
    the step of that many layers from the timed ones, with their error bounds."""
    step = run_of(topology, p)
    lay = Layout(topology, step)
    read = sum(lay.read(pid) for pid in range(topology.num_pes))
    macs = _macs(lay)
    if step.steps > 1:  # the steps' mean: what one reads and multiplies grows linearly with
        # its position
        first = Layout(topology, run_of(topology, {**p, "steps": 1}))
        read = (read + sum(first.read(pid) for pid in range(topology.num_pes))) // 2
        macs = (macs + _macs(first)) / 2
    rate = topology.num_pes * stream_bandwidth(topology)
    hbm_bound = read / rate * 1e12
    b, power = step.batch, run.static_aj / run.latency_ps if run.latency_ps else 0.0
    ttft = run.region_bounds["prefill"][1] if step.prompt else 0
    pre_aj = run.region_energy_aj.get("prefill", 0)
    tpot, energy = float(run.latency_ps - ttft), float(run.energy_aj - run.static_aj - pre_aj)
    tpot, energy = tpot / step.steps, energy / step.steps  # a step's, on average
    how, out = f"{step.timed} layers as run", {}
    if step.steps > 1:
        how += f", the mean of {step.steps} steps"
    if step.scaled:
        t_mid, e_mid, t_bound, e_bound, how = _middle(step, _decode_layers(step, run), run)
        extra = step.layers - step.timed
        tpot, energy = tpot + extra * t_mid, energy + extra * e_mid
        out = {"tpot_bound_ps": (float(t_bound), "(+/-: the layers not timed times the timed "
                                                 "middle layers' spread)"),
               "energy_per_token_bound_uj": ((e_bound + power * t_bound) / 1e12 / b, ""),
               "layers_timed": (float(step.timed), f"(of {step.layers})")}
    energy += power * tpot  # static power over the step
    if tpot < hbm_bound:
        raise RuntimeError(f"TPOT {tpot:.0f} ps is below the step's HBM bound {hbm_bound:.0f} "
                           "ps: a bug in kernbench, please report it")
    if step.microbatches > 1:
        out.update(_pipeline(step, run, tpot))
    if step.prompt:
        steady = out["steady_tpot_ps"][0] if step.microbatches > 1 else tpot
        out.update(_request(step, run, float(ttft), float(pre_aj), power, tpot, steady))
    decode = "the decode step" + (" after the prompt" if step.prompt else "")
    once = (f": each read once, as the step's {step.microbatches} micro-batches do not: "
            "each reads the weights" if step.microbatches > 1 else "")
    return {"tpot_ps": (tpot, f"({decode}: {how})"),
            "tokens_per_s": (b * 1e12 / tpot if tpot else 0.0, f"(batch {b} / TPOT" + (
                ": the largest batch that fits)" if p["batch"] == 0 else ")")),
            "hbm_bound_ps": (hbm_bound, f"(weights and KV cache {read:,} B / aggregate HBM "
                                        f"stream bandwidth{once})"),
            "tpot_over_hbm_bound": (tpot / hbm_bound if hbm_bound else 0.0, ""),
            "energy_per_token_uj": (energy / 1e12 / b, f"({decode}'s energy / batch" + (
                ": each layer not timed at a middle layer's counted energy, static power "
                "over the TPOT)" if step.scaled else ")")),
            **_capacity(topology, p, step, lay),
            "macs": (float(macs), _macs_how(step, lay)), **out}


def _capacity(topology, p, step: Run, lay: Layout) -> dict:
    """What the model takes of HBM (`lay`, the run's placement) and the largest batch and
    context that fit, each saying what it is of."""
    used = [sum(lay.need(pid).values()) for pid in range(topology.num_pes)]
    most_batch = largest(topology, p, "batch")  # in the run's micro-batches
    b = step.batch
    searched = {**p, "batch": b}  # with the run's prompt and new tokens
    most_context = largest(topology, searched, "context")
    rows = tcm_rows(topology, step)
    have = topology.hbm.slice_size
    model = ("the whole model" if step.layers == step.cfg.layers else
             f"{step.layers} of the model's {step.cfg.layers} layers")
    return {
        "hbm_used_bytes": (float(sum(used)), f"({model} over {len(used)} PEs; "
                           f"the fullest slice {max(used) / have:.1%} used)"),
        "hbm_free_bytes": (float(len(used) * have - sum(used)), ""),
        "max_batch": (float(most_batch), f"(at context {step.context}{step.with_prompt}"
                      + (f", {step.steps} steps" if step.steps > 1 else "")
                      + (f", through the request's {step.new_tokens} new tokens"
                         if step.request_end is not step else "")
                      + (f", in {step.microbatches} micro-batches"
                         if step.microbatches > 1 else "")
                      + f": the largest batch whose weights ({model}), KV cache and "
                      "buffers fit HBM; TCM bounds a micro-batch apart: more than "
                      f"{rows} rows cannot fit, fewer may not)"),
        "max_context": (float(most_context), f"(at batch {b}"
                        + (f" and a prompt of {step.prompt}" if step.prompt else "")
                        + (f", through the request's {step.new_tokens} new tokens"
                           if step.request_end is not step else "")
                        + f"{_context_bound(step, searched, most_context)})")}


def _context_bound(step: Run, searched, most: int) -> str:
    """What bounds `max_context` (`most`, found for `searched`) where HBM does not: the
    model's positions (with `dynamic` RoPE, which scales past them, a prompt's end) or,
    with `dynamic` RoPE, no prompt and a window on every layer (the KV cache stops
    growing), nothing below where the search ends."""
    if most != limit_of(searched, "context"):
        return ""
    if step.cfg.rope.kind == "dynamic" and not searched["prompt"]:
        return (f": no bound below {MAX_CONTEXT:,} positions, where the search ends: "
                "dynamic RoPE scales past max_position_embeddings, and sliding windows "
                "keep the KV cache from growing")
    rope = step.cfg.rope
    return (": the model's max_position_embeddings, not its HBM, bounds it"
            if rope.end == rope.max_positions else
            ": the model's positions (yarn's factor x original_max_position_embeddings), "
            "not its HBM, bound it")


def _pipeline(step: Run, run, tpot: float) -> dict:
    """A micro-batched step's pipeline: the stage time (how far apart the micro-batches
    leave the last stage: the slowest stage's time a micro-batch), the share of the step
    that stage idles (fill and drain: about (N - 1) / (N + m - 1) of equal stages), and
    the pipeline in steady state: a micro-batch's next token cannot enter before its
    token is out, one round trip through the stages after it entered (the first
    micro-batch's, TPOT less the m - 1 stage times after it), and the slowest stage takes
    the m micro-batches one after another, so steady TPOT is the larger of the two
    (max(m, N) stage times of equal stages) and the batch's tokens/s batch / that."""
    m, n, b = step.microbatches, step.pp, step.batch
    ends = [end for _, end in run.region_passes["lm_head"]]
    stage = (ends[-1] - ends[0]) / (m - 1)
    trip = tpot - (m - 1) * stage
    steady = max(m * stage, trip)
    return {"stage_ps": (stage, f"(a micro-batch of {step.rows} through the slowest stage)"),
            "pipeline_bubble": (1 - m * stage / tpot, f"(the share of the step the slowest "
                                                      f"stage idles: {n} stages x {m} "
                                                      "micro-batches)"),
            "steady_tpot_ps": (steady, f"(the larger of {m} micro-batches x stage and a "
                                       f"micro-batch's round trip through the {n} stages, "
                                       f"{trip / 1e6:.3f} us)"),
            "steady_tokens_per_s": (b * 1e12 / steady, f"(batch {b} / steady TPOT)")}


def _request(step: Run, run, ttft: float, pre_aj: float, power: float,
             tpot: float, steady: float) -> dict:
    """A request's figures: TTFT (the prefill and its first token; with `scale_to`, each
    layer not timed at a middle layer's time), the prefill's tokens/s and energy, and the
    whole request of `new_tokens` tokens: TTFT + (new_tokens - 1) TPOT, each decode step
    at the first one's TPOT (context + prompt; later steps read more positions, which the
    label says: a lower estimate where the cache grows far). With micro-batches the first
    decode step fills the pipeline and each later one follows it by `steady` (steady TPOT,
    `_pipeline`): TTFT + TPOT + (new_tokens - 2) steady TPOT."""
    b, out, how = step.batch, {}, f"{step.timed} layers as run"
    t_bound = e_bound = None
    if step.sampled:
        ttft, pre_aj, t_bound, e_bound, how = _passes(step, run, ttft, pre_aj)
    elif step.scaled:
        t_mid, e_mid, t_bound, e_bound, how = _middle(step, _prefill_layers(step, run), run)
        extra = step.layers - step.timed
        ttft, pre_aj = ttft + extra * t_mid, pre_aj + extra * e_mid
    if t_bound is not None:
        out["ttft_bound_ps"] = (float(t_bound), "(+/-: the layers and passes not timed)")
        out["prefill_energy_per_token_bound_uj"] = (
            (e_bound + power * t_bound) / 1e12 / (b * step.prompt), "")
    pre_aj += power * ttft
    n, m = step.new_tokens, step.microbatches
    request = ttft + (n - 1) * tpot if m == 1 or n == 1 else ttft + tpot + (n - 2) * steady
    steps = (f"TTFT + {n - 1} x TPOT" if m == 1 or n == 1 else
             f"TTFT + TPOT + {n - 2} x steady TPOT")
    tokens = b * step.prompt
    per_pass = step.chunks[0][1]  # at most the prompt: one pass of a shorter prompt
    return {"ttft_ps": (ttft, f"(the prompt of {step.prompt} tokens, {per_pass} a pass, "
                              f"and its first token: {how})"),
            "prefill_tokens_per_s": (tokens * 1e12 / ttft, f"(batch {b} x {step.prompt} / "
                                                           "TTFT)"),
            "prefill_energy_per_token_uj": (pre_aj / 1e12 / tokens, "(the prefill's "
                                            "energy, static power over TTFT, / batch x "
                                            "prompt tokens)"),
            "request_ps": (request, f"({steps}: {n} new token{'s' if n > 1 else ''}"
                                    + (f"; the first decode step fills the {m} micro-"
                                       "batches' pipeline, each later one follows it by "
                                       "steady TPOT" if m > 1 and n > 1 else "") + (
                                        f"; each step at the first's TPOT, though the cache "
                                        f"grows from {step.positions:,} to "
                                        f"{step.request_end.positions:,} positions a sequence)"
                                        if step.request_end is not step else ")")),
            "request_tokens_per_s_per_user": (n * 1e12 / request, ""),
            "request_tokens_per_s": (b * n * 1e12 / request, f"(batch {b})"), **out}


#: the least bound on a layer not timed, as a share of a middle layer's time (`_middle`)
DRIFT = 1e-3
#: the least bound on a prefill pass not timed, as a share of its interpolated time
#: (`_passes`): a pass's time is not smooth in its position (up to 3.6% off its
#: neighbours' mean on the tests' ten-layer model), and timed passes that happen to lie
#: near one line do not show it
PASS_DRIFT = 1e-2


def _middle(step: Run, layers: list[tuple[int, int]], run) -> tuple:
    """Of `layers` ((time, dynamic energy) of each timed layer), the middle ones' mean time
    and energy, and their spreads times the layers not timed (the bounds), and how it was
    found. Middle layers are neither the first of their stage (it fills the pipeline, or
    takes the hand-off from the stage before) nor the last (the LM head or the hand-off
    follows it); the layers not timed are middle ones: the full step lies within the
    bounds when they differ no more than the timed middle ones do, or than `DRIFT` of a
    middle layer's time, whichever is more. The floor is there because the PEs'
    relative phase can drift over many layers and move a later layer's time a little,
    which a few timed layers that time alike cannot show (the tests' ten-layer model:
    layers 1 to 6 alike, 7 to 9 0.03% longer). A layer's dynamic energy counts its
    commands' actions, which do not depend on the phase: its bound has no floor."""
    edges = {i for k in range(step.pp) for i in (coll.part(step.timed, step.pp, k)[0],
                                                 sum(coll.part(step.timed, step.pp, k)) - 1)}
    times = [t for i, (t, _) in enumerate(layers) if i not in edges]
    joules = [e for i, (_, e) in enumerate(layers) if i not in edges]
    extra = step.layers - step.timed
    t_mid, e_mid = sum(times) / len(times), sum(joules) / len(joules)
    t_bound = extra * max(max(times) - min(times), DRIFT * t_mid)
    how = (f"{step.timed} layers timed, {extra} more at a middle layer's "
           f"{t_mid / 1e6:.3f} us, within +/- {t_bound / 1e6:.3f} us: the timed middle "
           f"layers took {min(times) / 1e6:.3f} to {max(times) / 1e6:.3f} us, and one "
           f"not timed may drift {DRIFT:.1%} of that")
    return t_mid, e_mid, t_bound, extra * (max(joules) - min(joules)), how


def _decode_layers(step: Run, run) -> list[tuple[int, int]]:
    """(time, dynamic energy) of each timed layer of the decode step: a layer's time from
    the end of the layer before (the last of its commands on any PE; the start of the
    first) to the end of its own."""
    names = [f"layer{i}" for i in range(step.timed)]
    ends = [run.region_bounds[n][1] for n in names]
    starts = [run.region_bounds[names[0]][0], *ends[:-1]]
    return [(e - s, run.region_energy_aj[n]) for s, e, n in zip(starts, ends, names,
                                                                  strict=True)]


def _passes(step: Run, run, ttft: float, pre_aj: float) -> tuple:
    """(TTFT, prefill dynamic energy, their bounds, how) from representative passes: each
    timed pass's time (from the end of the pass before it in the run to its own end; the
    first's, to the next one's start: a pass starts on some PEs before the one before
    has ended on all, so its span, first start to last end, counted that overlap twice
    and put the TTFT past its bound) and energy (and, with
    `scale_to`, its layers not timed at its middle layers'); each pass not timed at the
    line between the timed ones around it. A later pass attends to more keys, so the
    passes' times grow along the prompt, and vary about that trend (the PEs' relative
    phase, as layers do): a pass not timed is bounded by the larger of its distances
    along the line to the timed passes either side and twice how far the farthest timed
    pass lies off its neighbours' line (the variation measured, with a margin: an
    estimate from the run, not a proof), and in time at least `PASS_DRIFT` of the pass;
    the layers' bounds (`_middle`, per pass) add."""
    every, extra = step.chunks, step.layers - step.timed
    timed = [every.index(c) for c in step.timed_chunks]
    points = []  # per timed pass: (time, energy, layer time bound, layer energy bound)
    starts = [run.region_bounds[f"prefill/pass{n}"][0] for n in timed]
    before = starts[0]
    for k, n in enumerate(timed):
        name = f"prefill/pass{n}"
        end = run.region_bounds[name][1]
        t, e, tb, eb = end - before, run.region_energy_aj[name], 0.0, 0.0
        if k == 0 and len(timed) > 1:  # the first, start to start: without the overlap
            t = starts[1] - starts[0]
        before = end
        if step.scaled:
            t_mid, e_mid, tb, eb, _ = _middle(step, _pass_layers(step, run, name), run)
            t, e = t + extra * t_mid, e + extra * e_mid
            ttft, pre_aj = ttft + extra * t_mid, pre_aj + extra * e_mid
        points.append((t, e, tb, eb))
    bound_t = sum(p[2] for p in points)
    bound_e = sum(p[3] for p in points)
    off = [0.0, 0.0]  # the farthest a timed pass lies off its neighbours' line
    for k in range(1, len(timed) - 1):
        w = (timed[k] - timed[k - 1]) / (timed[k + 1] - timed[k - 1])
        for q in range(2):
            line = points[k - 1][q] + w * (points[k + 1][q] - points[k - 1][q])
            off[q] = max(off[q], abs(points[k][q] - line))
    for k in range(len(timed) - 1):
        for n in range(timed[k] + 1, timed[k + 1]):
            w = (n - timed[k]) / (timed[k + 1] - timed[k])
            t, e, tb, eb = (a + w * (b - a) for a, b in zip(points[k], points[k + 1],
                                                           strict=True))
            ttft, pre_aj = ttft + t, pre_aj + e
            span = [abs(points[k + 1][q] - points[k][q]) * max(w, 1 - w) for q in range(2)]
            bound_t += tb + max(2 * off[0], span[0], PASS_DRIFT * t)
            bound_e += eb + max(2 * off[1], span[1])
    how = (f"{len(timed)} of {len(every)} passes timed ({step.timed} layers"
           + (f", scaled to {step.layers}" if step.scaled else "")
           + f"), the rest on the line between them, within +/- {bound_t / 1e6:.3f} us")
    return ttft, pre_aj, bound_t, bound_e, how


def _pass_layers(step: Run, run, name: str) -> list[tuple[int, int]]:
    """(time, dynamic energy) of each timed layer in the representative pass `name`: from
    the end of the layer before (the first: from the pass's start) to its own end."""
    before = run.region_bounds[name][0]
    out = []
    for i in range(step.timed):
        layer = f"{name}/layer{i}"
        end = run.region_bounds[layer][1]
        out.append((end - before, run.region_energy_aj[layer]))
        before = end
    return out


def _prefill_layers(step: Run, run) -> list[tuple[int, int]]:
    """(time, dynamic energy) of each timed layer over the whole prefill: in each pass, from
    the end of the layer before (the pass's first: from the end of the pass before) to
    the end of its own, summed over the passes."""
    names = [f"prefill/layer{i}" for i in range(step.timed)]
    passes = [run.region_passes[n] for n in names]
    times = [0] * step.timed
    before = passes[0][0][0]
    for c in range(len(step.chunks)):
        for i in range(step.timed):
            end = passes[i][c][1]
            times[i] += end - before
            before = end
    return [(t, run.region_energy_aj[n]) for t, n in zip(times, names, strict=True)]


def quality(host, p, outputs):
    """How far the step's logits are from the exact model's: the same weights and cache,
    computed in float64 with no rounding anywhere (`reference` instead rounds where the
    kernel stores a value in `dtype`, to verify the kernel). Relative L2 error of the
    logits over the batch (and steps), their largest absolute error, and the share of
    sequences' steps whose next token (the one the kernel chose) is the exact model's.
    With `scale_to` they are of the layers run (the logits follow the last timed one):
    the labels say so, as the error grows with depth."""
    run = run_of(host.topology, p)
    exact = step(run.cfg, host.inputs, range(run.timed), run.context, np.float64)
    want, got = exact["logits"], outputs["logits"].astype(np.float64)
    norm = float(np.linalg.norm(want))
    agree = float(np.mean(outputs["next_token"] == want.argmax(axis=-1)))
    of = f"{run.batch} sequences" + (f" x {run.steps} steps" if run.steps > 1 else "")
    depth = (f"; of the {run.timed} layers run, not the {run.layers} the step is scaled "
             "to: the error grows with depth" if run.scaled else "")
    return {"logits_rel_l2": (float(np.linalg.norm(got - want)) / norm if norm else 0.0,
                              f"(against the exact model in float64{depth})"),
            "logits_max_abs_err": (float(np.abs(got - want).max()), ""),
            "top1_agreement": (agree, f"(of {of}, the exact model's next token)")}
