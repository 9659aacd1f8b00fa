"""Sensitivity by replay (`kb.sensitivity`, `kernbench run --sensitivity`): what each
configuration key is worth to this run, measured, not guessed.

After a run, its recorded command streams are re-timed with one key made
2x better at a time (a bandwidth, a count or a size doubled; a latency, a
setup or the issue costs halved): every key the timing pass reads and the
functional pass does not, so a replay gives exactly what ``kernbench run
--set KEY=VALUE`` would (the tests check it key by key). Link levels and
engines the run did not use are left out (no change is possible there), and so are
the IPCQ rings' keys where the kernel read their capacity (`tl.ring_capacity`: the
collectives cut their messages by it, so a replay on other rings is refused). The
rows are ranked by the latency saved, each with what then bounds the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kernbench_cli.api.result import Result
from kernbench_cli.errors import KernbenchError
from kernbench_cli.lang.watchdog import holds_caller_timer

#: (key, how it gets 2x better: "x2" doubles it, "/2" halves it, the engine or link level
#: that must have been used for it to matter, or None). `costs.issue.*` is one group.
KEYS: tuple[tuple[str, str, str | None], ...] = (
    ("hbm.bandwidth", "x2", "hbm"), ("hbm.latency", "/2", "hbm"),
    ("pe.gemm.rows", "x2", "gemm"), ("pe.gemm.cols", "x2", "gemm"),
    ("pe.math.lanes", "x2", "math"), ("pe.clock", "x2", None),
    ("costs.issue.*", "/2", None), ("pe.dma.setup", "/2", "dma"),
    ("pe.dma.outstanding", "x2", "dma"),
    ("noc.bandwidth", "x2", "noc"), ("noc.latency", "/2", "noc"),
    ("ucie.bandwidth", "x2", "ucie"), ("ucie.latency", "/2", "ucie"),
    ("sip_link.bandwidth", "x2", "sip_link"), ("sip_link.latency", "/2", "sip_link"),
    ("rack_link.bandwidth", "x2", "rack_link"), ("rack_link.latency", "/2", "rack_link"),
    ("pe.ipcq.slots", "x2", "ipcq"), ("pe.ipcq.slot_size", "x2", "ipcq"),
    ("sram.bandwidth", "x2", "sram"),
)


@dataclass(frozen=True)
class Change:
    """One key made 2x better: its `items` (``KEY=VALUE`` as `--set` takes them), the
    latency of the run re-timed under them, its change against the run, what bounds it."""

    key: str
    items: tuple[str, ...]
    latency_ps: int
    saved_ps: int  # the run's latency less this one (negative: slower)
    change: float  # -saved / the run's latency
    bound: str


@dataclass(frozen=True)
class Sensitivity:
    """The run's latency and one `Change` per key, the largest saving first."""

    latency_ps: int
    changes: tuple[Change, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"latency_ps": self.latency_ps,
                "changes": [{"key": c.key, "set": list(c.items), "latency_ps": c.latency_ps,
                             "saved_ps": c.saved_ps, "change": round(c.change, 6),
                             "bound": c.bound}
                            for c in self.changes]}


@holds_caller_timer
def sensitivity(result: Result, keys: tuple[str, ...] | None = None) -> Sensitivity:
    """Re-time `result` (a result of `kb.run` or `kb.replay` that holds its recording) with
    each of `keys` (default: every `KEYS` entry the run used) made 2x better."""
    from kernbench_cli.api import arguments as args
    from kernbench_cli.api.runs import replay

    args.one_of(result, "result", (Result,), "a Result of kb.run or kb.replay")
    keys = args.strings(keys, "keys", "None or a tuple of keys, such as ('hbm.bandwidth',)")
    topology = result.address_map.topology if result.address_map is not None else None
    if topology is None:
        raise KernbenchError(f"{result.kernel}: sensitivity needs a result of kb.run or "
                             "kb.replay (this one holds no recording)")
    used = {name for name, engine in result.engines.items() if engine.ops}
    trace = getattr(result.raw, "trace", None)
    if trace is not None and trace.program.ring_capacity is not None:
        used.discard("ipcq")  # its kernel cut its messages for the rings: a replay cannot say
    chosen = [k for k in KEYS if (keys is None and (k[2] is None or k[2] in used))
              or (keys is not None and k[0] in keys)]
    unknown = set(keys or ()) - {k[0] for k in KEYS}
    if unknown:
        raise KernbenchError(f"sensitivity: no such key {sorted(unknown)[0]!r} (keys: "
                             f"{', '.join(k[0] for k in KEYS)})")
    base = result.latency_ps
    changes = []
    for key, how, _ in chosen:
        items = tuple(better(topology, key, how))
        if not items:
            continue  # nothing to make better (a latency of 0)
        again = replay(result, set=list(items), check=False)  # after the run's own --set
        saved = base - again.latency_ps
        changes.append(Change(key, items, again.latency_ps, saved,
                              -saved / base if base else 0.0,
                              again.bound.engine or again.bound.by))
    changes.sort(key=lambda c: (c.latency_ps, c.key))
    return Sensitivity(base, tuple(changes))


def better(topology, key: str, how: str) -> list[str]:
    """The plain `--set` items making `key` of `topology` 2x better (`config.loader`'s
    ``KEY=x2`` or ``=x0.5``, resolved); none when that is no change or not a whole number of
    the key's unit (an odd number of picoseconds halved)."""
    from kernbench_cli.config.loader import resolve_relative
    from kernbench_cli.errors import ConfigError

    try:
        items = resolve_relative(topology, f"{key}={'x2' if how == 'x2' else 'x0.5'}")
    except ConfigError:
        return []
    return [] if all(_unchanged(topology, item) for item in items) else items


def _unchanged(topology, item: str) -> bool:
    """Whether `item` sets its key to what `topology` has already (a latency of 0 halved)."""
    from kernbench_cli.config.loader import resolve_relative

    key, _, _ = item.partition("=")
    return resolve_relative(topology, f"{key}=x1") == [item]
