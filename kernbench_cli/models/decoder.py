"""A decoder step's model and placement: which model, which step, and where every piece
of it goes in the PEs' HBM, shapes only (the `llama_decode` kernel's host side).

`model_config` reads a shipped model or a Hugging Face config (`models.hf`); `run_of`
checks the step a kernel's parameters ask for against the model and the topology;
`Layout` places it, weight-stationary: per PE its parts of the work, the pieces it holds
for each layer (a *block*, alike for every layer of one attention window, each piece at
the start of a DRAM page) and beside them, the buffers every PE holds at one offset, and
what the whole model needs of each PE's HBM slice (`Layout.check`, `largest`);
`weights` draws the seeded weights under Hugging Face's names and `Maker` cuts each PE's
piece of them as it is placed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from kernbench_cli.config.units import format_size_human as format_size
from kernbench_cli.errors import ParamError
from kernbench_cli.lang import collectives as coll
from kernbench_cli.lang.dtypes import dtype as dtype_of
from kernbench_cli.lang.dtypes import nbytes, rounded
from kernbench_cli.lang.narrow import NARROW
from kernbench_cli.models.hf import ModelConfig, Rope, from_dict, read_config

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
ITEM = {"bf16": 2, "f16": 2, "f32": 4}
#: What `-p weights` and `-p kv` take besides the run's dtype (`lang.narrow`).
NARROW_FORMATS = tuple(NARROW)
#: Elements a scaled format's scale covers, along a row (`lang.narrow`).
BLOCK = 32
BF16 = dtype_of("bf16")  # what the GEMM array takes a dequantised operand as


def nbytes_of(dtype: str, shape: tuple) -> int:
    """Bytes `shape` of `dtype` takes in memory (`lang.dtypes.nbytes`: a narrow dtype's
    packed elements and, for a scaled one, a scale per block; its rows whole blocks, as
    `Run` checks)."""
    return nbytes(dtype_of(dtype), math.prod(shape))


def scaled(dtype: str) -> bool:
    """A format with a scale per block of a row (int8, int4, mxfp8, mxfp4)."""
    return dtype in NARROW and NARROW[dtype].block > 1


def model_config(p) -> ModelConfig:
    """The model: a shipped one, or the Hugging Face config.json given (`ParamError`)."""
    if not p["model"] and not p["config"].strip():  # `-p config=`: the model blanked for it
        raise ValueError(f"config = {p['config']!r}: give the path of a Hugging Face "
                         "config.json (or -p model=NAME)")
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
    context: int  # tokens each sequence has in its cache before the step
    pp: int
    dtype: str
    kv_chunk: int  # KV positions an attention partial takes at once
    algo: str
    prompt: int = 0  # tokens prefilled before the decode step (0: none)
    chunk: int = 1  # prompt tokens each prefill pass takes
    new_tokens: int = 1  # tokens a request generates (its figures)
    microbatches: int = 1  # the decode step's batch in this many parts, through the stages
    passes: int = 0  # prefill passes timed, spread over the prompt (0: every one)
    weights: str = ""  # the decoder layers' weight matrices' format ("": dtype)
    kv: str = ""  # the KV cache's format ("": dtype)
    steps: int = 1  # decode steps, one after another (teacher-forced)
    #: positions `request_end` moved the context on by (0: the run as given)
    grown: int = field(default=0, compare=False)

    @property
    def wdt(self) -> str:
        """The format the decoder layers' projection weights are stored in."""
        return self.weights or self.dtype

    @property
    def kvdt(self) -> str:
        """The format the KV cache is stored in."""
        return self.kv or self.dtype

    @property
    def narrow_weights(self) -> bool:
        """Weights stored narrow: each projection as HF's [out, in] (N, K), so that a scaled
        format's blocks run along K, multiplied with `trans_b`."""
        return self.wdt in NARROW

    @property
    def where(self) -> str:
        """"context C, a prompt of L" as given, for messages (with `request_end`'s run, at
        the request's last decode step)."""
        given = f"context {self.context - self.grown}{self.with_prompt}"
        return given + (f", at the request's last decode step ({self.positions:,} positions "
                        "a sequence)" if self.grown else "")

    @property
    def with_prompt(self) -> str:
        """", a prompt of L" when there is one (for messages)."""
        return f", a prompt of {self.prompt:,}" if self.prompt else ""

    @property
    def rows(self) -> int:
        """Sequences a micro-batch of the decode step holds (its GEMMs' M)."""
        return self.batch // self.microbatches

    @property
    def scaled(self) -> bool:
        return self.layers != self.timed

    @property
    def positions(self) -> int:
        """Positions the cache holds after the step: the context, the prompt, the token
        each decode step appends."""
        return self.context + self.prompt + self.steps

    @property
    def request_end(self) -> Run:
        """The request's last decode step, whose cache the request must hold: with a
        prompt, `new_tokens` - 1 decode steps follow the prefill, the last with context +
        prompt + new_tokens - 1 positions a sequence cached; this run if it runs that far
        (or has no prompt, so no request)."""
        grow = self.new_tokens - 1 - self.steps
        return replace(self, context=self.context + grow, grown=grow) \
            if self.prompt and grow > 0 else self

    @property
    def chunks(self) -> list[tuple[int, int]]:
        """(first position, tokens) of each prefill pass, in order."""
        return [(self.context + p, min(self.chunk, self.prompt - p))
                for p in range(0, self.prompt, self.chunk)]

    @property
    def timed_chunks(self) -> list[tuple[int, int]]:
        """The prefill passes run: every one, or `passes` of them spread evenly over the
        prompt, the first and the last among them."""
        every = self.chunks
        if not self.passes or self.passes >= len(every):
            return every
        k = self.passes
        return [every[round(i * (len(every) - 1) / (k - 1))] for i in range(k)]

    @property
    def sampled(self) -> bool:
        return len(self.timed_chunks) < len(self.chunks)

    @property
    def pass_rows(self) -> list[int]:
        """The rows (sequences x tokens) a pass through a layer takes, each size once: a
        decode micro-batch's sequences, the prefill's batch x chunk (and a last shorter
        one)."""
        return sorted({self.rows, *(self.batch * t for _, t in self.chunks)})


def run_of(topology, p) -> Run:
    """The step `p` asks for, checked against the model and the topology (ValueError)."""
    cfg = model_config(p)
    for name, low in (("batch", 0), ("context", 0), ("prompt", 0), ("chunk", 1),
                      ("kv_chunk", 1), ("new_tokens", 1), ("microbatches", 1), ("layers", 0),
                      ("scale_to", 0), ("pp", 1), ("passes", 0), ("steps", 1)):
        if p[name] < low:
            raise ValueError(f"{name} = {p[name]}: must be at least {low}")
    _check_passes(p)
    m = p["microbatches"]
    if m > 1 and p["scale_to"]:
        raise ValueError(f"microbatches = {m}: each layer runs once per micro-batch (with "
                         "stages, overlapped), so no scale_to")
    if p["prompt"] and p["scale_to"] and p["pp"] > 1:
        raise ValueError("scale_to with a prompt and pp > 1: the stages take the prefill's "
                         "passes in a pipeline, so a layer's time there is no share of the "
                         "TTFT; run all layers, or one stage")
    _check_positions(p, cfg.rope)
    if p["steps"] > 1 and (p["pp"] > 1 or m > 1 or p["scale_to"] or cfg.windows):
        raise ValueError(f"steps = {p['steps']}: several decode steps run on one pipeline "
                         "stage, without micro-batches, scale_to or sliding windows (each "
                         "step waits for the token the one before chose)")
    if p["prompt"] and cfg.windows:
        raise ValueError("prompt: a prefill of sliding-window layers is not modelled (its "
                         "attention would need a window per query); run the decode step, "
                         "or a model without sliding_window")
    if p["batch"] == 0:  # the largest batch that fits; if none, say why one does not
        p = {**p, "batch": largest(topology, p, "batch") or m}
    if p["batch"] % m:
        raise ValueError(f"microbatches = {m}: batch {p['batch']} does not split into {m} "
                         "equal micro-batches")
    timed = p["layers"] or cfg.layers
    if timed > cfg.layers:
        raise ValueError(f"layers = {timed}: the model has {cfg.layers} "
                         "(num_hidden_layers)")
    layers = p["scale_to"] or timed
    if p["scale_to"]:
        check_scaling(cfg, timed, layers, p["pp"])
    pes, pp = topology.num_pes, p["pp"]
    if pes < cfg.kv_heads:  # no split of the PEs helps: say what bounds it
        raise ValueError(f"the model's {cfg.kv_heads} KV heads (num_key_value_heads) need a "
                         f"PE each at least, and topology {topology.name!r} has {pes}")
    if pes % cfg.kv_heads:  # no split into stages helps: say what bounds it
        raise ValueError(f"{model_name(cfg)}: its {cfg.kv_heads} KV heads "
                         f"(num_key_value_heads) need a head group of PEs each, all alike, "
                         f"and topology {topology.name!r} has {pes} PEs, which do not split "
                         f"so: a topology whose PE count is a multiple of {cfg.kv_heads} "
                         "runs it")
    if pp > timed or pes % pp or (pes // pp) % cfg.kv_heads:
        raise ValueError(f"pp = {pp}: the {pes} PEs must split into {pp} stages of a multiple "
                         f"of {cfg.kv_heads} PEs (a head group per KV head), with a layer "
                         f"each at least ({timed} layers)")
    _check_formats(cfg, p)
    return Run(cfg, timed, layers, p["batch"], p["context"], pp, p["dtype"], p["kv_chunk"],
               p["algo"], p["prompt"], p["chunk"], p["new_tokens"], m, p["passes"],
               p["weights"] if p["weights"] != p["dtype"] else "",
               p["kv"] if p["kv"] != p["dtype"] else "", p["steps"])


#: the fewest representative prefill passes (`passes`): the first, the last and three
#: between. With one between (3), a pass's time varies with its position in ways that one
#: pass's distance off its neighbours' line does not show: on the tests' ten-layer model
#: (context 0, prompt 128 in passes of 16, 3 of 8 timed) the full TTFT lay up to 2.6x the
#: bound away
MIN_PASSES = 5


def _check_passes(p) -> None:
    """Representative prefill passes (`passes`) as they can be run (ValueError). As many
    as the prompt has, or more, time every pass: nothing is then left to bound."""
    every = -(-p["prompt"] // p["chunk"])
    if 0 < p["passes"] < min(MIN_PASSES, every):
        fewer = f", or all {every} of this prompt's" if every < MIN_PASSES else ""
        raise ValueError(f"passes = {p['passes']}: representative prefill passes are "
                         f"{MIN_PASSES} or more{fewer} (the first, the last and three between: the "
                         "bound on the passes not timed is from how far those three lie off "
                         "their neighbours' line; one or two between missed the full prefill "
                         "by up to 2.6x that bound)")
    if p["passes"] and p["pp"] > 1:
        raise ValueError(f"pp = {p['pp']}: representative prefill passes (passes = "
                         f"{p['passes']}) run on one pipeline stage")
    if p["passes"] and not p["prompt"]:
        raise ValueError(f"passes = {p['passes']}: representative prefill passes need a "
                         "prompt to pass over (-p prompt)")


def most_rows(topology, cfg: ModelConfig) -> int:
    """The most rows a pass through a layer can have: three [rows, hidden] f32 tensors
    are in a PE's TCM at once at a residual add (its input, the sum, the result)."""
    return topology.pe.tcm.size // (3 * cfg.hidden * 4)


def most_head_rows(topology, run: Run) -> int:
    """The most rows the LM head can take (`head_bytes` within a PE's TCM)."""
    per_row = head_bytes(topology, run, 1) - head_bytes(topology, run, 0)
    return max(0, topology.pe.tcm.size - head_bytes(topology, run, 0)) // per_row


def head_bytes(topology, run: Run, rows: int) -> int:
    """TCM the LM head's argmax holds on a PE of the last stage for `rows` rows: its input
    [rows, hidden] in f32 and normed in the dtype, the [rows, share] f32 logits (its share
    of the vocabulary, `head_share`) and two temporaries of their shape (`_is_max`'s
    difference and product), and the vocabulary's indices [share] in f32."""
    share = head_share(topology, run)
    return rows * (run.cfg.hidden * (4 + ITEM[run.dtype]) + 12 * share) + 4 * share


def tcm_rows(topology, run: Run) -> int:
    """The most rows a micro-batch can have by both TCM bounds (`most_rows`,
    `most_head_rows`): more cannot fit, fewer may not."""
    return min(most_rows(topology, run.cfg), most_head_rows(topology, run))


def head_share(topology, run: Run) -> int:
    """The vocabulary a PE of the last stage takes at most (its LM head's columns)."""
    return -(-run.cfg.vocab // (topology.num_pes // run.pp))


def _check_one_row(topology, run: Run, most: int, head: int) -> None:
    """Refuse a run of which not one row fits TCM (`most`: at a residual add; `head`: at
    the LM head), naming what would have to change: the config's width, or `pp` where
    fewer stages (the vocabulary over more PEs) would fit it."""
    if most and head:
        return
    tcm, cfg = topology.pe.tcm.size, run.cfg
    if not most:
        raise ValueError(f"{model_name(cfg)}: one row does not fit a PE's {tcm:,} B of TCM: "
                         f"hidden_size {cfg.hidden:,} makes a layer's residual add hold "
                         f"three [1, {cfg.hidden}] f32 tensors ({12 * cfg.hidden:,} B)")
    what = (f"the LM head's argmax holds {head_bytes(topology, run, 1):,} B for one row: "
            f"the [1, {head_share(topology, run)}] f32 logits of a PE's share of the "
            f"vocabulary ({cfg.vocab:,} over {topology.num_pes // run.pp} PEs) and more")
    if run.pp > 1 and most_head_rows(topology, replace(run, pp=1)):
        raise ValueError(f"pp = {run.pp}: {what}, more than a PE's {tcm:,} B of TCM: fewer "
                         "stages spread the vocabulary over more PEs")
    raise ValueError(f"{model_name(cfg)}: one row does not fit a PE's {tcm:,} B of TCM: "
                     f"{what}")


def split_of(run: Run) -> str:
    """"microbatches = m, " where the batch is split (for messages)."""
    return f"microbatches = {run.microbatches}, " if run.microbatches > 1 else ""


def check_rows(topology, run: Run, chosen: bool = False) -> None:
    """Refuse a pass with more rows than a PE's TCM can hold at a layer's residual add:
    its input, the sum and the result, each [rows, hidden] in f32, in TCM at once; or
    at the LM head (`head_bytes`, which binds for a wide vocabulary over few PEs).
    Necessary bounds only: other tensors share TCM, so a pass under them can still
    overflow, with the overflow's own error naming what holds TCM. `chosen`: the batch
    is the one `batch = 0` chose (the largest HBM holds), which the message says."""
    tcm, hidden, most = topology.pe.tcm.size, run.cfg.hidden, most_rows(topology, run.cfg)
    head = most_head_rows(topology, run)
    _check_one_row(topology, run, most, head)
    fit = min(most, head)  # `tcm_rows`, of the bounds at hand
    batch = (f"batch = 0, the largest batch HBM holds ({run.batch:,})" if chosen else
             f"batch = {run.batch}")
    split = f"split the batch into micro-batches of at most {fit} rows (-p microbatches"
    if run.rows > most:
        raise ValueError(
            f"{batch}: {split_of(run)}a micro-batch of {run.rows} rows holds three "
            f"[{run.rows}, {hidden}] f32 tensors at a layer's residual add "
            f"({3 * run.rows * hidden * 4:,} B), more than a PE's {tcm:,} B of TCM: "
            + ("give a batch, or " if chosen else "") +
            f"{split}; other tensors share TCM, so it may take fewer)")
    for rows, what, change in (
            (run.rows, f"{split_of(run)}a micro-batch of {run.rows} rows holds", split),
            (run.batch if run.prompt else 0, f"the prefill's last tokens ({run.batch} rows) "
             "hold", f"give a batch of at most {head} (-p batch")):
        if rows > head:
            share = head_share(topology, run)
            raise ValueError(
                f"{batch}: {what}, at the LM head's argmax, the input [{rows}, {hidden}] in "
                f"f32 and in {run.dtype}, the [{rows}, {share}] f32 logits of a PE's share "
                f"of the vocabulary ({run.cfg.vocab:,} over {topology.num_pes // run.pp} "
                f"PEs) and two temporaries of their shape ("
                f"{head_bytes(topology, run, rows):,} B), more than a PE's {tcm:,} B of "
                "TCM: " + ("give a batch, or " if chosen else "") +
                f"{change}; other tensors share TCM, so it may take fewer)")
    rows = max((run.batch * t for _, t in run.chunks), default=0)
    if rows > most:
        if most < run.batch:
            raise ValueError(f"{batch}: a prefill pass of one token a sequence "
                             f"({run.batch} rows) holds three [{run.batch}, {hidden}] f32 "
                             "tensors at a layer's residual add, more than a PE's "
                             f"{tcm:,} B of TCM")
        raise ValueError(f"chunk = {run.chunk}: a prefill pass of batch x chunk = {rows} "
                         f"rows holds three [{rows}, {hidden}] f32 tensors at a layer's "
                         f"residual add ({3 * rows * hidden * 4:,} B), more than a PE's "
                         f"{tcm:,} B of TCM: lower -p chunk to at most {most // run.batch} (other "
                         "tensors share TCM, so it may take fewer)")


def _check_formats(cfg: ModelConfig, p) -> None:
    """`-p weights` and `-p kv`: the run's dtype or a narrow one; a scaled format's rows
    (a projection's K: the hidden size, a PE's share of the heads' and the MLP's
    intermediate columns; the cache's half heads, RoPE's halves) whole blocks of 32."""
    for name in ("weights", "kv"):
        value = p[name]
        if value and value != p["dtype"] and value not in NARROW:
            raise ValueError(f"{name} = {value}: one of {p['dtype']} (the dtype) or a narrow "
                             f"format: {', '.join(NARROW_FORMATS)}")
    if scaled(p["weights"]):
        for what, size in (("hidden_size", cfg.hidden), ("head_dim", cfg.head_dim),
                           ("intermediate_size", cfg.intermediate)):
            if size % BLOCK:
                raise ValueError(f"weights = {p['weights']}: its scales cover blocks of "
                                 f"{BLOCK} elements along K, and {what} {size} is not whole "
                                 "blocks")
    if scaled(p["kv"]) and (cfg.head_dim // 2) % BLOCK:
        raise ValueError(f"kv = {p['kv']}: its scales cover blocks of {BLOCK} elements along a "
                         f"cached row, read in RoPE's halves, and half of head_dim "
                         f"{cfg.head_dim} is not whole blocks")


def check_scaling(cfg: ModelConfig, timed: int, layers: int, pp: int) -> None:
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
        object.__setattr__(self, "nbytes", nbytes_of(self.dtype, self.shape))

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
        self.share = head_share(topology, run)
        self._gathered: dict[int, dict] = {}  # by stage (`gathered`), made once
        #: a prefill pass's prompt rows as a PE holds them: the part of them it gathers
        #: (`gathered(0)`), in a slot of the largest part's size (the first pass's)
        self.prompt_slot = max(n for _, n in self.gathered(0)[
            run.batch * run.chunks[0][1]].values()) if run.prompt else 0
        #: a micro-batch's hidden state as the check keeps it after each layer: each PE of
        #: the stage its part (`gathered`), in a slot of the largest part's size; a
        #: layer's slots in a row of whole DRAM pages (`state_stride` elements), so that
        #: every layer stores at the same offsets within its pages
        self.state_slot = max(n for _, n in self.gathered(0)[run.rows].values())
        self.state_stride = self.aligned(run.microbatches * self.state_slot * 4) // 4
        #: with a prompt, each sequence's last prompt token's state as the check keeps it
        #: after each layer: each PE of a stage its part of the [batch, hidden] rows (`kept`),
        #: in a row of whole pages (`prefill_stride` elements), as the decode step's
        self.kept = [coll.layout(self.grid, run.batch * cfg.hidden, stage) if run.prompt
                     else {} for stage in self.stages]
        self.prefill_stride = self.aligned(4 * max(
            (n for parts in self.kept for _, n in parts.values()), default=0)) // 4
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
        hidden state after each is kept, for the check, each PE its part; the prefill's
        too)."""
        run, cfg = self.run, self.run.cfg
        b, d, g, dt = run.batch, cfg.head_dim, cfg.group, run.dtype
        rows = max(run.pass_rows)  # the most rows a pass takes
        s = run.steps  # each step's input, RoPE, logits and token
        pieces = [Piece("x", (s * b, cfg.hidden), dt, "buffers", "inputs_embeds"),
                  Piece("rope", (s, 2, d // 2), "f32", "buffers"),
                  Piece("qkvbuf", ((g + 2) * d * rows,), dt, "buffers"),
                  Piece("obuf", (rows * g * d,), dt, "buffers"),
                  Piece("ybuf", (rows * cfg.hidden,), "f32", "buffers"),
                  Piece("argbuf", (self.width * b * 2,), "f32", "buffers"),
                  Piece("hidden_out", (layers + 1, self.state_stride), "f32", "buffers"),
                  Piece("token", (s * b,), "f32", "buffers"),
                  Piece("logits", (s * b * self.share,), "f32", "buffers")]
        if run.prompt:  # the prompt's embeddings, pass by pass (each PE's part of each
            # pass's rows, `prompt_slot`); its RoPE; positions; each sequence's last token
            # after each layer (for the check)
            pieces += [Piece("prompt", (len(run.chunks) * self.prompt_slot,), dt, "buffers",
                             "prompt_embeds"),
                       Piece("prompt_rope", (2, run.prompt, d // 2), "f32", "buffers"),
                       Piece("positions", (run.positions,), "f32", "buffers"),
                       Piece("prefill_out", (layers + 1, self.prefill_stride), "f32",
                             "buffers"),
                       Piece("prefill_token", (b,), "f32", "buffers"),
                       Piece("prefill_logits", (b * self.share,), "f32", "buffers")]
        return pieces

    def aligned(self, nbytes: int) -> int:
        return -(-nbytes // self.page) * self.page

    def _check_totals(self) -> None:
        """The whole model's weights and cache against the system's HBM, before any
        per-PE layout (which takes time in proportion to the PEs: a model far too large
        is refused at once)."""
        cfg, run = self.run.cfg, self.run
        attn = cfg.hidden * cfg.head_dim * (2 * cfg.heads + 2 * cfg.kv_heads)
        per_layer = nbytes_of(run.wdt, (attn + 3 * cfg.hidden * cfg.intermediate,))
        cache = nbytes_of(run.kvdt, (2 * run.batch * cfg.kv_heads * cfg.head_dim * sum(
            min(run.positions, cfg.window(i) or run.positions) for i in range(run.layers)),))
        tables = cfg.vocab * cfg.hidden * ITEM[run.dtype] * (1 if cfg.tied and run.pp == 1
                                                            else 2)
        need = per_layer * run.layers + cache + tables
        have = self.topology.num_pes * self.topology.hbm.slice_size
        if need > have:
            raise DoesNotFit(
                f"{model_name(cfg)} does not fit topology {self.topology.name!r}: its "
                f"{run.layers} layers' weights, the LM head and embedding table and the KV "
                f"cache of batch {run.batch} at {run.where} take "
                f"{format_size(need)} ({need:,} B); the system has {format_size(have)} of "
                f"HBM ({self.topology.num_pes} PEs x {format_size(self.topology.hbm.slice_size)})")

    def gathered(self, k: int) -> dict[int, dict[int, tuple[int, int]]]:
        """Per pass's rows, each PE of stage `k`'s part (offset, count) of a hidden state
        [rows, hidden] the stage gathers (with its all-gather algorithm): the state the
        stage before hands on (its peer there sends that part), or, on the first stage,
        a prefill pass's prompt rows (each PE holds its part, `prompt_slot`)."""
        found = self._gathered.get(k)
        if found is None:
            stage, hidden = self.stages[k], self.run.cfg.hidden
            algo = gather_algo(self.grid, stage, self.run.algo)
            found = self._gathered[k] = {rows: coll.layout(self.grid, rows * hidden, stage,
                                                           algo)
                                         for rows in self.run.pass_rows}
        return found

    def _peers(self, k: int, at: int) -> tuple[int | None, int | None, int | None]:
        """The peers of the PE at place `at` of stage `k`: in the stage before and the stage
        after (which hand it the hidden state and take it), and, on the first and the last
        of several stages, in the other one (which the prompt's first token goes across)."""
        stages, last = self.stages, len(self.stages) - 1
        return (stages[k - 1][at] if k else None, stages[k + 1][at] if k < last else None,
                stages[last if k == 0 else 0][at] if last and k in (0, last) else None)

    def _stage(self, k: int, stage: list[int]) -> None:
        run, cfg, grid = self.run, self.run.cfg, self.grid
        first, count = coll.part(run.timed, run.pp, k)
        last = k == run.pp - 1
        size = self.width // cfg.kv_heads
        b, g, d, dt = run.batch, cfg.group, cfg.head_dim, run.dtype
        unit = BLOCK if scaled(run.wdt) else 1  # a scaled weight's K in whole blocks
        mlp = _in_units(grid, cfg.intermediate, stage, unit)
        lm = coll.layout(grid, cfg.vocab, stage) if last else {}
        embed = coll.layout(grid, cfg.vocab, stage) if k == 0 and (  # tied: a copy, the
            not cfg.tied or run.pp > 1) else {}  # LM head's table being the last stage's
        gathers = gather_algo(grid, stage, run.algo)
        arg = {n: coll.layout(grid, self.width * n * 2, stage, gathers)  # per LM head's rows
               for n in {run.rows, b}}
        take = self.gathered(k)  # its parts of the hidden state handed on (or the prompt)
        give = {} if last else self.gathered(k + 1)  # the next stage's
        layers = tuple((i, cfg.window(i)) for i in range(first, first + count))
        windows = {window for _, window in layers}
        for h in range(cfg.kv_heads):
            members = stage[h * size:(h + 1) * size]
            qkv_algo = gather_algo(grid, members, run.algo)
            qkv_parts = {rows: coll.layout(grid, (g + 2) * d * rows, members, qkv_algo)
                         for rows in run.pass_rows}
            o_parts = _in_units(grid, g * d, members, unit)
            seqs = {}  # per window: (first cached position, each member's shard of them)
            for window in windows:
                lo = max(0, run.positions - window) if window else 0
                seqs[window] = (lo, coll.layout(grid, run.positions - lo, members))
            for at, pid in enumerate(members, h * size):
                self.stage_of[pid] = k
                prev, after, wrap = self._peers(k, at)
                qkv = {}  # per pass's rows: (its part of the gather, the columns it covers)
                for rows, parts in qkv_parts.items():
                    e0, n = parts[pid]
                    qkv[rows] = (e0, n, e0 // rows, -(-(e0 + n) // rows))
                plan = self.plans[pid] = {
                    "group": members, "rank": members.index(pid), "head": h, "qkv": qkv,
                    "qkv_cols": (min(c0 for _, _, c0, _ in qkv.values()),
                                 max(c1 for _, _, _, c1 in qkv.values())),
                    "o": o_parts[pid],
                    "mlp": mlp[pid], "lm": lm.get(pid, (0, 0)),
                    "arg": {n: parts[pid] for n, parts in arg.items()},
                    "gather_algo": gathers, "qkv_algo": qkv_algo, "stage": stage,
                    "prev": prev, "next": after, "wrap": wrap,
                    "take": {rows: parts[pid] for rows, parts in take.items()},
                    "kept": self.kept[k].get(pid, (0, 0)),
                    "give": {rows: parts[after] for rows, parts in give.items()},
                    "seq": {w: (lo, *seq[pid]) for w, (lo, seq) in seqs.items()},
                    "layers": layers}
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
        c0, c1 = plan["qkv_cols"]  # every pass's columns of the group's q, k, v
        sn = plan["seq"][window][2]
        key = (c1 - c0, plan["o"][1], plan["mlp"][1], sn)
        found = self._blocks.get(key)
        if found is not None:
            return found
        h, (_r0, rn), (_f0, fn) = cfg.hidden, plan["o"], plan["mlp"]
        wdt, kvdt = run.wdt, run.kvdt

        def weight(key: str, k: int, n: int) -> Piece:  # [K, N], or narrow [N, K]
            return Piece(key, (n, k) if run.narrow_weights else (k, n), wdt)

        pieces = [Piece("norm_in", (1, h), "f32"), weight("qkv", h, c1 - c0),
                  Piece("qkv_bias", (1, c1 - c0), dt) if cfg.qkv_bias else None,
                  weight("o", rn, h),
                  Piece("o_bias", (1, h), dt) if cfg.o_bias else None,
                  Piece("norm_post", (1, h), "f32"), weight("gate", h, fn),
                  weight("up", h, fn), weight("down", fn, h),
                  *((Piece("gate_bias", (1, fn), dt), Piece("up_bias", (1, fn), dt),
                     Piece("down_bias", (1, h), dt)) if cfg.mlp_bias else ()),
                  Piece("k", (run.batch, sn, cfg.head_dim), kvdt, "kv_cache"),
                  Piece("v", (run.batch, sn, cfg.head_dim), kvdt, "kv_cache")]
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
            f"{model_name(self.run.cfg)} does not fit topology {self.topology.name!r} at "
            f"batch {self.run.batch}, {self.run.where}: PE "
            f"({system_pes[worst]}) "
            f"needs {format_size(needs[worst])} ({parts}) for its share of "
            f"{self.run.layers} layers, its HBM slice has {format_size(slice_bytes)} "
            f"({needs[worst] - slice_bytes:,} B short); "
            f"{sum(n > slice_bytes for n in needs)} of {len(needs)} PEs overflow, "
            f"{format_size(total)} in all of {format_size(have)}")


def check_request(topology, run: Run, system_pes: list) -> None:
    """The request's last decode step (`Run.request_end`) within every PE's HBM slice, as
    the step is (`Layout.check`): its cache grows by a position a sequence each decode step
    (DoesNotFit naming `new_tokens`)."""
    end = run.request_end
    if end is run:
        return
    try:
        Layout(topology, end).check(system_pes)
    except DoesNotFit as exc:
        raise DoesNotFit(f"new_tokens = {run.new_tokens}: {exc}") from None


def _in_units(grid, n: int, members: list, unit: int) -> dict:
    """`coll.layout` of `n` over `members` in whole `unit`s (a scaled weight's blocks of K;
    `n` a multiple of `unit`, as `Run` checks)."""
    if unit == 1:
        return coll.layout(grid, n, members)
    return {pid: (s * unit, c * unit)
            for pid, (s, c) in coll.layout(grid, n // unit, members).items()}


class DoesNotFit(ValueError):
    """The model does not fit the topology's HBM (a ValueError: the run's parameters')."""


#: The largest batch `largest` searches to (a search needs an end; no PE holds this many).
MAX_BATCH = 1 << 24
#: The most positions `largest` searches for a `dynamic` RoPE model's context, which
#: `max_position_embeddings` does not end (a sliding-window model's HBM does not either)
MAX_CONTEXT = 1 << 24


def _check_positions(p, rope: Rope) -> None:
    """Refuse a run whose last token sits past the model's positions: a step at context c
    after a prompt of n tokens, the last of `steps`, computes the token at position c + n +
    steps - 1, and a config's `max_position_embeddings` m holds positions 0 to m - 1
    (with yarn, as many as it extends to, `Rope.end`; `dynamic` RoPE has no such end: it
    scales past m, as transformers does). The key
    named is the one that alone would not fit: `steps` or `prompt` if they already reach
    past m at context 0, else `context`. With a prompt, the request figure's `new_tokens`
    (the first from the prefill, then a decode step each, the last feeding position c + n
    + new_tokens - 2) must fit too. With `dynamic` RoPE a prompt must end within the
    positions: transformers rotates a forward pass's tokens at one base, its last
    position's, which past m is scaled for tokens before it too; kernbench rotates each
    token at its own, as a decode step does (the same below m)."""
    last, most = p["context"] + p["prompt"] + p["steps"] - 1, rope.end
    if rope.kind == "dynamic":
        if p["prompt"] and p["context"] + p["prompt"] > most:
            raise ValueError(
                f"prompt = {p['prompt']}: with dynamic RoPE, a prompt past the model's "
                f"positions (max_position_embeddings {most:,}) is rotated by transformers at "
                "one scaled base a forward pass, which kernbench does not model (it rotates "
                "each token at its own, as decode steps are, which match transformers); "
                f"the prompt must end by position {most - 1:,}: "
                + (f"at most {most:,} tokens" if p["prompt"] > most else
                   f"context at most {most - p['prompt']:,} here"))
        return
    request = p["context"] + p["prompt"] + p["new_tokens"] - 2  # the last token it feeds
    if p["prompt"] and last < most <= request:  # the request figure's decode steps
        raise ValueError(f"new_tokens = {p['new_tokens']}: the request's last token sits "
                         f"at position {request:,}, past the model's positions "
                         f"({rope.end_named}); at most "
                         f"{most + 1 - p['context'] - p['prompt']:,} new tokens here")
    if last < most:
        return
    where = (f"the last token's position, {last:,}, is past the model's positions "
             f"({rope.end_named})")
    for name, alone in (("steps", 1), ("prompt", 0)):
        if p[name] > alone and p["prompt"] + p["steps"] > most:
            raise ValueError(f"{name} = {p[name]}: {where}")
    raise ValueError(f"context = {p['context']}: {where}; the largest context here is "
                     f"{limit_of(p, 'context'):,}")


def limit_of(p, name: str) -> int:
    """The most `largest` searches to: for "context", the model's max_position_embeddings
    less the prompt and the steps (the last step's token sits at position context +
    prompt + steps - 1) or, with a prompt, the request's new tokens if more (its last
    feeds position context + prompt + new_tokens - 2), as `_check_positions` has it;
    `dynamic` RoPE, which scales past them, from `MAX_CONTEXT` (with a prompt, the
    positions less the prompt, as `_check_positions` has it); for "batch",
    `MAX_BATCH`. A model whose every layer has a sliding window needs no more HBM past
    its window, so its context is bounded by its positions alone."""
    if name == "context":
        rope = model_config(p).rope
        if rope.kind == "dynamic" and p["prompt"]:  # a prompt ends within the positions
            return max(0, rope.max_positions - p["prompt"])
        most = MAX_CONTEXT if rope.kind == "dynamic" else rope.end
        after = max(p["steps"], p["new_tokens"] - 1) if p["prompt"] else p["steps"]
        return max(0, most - p["prompt"] - after)
    return MAX_BATCH


def largest(topology, p, name: str) -> int:
    """The largest value of parameter `name` ("batch" or "context") at which the model
    fits every PE's HBM slice, the other parameters as in `p`, up to `limit_of`; 0 if not
    even the least does. A batch is a whole number of `p`'s micro-batches (their rows size
    the buffers a PE holds, so how the batch splits changes what fits). Found by placing
    the model (a `Layout`, shapes only): a first guess from two placements (what a PE needs
    grows about linearly in both), then placements a step apart, the step doubling, until
    one fits and the next does not, and halving the gap between them."""
    unit = p["microbatches"] if name == "batch" else 1  # values below count micro-batches
    low, step = (1, 8) if name == "batch" else (0, 1024)
    limit = limit_of(p, name) // unit
    slice_bytes = topology.hbm.slice_size

    def needs(value: int) -> list[int] | None:
        try:
            run = run_of(topology, {**p, name: value * unit})
            lays = [Layout(topology, at) for at in dict.fromkeys((run, run.request_end))]
        except DoesNotFit:
            return None
        return [max(sum(lay.need(pid).values()) for lay in lays)
                for pid in range(topology.num_pes)]

    def fits(value: int) -> bool:
        got = needs(value)
        return got is not None and max(got) <= slice_bytes

    return unit * _search(needs, fits, low, step, limit, slice_bytes)


def _search(needs, fits, low: int, step: int, limit: int, slice_bytes: int) -> int:
    """`largest`'s search over [low, limit] (`needs`: what each PE needs at a value)."""
    if limit <= low:
        return limit if fits(limit) else 0
    first = needs(low)
    if first is None or max(first) > slice_bytes:
        return 0
    if fits(limit):
        return limit
    # the answer is in [low, limit): a guess on the line through two placements
    second = needs(min(low + step, limit))
    if second is None:
        return _settle(fits, low, min(low + step, limit))
    grows = [(a, b - a) for a, b in zip(first, second, strict=True) if b > a]
    guess = low + min(((slice_bytes - a) * step // d for a, d in grows), default=0)
    guess = min(max(low, guess), limit - 1)
    if fits(guess):
        bad, jump = guess + 1, 1
        while fits(bad):
            guess, bad, jump = bad, min(limit, bad + 2 * jump), 2 * jump
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


def model_name(cfg: ModelConfig) -> str:
    return cfg.name if cfg.name in SHIPPED else f"the model of {cfg.name}"


def gather_algo(grid, group, algo):
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


def weights(host, run: Run) -> dict:
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
    if run.prompt:  # the prompt's tokens, embedded, before the decode step's
        w["prompt_embeds"] = host.random("prompt_embeds", (run.batch, run.prompt, hidden), dt)
    w["inputs_embeds"] = host.random(  # teacher-forced: each step's input given
        "inputs_embeds", (run.batch, hidden) if run.steps == 1 else
        (run.batch, run.steps, hidden), dt)
    return w


#: The projections whose weights `-p weights` narrows (HF's names, in a layer).
PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def as_stored(run: Run, inputs: dict) -> tuple[dict, Callable | None]:
    """The model as the kernel holds it: `inputs` (Hugging Face's names) with each layer's
    projection weights in the `weights` format and its cache in the `kv` format, each
    read back as the GEMM array takes it (dequantised to bf16), and how a new K or V row
    is cached (None: in dtype). A scaled format's blocks run along each weight's `in`
    axis and each cached row."""
    if not run.weights and not run.kv:
        return inputs, None
    held = dict(inputs)

    def stored(fmt: str) -> Callable:
        return lambda a: rounded(rounded(np.asarray(a, np.float32), dtype_of(fmt)), BF16)

    for i in range(run.timed):
        pre = f"model.layers.{i}."
        if run.weights:
            for name in PROJECTIONS:
                held[pre + name + ".weight"] = stored(run.weights)(inputs[pre + name + ".weight"])
        if run.kv and run.context:
            for x in ("key", "value"):
                held[f"{pre}past_{x}"] = stored(run.kv)(inputs[f"{pre}past_{x}"])
    return held, stored(run.kv) if run.kv else None


class Maker:
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
        if piece.dtype in NARROW:  # quantised as placed; a weight as [N, K]
            if piece.kind == "weights":
                value = value.T
            return host.place(name, np.ascontiguousarray(value, np.float32), pid, align=page,
                              dtype=piece.dtype)
        return host.place(name, np.ascontiguousarray(value, dtype_of_piece(host, piece.dtype)), pid,
                          align=page)

    def value(self, piece: Piece, i: int | None) -> np.ndarray:
        w, cfg, plan = self.w, self.run.cfg, self.plan
        pre = f"model.layers.{i}."
        g, d, h = cfg.group, cfg.head_dim, plan["head"]
        c0, c1 = plan["qkv_cols"]
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
        lo + s0 .. of every sequence, [b, sn, d]; the rows of the prompt and the new token
        are the kernel's."""
        lo, s0, sn = self.plan["seq"][self.run.cfg.window(i)]
        full = self.w[f"model.layers.{i}.past_{'key' if piece.key == 'k' else 'value'}"]
        shard = np.zeros(piece.shape, full.dtype)
        first = lo + s0  # the first position this shard holds
        past = min(sn, max(0, self.run.context - first))  # of them, already in the cache
        if past:
            shard[:, :past] = full[:, self.plan["head"], first:first + past]
        return shard


def dtype_of_piece(host, name: str) -> np.dtype:
    return np.dtype(np.float32) if name == "f32" else host.inputs["inputs_embeds"].dtype
