"""Regenerate or check the goldens.

`regen` runs every case (or those matching a pattern), compares each result
with its golden, and with `write` replaces the files that changed, adds the
missing ones and deletes goldens no case produces; without `write` it only
reports. Either way it returns every difference, so `check` is regen that
writes nothing.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernbench_cli.fileio import atomic_write, check_outputs, written_together
from kernbench_cli.golden import record as rec
from kernbench_cli.golden.cases import CASES, Case


@dataclass(frozen=True)
class Difference:
    case: str
    field: str
    old: Any
    new: Any

    @property
    def delta_pct(self) -> float | None:
        if isinstance(self.old, int | float) and isinstance(self.new, int | float) \
                and not isinstance(self.old, bool) and self.old:
            return (self.new - self.old) / abs(self.old) * 100
        return None


def select(pattern: str | None) -> list[Case]:
    return [c for c in CASES if pattern is None or fnmatch.fnmatch(c.name, pattern)]


def run_case(case: Case, costs: Path | None = None, sets: Sequence[str] = (),
             watch: Any = None, dedup: bool = True) -> dict[str, Any]:
    """The golden record of `case` (`watch`, a `sim.watch.Watch`, follows its progress;
    `dedup`: as `run_kernel`'s)."""
    return rec.make_record(case.name, case_result(case, costs, sets, watch, dedup))


def case_result(case: Case, costs: Path | None = None, sets: Sequence[str] = (),
                watch: Any = None, dedup: bool = True):
    """The `RunResult` of golden case `case`, with its op log and races."""
    from kernbench_cli.address import load_address_map
    from kernbench_cli.sim.kernels import load_kernel, parse_params
    from kernbench_cli.sim.run import run_kernel

    kernel = load_kernel(case.kernel)
    amap = load_address_map(case.topology, costs, sets)
    params = parse_params(kernel, list(case.params), amap.topology.num_pes)
    return run_kernel(kernel, amap, params, seed=case.seed, oplog=True, races=True,
                      watch=watch, dedup=dedup)


def regen(directory: Path, pattern: str | None, write: bool,
          progress: Callable[[str], Any] = lambda _: contextlib.nullcontext(),
          costs: Path | None = None, sets: Sequence[str] = (),
          dedup: bool = True) -> list[Difference]:
    """Run the cases matching `pattern`, each inside ``progress(case name)`` (a context
    manager, which gives the `Watch` that follows the case, or None); write the goldens
    that changed to `directory` if `write`, once every case has run (one interrupted or
    failed writes none: the folder is never part one configuration's, part another's);
    every difference (`dedup`: as `run_kernel`'s)."""
    cases = select(pattern)
    olds = {}
    for case in cases:  # read (and so check) every golden before running anything:
        path = directory / f"{case.name}.json"  # something there that is no file is refused
        olds[case.name] = rec.load(path) if os.path.lexists(path) else None
    if write:  # and where they go: not after hours of cases, some goldens written
        goldens = {f"golden regen {directory / c.name}.json": directory / f"{c.name}.json"
                   for c in cases}
        check_outputs(goldens, rewrites=tuple(goldens))
    differences: list[Difference] = []
    changed: dict[str, str] = {}  # case -> its new golden's text
    for case in cases:
        with progress(case.name) as watch:
            new = run_case(case, costs, sets, watch, dedup)
        old = olds[case.name]
        if old is None:
            differences.append(Difference(case.name, "(file)", None, "new"))
        else:
            differences += [Difference(case.name, f, a, b) for f, a, b in rec.diff(old, new)]
        if write and (old is None or rec.diff(old, new)):
            changed[case.name] = rec.dumps(new)
    with written_together():  # a full disk at the third: none moves
        for name, text in changed.items():
            atomic_write(directory / f"{name}.json", lambda out, t=text: out.write(
                t.encode()), "golden regen", rewrites_input=True)  # the golden it replaces
    known = {c.name for c in CASES}
    for path in sorted(directory.glob("*.json")):
        name = path.stem
        if name not in known and (pattern is None or fnmatch.fnmatch(name, pattern)):
            try:
                rec.load(path)
            except rec.GoldenError:  # some other JSON file: not ours to judge or remove
                continue
            differences.append(Difference(name, "(file)", "present", "no such case"))
            if write:
                path.unlink()
    return differences
