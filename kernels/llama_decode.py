"""One decode step of a Llama model (Hugging Face's LlamaForCausalLM), on every PE.

`batch` sequences, each with `context` tokens already in its KV cache, take one new
token (given as `inputs_embeds`) through `layers` decoder layers, the final norm and
the LM head, and pick the next token (argmax). Weights are seeded random, placed once
in the PEs' HBM as a weight-stationary near-memory design keeps them:

- The grid is one tensor-parallel group (`-p pp=N`: N pipeline stages, each one
  with its share of the layers, handing the hidden state on). Its PEs split into
  one *head group* per KV head (hkv of them, PEs in ring order, so a head group is
  a cube where the sizes allow); a head group owns its KV head, its G = heads_q /
  heads_kv query heads, and their slices of the QKV and O projections.
- QKV projection: column-parallel inside the head group (each member computes its
  share of the group's (G + 2) x head_dim columns, in `collectives.layout`'s split),
  then an all-gather inside the group (with `algo`, as the all-reduces); RoPE
  (Hugging Face's rotate-half, the new token at position `context`) on every member.
- KV append and attention: the group's KV cache is split along the sequence over
  its members (shards may be uneven or empty); the member holding position
  `context` appends the new K and V. Each member computes a flash-decoding partial
  (running max, sum, output) over its shard; the partials merge up a binomial tree
  by the log-sum-exp rule to the group's first member, which divides and
  broadcasts the heads' output to the group.
- O projection: row-parallel (each member multiplies its slice of the group's
  output dims by its rows of W_o), then an all-reduce over every PE; residual.
- MLP: gate and up column-parallel over every PE, SiLU(gate) x up, down row-parallel,
  all-reduce; residual. RMSNorms run on every PE (the hidden state is replicated).
- LM head: vocab-parallel; each PE's logits and its local argmax, then an all-gather
  of (max, index) pairs and the argmax of those on every PE.

Regions (`tl.region`) name each operator per layer, so the report times them.
Dtype: weights, activations handed to the GEMM array and the KV cache in `dtype`;
the residual stream, norms, softmax and accumulation in f32.
"""

import contextlib
import json
import math
from pathlib import Path

import numpy as np

from kernbench_cli.lang import collectives as coll

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
    "model": "a shipped config: tiny (for tests), llama3-8b, llama3-70b",
    "config": "a Hugging Face config.json instead of -p model (hidden_size, "
              "intermediate_size, num_attention_heads, num_key_value_heads, "
              "num_hidden_layers, vocab_size, rms_norm_eps, rope_theta)",
    "batch": ("sequences decoded at once, one new token each", "sequences"),
    "context": ("tokens already in each sequence's KV cache (the new one is at this "
                "position)", "tokens"),
    "layers": ("decoder layers to run (0: all of the model's)", "layers"),
    "scale_to": ("representative layers: time `layers` (3 or more) and report the step "
                 "of this many (0: the step as run), adding a middle layer's time per "
                 "layer; exact when the middle layers take the same time, which the report "
                 "checks (from 4 timed layers)", "layers"),
    "pp": ("pipeline stages: the grid's PEs (in ring order) split into this many "
           "tensor-parallel groups, each running a share of the layers; one step, no "
           "micro-batches, so stages run one after another", "stages"),
    "dtype": "weights, KV cache and GEMM operands (f32 accumulation)",
    "algo": "the all-reduces' and all-gathers' algorithm (collectives; an all-gather "
            "takes ring where its group does not allow it); hier: a ring per level, the "
            "fewest steps for the small vectors of a decode step",
    "chunk": ("KV positions a PE's attention takes at once", "tokens"),
}
CONFIGS = {
    "tiny": {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 8,
             "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1024,
             "rms_norm_eps": 1e-5, "rope_theta": 10000.0},
    "llama3-8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                  "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 128256,
                  "rms_norm_eps": 1e-5, "rope_theta": 500000.0},
    "llama3-70b": {"hidden_size": 8192, "intermediate_size": 28672,
                   "num_attention_heads": 64, "num_key_value_heads": 8,
                   "num_hidden_layers": 80, "vocab_size": 128256, "rms_norm_eps": 1e-5,
                   "rope_theta": 500000.0},
}
_KEYS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
         "num_hidden_layers", "vocab_size", "rms_norm_eps", "rope_theta")


def model_config(p):
    """The model's sizes: a shipped config, or the Hugging Face config.json given."""
    if not p["config"]:
        return dict(CONFIGS[p["model"]])
    path = Path(p["config"])
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"config {path}: cannot read it as JSON ({exc})") from None
    missing = [k for k in _KEYS if k not in raw]
    if not isinstance(raw, dict) or missing:
        raise ValueError(f"config {path}: missing {', '.join(missing)}")
    cfg = {k: raw[k] for k in _KEYS}
    for k in _KEYS[:6]:
        if not isinstance(cfg[k], int) or isinstance(cfg[k], bool) or cfg[k] <= 0:
            raise ValueError(f"config {path}: {k} must be a positive integer, got {cfg[k]!r}")
    if "head_dim" in raw:
        cfg["head_dim"] = raw["head_dim"]
    return cfg


def _shape(host, p):
    cfg = model_config(p)
    hidden, hq, hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim", hidden // hq)
    layers = p["layers"] or cfg["num_hidden_layers"]
    if p["batch"] <= 0 or p["context"] < 0 or layers <= 0 or p["chunk"] <= 0:
        raise ValueError("batch, layers and chunk must be positive and context not negative")
    if p["scale_to"] and not 3 <= layers <= p["scale_to"]:
        raise ValueError(f"scale_to = {p['scale_to']} needs at least 3 timed layers (a first, "
                         f"a middle, a last) and no more than it (layers = {layers})")
    if hq % hkv or d % 2 or d * hq != hidden:
        raise ValueError(f"heads {hq} must be a multiple of kv heads {hkv}, and hidden "
                         f"{hidden} = heads x an even head_dim ({d})")
    pp = p["pp"]
    if pp <= 0 or pp > layers or host.num_pes % pp or (host.num_pes // pp) % hkv:
        raise ValueError(f"pp = {pp}: the {host.num_pes} PEs must split into {pp} stages of "
                         f"a multiple of {hkv} PEs (a head group per KV head), with a layer "
                         f"each at least ({layers} layers)")
    return cfg, hidden, hq, hkv, d, layers


def _rope(cfg, d, position):
    inv = 1.0 / cfg["rope_theta"] ** (np.arange(0, d, 2, dtype=np.float64) / d)
    angle = position * inv
    return np.cos(angle), np.sin(angle)


def setup(host, p):
    cfg, hidden, hq, hkv, d, layers = _shape(host, p)
    b, ctx, dt = p["batch"], p["context"], p["dtype"]
    inter, vocab, g = cfg["intermediate_size"], cfg["vocab_size"], hq // hkv
    grid, pp = coll.Grid(host.topology), p["pp"]
    everyone = coll.ranks(grid)
    width = host.num_pes // pp  # PEs per stage
    stages = [list(everyone[k * width:(k + 1) * width]) for k in range(pp)]
    # the shared buffers in every slice, 7 per PE and layer, the LM head's 2 (--progress)
    host.expect(host.num_pes * (2 * layers + 10) + width * (7 * layers + 2))
    host_w = _weights(host, cfg, layers, hidden, hq, hkv, d, inter, vocab, dt, b, ctx)
    cos, sin = _rope(cfg, d, ctx)
    share = -(-vocab // width)
    shared = {
        "x": host.replicate("inputs_embeds", host_w["inputs_embeds"]),
        "norms": [host.replicate(f"norm{i}", host_w[f"norm{i}"])
                  for i in range(2 * layers + 1)],
        "rope": host.replicate("rope", np.stack([cos, sin]).astype(np.float32)),
        "qkvbuf": host.empty("qkvbuf", ((g + 2) * d * b,), dt),
        "obuf": host.empty("obuf", (b * g * d,), dt),
        "ybuf": host.empty("ybuf", (b * hidden,), "f32"),
        "argbuf": host.empty("argbuf", (width * b * 2,), "f32"),
        "hidden_out": host.empty("hidden_out", (layers + 1, b * hidden), "f32"),
        "token": host.empty("token", (b,), "f32"),
        "logits": host.empty("logits", (b * share,), "f32"),
    }
    plans = [None] * host.num_pes
    for k, stage in enumerate(stages):
        first, count = coll.part(layers, pp, k)
        last = k == pp - 1
        size = width // hkv
        mlp = coll.layout(grid, inter, stage)
        lm = coll.layout(grid, vocab, stage) if last else {}
        arg_algo = _gather_algo(grid, stage, p["algo"])
        arg = coll.layout(grid, width * b * 2, stage, arg_algo)
        for h in range(hkv):
            members = stage[h * size:(h + 1) * size]
            qkv_algo = _gather_algo(grid, members, p["algo"])
            qkv_parts = coll.layout(grid, (g + 2) * d * b, members, qkv_algo)
            o_parts = coll.layout(grid, g * d, members)
            seq = coll.layout(grid, ctx + 1, members)
            for pid in members:
                at = stage.index(pid)
                plans[pid] = _plan(host, host_w, pid, h, members, qkv_parts[pid],
                                   o_parts[pid], seq[pid], mlp[pid], lm.get(pid),
                                   range(first, first + count), b, d, g, ctx)
                plans[pid].update(arg=arg[pid], arg_algo=arg_algo, qkv_algo=qkv_algo,
                                  stage=stage,
                                  prev=stages[k - 1][at] if k else None,
                                  next=None if last else stages[k + 1][at])
    dims = {"b": b, "hidden": hidden, "g": g, "d": d, "layers": layers, "dt": dt,
            "per_layer": bool(p["scale_to"]),
            "eps": cfg["rms_norm_eps"], "ctx": ctx, "chunk": p["chunk"], "algo": p["algo"],
            "vocab_share": share}
    return {"plans": plans, "shared": shared, "dims": dims}


def _gather_algo(grid, group, algo):
    """The all-gathers' algorithm in `group`: the run's `algo` where all_gather has it and
    the group allows it (rhd: a power of two of PEs; hier: as many PEs in each cube and
    cubes in each SIP), else ring (a ring over a whole rack would take 8,191 steps)."""
    uneven = len(group) & (len(group) - 1)
    if algo not in coll.ALGOS["all_gather"] or (algo == "rhd" and uneven):
        return "ring"
    if algo == "hier":
        try:
            coll.layout(grid, len(group), group, "hier")
        except ValueError:
            return "ring"
    return algo


def _weights(host, cfg, layers, hidden, hq, hkv, d, inter, vocab, dt, b, ctx):
    """Every weight, Hugging Face's names and [out, in] layouts, seeded (kept for --save)."""
    w = {}
    for i in range(layers):
        pre = f"model.layers.{i}."
        for name, out, inp in (("self_attn.q_proj", hq * d, hidden),
                               ("self_attn.k_proj", hkv * d, hidden),
                               ("self_attn.v_proj", hkv * d, hidden),
                               ("self_attn.o_proj", hidden, hq * d),
                               ("mlp.gate_proj", inter, hidden), ("mlp.up_proj", inter, hidden),
                               ("mlp.down_proj", hidden, inter)):
            w[pre + name + ".weight"] = host.random(pre + name + ".weight", (out, inp), dt,
                                                    scale=1 / math.sqrt(inp))
        for x in ("key", "value"):  # the cache before the step, [batch, kv heads, context, d]
            host.random(f"{pre}past_{x}", (b, hkv, ctx, d), dt) if ctx else \
                host.inputs.setdefault(f"{pre}past_{x}", np.zeros((b, hkv, 0, d), np.float32))
        for j, name in enumerate(("input_layernorm", "post_attention_layernorm")):
            w[f"norm{2 * i + j}"] = host.random(pre + name + ".weight", (hidden,), "f32",
                                                scale=0.1) + np.float32(1)
            host.inputs[pre + name + ".weight"] = w[f"norm{2 * i + j}"]
    w[f"norm{2 * layers}"] = host.random("model.norm.weight", (hidden,), "f32",
                                         scale=0.1) + np.float32(1)
    host.inputs["model.norm.weight"] = w[f"norm{2 * layers}"]
    w["lm_head.weight"] = host.random("lm_head.weight", (vocab, hidden), dt,
                                      scale=1 / math.sqrt(hidden))
    w["inputs_embeds"] = host.random("inputs_embeds", (b, hidden), dt)
    return w


def _plan(host, w, pid, h, members, qkv_part, o_part, seq_part, mlp_part, lm_part, layers,
          b, d, g, ctx):
    """What PE `pid` holds and does: its weight slices (per layer), its KV shard, its parts
    of the shared buffers."""
    rank = members.index(pid)
    e0, n = qkv_part
    c0, c1 = e0 // b, -(-(e0 + n) // b)  # the columns its part of the gather covers
    r0, rn = o_part
    f0, fn = mlp_part
    v0, vn = lm_part or (0, 0)
    s0, sn = seq_part
    plan = {"group": members, "rank": rank, "head": h, "qkv": (e0, n, c0, c1), "o": (r0, rn),
            "mlp": (f0, fn), "lm": (v0, vn), "seq": (s0, sn), "layers": []}
    hidden = w["inputs_embeds"].shape[1]
    src = [*range(h * g * d, (h + 1) * g * d), *range(h * d, (h + 1) * d),
           *range(h * d, (h + 1) * d)]  # the group's q rows, its k rows, its v rows
    for i in layers:
        pre = f"model.layers.{i}."

        def qkv(i=i, pre=pre):
            parts = [w[pre + f"self_attn.{x}_proj.weight"] for x in "qkv"]
            which = [0] * (g * d) + [1] * d + [2] * d
            return np.stack([parts[which[c]][src[c]] for c in range(c0, c1)]).T

        def cols(name, lo, n, pre=pre):  # rows lo.. of an [out, in] weight, as [in, n]
            return lambda: w[pre + name][lo:lo + n].T

        def rows(name, lo, n, pre=pre):  # input columns lo.. of an [out, in] weight: [n, out]
            return lambda: w[pre + name][:, lo:lo + n].T

        layer = {
            "qkv": _put(host, f"L{i}.qkv[{pid}]", (hidden, c1 - c0), qkv, pid),
            "o": _put(host, f"L{i}.o[{pid}]", (rn, hidden),
                      rows("self_attn.o_proj.weight", h * g * d + r0, rn), pid),
            "gate": _put(host, f"L{i}.gate[{pid}]", (hidden, fn),
                         cols("mlp.gate_proj.weight", f0, fn), pid),
            "up": _put(host, f"L{i}.up[{pid}]", (hidden, fn),
                       cols("mlp.up_proj.weight", f0, fn), pid),
            "down": _put(host, f"L{i}.down[{pid}]", (fn, hidden),
                         rows("mlp.down_proj.weight", f0, fn), pid),
        }
        layer.update(_cache(host, i, pid, h, s0, sn, ctx, b, d))
        plan["layers"].append((i, layer))
    if lm_part is None:  # not the last stage: no LM head
        return plan
    plan["lm_w"] = _put(host, f"lm[{pid}]", (hidden, vn),
                        lambda: w["lm_head.weight"][v0:v0 + vn].T, pid)
    plan["iota"] = _put(host, f"iota[{pid}]", (1, vn),
                        lambda: np.arange(v0, v0 + vn, dtype=np.float32)[None], pid, "f32")
    return plan


def _cache(host, i, pid, h, s0, sn, ctx, b, d):
    """PE `pid`'s shard of layer `i`'s KV cache of head `h`: positions s0 .. s0+sn-1 of
    every sequence, [b, sn, d] for K and for V; the new token's row is the kernel's."""
    past = min(sn, max(0, ctx - s0))  # rows of this shard already in the cache
    out = {}
    for x, key in (("k", "past_key"), ("v", "past_value")):
        full = host.inputs[f"model.layers.{i}.{key}"]
        shard = None if host.timing_only else np.zeros((b, sn, d), full.dtype)
        if past and shard is not None:
            shard[:, :past] = full[:, h, s0:s0 + past]
        out[x] = _put(host, f"L{i}.{x}[{pid}]", (b, sn, d), lambda s=shard: s, pid) \
            if sn else None
    return out


def _put(host, name, shape, make, pid, dt=None):
    """Place `make()` (an array of `shape`) in PE `pid`'s HBM: its address (None for an
    empty shard, which the kernel skips). Timing only, nothing is made: the space is
    taken, as the values would take it."""
    if not math.prod(shape):
        return None
    dt = np.dtype(np.float32) if dt == "f32" else host.inputs["inputs_embeds"].dtype
    if host.timing_only:
        return host.reserve(name, shape, dt, pid)
    return host.place(name, np.ascontiguousarray(make(), dt), pid)


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


def _qkv(tl, plan, layer, h, shared, dims):
    """This member's columns of the group's q, k, v, all-gathered in the group; then each
    sequence's q (scaled by 1/sqrt(d)) and new k in halves, RoPE'd, and its new v."""
    b, g, d, dt, hidden = dims["b"], dims["g"], dims["d"], dims["dt"], dims["hidden"]
    item = tl.itemsize(dt)
    e0, n, c0, c1 = plan["qkv"]
    buf = tl.shard(shared["qkvbuf"])
    if n:
        cols = _gemv(tl, h, layer["qkv"], hidden, c1 - c0, dt, out_dtype=dt)
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


def _append(tl, plan, layer, new, dims):
    """The member holding position `context` writes each sequence's new K and V row."""
    s0, sn = plan["seq"]
    ctx, d, dt = dims["ctx"], dims["d"], dims["dt"]
    if not s0 <= ctx < s0 + sn:
        return
    item = tl.itemsize(dt)
    for j, (_, _, k1, k2, v) in enumerate(new):
        row = (j * sn + ctx - s0) * d * item
        tl.store(layer["k"] + row, k1)
        tl.store(layer["k"] + row + d // 2 * item, k2)
        tl.store(layer["v"] + row, v)


def _partial(tl, plan, layer, q1, q2, j, dims):
    """Flash-decoding over this member's shard of sequence j: (max, sum, output)."""
    _s0, sn = plan["seq"]
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
    parts = [_partial(tl, plan, layer, q1, q2, j, dims) for j, (q1, q2, *_) in enumerate(new)]
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


def _layer(tl, plan, layer, i, x, shared, dims):
    b, g, d, dt, hidden, eps = (dims[k] for k in ("b", "g", "d", "dt", "hidden", "eps"))
    norms = [tl.shard(n) for n in shared["norms"]]
    with tl.region("rmsnorm"):
        h = _rmsnorm(tl, x, norms[2 * i], hidden, eps).to(dt)
    with tl.region("qkv"):
        new = _qkv(tl, plan, layer, h, shared, dims)
    with tl.region("kv_append"):
        _append(tl, plan, layer, new, dims)
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
        x = x + _all_reduce_into(tl, plan, y, shared, dims)
    with tl.region("rmsnorm"):
        h = _rmsnorm(tl, x, norms[2 * i + 1], hidden, eps).to(dt)
    with tl.region("mlp"):
        _f0, fn = plan["mlp"]
        if fn:
            gate = _gemv(tl, h, layer["gate"], hidden, fn, dt)
            up = _gemv(tl, h, layer["up"], hidden, fn, dt)
            act = (gate * tl.reciprocal(tl.exp(-gate) + 1.0) * up).to(dt)
            y = _gemv(tl, act, layer["down"], fn, hidden, dt)
        else:
            y = tl.zeros((b, hidden))
    with tl.region("mlp_all_reduce"):
        return x + _all_reduce_into(tl, plan, y, shared, dims)


def _is_max(tl, x, m):
    """1 where `x` equals its maximum `m` (broadcast), else 0: 1 - min((m - x) * 1e30, 1),
    exact in f32, as the language has no comparisons."""
    return 1.0 - tl.minimum((m - x) * 1e30, 1.0)


def _lm_head(tl, plan, x, shared, dims):
    """Vocab-parallel logits, the local argmax, the all-gathered (max, index) pairs and
    their argmax (the lowest index among equal maxima, as numpy's)."""
    b, hidden, dt, eps = dims["b"], dims["hidden"], dims["dt"], dims["eps"]
    _v0, vn = plan["lm"]
    h = _rmsnorm(tl, x, tl.shard(shared["norms"][-1]), hidden, eps).to(dt)
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
    """The same step in float64, as Hugging Face's Llama computes it, rounded to `dtype`
    where the kernel hands values to the GEMM array or the KV cache."""
    cfg, hidden, hq, hkv, d, layers = _shape(host, p)
    dt = host.inputs["inputs_embeds"].dtype
    i_ = host.inputs

    def rnd(a):
        return a.astype(dt).astype(np.float64)

    def rms(x, w):
        return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + cfg["rms_norm_eps"]) * w

    def rope(t, cos, sin):  # rotate-half over the last axis
        half = t.shape[-1] // 2
        t1, t2 = t[..., :half], t[..., half:]
        return np.concatenate([t1 * cos - t2 * sin, t2 * cos + t1 * sin], axis=-1)

    def f(name):
        return i_[name].astype(np.float64)

    cos, sin = _rope(cfg, d, p["context"])
    x = f("inputs_embeds")
    b, g, out = x.shape[0], hq // hkv, {}
    for i in range(layers):
        pre = f"model.layers.{i}."
        h = rnd(rms(x, f(pre + "input_layernorm.weight")))
        q = rnd(h @ f(pre + "self_attn.q_proj.weight").T).reshape(b, hq, d)
        k = rnd(h @ f(pre + "self_attn.k_proj.weight").T).reshape(b, hkv, 1, d)
        v = rnd(h @ f(pre + "self_attn.v_proj.weight").T).reshape(b, hkv, 1, d)
        q, k = rnd(rope(q / math.sqrt(d), cos, sin)), rnd(rope(k, cos, sin))
        keys = np.concatenate([f(pre + "past_key"), k], axis=2)
        values = np.concatenate([f(pre + "past_value"), v], axis=2)
        o = np.empty((b, hq, d))
        for j in range(b):
            for kv in range(hkv):
                s = q[j, kv * g:(kv + 1) * g] @ keys[j, kv].T
                w = np.exp(s - s.max(axis=1, keepdims=True))
                o[j, kv * g:(kv + 1) * g] = (w / w.sum(axis=1, keepdims=True)) @ values[j, kv]
        x = x + rnd(o.reshape(b, hidden)) @ f(pre + "self_attn.o_proj.weight").T
        h = rnd(rms(x, f(pre + "post_attention_layernorm.weight")))
        gate, up = h @ f(pre + "mlp.gate_proj.weight").T, h @ f(pre + "mlp.up_proj.weight").T
        x = x + rnd(gate / (1 + np.exp(-gate)) * up) @ f(pre + "mlp.down_proj.weight").T
        out[f"hidden_states.{i}"] = x.astype(dt)
    logits = rnd(rms(x, f("model.norm.weight"))) @ f("lm_head.weight").T
    out["logits"] = logits.astype(dt)
    out["next_token"] = logits.argmax(axis=1).astype(np.float32)
    return out


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


def _traffic(cfg, p, layers):
    """(HBM bytes, MACs) of `layers` layers and the LM head: every weight once, each
    layer's KV cache (the context and the new row) once; activations left out."""
    hidden, inter, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hq, hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim", hidden // hq)
    item = 2  # bf16 and f16
    weights = hidden * d * (2 * hq + 2 * hkv) + 3 * hidden * inter
    kv = 2 * p["batch"] * hkv * (p["context"] + 1) * d
    nbytes = layers * (weights + kv) * item + vocab * hidden * item
    macs = p["batch"] * (layers * (weights + 2 * hq * (p["context"] + 1) * d)
                         + vocab * hidden)
    return nbytes, macs


def bounds(topology, p):
    """The step as run cannot be faster than reading its weights and KV cache once from
    every HBM slice at its stream rate."""
    cfg = model_config(p)
    layers = p["layers"] or cfg["num_hidden_layers"]
    nbytes, _ = _traffic(cfg, p, layers)
    rate = topology.num_pes * _stream(topology)
    return {"memory": (-(-nbytes * 10**12 // rate),
                       f"weights and KV cache {nbytes} B / ({topology.num_pes} PEs x HBM "
                       "stream bandwidth)")}


def _stream(topology):
    hbm = topology.hbm
    return hbm.bandwidth * (hbm.refresh_interval - hbm.refresh_time) // hbm.refresh_interval


def metrics(topology, p, run):
    """Time per output token (TPOT), tokens/s, and TPOT against the HBM bound of the whole
    step; with `scale_to`, the step of that many layers from the timed ones."""
    cfg = model_config(p)
    layers = p["layers"] or cfg["num_hidden_layers"]
    tpot, how = run.latency_ps, f"{layers} layers as run"
    out = {}
    if p["scale_to"]:
        times = [run.regions.get(f"layer{i}", 0) for i in range(layers)]
        steady = times[len(times) // 2]  # a middle layer: the first fills, the last drains
        exact = len(times) >= 4 and all(t == steady for t in times[1:-1])
        tpot = run.latency_ps + (p["scale_to"] - layers) * steady
        verdict = (f"exact: layers 2..{layers - 1} took the same time" if exact else
                   "unchecked: time 4 layers or more to check it" if len(times) < 4 else
                   "an estimate: the middle layers differ, " +
                   ", ".join(f"{t / 1e6:.3f}" for t in times[1:-1]) + " us")
        how = (f"{layers} layers timed, a middle one {steady / 1e6:.3f} us, scaled to "
               f"{p['scale_to']}; {verdict}")
        out["scaling_exact"] = (1.0 if exact else 0.0, "")
        layers = p["scale_to"]
    nbytes, macs = _traffic(cfg, p, layers)
    bound = nbytes / (topology.num_pes * _stream(topology)) * 1e12
    out = {"tpot_ps": (float(tpot), f"({how})"),
           "tokens_per_s": (p["batch"] * 1e12 / tpot if tpot else 0.0,
                            f"(batch {p['batch']} / TPOT)"),
           "hbm_bound_ps": (bound, f"(weights and KV cache {nbytes} B / aggregate HBM "
                                   "stream bandwidth)"),
           "tpot_over_hbm_bound": (tpot / bound if bound else 0.0, ""),
           "energy_per_token_uj": (run.energy_aj / 1e12 / p["batch"] * (
               tpot / run.latency_ps if run.latency_ps else 1),
               "(the step's energy / batch" + (", scaled as TPOT is)" if p["scale_to"]
                                               else ")")),
           "macs": (float(macs), ""), **out}
    return out
