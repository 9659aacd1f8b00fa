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
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kernbench_cli.config.units import format_size_human as format_size
from kernbench_cli.errors import ParamError
from kernbench_cli.lang import collectives as coll
from kernbench_cli.models.hf import ModelConfig, from_dict, read_config
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
_LLAMA3 = {"model_type": "llama", "vocab_size": 128256, "rms_norm_eps": 1e-5,
           "rope_theta": 500000.0, "max_position_embeddings": 8192}
#: The shipped models, as their Hugging Face config.json says them (Meta Llama 3).
SHIPPED = {
    "tiny": {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
             "num_attention_heads": 8, "num_key_value_heads": 2, "num_hidden_layers": 2,
             "vocab_size": 1024, "rms_norm_eps": 1e-5, "rope_theta": 10000.0},
    "llama3-8b": {**_LLAMA3, "hidden_size": 4096, "intermediate_size": 14336,
                  "num_attention_heads": 32, "num_key_value_heads": 8,
                  "num_hidden_layers": 32},
    "llama3-70b": {**_LLAMA3, "hidden_size": 8192, "intermediate_size": 28672,
                   "num_attention_heads": 64, "num_key_value_heads": 8,
                   "num_hidden_layers": 80},
}
_ITEM = {"bf16": 2, "f16": 2, "f32": 4}


def model_config(p) -> ModelConfig:
    """The model: a shipped one, or the Hugging Face config.json given (`ParamError`)."""
    try:
        if p["config"]:
            return read_config(Path(p["config"]))
        return from_dict(SHIPPED[p["model"]], p["model"], f"model {p['model']}")
    except ParamError as exc:  # said as this kernel's: "llama_decode: config …"
        raise ValueError(str(exc)) from None


@dataclass(frozen=True)
class Run:
    """What a step runs: the model, the layers timed (`timed`) and the step they stand for
    (`layers`), and the run's shape."""

    cfg: ModelConfig
    timed: int
    layers: int
    batch: int
    context: int
    pp: int
    dtype: str
    chunk: int
    algo: str

    @property
    def scaled(self) -> bool:
        return self.layers != self.timed


def _run(topology, p) -> Run:
    """The step `p` asks for, checked against the model and the topology (ValueError)."""
    cfg = model_config(p)
    for name, low in (("batch", 0), ("context", 0), ("chunk", 1), ("layers", 0),
                      ("scale_to", 0), ("pp", 1)):
        if p[name] < low:
            raise ValueError(f"{name} = {p[name]}: must be at least {low}")
    if p["batch"] == 0:  # the largest batch that fits; if none, say why one does not
        p = {**p, "batch": largest(topology, p, "batch") or 1}
    timed = p["layers"] or cfg.layers
    if timed > cfg.layers:
        raise ValueError(f"layers = {timed}: the model has {cfg.layers} "
                         "(num_hidden_layers)")
    layers = p["scale_to"] or timed
    if p["scale_to"]:
        _check_scaling(cfg, timed, layers, p["pp"])
    pes, pp = topology.num_pes, p["pp"]
    if pp > timed or pes % pp or (pes // pp) % cfg.kv_heads:
        raise ValueError(f"pp = {pp}: the {pes} PEs must split into {pp} stages of a multiple "
                         f"of {cfg.kv_heads} PEs (a head group per KV head), with a layer "
                         f"each at least ({timed} layers)")
    return Run(cfg, timed, layers, p["batch"], p["context"], pp, p["dtype"], p["chunk"],
               p["algo"])


def _check_scaling(cfg: ModelConfig, timed: int, layers: int, pp: int) -> None:
    """Representative layers need two middle layers timed (a layer neither the first of its
    stage, which fills the pipeline or takes the hand-off, nor the last, which the LM head
    or the hand-off follows), no more layers than the model has, and layers all alike
    (one sliding window, or none)."""
    if not timed <= layers <= cfg.layers:
        raise ValueError(f"scale_to = {layers}: must be at least layers ({timed}) and at most "
                         f"the model's {cfg.layers} (num_hidden_layers)")
    middle = sum(max(0, coll.part(timed, pp, k)[1] - 2) for k in range(pp))
    if middle < 2:
        raise ValueError(f"scale_to needs two middle layers timed, to measure how much "
                         f"layers differ: layers = {timed} over pp = {pp} stages has "
                         f"{middle} (a middle layer is neither the first nor the last of "
                         "its stage)")
    if len(set(cfg.windows)) > 1:
        kinds = sorted({w for w in cfg.windows}, key=lambda w: (w is not None, w or 0))
        raise ValueError("scale_to needs layers all alike; this model's differ in their "
                         f"attention window ({', '.join(map(str, kinds))}): run them all")


# ---------------------------------------------------------------------- placement


@dataclass(frozen=True)
class Piece:
    """One thing a PE holds: `key` in its plan (or its layer's), the `label` its allocation
    is named by, a shape and dtype, and what kind of bytes it is (weights, kv_cache,
    embedding: space only; buffers)."""

    key: str
    shape: tuple
    dtype: str
    kind: str = "weights"
    label: str = ""
    nbytes: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nbytes", math.prod(self.shape) * _ITEM[self.dtype])

    def name(self, pid: int, layer: int | None = None) -> str:
        """Its allocation's name: ``L3.qkv[17]`` (layer 3's, PE 17's), ``lm[17]``."""
        label = self.label or self.key
        return f"{label}[{pid}]" if layer is None else f"L{layer}.{label}[{pid}]"


class Layout:
    """Where everything goes, shapes only: each PE's parts of the work (`plans`), the
    pieces it holds for one layer (`block`, alike for every layer of one attention
    window) and beside its layers (`extra`), the buffers every PE holds at one offset
    (`shared`), and the HBM each PE needs for the whole model (`need`). PEs with the same
    parts share their blocks, so a rack's layout costs what its distinct PEs do."""

    def __init__(self, topology, run: Run):
        cfg, self.run, self.topology = run.cfg, run, topology
        self.page = topology.hbm.page_size
        self.grid = coll.Grid(topology)
        pes = topology.num_pes
        everyone = coll.ranks(self.grid)
        width = self.width = pes // run.pp
        self.stages = [list(everyone[k * width:(k + 1) * width]) for k in range(run.pp)]
        self.stage_of = [0] * pes
        self.share = -(-cfg.vocab // width)
        self.shared = self._shared(run.timed)
        self.plans: list[dict] = [{} for _ in range(pes)]
        self.extra: list[tuple[Piece, ...]] = [() for _ in range(pes)]
        self._blocks: dict[tuple, tuple[Piece, ...]] = {}
        self._needs: dict[tuple, dict[str, int]] = {}  # by what a PE holds
        self._shared_bytes: int | None = None
        self._check_totals()
        for k, stage in enumerate(self.stages):
            self._stage(k, stage)

    def _shared(self, layers: int) -> list[Piece]:
        """The buffers every PE holds at one offset, for a step of `layers` layers (the
        hidden state after each is kept, for the check)."""
        run, cfg = self.run, self.run.cfg
        b, d, g, dt = run.batch, cfg.head_dim, cfg.group, run.dtype
        return [Piece("x", (b, cfg.hidden), dt, "buffers", "inputs_embeds"),
                Piece("rope", (2, d // 2), "f32", "buffers"),
                Piece("qkvbuf", ((g + 2) * d * b,), dt, "buffers"),
                Piece("obuf", (b * g * d,), dt, "buffers"),
                Piece("ybuf", (b * cfg.hidden,), "f32", "buffers"),
                Piece("argbuf", (self.width * b * 2,), "f32", "buffers"),
                Piece("hidden_out", (layers + 1, b * cfg.hidden), "f32", "buffers"),
                Piece("token", (b,), "f32", "buffers"),
                Piece("logits", (b * self.share,), "f32", "buffers")]

    def aligned(self, nbytes: int) -> int:
        return -(-nbytes // self.page) * self.page

    def _check_totals(self) -> None:
        """The whole model's weights and cache against the system's HBM, before any
        per-PE layout (which takes time in proportion to the PEs: a model far too large
        is refused at once)."""
        cfg, run = self.run.cfg, self.run
        item = _ITEM[run.dtype]
        attn = cfg.hidden * cfg.head_dim * (2 * cfg.heads + 2 * cfg.kv_heads)
        per_layer = (attn + 3 * cfg.hidden * cfg.intermediate) * item
        cache = 2 * run.batch * cfg.kv_heads * cfg.head_dim * item * sum(
            min(run.context + 1, cfg.window(i) or run.context + 1) for i in range(run.layers))
        tables = cfg.vocab * cfg.hidden * item * (1 if cfg.tied else 2)
        need = per_layer * run.layers + cache + tables
        have = self.topology.num_pes * self.topology.hbm.slice_size
        if need > have:
            raise DoesNotFit(
                f"{_model_name(cfg)} does not fit topology {self.topology.name!r}: its "
                f"{run.layers} layers' weights, the LM head and embedding table and the KV "
                f"cache of batch {run.batch} at context {run.context} take "
                f"{format_size(need)} ({need:,} B); the system has {format_size(have)} of "
                f"HBM ({self.topology.num_pes} PEs x {format_size(self.topology.hbm.slice_size)})")

    def _stage(self, k: int, stage: list[int]) -> None:
        run, cfg, grid = self.run, self.run.cfg, self.grid
        first, count = coll.part(run.timed, run.pp, k)
        last = k == run.pp - 1
        size = self.width // cfg.kv_heads
        b, g, d, dt = run.batch, cfg.group, cfg.head_dim, run.dtype
        mlp = coll.layout(grid, cfg.intermediate, stage)
        lm = coll.layout(grid, cfg.vocab, stage) if last else {}
        embed = coll.layout(grid, cfg.vocab, stage) if k == 0 and not cfg.tied else {}
        arg_algo = _gather_algo(grid, stage, run.algo)
        arg = coll.layout(grid, self.width * b * 2, stage, arg_algo)
        windows = {cfg.window(i) for i in range(first, first + count)}
        for h in range(cfg.kv_heads):
            members = stage[h * size:(h + 1) * size]
            qkv_algo = _gather_algo(grid, members, run.algo)
            qkv_parts = coll.layout(grid, (g + 2) * d * b, members, qkv_algo)
            o_parts = coll.layout(grid, g * d, members)
            seqs = {}  # per window: (first cached position, each member's shard of them)
            for window in windows:
                lo = max(0, run.context + 1 - window) if window else 0
                seqs[window] = (lo, coll.layout(grid, run.context + 1 - lo, members))
            for pid in members:
                e0, n = qkv_parts[pid]
                self.stage_of[pid] = k
                plan = self.plans[pid] = {
                    "group": members, "rank": members.index(pid), "head": h,
                    "qkv": (e0, n, e0 // b, -(-(e0 + n) // b)), "o": o_parts[pid],
                    "mlp": mlp[pid], "lm": lm.get(pid, (0, 0)), "arg": arg[pid],
                    "arg_algo": arg_algo, "qkv_algo": qkv_algo, "stage": stage,
                    "prev": self.stages[k - 1][stage.index(pid)] if k else None,
                    "next": None if last else self.stages[k + 1][stage.index(pid)],
                    "seq": {w: (lo, *seq[pid]) for w, (lo, seq) in seqs.items()},
                    "layers": [(i, cfg.window(i)) for i in range(first, first + count)]}
                extra = []
                if last:
                    vn = plan["lm"][1]
                    extra += [Piece("norm_final", (1, cfg.hidden), "f32"),
                              Piece("lm_w", (cfg.hidden, vn), dt, label="lm"),
                              Piece("iota", (1, vn), "f32")]
                if pid in embed:  # space only: the kernel is given the embedded token
                    extra.append(Piece("embed", (embed[pid][1], cfg.hidden), dt,
                                       "embedding"))
                self.extra[pid] = tuple(p for p in extra if p.nbytes)

    def block(self, pid: int, window: int | None) -> tuple[Piece, ...]:
        """The pieces PE `pid` holds for each layer of attention window `window` (None:
        full): its weights, biases, norms and KV cache shard (empty ones left out)."""
        cfg, run, dt, plan = self.run.cfg, self.run, self.run.dtype, self.plans[pid]
        _e0, _n, c0, c1 = plan["qkv"]
        sn = plan["seq"][window][2]
        key = (c1 - c0, plan["o"][1], plan["mlp"][1], sn)
        found = self._blocks.get(key)
        if found is not None:
            return found
        h, (_r0, rn), (_f0, fn) = cfg.hidden, plan["o"], plan["mlp"]
        pieces = [Piece("norm_in", (1, h), "f32"), Piece("qkv", (h, c1 - c0), dt),
                  Piece("qkv_bias", (1, c1 - c0), dt) if cfg.qkv_bias else None,
                  Piece("o", (rn, h), dt),
                  Piece("o_bias", (1, h), dt) if cfg.o_bias else None,
                  Piece("norm_post", (1, h), "f32"), Piece("gate", (h, fn), dt),
                  Piece("up", (h, fn), dt), Piece("down", (fn, h), dt),
                  *((Piece("gate_bias", (1, fn), dt), Piece("up_bias", (1, fn), dt),
                     Piece("down_bias", (1, h), dt)) if cfg.mlp_bias else ()),
                  Piece("k", (run.batch, sn, cfg.head_dim), dt, "kv_cache"),
                  Piece("v", (run.batch, sn, cfg.head_dim), dt, "kv_cache")]
        found = self._blocks[key] = tuple(p for p in pieces if p is not None and p.nbytes)
        return found

    # -- what it takes

    def shared_bytes(self) -> int:
        """The shared buffers of the whole step (of all its layers, timed or not)."""
        if self._shared_bytes is None:
            self._shared_bytes = sum(self.aligned(p.nbytes)
                                     for p in self._shared(self.run.layers))
        return self._shared_bytes

    def layers(self, pid: int) -> list[tuple[int | None, int]]:
        """(window, how many) of the layers PE `pid` holds in the whole step: its stage's
        share of all the model's layers (a scaled run's layers not timed take its timed
        ones' window, all alike)."""
        run, k = self.run, self.stage_of[pid]
        timed = self.plans[pid]["layers"]
        count = coll.part(run.layers, run.pp, k)[1]
        if run.scaled:
            return [(timed[0][1], count)]
        by: dict[int | None, int] = {}
        for _, window in timed:
            by[window] = by.get(window, 0) + 1
        return list(by.items())

    def need(self, pid: int) -> dict[str, int]:
        """HBM bytes PE `pid` needs for the whole step, by kind, page-aligned as placed."""
        held = (tuple((id(self.block(pid, w)), n) for w, n in self.layers(pid)),
                self.extra[pid])
        found = self._needs.get(held)
        if found is None:
            by = {"weights": 0, "kv_cache": 0, "embedding": 0, "buffers": self.shared_bytes()}
            for window, count in self.layers(pid):
                for piece in self.block(pid, window):
                    by[piece.kind] += count * self.aligned(piece.nbytes)
            for piece in self.extra[pid]:
                by[piece.kind] += self.aligned(piece.nbytes)
            found = self._needs[held] = by
        return dict(found)

    def read(self, pid: int) -> int:
        """HBM bytes PE `pid` reads in the whole step: its weights and KV cache, once each
        (not the embedding table or the buffers), unaligned."""
        return sum(count * sum(p.nbytes for p in self.block(pid, window))
                   for window, count in self.layers(pid)) + \
            sum(p.nbytes for p in self.extra[pid] if p.kind == "weights")

    def check(self, system_pes: list) -> None:
        """Every PE's need within its HBM slice (ValueError: needed and available bytes,
        and where it overflows first)."""
        slice_bytes = self.topology.hbm.slice_size
        needs = [sum(self.need(pid).values()) for pid in range(len(self.plans))]
        worst = max(range(len(needs)), key=lambda pid: (needs[pid], -pid))
        if needs[worst] <= slice_bytes:
            return
        by = self.need(worst)
        total, have = sum(needs), slice_bytes * len(needs)
        parts = ", ".join(f"{k.replace('_', ' ')} {format_size(v)}" for k, v in by.items() if v)
        raise DoesNotFit(
            f"{_model_name(self.run.cfg)} does not fit topology {self.topology.name!r} at "
            f"batch {self.run.batch}, context {self.run.context}: PE ({system_pes[worst]}) "
            f"needs {format_size(needs[worst])} ({parts}) for its share of "
            f"{self.run.layers} layers, its HBM slice has {format_size(slice_bytes)}; "
            f"{sum(n > slice_bytes for n in needs)} of {len(needs)} PEs overflow, "
            f"{format_size(total)} in all of {format_size(have)}")


class DoesNotFit(ValueError):
    """The model does not fit the topology's HBM (a ValueError: the run's parameters')."""


def largest(topology, p, name: str) -> int:
    """The largest value of parameter `name` ("batch" or "context") at which the model
    fits every PE's HBM slice, the other parameters as in `p`; 0 if not even the least
    does. Found by placing the model (a `Layout`, shapes only): a first guess from two
    placements (what a PE needs grows about linearly in both), then placements a step
    apart, the step doubling, until one fits and the next does not, and halving the gap
    between them."""
    low, step = (1, 8) if name == "batch" else (0, 1024)
    slice_bytes = topology.hbm.slice_size

    def needs(value: int) -> list[int] | None:
        try:
            lay = Layout(topology, _run(topology, {**p, name: value}))
        except DoesNotFit:
            return None
        return [sum(lay.need(pid).values()) for pid in range(topology.num_pes)]

    def fits(value: int) -> bool:
        got = needs(value)
        return got is not None and max(got) <= slice_bytes

    first, second = needs(low), needs(low + step)
    if first is None or max(first) > slice_bytes:
        return 0
    if second is None:
        return _settle(fits, low, low + step)
    grows = [(a, b - a) for a, b in zip(first, second, strict=True) if b > a]
    if not grows:
        raise ValueError(f"the model's HBM need does not grow with {name}")
    guess = max(low, low + min((slice_bytes - a) * step // d for a, d in grows))
    if fits(guess):
        bad, jump = guess + 1, 1
        while fits(bad):
            guess, bad, jump = bad, bad + 2 * jump, 2 * jump
        return _settle(fits, guess, bad)
    good, jump = guess - 1, 1
    while not fits(good):
        good, jump = max(low, good - 2 * jump), 2 * jump
    return _settle(fits, good, guess)


def _settle(fits, good: int, bad: int) -> int:
    """The largest value in [good, bad) that `fits` (`good` does, `bad` does not)."""
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if fits(mid) else (good, mid)
    return good


def _model_name(cfg: ModelConfig) -> str:
    return cfg.name if cfg.name in SHIPPED else f"the model of {cfg.name}"


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


# ---------------------------------------------------------------------- setup


def setup(host, p):
    run = _run(host.topology, p)
    lay = Layout(host.topology, run)
    lay.check(host.grid)
    host.expect(len(lay.shared) * host.num_pes + sum(
        sum(len(lay.block(pid, w)) for _, w in plan["layers"]) + len(lay.extra[pid])
        for pid, plan in enumerate(lay.plans)))
    cfg, b, dt = run.cfg, run.batch, run.dtype
    w = _weights(host, run)
    cos, sin = cos_sin(cfg.rope, cfg.head_dim, run.context)
    values = {"x": w["inputs_embeds"], "rope": np.stack([cos, sin]).astype(np.float32)}
    shared = {piece.key: host.replicate(piece.label or piece.key, values[piece.key])
              if piece.key in values else
              host.empty(piece.label or piece.key, piece.shape, piece.dtype)
              for piece in lay.shared}
    plans = []
    for pid, plan in enumerate(lay.plans):
        made = _Maker(host, w, run, plan)
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


def _weights(host, run: Run) -> dict:
    """Every weight and bias, Hugging Face's names and [out, in] layouts, and each layer's
    cache before the step, seeded (kept for --save)."""
    cfg, dt = run.cfg, run.dtype
    hq, hkv, d, hidden, inter = cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.hidden, \
        cfg.intermediate
    w = {}
    for i in range(run.timed):
        pre = f"model.layers.{i}."
        for name, out, inp, bias in (("self_attn.q_proj", hq * d, hidden, cfg.qkv_bias),
                                     ("self_attn.k_proj", hkv * d, hidden, cfg.qkv_bias),
                                     ("self_attn.v_proj", hkv * d, hidden, cfg.qkv_bias),
                                     ("self_attn.o_proj", hidden, hq * d, cfg.o_bias),
                                     ("mlp.gate_proj", inter, hidden, cfg.mlp_bias),
                                     ("mlp.up_proj", inter, hidden, cfg.mlp_bias),
                                     ("mlp.down_proj", hidden, inter, cfg.mlp_bias)):
            w[pre + name + ".weight"] = host.random(pre + name + ".weight", (out, inp), dt,
                                                    scale=1 / math.sqrt(inp))
            if bias:
                w[pre + name + ".bias"] = host.random(pre + name + ".bias", (out,), dt,
                                                      scale=0.1)
        for x in ("key", "value"):  # the cache before the step, [batch, kv heads, context, d]
            w[f"{pre}past_{x}"] = host.random(f"{pre}past_{x}", (run.batch, hkv, run.context, d),
                                              dt) if run.context else \
                host.inputs.setdefault(f"{pre}past_{x}",
                                       np.zeros((run.batch, hkv, 0, d), np.float32))
        for name in ("input_layernorm", "post_attention_layernorm"):
            w[pre + name + ".weight"] = host.random(pre + name + ".weight", (hidden,), "f32",
                                                    scale=0.1) + np.float32(1)
            host.inputs[pre + name + ".weight"] = w[pre + name + ".weight"]
    w["model.norm.weight"] = host.random("model.norm.weight", (hidden,), "f32",
                                         scale=0.1) + np.float32(1)
    host.inputs["model.norm.weight"] = w["model.norm.weight"]
    w["lm_head.weight"] = host.random("lm_head.weight", (cfg.vocab, hidden), dt,
                                      scale=1 / math.sqrt(hidden))
    w["inputs_embeds"] = host.random("inputs_embeds", (run.batch, hidden), dt)
    return w


class _Maker:
    """The values of a PE's pieces, from the weights, made only as they are placed."""

    def __init__(self, host, w: dict, run: Run, plan: dict):
        self.host, self.w, self.run, self.plan = host, w, run, plan

    def place(self, pid: int, piece: Piece, page: int, layer: int | None = None) -> int:
        """Place `piece` in PE `pid`'s HBM at the start of a DRAM page: its address. Timing
        only (or an embedding table: space only), nothing is made."""
        host = self.host
        name = piece.name(pid, layer)
        if host.timing_only or piece.kind == "embedding":
            return host.reserve(name, piece.shape, piece.dtype, pid, align=page)
        value = self.value(piece, layer)
        return host.place(name, np.ascontiguousarray(value, _dtype(host, piece.dtype)), pid,
                          align=page)

    def value(self, piece: Piece, i: int | None) -> np.ndarray:
        w, cfg, plan = self.w, self.run.cfg, self.plan
        pre = f"model.layers.{i}."
        g, d, h = cfg.group, cfg.head_dim, plan["head"]
        _e0, _n, c0, c1 = plan["qkv"]
        r0, rn = plan["o"]
        f0, fn = plan["mlp"]
        key = piece.key
        if key in ("qkv", "qkv_bias"):  # the group's q rows, its k rows, its v rows
            src = [*range(h * g * d, (h + 1) * g * d), *range(h * d, (h + 1) * d),
                   *range(h * d, (h + 1) * d)]
            which = [0] * (g * d) + [1] * d + [2] * d
            kind = "weight" if key == "qkv" else "bias"
            parts = [w[pre + f"self_attn.{x}_proj.{kind}"] for x in "qkv"]
            cols = [parts[which[c]][src[c]] for c in range(c0, c1)]
            return np.stack(cols).T if key == "qkv" else np.asarray(cols)[None]
        if key == "k" or key == "v":
            return self._cache(piece, i)
        table = {
            "norm_in": lambda: w[pre + "input_layernorm.weight"][None],
            "norm_post": lambda: w[pre + "post_attention_layernorm.weight"][None],
            "o": lambda: w[pre + "self_attn.o_proj.weight"][:, h * g * d + r0:
                                                              h * g * d + r0 + rn].T,
            "o_bias": lambda: w[pre + "self_attn.o_proj.bias"][None],
            "gate": lambda: w[pre + "mlp.gate_proj.weight"][f0:f0 + fn].T,
            "up": lambda: w[pre + "mlp.up_proj.weight"][f0:f0 + fn].T,
            "down": lambda: w[pre + "mlp.down_proj.weight"][:, f0:f0 + fn].T,
            "gate_bias": lambda: w[pre + "mlp.gate_proj.bias"][None, f0:f0 + fn],
            "up_bias": lambda: w[pre + "mlp.up_proj.bias"][None, f0:f0 + fn],
            "down_bias": lambda: w[pre + "mlp.down_proj.bias"][None],
            "norm_final": lambda: w["model.norm.weight"][None],
            "lm_w": lambda: w["lm_head.weight"][plan["lm"][0]:sum(plan["lm"])].T,
            "iota": lambda: np.arange(plan["lm"][0], sum(plan["lm"]), dtype=np.float32)[None],
        }
        return table[key]()

    def _cache(self, piece: Piece, i: int) -> np.ndarray:
        """This PE's shard of layer `i`'s K or V cache of its head: cached positions
        lo + s0 .. of every sequence, [b, sn, d]; the new token's row is the kernel's."""
        lo, s0, sn = self.plan["seq"][self.run.cfg.window(i)]
        full = self.w[f"model.layers.{i}.past_{'key' if piece.key == 'k' else 'value'}"]
        shard = np.zeros(piece.shape, full.dtype)
        first = lo + s0  # the first position this shard holds
        past = min(sn, max(0, self.run.context - first))  # of them, already in the cache
        if past:
            shard[:, :past] = full[:, self.plan["head"], first:first + past]
        return shard


def _dtype(host, name: str) -> np.dtype:
    return np.dtype(np.float32) if name == "f32" else host.inputs["inputs_embeds"].dtype


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
    run = _run(host.topology, p)
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
    lay = Layout(topology, _run(topology, _as_run(p)))
    read = [lay.read(pid) for pid in range(topology.num_pes)]
    worst = max(range(len(read)), key=lambda pid: (read[pid], -pid))
    return {"memory": (-(-read[worst] * 10**12 // _stream(topology)),
                       f"PE {worst}'s weights and KV cache, {read[worst]:,} B, at its HBM "
                       "slice's stream bandwidth")}


def _as_run(p):
    """`p` for the step as run (bounds() states the run's bounds, not the scaled step's)."""
    return {**p, "scale_to": 0}


def metrics(topology, p, run):
    """Time per output token (TPOT), tokens/s, energy per token, TPOT against the HBM bound
    of the whole step, and the HBM the model takes; with `scale_to`, the step of that many
    layers from the timed ones, with its error bound."""
    step = _run(topology, p)
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
    run = _run(host.topology, p)
    exact = decode_step(run.cfg, host.inputs, range(run.timed), run.context, np.float64)
    want, got = exact["logits"], outputs["logits"].astype(np.float64)
    norm = float(np.linalg.norm(want))
    agree = float(np.mean(got.argmax(axis=1) == want.argmax(axis=1)))
    return {"logits_rel_l2": (float(np.linalg.norm(got - want)) / norm if norm else 0.0,
                              "(against the exact model in float64)"),
            "logits_max_abs_err": (float(np.abs(got - want).max()), ""),
            "top1_agreement": (agree, f"(of {run.batch} sequences, the exact model's next "
                                      "token)")}
