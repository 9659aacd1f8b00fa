"""Named regions (`tl.region`): where a run's time went, by the kernel's own names.

A region is a path of names ("layer0/attn"); a command belongs to the innermost
region open when it was issued, and counts for that region and each one around
it. Per region:

- `path_ps`: the time the critical path spends on the region's commands (a tile
  operation counts for its composite, PE_CPU's issue of a command for that
  command). Top-level regions and the time outside any region sum to the
  latency exactly, as the critical path tiles it.
- `by_engine`: that time by engine (the critical path's split).
- `span_ps`: the time some PE was in the region: the union over PEs of each
  stretch of its commands, from the stretch's first issue to its last end.
- `commands`: its commands, over every PE.
- `energy_aj`: the dynamic energy of every action its commands issued (`sim.energy`:
  a composite's tile transfers count for it, a receive's copies out of ring slots for
  the receive); with the time outside any region's, the run's dynamic energy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernbench_cli.sim.critical import CriticalPath
from kernbench_cli.stream import CYCLES, OUTSIDE, Program


@dataclass(frozen=True)
class Region:
    name: str
    path_ps: int
    by_engine: dict[str, int] = field(default_factory=dict)
    span_ps: int = 0
    commands: int = 0
    energy_aj: int = 0


def _around(names: list[str]) -> list[list[int]]:
    """Per region name, every region a command in it belongs to: itself and each named
    path around it (`a` and `a/b` around `a/b/c`), by index in `names`; none for the
    unnamed (index 0). Linear in the names' length (each against every other name was
    quadratic: minutes for 20,000 names)."""
    at: dict[str, list[int]] = {}
    for j, name in enumerate(names):
        if name:
            at.setdefault(name, []).append(j)

    def of(name: str) -> list[int]:
        paths = [name[:i] for i, c in enumerate(name) if c == "/"] + [name]
        return sorted(j for path in paths for j in at.get(path, ()))
    return [of(name) if name else [] for name in names]


def regions(program: Program, path: CriticalPath | None,
            stretches: list[tuple[int, str, int, int]],
            energy_aj: list[int] | None = None) -> list[Region]:
    """The regions of a run, in the order first entered, with the time outside them last;
    empty when the kernel names none. `stretches` are the run's `spans`, `energy_aj` each
    region's own commands' dynamic energy (`sim.energy.by_region`)."""
    if len(program.regions) == 1:
        return []
    names = program.regions
    around = _around(names)
    path_ps = [0] * len(names)
    by_engine: list[dict[str, int]] = [{} for _ in names]
    of = {pid: program.region_of(pid) for pid in range(len(program.streams))
          if program.region_marks[pid]}
    if path is not None:
        for step in path.steps:
            marks = of.get(step.pid)
            leaf = marks[step.command] if marks and 0 <= step.command < len(marks) else 0
            ps = step.end_ps - step.start_ps
            for j in around[leaf] or [0]:
                path_ps[j] += ps
                by_engine[j][step.engine] = by_engine[j].get(step.engine, 0) + ps
    count = [0] * len(names)
    for pid, stream in enumerate(program.streams):
        for leaf in of.get(pid, ()):
            for j in around[leaf]:
                count[j] += 1
        count[0] += len(stream.op) if pid not in of else sum(1 for r in of[pid] if not r)
    busy = _union(stretches)
    energy = [0] * len(names)
    for leaf, aj in enumerate(energy_aj or ()):
        for j in around[leaf] or [0]:
            energy[j] += aj
    out = [Region(name, path_ps[j], _sorted(by_engine[j]), busy.get(name, 0), count[j],
                  energy[j]) for j, name in enumerate(names) if j]
    out.append(Region(OUTSIDE, path_ps[0], _sorted(by_engine[0]), 0, count[0], energy[0]))
    return out


def _union(stretches: list[tuple[int, str, int, int]]) -> dict[str, int]:
    """Per region, the time some PE was in one of its stretches (their union's length)."""
    by: dict[str, list[tuple[int, int]]] = {}
    for _, name, start, end in stretches:
        by.setdefault(name, []).append((start, end))
    out = {}
    for name, spans_ in by.items():
        total, reach = 0, -1
        for start, end in sorted(spans_):
            if end > reach:
                total += end - max(start, reach)
                reach = end
        out[name] = total
    return out


def _sorted(ps: dict[str, int]) -> dict[str, int]:
    return dict(sorted(ps.items(), key=lambda kv: (-kv[1], kv[0])))


def _stretch(proc, ops, first: int, end: int) -> tuple[int, int]:
    """When commands `first` to `end` of a PE ran: from the earliest issue (a `tl.cycles`,
    whose issue is PE_CPU's work, from its start) to the latest end (PE_CPU's own
    commands, which make no result, at their issue: a stretch of `tl.cycles` alone ended
    at 0 before, a negative span)."""
    issued = proc.issue[first:end]
    lo = min(issued)
    if CYCLES in ops[first:end]:
        lo = min(lo, *(proc.start[i] for i in range(first, end) if ops[i] == CYCLES))
    return lo, max(max(proc.end[first:end]), max(issued))


def spans(program: Program, timing) -> list[tuple[int, str, int, int]]:
    """(pid, region path, start, end) of each stretch of a PE's commands in a region (each
    level of a nested one): from the earliest issue of its commands to their latest end
    (`_stretch`), in the order the stretches begin."""
    out = []
    for pid, marks in enumerate(program.region_marks):
        if not marks:
            continue
        proc, ops = timing.procs[pid], program.streams[pid].op
        n = len(ops)
        open_: dict[str, list[int]] = {}  # path -> [start, end] of its stretch so far
        for k, (first, leaf) in enumerate(marks):
            end = marks[k + 1][0] if k + 1 < len(marks) else n
            name = program.regions[leaf]
            paths = [name[:i] for i in range(len(name) + 1) if name and (
                i == len(name) or name[i] == "/")]
            for path in [p for p in open_ if p not in paths]:  # stretches that ended
                start, stop = open_.pop(path)
                out.append((pid, path, start, stop))
            if first == end:
                continue
            lo, hi = _stretch(proc, ops, first, end)
            for path in paths:
                got = open_.setdefault(path, [lo, hi])
                got[0], got[1] = min(got[0], lo), max(got[1], hi)
        out += [(pid, path, start, stop) for path, (start, stop) in open_.items()]
    return sorted(out, key=lambda s: (s[2], s[0], s[1]))
