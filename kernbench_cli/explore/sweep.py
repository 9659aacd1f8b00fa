"""Sweeps: many runs of one kernel over axes of `--set` keys and kernel parameters.

An axis is a `--set KEY=V1,V2,…` or `-p NAME=V1,V2,…` with more than one
value (commas inside brackets or quotes do not split: `pe_mesh=[4,2],[8,1]`
is two values). The points are the cartesian product of the axes, the first
axis slowest (or, with `zip`, the axes side by side). Each point is a full
`run` in a worker process; its row holds the axes' values and the run's
`--json` object, or the error that stopped it.

Rows are written to the results file (`.jsonl` or `.csv`) in point order, a
row only once its point is done, each line flushed: the file is valid after
an interrupt, and `resume` skips the points already in it. A point whose
worker process dies (killed, out of memory) is run once more, alone in a new
worker, then recorded as failed with the reason; a kernel, verification or
configuration error is that point's row, not the end of the sweep.
"""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import json
import math
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from kernbench_cli.errors import KernbenchError, OutputError, ParamError, clip
from kernbench_cli.fileio import (
    atomic_write,
    may_be_json_object,
    owner_access,
    parse_json,
    read_input,
)
from kernbench_cli.lang.watchdog import STOP_SIGNALS


@dataclass(frozen=True)
class Point:
    """One run of a sweep: its index and the `--set` and `-p` items that make it."""

    index: int
    sets: tuple[str, ...]
    params: tuple[str, ...]

    @property
    def axes(self) -> dict[str, str]:
        """KEY -> value of every item (fixed ones too), as given."""
        return dict(item.split("=", 1) for item in (*self.sets, *self.params))

    @property
    def key(self) -> str:
        return json.dumps(self.axes, sort_keys=True)


@dataclass
class Spec:
    """What every point shares."""

    kernel: str
    topology: str | None = None
    costs: str | None = None
    seed: int = 0
    timing_only: bool = False
    trace: str | None = None  # replay this recording at every point instead of running
    #: the files the points' parameters name (a model's config)
    read: tuple[str, ...] = ()
    #: `fingerprint` of the files the points read, as the sweep began: each point checks,
    #: once it has run, that they are still those ("": not checked)
    begun: str = ""
    recorded: bool = False  # `trace` is the sweep's own recording of its points


def axis_number(text: str) -> tuple[int | float | None, str | None]:
    """An axis value as a number and its unit: a unit string in its kind's stored unit
    (``"102.4GB/s"`` -> 102400000000 ``"B/s"``, ``"30ns"`` -> 30000 ``"ps"``), a TOML
    number as it is (unit ``""``), a factor ``"x0.5"`` as 0.5 (unit ``"x"``); (None, None)
    for anything else (a name, a boolean, an array)."""
    from kernbench_cli.config.loader import read_set_value
    from kernbench_cli.config.units import quantity

    value = read_set_value(text)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (value, "") if math.isfinite(value) else (None, None)
    if isinstance(value, str):
        if value.startswith("x"):
            factor = read_set_value(value[1:])
            if isinstance(factor, int | float) and not isinstance(factor, bool) \
                    and math.isfinite(factor):
                return factor, "x"
        found = quantity(value)
        if found is not None:
            return found
    return None, None


def numbered(row: dict[str, Any]) -> dict[str, Any]:
    """`row` with ``axis_numbers`` and ``axis_units``: each axis value as `axis_number` reads
    it (its ``axes`` stay the text given)."""
    pairs = {key: axis_number(str(text)) for key, text in row["axes"].items()}
    return {**row, "axis_numbers": {k: n for k, (n, _) in pairs.items()},
            "axis_units": {k: u for k, (_, u) in pairs.items()}}


def split_values(text: str) -> list[str]:
    """`V1,V2,…` split at commas outside brackets and quotes."""
    out, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return out


#: Characters of one axis value (a number, a quantity, a TOML array, a name): past this no
#: key takes it, and rows and tables would carry it for every point.
MAX_VALUE_CHARS = 256
#: Points one sweep may have: each is a run; refused before the list of points is made.
MAX_POINTS = 100_000


def split_axes(items: Sequence[str], option: str) -> list[list[str]]:
    """Each `KEY=V1,V2,…` item's list of `KEY=value` alternatives (`option` names the items
    in errors: ``--set``, ``-p``)."""
    axes, keys = [], set()
    for item in items:
        key, sep, values = item.partition("=") if isinstance(item, str) else ("", "", "")
        if not sep or not key.strip():
            raise ParamError(f"{option} {clip(item)}: expected KEY=V1,V2,…")
        if len(key) > MAX_VALUE_CHARS:
            raise ParamError(f"{option} {clip(key)}: a key of {len(key):,} characters is no key")
        if key.strip() in keys:
            raise ParamError(f"{option} {key.strip()} is given twice; give it once, with all "
                             "its values (KEY=V1,V2,…)")
        keys.add(key.strip())
        parts = split_values(values)
        if any(not part.strip() for part in parts):
            raise ParamError(f"{option} {clip(item)}: an empty value")
        axes.append([f"{key.strip()}={part.strip()}" for part in parts])
    return axes


def points(sets: Sequence[str], params: Sequence[str], zipped: bool = False,
           pairs: Sequence[Sequence[str]] = ()) -> list[Point]:
    """The points of a sweep, in order: the product of the axes (first axis slowest), or
    with `zipped`, the i-th value of every axis together (all axes the same length); each
    group of `pairs` (axis keys) goes through its values together, crossed with the rest."""
    return combine(split_axes(sets, "--set"), split_axes(params, "-p"), zipped, pairs)


def combine(set_axes: list[list[str]], param_axes: list[list[str]],
            zipped: bool = False, pairs: Sequence[Sequence[str]] = ()) -> list[Point]:
    """The points of axes already split into their `KEY=value` alternatives (`points`)."""
    axes = set_axes + param_axes
    for option, group in (("--set", set_axes), ("-p", param_axes)):
        _check_values(group, option)
    if zipped and pairs:
        raise ParamError("--zip pairs every axis already; give it or --pair, not both")
    if zipped:
        lengths = {len(a) for a in axes if len(a) > 1}
        if len(lengths) > 1:
            raise ParamError(f"--zip needs axes of one length; got {sorted(lengths)} values")
        n = lengths.pop() if lengths else 1
        _check_count([n])
        combos: Iterator[tuple[str, ...]] = (tuple(a[i] if len(a) > 1 else a[0] for a in axes)
                                              for i in range(n))
    else:
        units = _units(axes, pairs)
        _check_count([len(axes[u[0]]) for u in units])
        combos = (_flatten(axes, units, choice)
                  for choice in itertools.product(*(range(len(axes[u[0]])) for u in units)))
    out = []
    for index, combo in enumerate(combos):
        out.append(Point(index, tuple(combo[:len(set_axes)]), tuple(combo[len(set_axes):])))
    return out


def _check_values(axes: list[list[str]], option: str) -> None:
    """ParamError naming the first value longer than `MAX_VALUE_CHARS`."""
    for axis in axes:
        for item in axis:
            key, _, value = item.partition("=")
            if len(value) > MAX_VALUE_CHARS:
                raise ParamError(f"{option} {key}={value[:24]}…: a value of {len(value):,} "
                                 f"characters; an axis value is at most {MAX_VALUE_CHARS}")


def _check_count(lengths: list[int]) -> None:
    """ParamError if axes of these lengths make more than `MAX_POINTS` points (counted, not
    made)."""
    count = 1
    for n in lengths:
        count *= n
    if count > MAX_POINTS:
        shown = " x ".join(f"{n:,}" for n in lengths if n > 1)
        raise ParamError(f"the axes make {count:,} points ({shown}); a sweep runs at most "
                         f"{MAX_POINTS:,}: fewer values, or --zip/--pair to pair axes")


def _flatten(axes: list[list[str]], units: list[list[int]], choice: tuple[int, ...]
             ) -> tuple[str, ...]:
    """The items of one point, in the axes' order: value `choice[u]` of each axis of unit
    `u`."""
    combo = [""] * len(axes)
    for unit, at in zip(units, choice, strict=True):
        for axis in unit:
            combo[axis] = axes[axis][at]
    return tuple(combo)


def _units(axes: list[list[str]], pairs: Sequence[Sequence[str]]) -> list[list[int]]:
    """The axes crossed, in order (each where its first axis is): an axis alone, or a group
    of `pairs` whose axes go through their values together (as many values each)."""
    where = {axis[0].split("=", 1)[0]: n for n, axis in enumerate(axes)}
    grouped: dict[int, list[int]] = {}
    for group in pairs:
        keys = [k.strip() for k in (group.split(",") if isinstance(group, str) else group)]
        name = ",".join(keys)
        if len(keys) < 2:
            raise ParamError(f"--pair {name}: name two axes or more (KEY,KEY,…)")
        missing = [k for k in keys if k not in where]
        if missing:
            raise ParamError(f"--pair {name}: {missing[0]} is not an axis (axes: "
                             f"{', '.join(where) or 'none'})")
        taken = [k for k in keys if where[k] in grouped or keys.count(k) > 1]
        if taken:
            raise ParamError(f"--pair {name}: {taken[0]} is in two pairs; an axis pairs once")
        lengths = [len(axes[where[k]]) for k in keys]
        if len(set(lengths)) > 1:
            counts = ", ".join(f"{k} has {n}" for k, n in zip(keys, lengths, strict=True))
            raise ParamError(f"--pair {name}: {counts} values; paired axes need as many "
                             "values each")
        unit = sorted(where[k] for k in keys)
        for axis in unit:
            grouped[axis] = unit
    return [grouped.get(n, [n]) for n in range(len(axes))
            if n not in grouped or grouped[n][0] == n]


#: What changed when a file the sweep began with is no longer that file
FILES_CHANGED = ("the kernel, topology, cost table, recording or a parameter's file changed "
                 "after the sweep began")
#: A point's error when a file the sweep began with changed before the point had run
CHANGED = (f"{FILES_CHANGED}; restore it and run the point again (with --out, --resume runs "
           "only the points not done)")


def run_point(spec: Spec, point: Point) -> dict[str, Any]:
    """The row of one point: its run's `--json` object, or the error that stopped it; an
    error (`CHANGED`) if the files the sweep began with are no longer those once it ran."""
    row: dict[str, Any] = {"point": point.index, "axes": point.axes}
    row = _replay_point(spec, point, row) if spec.trace is not None else _run(spec, point, row)
    if spec.begun and _fingerprint_now(spec) != spec.begun:
        return {**row, "error": CHANGED, "result": None}
    return row


def fingerprint(spec: Spec) -> str:
    """`identity` of the files `spec`'s points read, as they are now (the sweep's own
    recording stands for the kernel and configuration it recorded)."""
    from kernbench_cli.address import load_address_map
    from kernbench_cli.sim.kernels import load_kernel

    given = replace(spec, trace=None if spec.recorded else spec.trace)
    costs = Path(spec.costs) if spec.costs else None
    if given.trace is None:
        amap = load_address_map(given.topology, costs)
    else:
        from kernbench_cli.sim.run import replay_address_map
        from kernbench_cli.sim.trace_file import read_trace

        amap = replay_address_map(read_trace(Path(given.trace)), given.trace, given.topology,
                                  costs)
    return identity(given, load_kernel(given.kernel).digest, amap, spec.read)


def _fingerprint_now(spec: Spec) -> str | None:
    try:
        return fingerprint(spec)
    except (KernbenchError, OSError, MemoryError):  # gone, or no longer loads
        return None


def _run(spec: Spec, point: Point, row: dict[str, Any]) -> dict[str, Any]:
    from kernbench_cli.address import load_address_map
    from kernbench_cli.report.run import to_json
    from kernbench_cli.sim.kernels import load_kernel, parse_params
    from kernbench_cli.sim.run import run_kernel

    try:
        module = load_kernel(spec.kernel)
        amap = load_address_map(spec.topology, Path(spec.costs) if spec.costs else None,
                                point.sets)
        result = run_kernel(module, amap,
                            parse_params(module, list(point.params), amap.topology.num_pes,
                                         varying=module.needs.values()),  # (see `_checked`)
                            seed=spec.seed, timing_only=spec.timing_only)
    except KernbenchError as exc:
        return {**row, "error": " / ".join(exc.lines()), "result": None}
    except MemoryError:
        return {**row, "error": "the worker ran out of memory", "result": None}
    out = to_json(result)
    if result.verified is False:
        return {**row, "error": "verification failed", "result": out}
    return {**row, "error": None, "result": out}


def _replay_point(spec: Spec, point: Point, row: dict[str, Any]) -> dict[str, Any]:
    """A point of a replayed sweep: the recording re-timed with the point's `--set`s. The
    sweep's own recording (`spec.recorded`) is re-timed on the configuration it was made
    from, the spec's, as this worker resolves it (the recording names the client's
    files, which a Dask worker may not have)."""
    from kernbench_cli.address import load_address_map
    from kernbench_cli.report.run import to_json
    from kernbench_cli.sim.run import replay_address_map, replay_trace
    from kernbench_cli.sim.trace_file import read_trace

    costs = Path(spec.costs) if spec.costs else None
    try:
        trace = read_trace(Path(spec.trace))
        amap = load_address_map(spec.topology, costs, [*trace.sets, *point.sets]) \
            if spec.recorded else replay_address_map(trace, spec.trace, spec.topology, costs,
                                                     point.sets)
        result = replay_trace(trace, amap, spec.trace)
    except KernbenchError as exc:
        return {**row, "error": " / ".join(exc.lines()), "result": None}
    except MemoryError:
        return {**row, "error": "the worker ran out of memory", "result": None}
    return {**row, "error": None, "result": to_json(result), "replayed": True}


# ---------------------------------------------------------------------- analytic bounds

def bounds_row(spec: Spec, point: Point, module=None) -> dict[str, Any]:
    """The row of `point` in a bounds-only sweep: its `bounds` (the `run --bounds-only
    --json` object of the kernel's `bounds()` there), or the error; no `result` (nothing
    ran). `module`: the kernel, loaded once for every point."""
    from kernbench_cli.address import load_address_map
    from kernbench_cli.report.bounds import stated
    from kernbench_cli.sim.kernels import load_kernel

    row: dict[str, Any] = {"point": point.index, "axes": point.axes, "result": None}
    try:
        module = module or load_kernel(spec.kernel)
        amap = load_address_map(spec.topology, Path(spec.costs) if spec.costs else None,
                                point.sets)
        return {**row, "error": None, "bounds": stated(module, amap, list(point.params))}
    except KernbenchError as exc:
        return {**row, "error": " / ".join(exc.lines())}


def prune_limit(text: str) -> tuple[Fraction | None, int | None]:
    """`--prune-above`'s LIMIT: (factor, None) for ``x1.5`` (times the best point's lower
    bound, at least 1), or (None, ps) for a latency (``50us``). ParamError otherwise."""
    from kernbench_cli.config.units import parse_time_ps

    given = text.strip() if isinstance(text, str) else ""
    if given.startswith("x"):
        try:
            factor = Fraction(given[1:])
        except (ValueError, ZeroDivisionError):
            factor = None
        if factor is not None and factor >= 1:
            return factor, None
    else:
        try:
            return None, parse_time_ps(given)
        except ValueError:  # config.units.UnitError
            pass
    raise ParamError(f"--prune-above {text!r}: expected a latency (50us) or a factor of the "
                     "best point's lower bound, at least 1 (x1.5)")


def pruned(rows: list[dict[str, Any]], limit: tuple[Fraction | None, int | None]
           ) -> dict[int, dict[str, Any]]:
    """Of `rows` (`bounds_row`s), those whose lower bound is above `limit` (`prune_limit`;
    a factor is of the smallest lower bound of any row), by point, each marked ``pruned``
    with the limit in ps. A row without a lower bound (an error, no bound stated) is
    never pruned: its point runs."""
    lower = {row["point"]: row["bounds"]["lower_bound_ps"] for row in rows
             if row.get("bounds") and row["bounds"]["lower_bound_ps"] is not None}
    factor, limit_ps = limit
    if factor is not None:
        if not lower:
            return {}
        limit_ps = math.floor(factor * min(lower.values()))  # lb > f x best, lb an int
    return {row["point"]: {**row, "pruned": {"limit_ps": limit_ps}} for row in rows
            if lower.get(row["point"], -1) > limit_ps}


#: `--set` prefixes a replay re-times (or, for energy, re-counts) without a new recording.
REPLAYABLE = ("costs.", "energy.")


def cost_only(todo: list[Point]) -> bool:
    """Whether the points differ in cost-table or energy keys only (so one recording serves
    them all: neither changes a command stream)."""
    first = todo[0]
    return len(todo) > 1 and all(p.params == first.params for p in todo) and all(
        a == b or a.startswith(REPLAYABLE)
        for p in todo for a, b in zip(p.sets, first.sets, strict=True))


def record(spec: Spec, point: Point, path: Path) -> None:
    """Run `point` timing-only and write its command trace to `path` (for a replayed sweep)."""
    from kernbench_cli.address import load_address_map
    from kernbench_cli.sim.kernels import load_kernel, parse_params
    from kernbench_cli.sim.run import run_kernel
    from kernbench_cli.sim.trace_file import write_trace

    module = load_kernel(spec.kernel)
    sets = [s for s in point.sets if not s.startswith(REPLAYABLE)]
    amap = load_address_map(spec.topology, Path(spec.costs) if spec.costs else None, sets)
    params = parse_params(module, list(point.params), amap.topology.num_pes,
                          varying=module.needs.values())  # checked as the sweep began
    result = run_kernel(module, amap, params, seed=spec.seed, timing_only=True)
    write_trace(path, result.trace)


# ---------------------------------------------------------------------- results files

CSV_RESULT = ("latency_ps", "bound", "verified", "gemm_mac_utilization", "hbm_gbps",
              "energy_pj", "lower_bound_ps", "bound_gap", "pruned")


def csv_header(axis_keys: list[str], metric_keys: Sequence[str] = ()) -> list[str]:
    """The columns of a sweep's `.csv` rows: the point, its axes, the summary, then a
    ``metrics.NAME`` column per metric of the kernel's (`report.metrics.names`)."""
    from kernbench_cli.report.metrics import PREFIX

    return ["point", *axis_keys, *CSV_RESULT, "error", "sweep",
            *(PREFIX + name for name in metric_keys)]


def csv_row(row: dict[str, Any], axis_keys: list[str],
            metric_keys: Sequence[str] = ()) -> list[Any]:
    """A sweep row (`point`, `axes`, `result`, `error`, `sweep`) as `.csv` fields."""
    from kernbench_cli.report.metrics import value

    result = row["result"] or {}
    values = [row["point"], *(row["axes"].get(k, "") for k in axis_keys)]
    lower = result.get("lower_bound_ps", (row.get("bounds") or {}).get("lower_bound_ps"))
    values += [result.get("latency_ps", ""), (result.get("bound") or {}).get("engine") or "",
               result.get("verified", ""), result.get("gemm_mac_utilization", ""),
               result.get("hbm_gbps", ""), (result.get("energy_pj") or {}).get("total", ""),
               "" if lower is None else lower, _blank(result.get("bound_gap")),
               True if row.get("pruned") else "", row["error"] or "", row.get("sweep", "")]
    values += ["" if (v := value(result, name)) is None else v for name in metric_keys]
    return values


def _blank(value: Any) -> Any:
    return "" if value is None else value


def _csv_result(rec: dict[str, str], metric_keys: Sequence[str]) -> dict[str, Any] | None:
    """What a `.csv` row kept of a run's result (None: the point had none)."""
    from kernbench_cli.report.metrics import PREFIX

    if not rec["latency_ps"]:
        return None
    metrics = {name: float(rec[PREFIX + name]) for name in metric_keys if rec[PREFIX + name]}
    return {"latency_ps": int(rec["latency_ps"]), "bound": {"engine": rec["bound"] or None},
            "verified": {"True": True, "False": False}.get(rec["verified"]),
            "gemm_mac_utilization": float(rec["gemm_mac_utilization"]),
            "hbm_gbps": float(rec["hbm_gbps"]),
            **({"energy_pj": {"total": float(rec["energy_pj"])}} if rec["energy_pj"] else {}),
            **({"lower_bound_ps": int(rec["lower_bound_ps"])} if rec["lower_bound_ps"] else {}),
            **({"bound_gap": float(rec["bound_gap"])} if rec["bound_gap"] else {}),
            **({"metrics": metrics} if metrics else {})}


def _csv_kept(row: dict[str, Any]) -> dict[str, Any]:
    """What a `.csv` row is made of (`csv_row`), kept to write the file again: a run's
    summary and metrics, not its whole result."""
    result = row["result"]
    if result is not None:
        result = {k: result.get(k) for k in ("latency_ps", "verified", "gemm_mac_utilization",
                                             "hbm_gbps", "lower_bound_ps", "bound_gap",
                                             "metrics")}
        result["bound"] = {"engine": (row["result"].get("bound") or {}).get("engine")}
        if row["result"].get("energy_pj"):
            result["energy_pj"] = {"total": row["result"]["energy_pj"].get("total")}
    return {**row, "result": result}


def _csv_metric_keys(header: str, base: str) -> list[str]:
    """The metric columns of a `.csv` file's `header` line, whose first columns must be
    `base` (this sweep's, without metrics); ValueError if they are not."""
    from kernbench_cli.report.metrics import PREFIX

    given = next(csv.reader([header]))
    fixed = next(csv.reader([base]))
    extra = given[len(fixed):]
    if given[:len(fixed)] != fixed or not all(c.startswith(PREFIX) for c in extra):
        raise ValueError("not this sweep's header")
    return [c.removeprefix(PREFIX) for c in extra]


def read_results(path: Path) -> list[dict[str, Any]]:
    """The rows of a sweep's ``.jsonl`` results file, in point order (a torn last line, as
    an interrupt leaves, is dropped). A one-line `KernbenchError` for a missing file, one
    that is not a sweep's rows (naming the line), rows of two sweeps, or no rows."""
    from kernbench_cli.report.compare import MAX_RESULTS_BYTES, checked

    if path.suffix == ".csv":
        raise KernbenchError(f"{path}: a .csv keeps only the summary columns; give the "
                             "sweep's .jsonl (sweep --out FILE.jsonl)")
    def a_row_first(head: bytes) -> None:  # before gigabytes of another file are read
        if not may_be_json_object(head):
            _result_row("", f"{path}:1", checked)  # says why

    try:
        text = read_input(path, MAX_RESULTS_BYTES, "a sweep's .jsonl results file",
                          a_row_first).decode()
    except UnicodeDecodeError:
        raise KernbenchError(f"{path}: not a sweep's .jsonl results file (not text)") from None
    lines = text.splitlines()
    if lines and not text.endswith("\n"):
        lines.pop()  # torn: the write of the last row was cut off
    rows = [_result_row(line, f"{path}:{n}", checked) for n, line in enumerate(lines, 1)]
    if not rows:
        raise KernbenchError(f"{path}: no rows (an empty sweep): nothing to read")
    if len({row.get("sweep") for row in rows}) > 1:
        raise KernbenchError(f"{path}: rows of more than one sweep (their `sweep` differs); "
                             "give one sweep's file")
    if len({tuple(sorted(row["axes"])) for row in rows}) > 1:
        raise KernbenchError(f"{path}: rows with different axes; not one sweep's file")
    rows.sort(key=lambda row: row["point"])
    if len({row["point"] for row in rows}) < len(rows):
        raise KernbenchError(f"{path}: a point appears twice; not one sweep's file")
    return rows


def _result_row(line: str, where: str, checked: Callable[[dict, str], dict]) -> dict[str, Any]:
    """One line of a sweep's ``.jsonl``, checked to be a row (`point`, `axes`, `result`,
    `error`); its result, if any, a `run --json` object."""
    try:
        row = parse_json(line, where)
    except (ValueError, RecursionError):
        row = None
    if not (isinstance(row, dict) and type(row.get("point")) is int
            and isinstance(row.get("axes"), dict)
            and all(isinstance(v, str) for v in row["axes"].values())
            and isinstance(row.get("error", 0), str | None)
            and isinstance(row.get("result", 0), dict | None)):
        raise KernbenchError(f"{where}: not a row of a sweep's .jsonl results file (a row "
                             "has point, axes, result and error)")
    long = next((k for k, v in row["axes"].items()
                 if len(k) > MAX_VALUE_CHARS or len(v) > MAX_VALUE_CHARS), None)
    if long is not None:  # no sweep writes one; a table or figure of it takes minutes
        raise KernbenchError(f"{where}: axis {clip(long, 24)}: a key or value of more than "
                             f"{MAX_VALUE_CHARS} characters; not a row a sweep writes")
    if row["result"] is not None:
        if "latency_ps" not in row["result"]:
            raise KernbenchError(f"{where}: its result is not a `run --json` object")
        checked(row["result"], where)
    return row


@dataclass
class Results:
    """The results file: rows appended in point order, flushed one by one."""

    path: Path | None
    axis_keys: list[str]
    #: what the rows are results of (`identity`): every row carries it, and --resume
    #: takes only a file whose rows all do
    sweep: str = ""
    done: dict[str, dict[str, Any]] = field(default_factory=dict)  # point key -> row (resume)
    #: a .csv file's metric columns, and its rows: a row with a metric the file has no
    #: column for rewrites it whole, a column wider
    metric_keys: list[str] = field(default_factory=list)
    _rows: list[dict[str, Any]] = field(default_factory=list)
    _fresh: bool = True  # the first write replaces the file (no --resume)
    _handle: Any = None

    @property
    def csv(self) -> bool:
        return self.path is not None and self.path.suffix == ".csv"

    def load(self, points: dict[str, int]) -> None:
        """The rows already in the file, for --resume: a file of another sweep (or not of one)
        is refused untouched; a torn last line and the rows of failed and pruned points are
        dropped (the points run, or are pruned, again) and the file rewritten (whole,
        atomically) without them. Rows are then appended to it. `points` are this sweep's
        (point key -> its number): a row of another point is refused, the file untouched,
        and rows numbered otherwise (an axis given more values, or in another order) are
        renumbered, so that the file never holds one number twice."""
        if self.path is None or not self.path.is_file():
            return
        try:
            text = read_input(self.path, 2**32, "a sweep results file").decode()
        except UnicodeDecodeError:
            raise KernbenchError(f"{self.path}: not a sweep results file (not text); "
                                 "--resume needs one") from None
        if not text:  # an empty file: nothing to resume, nothing to lose; rows are
            self._fresh = False  # appended to it (it was read: not replaced as an output)
            return
        torn = not text.endswith("\n")  # an interrupted write: keep the complete lines only
        if torn:
            text = text[:text.rfind("\n") + 1]
        rows = []
        try:
            if not text.strip():  # the first row is written whole: a file without one is
                raise ValueError("no complete row")  # not what a sweep leaves
            if self.csv:
                self.metric_keys = _csv_metric_keys(text.splitlines()[0],
                                                    self._header([]).rstrip("\r\n"))
                for rec in csv.DictReader(io.StringIO(text)):
                    axes = {k: rec[k] for k in self.axis_keys}
                    rows.append({"point": int(rec["point"]), "axes": axes,
                                 "error": rec["error"] or None,
                                 "result": _csv_result(rec, self.metric_keys),
                                 "sweep": rec["sweep"], "pruned": rec["pruned"] == "True"})
            else:
                rows = [parse_json(line, f"{self.path}:{n}")
                        for n, line in enumerate(text.splitlines(), 1)]
                if not all(isinstance(r, dict) and {"axes", "error", "sweep"} <= r.keys()
                           for r in rows):
                    raise ValueError("a row without axes, error or sweep")
        except (ValueError, KeyError, TypeError, RecursionError, csv.Error):
            raise KernbenchError(f"{self.path}: not a sweep results file of these axes; "
                                 "--resume needs one") from None
        if any(row["sweep"] != self.sweep for row in rows):
            raise KernbenchError(f"{self.path}: its rows are results of another sweep (another "
                                 "kernbench version, kernel, topology, cost table, file a "
                                 "parameter names, --timing-only, seed or recording); "
                                 "--resume needs the file this sweep wrote")
        kept, moved = self._renumbered(
            [row for row in rows if row["error"] is None and not row.get("pruned")], points)
        if self.csv:
            self._rows = kept
        if torn or moved or len(kept) < len(rows):  # only once the rows are known to be ours
            lines = b"".join(self._line(row).encode() for row in kept)
            with owner_access():
                atomic_write(self.path, lambda out: out.write(self._header().encode() + lines),
                             "--out", rewrites_input=True)
        self._fresh = False

    def _renumbered(self, kept: list[dict[str, Any]], points: dict[str, int]) -> tuple:
        """(`kept` with this sweep's point numbers, whether any moved), each in `done`
        under its key; a row of no point of `points` is refused (see `load`)."""
        out = []
        for row in kept:
            key = json.dumps(row["axes"], sort_keys=True)
            if key not in points:
                axes = " ".join(f"{k}={v}" for k, v in row["axes"].items())
                raise KernbenchError(f"{self.path}: its point {row['point']} ({axes}) is not "
                                     "a point of this sweep (its axes changed since); "
                                     "--resume takes the file of these points, or write a "
                                     "new --out")
            out.append({**row, "point": points[key]})
            self.done[key] = out[-1]
        return out, any(a["point"] != b["point"] for a, b in zip(kept, out, strict=True))

    def write(self, row: dict[str, Any]) -> None:
        """Append `row`, flushed to the disk. A fresh sweep's first row replaces the file whole
        (a sweep that fails before then leaves the old file as it was), and so does, in a
        .csv, a row with a metric the file has no column for yet (the file then has the
        column, the rows before an empty cell there); a later write that fails (a full
        disk) is cut back off, so the file ends with a whole row, and is an
        `OutputError`."""
        from kernbench_cli.report.metrics import names

        if self.path is None:
            return
        wider = False
        if self.csv:
            self._rows.append(_csv_kept(row))
            new = set(names([row["result"]])) - set(self.metric_keys)
            if new:
                self.metric_keys, wider = sorted({*self.metric_keys, *new}), True
        if self._fresh or wider:  # the old file stays until the new one has its rows
            self.close()
            data = self._header().encode() + b"".join(
                self._line(r).encode() for r in (self._rows if self.csv else [row]))
            with owner_access():  # the sweep appends to it after
                atomic_write(self.path, lambda out: out.write(data), "--out",
                             rewrites_input=not self._fresh, rewrites_output=not self._fresh)
            self._fresh = False
            return
        line = self._line(row).encode()
        if self._handle is None:
            try:
                self._handle = self.path.open("ab", buffering=0)
            except OSError as exc:
                raise KernbenchError(f"--out {self.path}: {exc.strerror or exc}") from None
            if self._handle.tell() == 0:
                self._append(self._header().encode())
        self._append(line)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def _append(self, data: bytes) -> None:
        handle = self._handle  # unbuffered: a failed write has nothing left to flush
        at = handle.tell()
        try:
            view = memoryview(data)
            while view:
                view = view[handle.write(view):]
            os.fsync(handle.fileno())
        except OSError as exc:
            with contextlib.suppress(OSError):
                handle.truncate(at)
            self.close()
            raise OutputError(f"--out {self.path}: cannot write: {exc.strerror or exc} "
                              "(the rows before are kept; --resume runs the rest)") from None

    def _header(self, metric_keys: Sequence[str] | None = None) -> str:
        if not self.csv:
            return ""
        text = io.StringIO(newline="")
        csv.writer(text).writerow(csv_header(
            self.axis_keys, self.metric_keys if metric_keys is None else metric_keys))
        return text.getvalue()

    def _line(self, row: dict[str, Any]) -> str:
        row = {**row, "sweep": self.sweep}
        if not self.csv:
            return json.dumps(row, sort_keys=True) + "\n"
        text = io.StringIO(newline="")
        csv.writer(text).writerow(csv_row(row, self.axis_keys, self.metric_keys))
        return text.getvalue()


# ---------------------------------------------------------------------- the pool

def identity(spec: Spec, kernel_digest: str, amap, read: Sequence[str] = ()) -> str:
    """16 hex digits naming what a sweep's rows are results of: the kernbench version (the
    model is in its code), the kernel (`KernelModule.digest`: its file's bytes and the
    helper modules beside it it imports), the topology and cost table
    (resolved, `--set` axes not included), --timing-only, the seed, the recording
    replayed (its bytes), and the bytes of each file in `read` (those the points'
    parameters name: a model's config; one that cannot be read, by its name)."""
    import hashlib

    from kernbench_cli import __version__
    from kernbench_cli.config.loader import config_digest

    digest = hashlib.sha256()
    for part in (__version__.encode(), kernel_digest.encode(),
                 config_digest(amap.topology).encode(),
                 config_digest(amap.topology.cost_table).encode(),
                 repr((spec.timing_only, spec.seed)).encode(),
                 Path(spec.trace).read_bytes() if spec.trace else b"",
                 *(_bytes_of(name) for name in read)):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


def _bytes_of(name: str) -> bytes:
    """A file's name and its bytes' digest for a sweep's identity; its name alone if it is
    not a regular file that can be read (the points then fail saying why)."""
    import hashlib

    try:
        if Path(name).is_file():
            with open(name, "rb") as handle:
                return name.encode() + b"\0" + hashlib.file_digest(handle, "sha256").digest()
    except OSError:
        pass
    return name.encode()


def run_local(spec: Spec, todo: list[Point], jobs: int,
              on_row: Callable[[dict[str, Any]], None],
              worker: Callable[[Spec, Point], dict[str, Any]] = run_point) -> None:
    """Run `todo` on `jobs` worker processes; `on_row` gets each row in point order.

    When a worker dies, the pool goes with it and every point then running
    fails alike; so each of those is run again alone in a process of its own,
    which tells the point that kills its worker (it dies again: a failed row)
    from those that went down with it (they complete).
    """
    pending = list(todo)
    ready: dict[int, dict[str, Any]] = {}
    order = [p.index for p in todo]
    emitted = 0

    def emit() -> None:
        nonlocal emitted
        while emitted < len(order) and order[emitted] in ready:
            on_row(ready.pop(order[emitted]))
            emitted += 1

    _enough_files(min(jobs, len(todo)))  # the pool starts no more workers than points
    context = _worker_context()
    while pending:
        suspects: list[Point] = []
        broken = False
        with _pool(jobs, context) as pool:
            running: dict[Future, Point] = {}
            while (pending or running) and not suspects:
                while pending and len(running) < jobs:
                    try:
                        future = _submit(pool, worker, spec, pending[0])
                    except BrokenProcessPool:  # a worker died since the last wait
                        broken = True
                        break
                    running[future] = pending.pop(0)
                if broken:
                    break
                finished: set[Future] = set()
                while not finished:  # a while at a time: see `_POLL_S`
                    finished, _ = wait(running, timeout=_POLL_S,
                                       return_when=FIRST_COMPLETED)
                for future in finished:
                    point = running.pop(future)
                    try:
                        ready[point.index] = future.result()
                    except BrokenProcessPool:
                        suspects.append(point)
                emit()
            suspects += running.values()  # running when the pool broke: the point not
            # yet submitted stays pending, for the next pool
        for point in sorted(suspects, key=lambda p: p.index):
            row = _alone(spec, point, worker)
            ready[point.index] = row if row is not None else {
                "point": point.index, "axes": point.axes, "result": None,
                "error": "its worker process died, and again when it ran alone (killed, or "
                         f"out of memory{_GUARD_HINT if _from_a_script() else ''})"}
        emit()
    emit()


#: why a sweep from a script can lose every worker: they import the script as they start
_GUARD_HINT = (", or, from a script, kb.sweep called outside `if __name__ == '__main__':`, "
               "which worker processes need: they import the script as they start")


def _from_a_script() -> bool:
    """Whether `__main__` is a script file (not the CLI, a notebook or `python -c`)."""
    main = sys.modules.get("__main__")
    file = getattr(main, "__file__", None)
    return isinstance(file, str) and file.endswith(".py") and \
        getattr(main, "__spec__", None) is None


# ---------------------------------------------------------------------- Dask

def bundle(spec: Spec) -> dict[str, bytes]:
    """The files a point reads from the client's disk, by a name relative to a folder the
    worker makes: the kernel (.py path), the topology (TOML path) and the cost table it names,
    the `--costs` file. Shipped kernels and topologies, given by name, need none."""
    import tomllib

    files: dict[str, bytes] = {}
    if spec.kernel.endswith(".py"):
        files["kernel/" + Path(spec.kernel).name] = Path(spec.kernel).read_bytes()
    if spec.topology and spec.topology.endswith(".toml"):
        topo = Path(spec.topology)
        files["topology/" + topo.name] = topo.read_bytes()
        try:
            named = tomllib.loads(files["topology/" + topo.name].decode()).get("costs", "")
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            named = ""  # the worker's load reports the file's problem as a row
        if named and (topo.parent / named).is_file():
            files["topology/" + named] = (topo.parent / named).read_bytes()
    if spec.costs:
        files["costs/" + Path(spec.costs).name] = Path(spec.costs).read_bytes()
    if spec.trace:
        files["trace/" + Path(spec.trace).name] = Path(spec.trace).read_bytes()
    return files


def run_bundled(spec: Spec, files: dict[str, bytes], point: Point) -> dict[str, Any]:
    """`run_point` on a worker that has only `files` of the client's disk (see `bundle`)."""
    import tempfile

    if not files:
        return run_point(spec, point)
    with tempfile.TemporaryDirectory(prefix="kernbench-point-") as folder:
        root = Path(folder)
        for name, data in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)

        def local(path: str | None, kind: str) -> str | None:
            if path is None or f"{kind}/{Path(path).name}" not in files:
                return path
            return str(root / kind / Path(path).name)

        here = replace(spec, kernel=local(spec.kernel, "kernel"),
                       topology=local(spec.topology, "topology"),
                       costs=local(spec.costs, "costs"), trace=local(spec.trace, "trace"))
        row = run_point(here, point)
    if row["error"]:  # name the client's files, not the worker's copies
        row["error"] = row["error"].replace(str(root) + "/kernel/", "").replace(
            str(root) + "/", "")
    return row


#: What `--dask` takes: [SCHEME://]HOST:PORT, HOST a name, an IPv4 address or [IPv6].
_DASK_ADDRESS = re.compile(r"^(?:(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://)?"
                           r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)"
                           r"(?::(?P<port>[0-9]{1,5}))?$")
#: Schemes kernbench reaches a scheduler over (Dask's inproc:// is in-process, ucx:// needs
#: UCX-Py): the rest would fail inside Dask with its own error.
DASK_SCHEMES = ("tcp", "tls", "ws", "wss")


def check_dask_address(address: str) -> None:
    """A one-line error unless Dask is installed and `address` names a scheduler as
    ``[tcp|tls|ws|wss://]HOST:PORT``, with Dask's TLS certificates configured for tls://.
    Checked here, before Dask's own parser sees it (which raises a ValueError or TypeError
    of its own for a missing port, an unknown scheme or TLS without certificates)."""
    try:
        import distributed  # noqa: F401  (the package itself: its parts may be loaded already)
    except ImportError:
        raise KernbenchError("--dask needs Dask: pip install 'kernbench[dask]'") from None
    shown = address if isinstance(address, str) and len(address) <= 80 and \
        address.isprintable() else clip(address, 60)
    found = _DASK_ADDRESS.match(address) if isinstance(address, str) else None
    if found is None:
        raise KernbenchError(f"--dask {shown}: not a scheduler address; give "
                             "tcp://HOST:PORT")
    scheme = (found["scheme"] or "tcp").lower()
    if scheme not in DASK_SCHEMES:
        raise KernbenchError(f"--dask {shown}: unknown scheme {scheme}://; kernbench reaches a "
                             f"scheduler over {', '.join(s + '://' for s in DASK_SCHEMES)}")
    if found["port"] is None or not 0 < int(found["port"]) < 65536:
        raise KernbenchError(f"--dask {shown}: needs the scheduler's port, 1 to 65535 "
                             f"({scheme}://HOST:8786)")
    if scheme == "tls":
        _check_tls(shown)


def _check_tls(shown: str) -> None:
    """tls:// needs Dask's TLS settings: a CA file and the client's certificate."""
    import dask

    tls = dask.config.get("distributed.comm.tls", default={}) or {}
    missing = [key for key, value in (("ca-file", tls.get("ca-file")),
                                      ("client.cert", (tls.get("client") or {}).get("cert")))
               if not value]
    if missing:
        raise KernbenchError(f"--dask {shown}: TLS needs certificates, and Dask's "
                             f"configuration has no distributed.comm.tls.{missing[0]} (set "
                             "it, or DASK_DISTRIBUTED__COMM__TLS__CA_FILE and "
                             "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT)")


#: Seconds a Dask scheduler has to answer, connection and handshake: Dask's own connect
#: timeout (10 s) does not cover the handshake, and a peer that accepts the connection
#: but never answers held the sweep for good
DASK_ANSWER_S = 30.0


def _dask_client(address: str):
    """A Dask client of the scheduler at `address`, or a one-line error: it cannot be
    reached, does not answer within `DASK_ANSWER_S` (the client is made on a thread of
    its own, which closes a client made too late; against a peer that never answers it
    waits as long as the peer holds the connection: a thread each such call, in a
    long-lived process), or answers as no Dask scheduler does (an HTTP server's first
    bytes read as a frame's length were an allocation of exbibytes, reported as this
    machine running out of memory)."""
    import threading

    from distributed import Client

    made: dict[str, Any] = {}
    lock = threading.Lock()  # the client is kept, or closed, once

    def connect() -> None:
        try:
            client = Client(address, timeout="10s")
        except BaseException as exc:  # reported by the thread waiting
            made["error"] = exc
            return
        with lock:
            if made.get("given up"):
                client.close()
            else:
                made["client"] = client

    thread = threading.Thread(target=connect, name="kernbench-dask-connect", daemon=True)
    thread.start()
    thread.join(DASK_ANSWER_S)
    with lock:
        late = "client" not in made and "error" not in made
        made["given up"] = late
    if late:
        raise KernbenchError(f"--dask {address}: the scheduler did not answer within "
                             f"{DASK_ANSWER_S:g} s (something there accepts connections: "
                             "not a Dask scheduler?)")
    exc = made.get("error")
    if isinstance(exc, MemoryError):
        raise KernbenchError(f"--dask {address}: what answers there is not a Dask scheduler "
                             "(its first bytes are no message of Dask's)")
    if isinstance(exc, OSError | TimeoutError):
        raise KernbenchError(f"--dask {address}: cannot reach the scheduler: {exc}")
    if exc is not None:
        raise exc
    return made["client"]


def run_dask(address: str, spec: Spec, todo: list[Point],
             on_row: Callable[[dict[str, Any]], None]) -> None:
    """Run `todo` on the Dask cluster at `address`; `on_row` gets each row in point order.
    A task whose worker dies is retried by Dask once, then is a failed row."""
    check_dask_address(address)
    from distributed import as_completed

    files = bundle(spec)
    client = _dask_client(address)
    ready: dict[int, dict[str, Any]] = {}
    order = [p.index for p in todo]
    emitted = 0
    try:
        shipped = client.scatter(files, broadcast=True) if files else files
        futures = {client.submit(run_bundled, spec, shipped, point, pure=False, retries=1,
                                 key=f"kernbench-point-{point.index}-{os.getpid()}"): point
                   for point in todo}
        for future in as_completed(futures):
            point = futures[future]
            try:
                ready[point.index] = future.result()
            except Exception as exc:
                ready[point.index] = {"point": point.index, "axes": point.axes,
                                      "result": None,
                                      "error": f"Dask: {type(exc).__name__}: {exc}"}
            while emitted < len(order) and order[emitted] in ready:
                on_row(ready.pop(order[emitted]))
                emitted += 1
    finally:
        client.close()


def _worker_context():
    """Workers start from a fresh interpreter (forkserver), one BLAS thread each: N workers
    on N cores, not N x the BLAS's threads spinning against each other.

    The fork server is multiprocessing's one for the process, which a caller's own
    forkserver pools share (the API: a notebook, a service). So it is started here, with
    kernbench preloaded (a worker per point starts in milliseconds; a kernel and the
    modules it imports are loaded in the worker, and die with it), the thread limits in
    its environment and Ctrl-C, SIGTERM and SIGHUP not blocked (`_submit` blocks them: a
    server started there kept them blocked for life, and a caller's pool forked from it
    could not be terminated); then the caller's environment and preload list are put
    back. A server already running is used as it is. What stays: the server has
    kernbench imported, the thread limits and Ctrl-C and SIGHUP ignored
    (`kernbench_cli._preload`), and so do the processes it forks until they set their
    own; the resource tracker, if started here, SIGHUP blocked (`_hangup_blocked`)."""
    import multiprocessing
    from multiprocessing import forkserver, resource_tracker

    context = multiprocessing.get_context("forkserver")
    server = forkserver._forkserver  # the process's one (multiprocessing's own)
    preload = list(getattr(server, "_preload_modules", ()))
    limits = {var: "1" for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                   "MKL_NUM_THREADS") if var not in os.environ}
    # SIGCHLD too: the server learns its workers ended by it, and one started with it
    # blocked (a mask inherited from the caller's launcher) hung the sweep at its first
    # point's end, Ctrl-C and all
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {*STOP_SIGNALS, signal.SIGCHLD})
    try:
        os.environ.update(limits)
        context.set_forkserver_preload(["kernbench_cli._preload"])
        with _hangup_blocked():
            resource_tracker.ensure_running()
        with owner_access():
            forkserver.ensure_running()
    except OSError as exc:  # its socket's folder in TMPDIR; its fork; its pipes
        import tempfile

        if "path too long" not in str(exc):
            raise KernbenchError(f"the sweep's workers cannot start: their fork server: "
                                 f"{exc.strerror or exc}") from None
        raise KernbenchError(f"the sweep's workers cannot start: their fork server's socket "
                             f"in {tempfile.gettempdir()}: {exc.strerror or exc} (a "
                             "socket's path is at most 107 bytes: a shorter TMPDIR)") from None
    finally:
        context.set_forkserver_preload(preload)
        for var in limits:
            os.environ.pop(var, None)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return context


@contextmanager
def _hangup_blocked() -> Iterator[None]:
    """The block with SIGHUP blocked (one that arrives meanwhile is taken after), for
    multiprocessing's resource tracker to start in, as it keeps the mask: a closed
    terminal's SIGHUP, sent to the whole process group, killed the tracker (which blocks
    only Ctrl-C and SIGTERM), and its successor printed warnings and tracebacks as the
    sweep stopped. (The fork server ignores SIGHUP itself: `kernbench_cli._preload`.)"""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _alone(spec: Spec, point: Point,
           worker: Callable[[Spec, Point], dict[str, Any]]) -> dict[str, Any] | None:
    """`point` run in a worker process of its own; None if that process dies too."""
    _enough_files(1)
    with _pool(1, _worker_context()) as pool:
        future = _submit(pool, worker, spec, point)
        try:
            while True:  # a while at a time: see `_POLL_S`
                with contextlib.suppress(FutureTimeout):
                    return future.result(timeout=_POLL_S)
        except BrokenProcessPool:
            return None


#: Seconds the sweep waits on its workers at a time. A Ctrl-C or SIGTERM that the kernel
#: hands to another of the sweep's threads does not wake the main thread's wait, and
#: Python runs its handler in the main thread only: waited on without end, the stop would
#: wait for the running points to finish.
_POLL_S = 0.25


@contextmanager
def _pool(jobs: int, context) -> Iterator[ProcessPoolExecutor]:
    """A pool of `jobs` workers that leave Ctrl-C to the sweep: on an interrupt, or any
    failure of the sweep's own (stderr past its size limit), the workers are stopped at
    once (their points are not finished) and the exception goes on. A worker
    runs one point and is replaced: nothing a kernel leaves in a module or class (a counter
    in a helper, an attribute on `type(tl)`) reaches the next point."""
    import multiprocessing

    before = set(multiprocessing.active_children())
    with owner_access():  # its queues' semaphores: the workers open them by name
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=context, max_tasks_per_child=1,
                                   initializer=_leave_interrupts, initargs=(os.getpid(),))
    with pool:
        try:
            yield pool
        except BaseException:  # Ctrl-C, or the sweep's own failure (its output cut off)
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
            # wait for the pool to wind down: a replacement worker the pool was starting
            # must find the sweep still there to read its start-up from (or it prints a
            # traceback); it gets no point and ends at once
            pool.shutdown(wait=True, cancel_futures=True)
            for process in set(multiprocessing.active_children()) - before:  # one started
                process.terminate()  # as the pool wound down, which exit would wait for
                process.join(timeout=5)
            raise


def _submit(pool: ProcessPoolExecutor, worker, spec: Spec, point: Point) -> Future:
    """`pool.submit`, with Ctrl-C held back while it may start a worker process: a worker
    whose start-up is cut off mid-way prints a traceback; the Ctrl-C comes right after."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        return pool.submit(worker, spec, point)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


#: Open files a sweep may need beyond those open as it starts its workers, and more for each
#: worker (pipes to it and its sentinel, its share of the fork server's; measured: 24 in all
#: for 1 and 2 workers, 28 for 4, from some 12 open), with room to spare
FILES_SPARE, FILES_A_WORKER = 16, 4


def _enough_files(jobs: int) -> None:
    """Room under the open-files limit for `jobs` workers: the soft limit raised towards the
    hard one where it is short (as a process may), or a one-line error where the hard one
    is. Past it, a worker's pipes failed in the pool's own thread, which then died, and the
    sweep waited for good (or, at the first worker, an internal error)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        open_now = len(os.listdir("/proc/self/fd"))
    except (ImportError, OSError, ValueError):  # no such limit, or no way to count here
        return
    need = open_now + FILES_SPARE + FILES_A_WORKER * jobs
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard == resource.RLIM_INFINITY or hard >= need:
        with contextlib.suppress(OSError, ValueError):  # a sandbox that refuses: try anyway
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        return
    raise KernbenchError(f"{jobs} worker{'s' if jobs > 1 else ''} need some {need} open "
                         f"files, and the limit is {hard} (ulimit -Hn): fewer --jobs, or a "
                         "higher limit")


def _leave_interrupts(sweep: int) -> None:
    """In a worker: Ctrl-C reaches the whole process group; the sweep handles it. The worker
    also ends as soon as the sweep (process `sweep`) is gone, even by SIGKILL: no orphan
    goes on with its point, holding the sweep's pipes."""
    import threading
    import time

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal: the sweep's to handle
    # `_submit` blocks them while the pool may start a process, and the fork server
    # started then hands its mask to every worker: SIGTERM (`_pool`'s terminate) stayed
    # pending, and the sweep waited for the point to end (minutes) after a Ctrl-C
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    def gone() -> bool:
        try:
            os.kill(sweep, 0)
        except ProcessLookupError:
            return True
        except OSError:  # there, but not ours to signal
            return False
        try:  # Linux: a zombie is gone too (its parent has not reaped it yet)
            with open(f"/proc/{sweep}/stat") as stat:
                return stat.read().rpartition(")")[2].split()[0] == "Z"
        except (OSError, IndexError):
            return False

    def watch() -> None:
        while not gone():
            time.sleep(0.25)
        os._exit(1)

    threading.Thread(target=watch, name="kernbench-sweep-watch", daemon=True).start()
