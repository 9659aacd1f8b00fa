"""`kb.sweep`: one kernel at every point of axes of `set` keys and kernel parameters, each
point a run in a worker process of its own (`explore.sweep`); a `SweepResult` of them.

An axis is a key with a list of values (``set={"pe.gemm.cols": [16, 64]}``, ``params=
{"seq_len": [1024, 2048]}``); a key with one value (not a list) is the same at every point,
so a single TOML array value is written as a list of one (``[[4, 2]]``). A list of
``KEY=V1,V2,…`` strings is taken as `kernbench sweep` takes its options. Every point's
axis values are typed as the configuration loader reads them (a TOML value: ``16`` an int,
``0.5`` a float, ``true`` a bool; otherwise the text, such as ``"204.8GB/s"``; a kernel's
str parameter is the text it got: ``"12"`` stays a str), the same whether the sweep ran
now or was resumed from its results file. Each value is also read as a number
(`SweepPoint.numbers`, in ``unit`` `SweepPoint.units`): ``"102.4GB/s"`` is 102400000000
B/s, so a sort or a pivot on ``KEY:number`` orders by the quantity, not by its text.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernbench_cli.api import arguments as args
from kernbench_cli.api.bounds import Bounds
from kernbench_cli.api.result import MADE, ReadOnly, Result, sealed
from kernbench_cli.api.runs import check_seed
from kernbench_cli.errors import ArgumentError, KernbenchError, ParamError, SweepError, clip
from kernbench_cli.fileio import claimed, json_number
from kernbench_cli.lang.watchdog import holds_caller_timer

MAX_JOBS = 1024  # worker processes a sweep may start
Axes = Mapping[str, Any] | Sequence[str] | None


@dataclass(frozen=True)
class SweepPoint:
    """One point: its index, every axis key's value there (typed), and its run's `Result`,
    or the `error` that stopped it. A point that failed verification has both. `result` is
    None too for a point resumed from a ``.csv`` results file (it keeps only the summary
    columns, which `SweepResult.table()` still shows), for every point of a bounds-only
    sweep and for a pruned one; `replayed` says the point was a replay of one recording (a
    cost-only sweep)."""

    index: int
    axes: Mapping[str, Any]
    result: Result | None
    error: str | None
    replayed: bool = False
    #: the kernel's analytic bounds there (`kb.bounds`): at every point of a bounds-only
    #: sweep, and at a `pruned` one (never run: its lower bound was above the limit)
    bounds: Bounds | None = None
    pruned: bool = False
    #: each axis value as a number in the stored unit of its kind (a bandwidth in B/s, a
    #: time in ps, a size in B, a frequency in Hz, an energy in aJ, a power in uW; a factor
    #: ``x0.5`` as 0.5), None where it is not a number (`explore.sweep.axis_number`)
    numbers: Mapping[str, int | float | None] = field(
        default_factory=lambda: ReadOnly({}))
    #: the unit of each of `numbers` (``"B/s"``, ``"ps"``, … ``""`` for a plain number,
    #: ``"x"`` for a factor), None where it is not a number
    units: Mapping[str, str | None] = field(default_factory=lambda: ReadOnly({}))


#: The columns of `SweepResult.table()` after the point, its axes and their numbers, and
#: before the kernel's metrics.
TABLE_COLUMNS = ("latency_ps", "latency_ns", "bound", "verified", "gemm_mac_utilization",
                 "hbm_gbps", "error", "replayed", "lower_bound_ps", "bound_gap", "pruned")
#: The suffix of an axis's number column in `SweepResult.table()` (``hbm.bandwidth:number``).
NUMBER = ":number"


@dataclass(frozen=True)
class SweepResult:
    """A sweep's points in order. `axes` are the keys given (``set`` keys first, then
    parameters); `to_dicts()` are the rows `kernbench sweep --json` prints; `table()` (and
    `to_pandas()`) one tidy row per point."""

    kernel: str
    axes: tuple[str, ...]
    points: tuple[SweepPoint, ...]
    _json: str = field(default="[]", repr=False)
    _made: Any = field(default=None, repr=False, compare=False)  # `api.result.sealed`

    def __post_init__(self) -> None:
        sealed(self, "SweepResult.from_rows(kernel, axes, rows) or kb.load_sweep")

    @classmethod
    def from_rows(cls, kernel: str, axes: Sequence[str],
                  rows: Sequence[Mapping[str, Any]]) -> SweepResult:
        """The sweep that gave `rows` (the sweep's rows in point order; each gets its
        ``axis_numbers`` and ``axis_units`` if it has none)."""
        from kernbench_cli.config.loader import read_set_value
        from kernbench_cli.explore.sweep import numbered

        _check_rows(kernel, axes, rows)
        text = json.dumps([row if row.get("axis_numbers") is not None and
                           row.get("axis_units") is not None else numbered(dict(row))
                           for row in rows])
        points, rows = [], json.loads(text)
        texts = _text_axes(axes, rows)
        for row in rows:
            whole = row["result"] is not None and "schema_version" in row["result"]
            try:
                result = Result.from_dict(row["result"]) if whole else None
            except ArgumentError as exc:  # which point's result is not one
                raise ArgumentError(f"point {row['point']}: {exc}") from None
            try:
                bounds = Bounds.from_dict(row["bounds"]) if row.get("bounds") else None
            except ArgumentError as exc:  # which point's bounds are not one
                raise ArgumentError(f"point {row['point']}: {exc}") from None
            points.append(SweepPoint(
                row["point"],
                ReadOnly({k: v.strip() if k in texts else read_set_value(v)
                          for k, v in row["axes"].items()}),
                result, row["error"], bool(row.get("replayed", False)), bounds,
                bool(row.get("pruned")), ReadOnly(row["axis_numbers"]),
                ReadOnly(row["axis_units"])))
        return cls(kernel, tuple(axes), tuple(points), text, MADE)

    def __reduce__(self) -> tuple:
        """Pickled and deep-copied as its rows (`Result.__reduce__`)."""
        return SweepResult.from_rows, (self.kernel, self.axes, self.to_dicts())

    def __copy__(self) -> SweepResult:
        return self

    def to_dicts(self) -> list[dict[str, Any]]:
        """The rows, as `kernbench sweep --json` prints them (a fresh copy)."""
        return json.loads(self._json)

    @property
    def failed(self) -> tuple[SweepPoint, ...]:
        return tuple(p for p in self.points if p.error is not None)

    def check(self) -> None:
        """`SweepError` if any point failed (the CLI's exit 1 after its table)."""
        if self.failed:
            raise SweepError(f"{len(self.failed)} of {len(self.points)} points failed (their "
                             "rows say why)")

    @property
    def metrics(self) -> tuple[str, ...]:
        """The names of the kernel's metrics (its `metrics()`) any point states, sorted."""
        from kernbench_cli.report.metrics import names

        return tuple(names(row["result"] for row in self.to_dicts()))

    def columns(self) -> tuple[str, ...]:
        """The columns of `table()`, in order."""
        from kernbench_cli.report.metrics import PREFIX

        return ("point", *self.axes, *(k + NUMBER for k in self.axes), *TABLE_COLUMNS,
                *(PREFIX + name for name in self.metrics))

    def table(self) -> list[dict[str, Any]]:
        """One record per point: ``point``, each axis (typed), each axis's number
        (``KEY:number``, see `SweepPoint.numbers`), then `TABLE_COLUMNS`: latency, the
        engine bounding it (None: latency-bound), verified, GEMM MAC utilisation, HBM GB/s,
        the error, whether it was replayed, the largest bound the kernel states
        (``lower_bound_ps``, a run's or a bounds-only or pruned point's), the latency over
        it (``bound_gap``) and whether the point was pruned; then ``metrics.NAME`` for each
        of the kernel's `metrics` (None at a point without it)."""
        from kernbench_cli.report.metrics import PREFIX, value

        metrics, out = self.metrics, []
        for point, row in zip(self.points, self.to_dicts(), strict=True):
            result = row["result"] or {}
            latency = result.get("latency_ps")
            out.append({"point": point.index, **{k: point.axes.get(k) for k in self.axes},
                        **{k + NUMBER: point.numbers.get(k) for k in self.axes},
                        "latency_ps": latency,
                        "latency_ns": latency / 1000 if latency is not None else None,
                        "bound": (result.get("bound") or {}).get("engine"),
                        "verified": result.get("verified"),
                        "gemm_mac_utilization": result.get("gemm_mac_utilization"),
                        "hbm_gbps": result.get("hbm_gbps"), "error": point.error,
                        "replayed": point.replayed,
                        "lower_bound_ps": result.get("lower_bound_ps", (
                            point.bounds.lower_bound_ps if point.bounds else None)),
                        "bound_gap": result.get("bound_gap"), "pruned": point.pruned,
                        **{PREFIX + name: value(result, name) for name in metrics}})
        return out

    def to_pandas(self):
        """`table()` as a pandas DataFrame, indexed by point. Needs pandas, which kernbench
        does not install (`PandasMissing`, an ImportError, says so)."""
        from kernbench_cli.api.tables import frame, pandas

        pandas()
        return frame(self.table(), self.columns(), index="point")

    def plot(self, path: str | Path, x: str | None = None, y: str = "latency",
             title: str | None = None, option: str = "path") -> None:
        """Draw the sweep to `path` (.png, .svg or .pdf, written whole or not at all), as
        `sweep --plot` draws it: `y` (``latency``, …, or a metric the kernel states, such as
        ``tpot_ps``) against axis `x` (default: the first that varies), and each point's
        engines. `title` defaults to the kernel, the topology and the point count; `option`
        names the figure in errors (an option of the CLI's, ``--plot``, and they name ``--x``
        and ``--y``). Needs matplotlib (the ``plot`` extra)."""
        from kernbench_cli.report.plot import check_figure, check_x, metric, plot

        path = args.output(path, "path", required=True)
        x = args.name_or_path(x, "x", "an axis key (a str) or None")
        y = args.name_or_path(y, "y", "a metric name (a str)", required=True)
        title = args.name_or_path(title, "title", "a str or None")
        check_figure(path, option)
        dashes = "--" if option.startswith("--") else ""  # the CLI's options, or ours
        check_x(x, list(self.axes), f"{dashes}x")
        rows = self.to_dicts()
        metric(y, rows, f"{dashes}y")
        done = [row["result"] for row in rows if row["result"] is not None]
        if not done:
            raise KernbenchError(f"no point has a result to plot: all {len(rows)} failed")
        if title is None:
            title = f"{self.kernel} on {done[0].get('topology')}: {len(rows)} points"
        plot(path, rows, x, y, title, option)


def _text_axes(axes: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> set[str]:
    """The axes that are a kernel's str parameters, as some point's result or bounds states
    its parameters: their values are the text the kernel got (``"12"`` stays a str), not
    read as TOML."""
    texts = set()
    for row in rows:
        for part in (row["result"], row.get("bounds")):
            params = part.get("params") if isinstance(part, dict) else None
            if isinstance(params, dict):
                texts.update(k for k in axes if isinstance(params.get(k), str))
    return texts


def load_sweep(path: str | Path) -> SweepResult:
    """A finished sweep from its ``.jsonl`` results file (`sweep --out`), as `sweep` returned
    it (a point resumed from a .csv is not there: read the .jsonl). Its axes are the rows'
    keys, sorted (the file keeps no order). A one-line `KernbenchError` for a missing file,
    one that is not a sweep's rows, rows of two sweeps, or no rows."""
    from kernbench_cli.explore.sweep import read_results

    path = args.path(path, "path", required=True)
    rows = read_results(path)
    kernel = next((str(r["result"].get("kernel")) for r in rows if r["result"]), path.stem)
    try:
        return SweepResult.from_rows(kernel, list(rows[0]["axes"]), rows)
    except ArgumentError as exc:
        raise KernbenchError(f"{path}: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError):
        raise KernbenchError(f"{path}: not a sweep's .jsonl results file (a result that is "
                             "not a `run --json` object)") from None


def check_options(kernel: str | Path, topology: str | Path | None, costs: str | Path | None,
                  replay: str | Path | None, out: Path | None, resume: bool, jobs: int | None,
                  dask: str | None, plot: Path | None = None, params: Axes = None):
    """What can be checked before any point runs: the options, the kernel, and that the
    outputs (`out`, and `plot`, the figure the CLI draws) may be written, not over a file
    the points read (the kernel, topology, cost table, recording, and the files `params`
    name: a model's config). Returns the kernel module (`sim.kernels.KernelModule`), loaded
    once here for the sweep's checks."""
    from kernbench_cli.fileio import check_outputs, note_input
    from kernbench_cli.sim.kernels import load_kernel, param_items

    if out is not None and out.suffix not in (".jsonl", ".csv"):
        raise KernbenchError(f"--out {str(out)!r}: the results file must end in .jsonl or .csv")
    if resume and out is None:
        raise KernbenchError("--resume needs --out, the results file to resume")
    try:
        os.getcwd()
    except OSError as exc:
        raise KernbenchError(f"the working folder cannot be read ({exc.strerror or exc}: "
                             "deleted since the shell went there?); the sweep's workers "
                             "start in it: cd to a folder that exists") from None
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int)):
        raise ArgumentError(f"jobs={clip(jobs)}: expected an int (1 to {MAX_JOBS}) or "
                            f"None, got {type(jobs).__name__}")
    if jobs is not None and not 1 <= jobs <= MAX_JOBS:
        raise KernbenchError(f"--jobs {jobs}: needs 1 to {MAX_JOBS} workers")
    if dask:
        from kernbench_cli.explore.sweep import check_dask_address

        check_dask_address(dask)
    module = load_kernel(str(kernel))  # an unknown kernel is bad input, before any point runs
    if topology is not None or replay is None:  # so is a topology or cost table no point reads
        from kernbench_cli.api.runs import load_topology

        load_topology(topology, costs=costs)
    items = [item for axis in _axes(params, "-p", param_items) for item in axis]
    for given in (kernel, topology, costs, replay, *_param_files(module, items)):
        if given is not None and Path(given).is_file():  # files the points read
            note_input(Path(given))
    if replay is not None:  # a recording every point would fail to read is bad input
        from kernbench_cli.sim.trace_file import read_trace

        _as_recorded(module, read_trace(Path(replay)), replay, items)
    check_outputs({"--out": out, "--plot": plot}, rewrites=("--out",) if resume else ())
    return module


def _as_recorded(module, trace, replay: str | Path, items: list[str]) -> None:
    """Refuse a replayed sweep whose kernel, or a `-p` of it, is not the recording's: its
    points would be labelled with a run that never was (the replay times the recording's
    own). A `-p` the kernel does not take, or one that varies, is left to `_checked`."""
    from kernbench_cli.sim.kernels import parse_params

    if trace.kernel != module.name:
        raise KernbenchError(f"--replay {replay}: the recording is of kernel "
                             f"{clip(trace.kernel)}, not {clip(module.name)}")
    names = [item.partition("=")[0].strip() for item in dict.fromkeys(items)]
    for item, name in zip(dict.fromkeys(items), names, strict=True):
        if names.count(name) > 1:
            continue
        try:
            value = parse_params(module, [item])[name]
        except ParamError:
            continue
        if name not in trace.params or trace.params[name] != value:
            recorded = f"{name}={trace.params[name]}" if name in trace.params else "none"
            raise KernbenchError(f"--replay {replay}: -p {item.strip()} is not the "
                                 f"recording's ({recorded}): a replay re-times the run "
                                 "recorded, whose parameters are fixed")


def _check_rows(kernel: Any, axes: Any, rows: Any) -> None:
    """`SweepResult.from_rows`' arguments, shaped as a sweep's (ArgumentError naming the
    argument, row and key otherwise): a kernel name, axis names, and rows each with a
    point number of its own, axes of text, and a result, error, bounds, axis_numbers and
    axis_units of their kinds (or null)."""
    where = "SweepResult.from_rows"
    if not isinstance(kernel, str):
        raise ArgumentError(f"{where}: kernel={clip(kernel)}: expected a str")
    if isinstance(axes, str) or not isinstance(axes, Sequence) or not all(
            isinstance(a, str) for a in axes):
        raise ArgumentError(f"{where}: axes={clip(axes)}: expected a list of axis names")
    if isinstance(rows, str | Mapping) or not isinstance(rows, Sequence):
        raise ArgumentError(f"{where}: rows={clip(rows)}: expected a list of sweep rows")
    seen: set[int] = set()
    for n, row in enumerate(rows):
        at = f"{where}: rows[{n}]"
        if not isinstance(row, Mapping):
            raise ArgumentError(f"{at}: expected a sweep row (a dict), got {clip(row)}")
        point, given = row.get("point"), row.get("axes")
        if type(point) is not int or point in seen:
            raise ArgumentError(f"{at}: point {clip(point)}: expected a point number of its "
                                "own (an int)")
        seen.add(point)
        if not isinstance(given, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in given.items()):
            raise ArgumentError(f"{at}: axes={clip(given)}: expected a dict of axis: value "
                                "text")
        for key, kind, what in (("result", Mapping, "a `run --json` object"),
                                ("error", str, "a str"), ("bounds", Mapping, "an object"),
                                ("axis_numbers", Mapping, "an object"),
                                ("axis_units", Mapping, "an object")):
            if row.get(key) is not None and not isinstance(row[key], kind):
                raise ArgumentError(f"{at}: {key}: expected {what} or None, got "
                                    f"{clip(row[key])}")
        if "result" not in row or "error" not in row:
            raise ArgumentError(f"{at}: no result or error key: not a sweep row")
        first = rows[0]["axes"]
        if not set(axes) <= set(given) or set(given) != set(first):
            raise ArgumentError(f"{at}: axes {clip(sorted(given), 120)}: expected those of "
                                f"every row, {clip(sorted(first), 120)}, with the axes "
                                f"{clip(sorted(axes), 120)} among them")
        _check_result(row["result"], at)


def _check_result(result: Any, at: str) -> None:
    """A sweep row's `result` as a plot reads it: a run's summary (its latency at least)
    and its roofline, a list of {resource, ps} objects (ArgumentError naming the row)."""
    if result is None:
        return
    if not json_number(result.get("latency_ps")) or isinstance(result["latency_ps"], float):
        raise ArgumentError(f"{at}: result: no latency_ps (an int): not a run's result")
    roofline = result.get("roofline", [])
    if not isinstance(roofline, list) or not all(
            isinstance(r, Mapping) and isinstance(r.get("resource"), str)
            and json_number(r.get("ps")) for r in roofline):
        raise ArgumentError(f"{at}: result: roofline={clip(roofline)}: expected a list of "
                            "{resource, ps} objects")


def _param_files(module, items: list[str]) -> list[str]:
    """The files the ``KEY=value`` items name for parameters the kernel (`module`) reads a
    file from (its `FILES`), each once, in order."""
    files = module.files
    if not files:
        return []
    named = (item.split("=", 1) for item in items if "=" in item)
    return list(dict.fromkeys(value.strip() for key, value in named
                              if key.strip() in files and value.strip()))


def _checked(module, todo: list, replay: str | Path | None) -> list:
    """`todo`, each point's parameters read as a run of the kernel (`module`) would read
    them (names, types, choices, alternatives), and alike at every point of a `replay`
    (its recording fixed them), and its `--set` keys ones a topology has (a key that is
    not would fail every point alike): bad input is refused before any point runs."""
    from kernbench_cli.config.loader import check_set_keys
    from kernbench_cli.sim.kernels import parse_params

    if todo:
        check_set_keys(todo[0].sets)
    if replay is not None and any(p.params != todo[0].params for p in todo):
        raise KernbenchError("--replay: -p cannot vary (the recording fixed the kernel's "
                             "parameters)")
    values: dict[str, set[str]] = {}
    for point in todo:
        for item in point.params:
            name, _, value = item.partition("=")
            values.setdefault(name.strip(), set()).add(value.strip())
    varying = {name for name, seen in values.items() if len(seen) > 1}
    for params in dict.fromkeys(point.params for point in todo):
        try:
            parse_params(module, list(params), varying=varying)
        except ParamError as exc:
            raise ParamError(f"-p {' '.join(params)}: {exc}") from None
    return todo


def sweep_points(sets: Axes, params: Axes, zipped: bool = False,
                 pairs: Sequence[Sequence[str] | str] = ()) -> list:
    """The sweep's points (`explore.sweep.Point`), in order, from the API's axes or the CLI's
    ``KEY=V1,V2,…`` items; each group of `pairs` names axes whose values go together."""
    from kernbench_cli.config.loader import set_items
    from kernbench_cli.explore.sweep import combine
    from kernbench_cli.sim.kernels import param_items

    return combine(_axes(sets, "--set", set_items), _axes(params, "-p", param_items), zipped,
                   pairs)


def _axes(given: Axes, option: str, items: Callable[[Mapping[str, Any]], list[str]]
          ) -> list[list[str]]:
    """Each key's list of ``KEY=value`` alternatives; a mapping's values become items as
    `run` writes them (`items`), a list or tuple of values being the axis."""
    from kernbench_cli.explore.sweep import split_axes

    if given is None:
        return []
    if isinstance(given, str | bytes | bytearray) or not isinstance(given, Mapping | Sequence):
        raise ParamError(f"{option}: expected a mapping of key: values, or KEY=V1,V2,… items; "
                         f"got {type(given).__name__}")
    if not isinstance(given, Mapping):
        return split_axes(list(given), option)
    axes = []
    for key, values in given.items():
        values = list(values) if isinstance(values, list | tuple) else [values]
        if not values:
            raise ParamError(f"{option} {key}: no values")
        axes.append([items({key: value})[0] for value in values])
    return axes


@holds_caller_timer
def sweep(kernel: str | Path, topology: str | Path | None = None, *, params: Axes = None,
          set: Axes = None,  # `set`, as the CLI says it
          costs: str | Path | None = None, zip: bool = False,
          pair: Sequence[Sequence[str] | str] = (), seed: int = 0,
          timing_only: bool = False, jobs: int | None = None, replay: str | Path | None = None,
          record_once: bool = True, out: str | Path | None = None, resume: bool = False,
          dask: str | None = None, on_start: Callable[[int], None] | None = None,
          on_row: Callable[[dict[str, Any]], None] | None = None, bounds_only: bool = False,
          prune_above: str | None = None) -> SweepResult:
    """Run `kernel` at every point of the axes: `kernbench sweep` (see the module docstring
    for the axes). The points are every combination, the first axis slowest, or with
    `zip` the axes' values side by side; each group of `pair` (axis keys, such as
    ``("pe.gemm.rows", "pe.gemm.cols")``) goes through its values together, crossed with
    the other axes. Each point runs in a fresh worker process (`jobs` of
    them, default the CPU count; `dask`: on that Dask scheduler). A point that fails is a
    point with its `error`, not an exception (`SweepResult.check()` raises the CLI's).

    `out` (``.jsonl`` or ``.csv``) gets a row per finished point, in order; `resume` runs
    only the points it lacks. `replay` re-times that recording at every point (`set` axes
    only); a timing-only sweep of cost-table keys alone records once and replays each point
    unless not `record_once`. `on_start` hears how many points are left to run, `on_row`
    each finished row (as `kernbench sweep --json` prints it).

    `bounds_only` runs nothing: each point is the kernel's analytic bounds there
    (`SweepPoint.bounds`, as `kb.bounds` gives them). `prune_above` (a latency,
    ``"50us"``, or a factor of the smallest lower bound of any point, ``"x1.5"``) runs
    only the points whose lower bound is at most that: the others are `pruned` points,
    with their bounds and no result (their latency is above the limit for certain).
    """
    out = _check_arguments(kernel, topology, costs, replay, out, dask, pair, seed, prune_above,
                           dict(zip=zip, timing_only=timing_only, record_once=record_once,
                                resume=resume, bounds_only=bounds_only),
                           dict(on_start=on_start, on_row=on_row))
    loaded = check_options(kernel, topology, costs, replay, out, resume, jobs, dask, params=params)
    from kernbench_cli.explore.sweep import Results, Spec, prune_limit

    todo = _checked(loaded, sweep_points(set, params, zip, pair), replay)
    spec = Spec(str(kernel), str(topology) if topology is not None else None,
                str(costs) if costs is not None else None, seed, timing_only,
                str(replay) if replay is not None else None)
    axis_keys = list(todo[0].axes) if todo else []
    limit = prune_limit(prune_above) if prune_above is not None else None
    module = _bounded(loaded, replay, bounds_only, limit is not None, out, resume)
    if bounds_only:
        return _bounds_only(spec, module, todo, axis_keys, on_start, on_row)
    _begin(spec, loaded, todo)
    results = Results(out, axis_keys, spec.begun if out is not None else "")
    rows = _ran(spec, module, todo, limit, results, resume, (record_once, jobs, dask),
                on_start, on_row)
    return SweepResult.from_rows(Path(str(kernel)).stem, axis_keys,
                                 [rows[p.index] for p in todo])


def _ran(spec, module, todo: list, limit, results, resume: bool, how: tuple,
         on_start, on_row) -> dict[int, dict[str, Any]]:
    """`sweep`'s points run (those `results` holds already, with `resume`, kept; those above
    `limit` pruned), by index, the results file held against another sweep meanwhile."""
    from kernbench_cli.explore.sweep import numbered

    out = results.path
    with claimed(out, "--out") if out is not None else contextlib.nullcontext():
        if resume:
            results.load({p.key: p.index for p in todo})
        rows = {p.index: numbered({**results.done[p.key], "point": p.index})
                for p in todo if p.key in results.done}
        skip = _pruned(spec, module, todo, limit, rows)
        left = [p for p in todo if p.index not in rows and p.index not in skip]
        try:
            _run_in_order(spec, todo, left, skip, rows, results, how, on_start, on_row)
        finally:
            results.close()
    return rows


def _begin(spec, module, todo: list) -> None:
    """Note in `spec` the files the points' parameters name and the `fingerprint` of every
    file the points read, as the sweep begins: each point checks it once run."""
    from kernbench_cli.explore.sweep import fingerprint

    spec.read = tuple(_param_files(module, [item for point in todo for item in point.params]))
    spec.begun = fingerprint(spec)


def _run_in_order(spec, todo, left, skip: dict, rows: dict, results, how: tuple,
                  on_start, on_row) -> None:
    """Run the points `left` (`how`: record_once, jobs, dask), each finished row kept in
    `rows`, written to `results` and given to `on_row`, the pruned rows of `skip` each in
    its place among them."""
    from kernbench_cli.explore.sweep import numbered

    def finished(row: dict[str, Any]) -> None:
        row = numbered(row)
        rows[row["point"]] = row
        results.write(row)
        if on_row is not None:
            on_row(_copy(row))

    queue = sorted(skip)

    def in_order(row: dict[str, Any]) -> None:
        while queue and queue[0] < row["point"]:
            finished(skip[queue.pop(0)])
        finished(row)

    _run_points(spec, todo, left, *how,
                (lambda n: on_start(n + len(skip))) if on_start is not None else None,
                in_order)
    while queue:
        finished(skip[queue.pop(0)])


def _check_arguments(kernel: Any, topology: Any, costs: Any, replay: Any, out: Any, dask: Any,
                     pair: Any, seed: Any, prune_above: Any, flags: dict[str, Any],
                     callbacks: dict[str, Any]) -> Path | None:
    """`sweep`'s arguments are of the types it takes (`api.arguments`); `out` as a Path."""
    args.name_or_path(kernel, "kernel", "a kernel name or .py path", required=True)
    args.name_or_path(topology, "topology", "a topology name or TOML path (or None)")
    for name, value in (("costs", costs), ("replay", replay)):
        args.path(value, name)
    out = args.output(out, "out")
    args.one_of(dask, "dask", (str, type(None)), "a scheduler address such as "
                "tcp://HOST:8786 (or None)")
    takes = "a list of axis groups, each 'KEY,KEY' or a list of keys"
    args.one_of(pair, "pair", (list, tuple), takes)
    for group in pair:
        if not isinstance(group, str):
            args.one_of(group, "pair", (list, tuple), takes)
            args.strings(group, "pair", takes)
    check_seed(seed)
    for name, value in callbacks.items():
        args.callback(value, name)
    args.flags(**flags)
    args.one_of(prune_above, "prune_above", (str, type(None)),
                "a latency such as '50us' or a factor such as 'x1.5' (or None)")
    return out


def _bounded(module, replay: str | Path | None, bounds_only: bool, prune: bool,
             out: Path | None, resume: bool):
    """The kernel module (`module`) when the sweep needs its bounds (`bounds_only`,
    `prune`), checked to declare them (ParamError) and the options to go with them; else
    None."""
    if not (bounds_only or prune):
        return None
    option = "--bounds-only" if bounds_only else "--prune-above"
    if replay is not None:
        raise KernbenchError(f"{option} reads the kernel's bounds() at each point; --replay "
                             "times a recording instead (give one of them)")
    if bounds_only and (out is not None or resume):
        raise KernbenchError("--bounds-only runs nothing to keep: it cannot go with --out or "
                             "--resume (--format csv or --json prints its rows)")
    from kernbench_cli.sim.bounds import declares

    if not declares(module):
        raise ParamError(f"{module.name} declares no bounds(): {option} needs the lower bound "
                         "it states at each point")
    return module


def _copy(row: dict[str, Any]) -> dict[str, Any]:
    """`row` for `on_row`: its own copy (what the callback does to it stays with it)."""
    return json.loads(json.dumps(row))


def _bounds_only(spec, module, todo: list, axis_keys: list[str],
                 on_start: Callable[[int], None] | None,
                 on_row: Callable[[dict[str, Any]], None] | None) -> SweepResult:
    """A bounds-only sweep: each point's bounds, in this process (they take milliseconds)."""
    from kernbench_cli.explore.sweep import bounds_row, numbered

    if on_start is not None:
        on_start(len(todo))
    rows = []
    for point in todo:
        rows.append(numbered(bounds_row(spec, point, module)))
        if on_row is not None:
            on_row(_copy(rows[-1]))
    return SweepResult.from_rows(Path(str(spec.kernel)).stem, axis_keys, rows)


def _pruned(spec, module, todo: list, limit, done: dict) -> dict[int, dict[str, Any]]:
    """The rows of the points `limit` prunes (`explore.sweep.pruned`), by point; a point
    already done (resumed) keeps its result."""
    if limit is None:
        return {}
    from kernbench_cli.explore.sweep import bounds_row, pruned

    found = pruned([bounds_row(spec, point, module) for point in todo], limit)
    return {index: row for index, row in found.items() if index not in done}


def _run_points(spec, todo: list, left: list, record_once: bool, jobs: int | None,
                dask: str | None, on_start: Callable[[int], None] | None,
                on_row: Callable[[dict[str, Any]], None]) -> None:
    """Run the points `left` of `todo`, on local workers or Dask; with one recording for
    all of them when only cost-table keys vary in a timing-only sweep."""
    import tempfile

    from kernbench_cli.explore import sweep as sw

    scratch = None
    try:
        if spec.trace is None and spec.timing_only and record_once and left and \
                sw.cost_only(todo):
            scratch = tempfile.TemporaryDirectory(prefix="kernbench-sweep-")
            trace = Path(scratch.name) / "sweep.kbtrace"
            sw.record(spec, todo[0], trace)
            spec.trace, spec.recorded = str(trace), True
            if spec.begun and sw.fingerprint(spec) != spec.begun:
                raise KernbenchError(f"the recording every point replays: "
                                     f"{sw.FILES_CHANGED}; restore it and run the sweep again")
        if on_start is not None:
            on_start(len(left))
        if left and dask:
            sw.run_dask(dask, spec, left, on_row)
        elif left:
            sw.run_local(spec, left, jobs or os.cpu_count() or 1, on_row)
    finally:
        if scratch is not None:
            scratch.cleanup()
