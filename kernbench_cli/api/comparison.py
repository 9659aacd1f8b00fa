"""`kb.compare`: runs side by side, each metric's value per run and its change against the
first (`kernbench compare`, `report.compare`)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernbench_cli.api import arguments as args
from kernbench_cli.api.result import MADE, ReadOnly, Result, sealed
from kernbench_cli.api.sweeps import SweepResult
from kernbench_cli.errors import ArgumentError, KernbenchError, clip
from kernbench_cli.fileio import parse_json

Run = Result | SweepResult | Mapping[str, Any] | str | Path


@dataclass(frozen=True)
class Comparison:
    """Runs side by side: `runs` are their labels; `metrics[name]` each run's value of a
    metric (the latency, each metric the kernel states as ``metrics.NAME``, each engine's
    mean busy time and utilisation, bound by, verified, invariants held; None where a run
    has no such engine or metric) and `delta_pct[name]` its change
    against the first run in percent (None where not a number). `to_dict()` is what
    `kernbench compare --json` prints."""

    runs: tuple[str, ...]
    metrics: Mapping[str, tuple[Any, ...]]
    delta_pct: Mapping[str, tuple[float | None, ...]]
    #: per run, the settings that differ between the runs (`report.compare.changed`)
    changed: tuple[Mapping[str, str], ...] = ()
    _json: str = field(default="[]", repr=False)
    _made: Any = field(default=None, repr=False, compare=False)  # `api.result.sealed`

    def __post_init__(self) -> None:
        sealed(self, "kb.compare")

    def __reduce__(self) -> tuple:
        """Pickled and deep-copied as plain data (`Result.__reduce__`)."""
        return _comparison, (self.runs, {k: list(v) for k, v in self.metrics.items()},
                             {k: list(v) for k, v in self.delta_pct.items()},
                             [dict(c) for c in self.changed], self._json)

    def __copy__(self) -> Comparison:
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"runs": list(self.runs), "changed": [dict(c) for c in self.changed],
                "metrics": {name: {"values": list(values), "delta_pct": list(self.delta_pct[name])}
                            for name, values in self.metrics.items()}}

    def pairs(self) -> list[tuple[str, dict[str, Any]]]:
        """The runs compared, as (label, `run --json` object): what `report.compare` reads."""
        return [(label, run) for label, run in json.loads(self._json)]

    def table(self) -> list[dict[str, Any]]:
        """One record per metric and run: ``metric``, ``run`` (its label), ``value``,
        ``delta_pct``: the tidy form (pivot it for the CLI's table)."""
        return [{"metric": name, "run": label, "value": value, "delta_pct": delta}
                for name, values in self.metrics.items()
                for label, value, delta in zip(self.runs, values, self.delta_pct[name],
                                               strict=True)]

    def to_pandas(self):
        """`table()` as a pandas DataFrame. Needs pandas, which kernbench does not install
        (`PandasMissing`, an ImportError, says so)."""
        from kernbench_cli.api.tables import frame

        return frame(self.table(), ("metric", "run", "value", "delta_pct"))


def compare(*runs: Run, labels: Sequence[str] | None = None) -> Comparison:
    """Compare at least two runs: each a `Result`, a `run --json` object (a dict), a
    `SweepResult` (each of its points), or a file (`run --json` output or a sweep's
    ``.jsonl``, as `kernbench compare` reads it). A result is labelled by its position and
    its ``set`` overrides, a sweep's point by its index and axes, a file's run as the CLI
    labels it; `labels` gives your own, one per run compared."""
    from kernbench_cli.report.compare import changed, deltas, enough, metrics, settings

    labels = args.strings(labels, "labels", "None or a list of labels (strings)")
    found = enough([one for n, run in enumerate(runs) for one in _runs_of(run, n)])
    if labels is not None:
        if len(labels) != len(found):
            raise ArgumentError(f"labels: {len(found)} runs to compare need {len(found)} "
                                f"labels (strings); got {clip(list(labels))}")
        found = [(label, run, axes) for label, (_, run, axes) in zip(labels, found,
                                                                      strict=True)]
    pairs = [(label, run) for label, run, _ in found]
    table = metrics(pairs)
    changes = changed([label for label, _ in pairs],
                      [settings(run, axes) for _, run, axes in found])
    return _comparison([label for label, _ in pairs], table,
                       {k: deltas(v) for k, v in table.items()}, changes, json.dumps(pairs))


def _comparison(runs, table, delta, changes, text: str) -> Comparison:
    """The `Comparison` of these labels, metrics, deltas and changes, read-only."""
    return Comparison(tuple(runs), ReadOnly({k: tuple(v) for k, v in table.items()}),
                      ReadOnly({k: tuple(v) for k, v in delta.items()}),
                      tuple(ReadOnly(c) for c in changes), text, MADE)


def _runs_of(run: Run, n: int) -> list[tuple[str, dict[str, Any], Mapping[str, Any] | None]]:
    """(label, run --json object, a sweep point's axes or None) of each run in one argument
    of `compare` (the `n`-th)."""
    from kernbench_cli.report.compare import checked, load_file

    if isinstance(run, Result):
        return [(" ".join([f"#{n}", *run.overrides]), run.to_dict(), None)]
    if isinstance(run, SweepResult):
        out = []
        for point in run.points:
            if point.result is None:
                raise KernbenchError(f"sweep point {point.index}: no run result (a failed "
                                     "point, or one resumed from a .csv file)")
            axes = " ".join(f"{k}={v}" for k, v in point.axes.items())
            out.append((f"#{point.index} {axes}".rstrip(), point.result.to_dict(), point.axes))
        return out
    if isinstance(run, Mapping):
        if "latency_ps" not in run:
            raise ArgumentError(f"run {n}: not a `run --json` object (no latency_ps)")
        try:
            text = json.dumps(dict(run))
        except (TypeError, ValueError, RecursionError) as exc:
            raise ArgumentError(f"run {n}: not JSON data ({exc})") from None
        try:  # numbers as a file holds them: no NaN or Infinity
            data = parse_json(text, f"run {n}")
        except KernbenchError as exc:
            raise ArgumentError(str(exc)) from None
        return [(f"#{n}", checked(data, f"run {n}"), None)]
    if isinstance(run, str | os.PathLike):
        return load_file(args.path(run, f"run {n}", required=True))
    raise ArgumentError(f"run {n}: expected a Result, SweepResult, `run --json` dict or a "
                        f"file; got {type(run).__name__}")
