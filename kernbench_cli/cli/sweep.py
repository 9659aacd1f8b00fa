"""`kernbench sweep`: one kernel over axes of `--set` keys and parameters, on local workers."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from kernbench_cli.cli.common import (
    CostsOpt,
    Format,
    FormatOpt,
    JsonOpt,
    SeedOpt,
    chosen_format,
    echo_rich,
    output_path,
)

KernelArg = Annotated[str, typer.Argument(help="Kernel name (sharded_gemm, …) or .py path.")]
TopologyOpt = Annotated[str | None, typer.Option(
    "--topology", "-t", metavar="NAME|PATH",
    help="Topology name or TOML path; without it, default (with --replay, the "
         "recording's).")]
AxisSetOpt = Annotated[list[str] | None, typer.Option(
    "--set", metavar="KEY=V1,V2,…",
    help="A topology or costs. key and its values (an axis if several); repeatable.")]
AxisParamOpt = Annotated[list[str] | None, typer.Option(
    "--param", "-p", metavar="NAME=V1,V2,…",
    help="A kernel parameter and its values (an axis if several); repeatable.")]
ZipOpt = Annotated[bool, typer.Option(
    "--zip", help="Pair the axes' values in order instead of taking every combination.")]
PairOpt = Annotated[list[str] | None, typer.Option(
    "--pair", metavar="KEY,KEY,…",
    help="Take these axes' values together (the i-th of each at once), crossed with the "
         "other axes; repeatable, a group each.")]
TimingOnlyOpt = Annotated[bool, typer.Option(
    "--timing-only", help="Skip values and verification (faster).")]
JobsOpt = Annotated[int | None, typer.Option(
    "--jobs", "-j", help="Worker processes (default: the CPU count).", metavar="INT")]
OutOpt = Annotated[Path | None, typer.Option(
    "--out", parser=output_path,
    help="Write a row per finished point to this .jsonl or .csv file.")]
ResumeOpt = Annotated[bool, typer.Option(
    "--resume", help="Skip the points already in --out; append the rest.")]
ReplayOpt = Annotated[Path | None, typer.Option(
    "--replay", help="Replay this recording (run --record) at every point; only --set "
                     "axes, no -p.")]
NoReplayOpt = Annotated[bool, typer.Option(
    "--no-replay", help="Run every point, even when only cost-table keys vary.")]
PlotOpt = Annotated[Path | None, typer.Option(
    "--plot", parser=output_path,
    help="Draw the sweep to this .png, .svg or .pdf (needs kernbench[plot]).")]


def _named(option: str, what: str):
    """A Typer callback refusing an empty value of `option`, which names `what` (the API
    would name its own argument, `x=`)."""
    def check(value: str | None) -> str | None:
        from kernbench_cli.errors import KernbenchError

        if value == "":
            raise KernbenchError(f"{option} is empty: name {what}")
        return value
    return check


XOpt = Annotated[str | None, typer.Option(
    "--x", metavar="AXIS", callback=_named("--x", "an axis, or leave --x out"),
    help="The axis along the plot's x (default: the first that varies).")]
YOpt = Annotated[str, typer.Option(
    "--y", metavar="METRIC",
    callback=_named("--y", "a metric (latency, energy, …, or one the kernel states)"),
    help="The plot's metric: latency, gemm_mac_utilization, hbm_gbps, energy, power, "
         "perf_per_watt, or one the kernel states (tpot_ps, …).")]
BoundsOnlyOpt = Annotated[bool, typer.Option(
    "--bounds-only", help="Run nothing: each point's analytic lower bounds (the kernel's "
                          "bounds(), after its setup made shapes only), in a second or less "
                          "a point.")]
PruneOpt = Annotated[str | None, typer.Option(
    "--prune-above", metavar="LATENCY|xFACTOR",
    help="Run only the points whose lower bound (the kernel's bounds()) is at most this "
         "latency (50us) or this factor of the smallest point's (x1.5); the others are rows "
         "marked pruned, with their bound.")]
DaskOpt = Annotated[str | None, typer.Option(
    "--dask", metavar="ADDRESS", envvar="DASK_SCHEDULER_ADDRESS",
    help="Run the points on this Dask scheduler (tcp://HOST:8786; needs kernbench[dask]).")]


def sweep(
    ctx: typer.Context, kernel: KernelArg, topology: TopologyOpt = None, costs: CostsOpt = None,
    sets: AxisSetOpt = None, param: AxisParamOpt = None, zipped: ZipOpt = False,
    pair: PairOpt = None,
    seed: SeedOpt = 0, timing_only: TimingOnlyOpt = False, jobs: JobsOpt = None,
    out: OutOpt = None, resume: ResumeOpt = False, replay: ReplayOpt = None,
    no_replay: NoReplayOpt = False, plot: PlotOpt = None, x: XOpt = None,
    y: YOpt = "latency", dask: DaskOpt = None, fmt: FormatOpt = None,
    as_json: JsonOpt = False, bounds_only: BoundsOnlyOpt = False, prune_above: PruneOpt = None,
) -> None:
    """Run KERNEL at every point of the axes; a table of the points, as given."""
    source = ctx.get_parameter_source("dask")  # (typer's own click's enum: by its name)
    with _dask_named(dask, getattr(source, "name", None) == "ENVIRONMENT"):
        from kernbench_cli.api import sweeps as api

        fmt = chosen_format(fmt, as_json)
        api.check_options(kernel, topology, costs, replay, out, resume, jobs, dask, plot=plot,
                          params=param)
        if bounds_only:
            _bounds_only(kernel, topology, costs, sets, param, zipped, pair, plot, prune_above,
                         out, resume, fmt, replay)
            return
        if plot is not None:
            from kernbench_cli.report.plot import check
            from kernbench_cli.sim.kernels import load_kernel

            todo = api.sweep_points(sets or [], param or [], zipped, pair or ())
            check(plot, x, y, list(todo[0].axes) if todo else [],
                  states_metrics=hasattr(load_kernel(kernel).module, "metrics"))
        progress = _progress(sys.stderr.isatty())
        try:
            result = api.sweep(kernel, topology, params=param or [], set=sets or [], costs=costs,
                               zip=zipped, pair=pair or (), seed=seed, timing_only=timing_only,
                               jobs=jobs, replay=replay, record_once=not no_replay, out=out,
                               resume=resume, dask=dask, on_start=progress.start,
                               on_row=progress.advance, prune_above=prune_above)
        finally:
            progress.stop()
        ordered = result.to_dicts()
        _print(ordered, list(result.axes), fmt)
        if plot is not None and any(row["result"] is not None for row in ordered):
            result.plot(plot, x, y, option="--plot")
        result.check()


@contextmanager
def _dask_named(dask: str | None, from_environment: bool) -> Iterator[None]:
    """An error about a `--dask` address taken from DASK_SCHEDULER_ADDRESS
    (`from_environment`), not given on the command line, says where it came from."""
    from kernbench_cli.errors import KernbenchError

    try:
        yield
    except KernbenchError as exc:
        text = exc.args[0] if len(exc.args) == 1 and isinstance(exc.args[0], str) else ""
        if dask and from_environment and text.startswith("--dask "):
            exc.args = ("--dask (from DASK_SCHEDULER_ADDRESS) " + text.removeprefix("--dask "),)
        raise


def _bounds_only(kernel: str, topology: str | None, costs: Path | None,
                 sets: list[str] | None, param: list[str] | None, zipped: bool,
                 pair: list[str] | None, plot: Path | None, prune_above: str | None,
                 out: Path | None, resume: bool, fmt: Format, replay: Path | None) -> None:
    """`sweep --bounds-only`: each point's bounds (`kb.sweep(bounds_only=True)`), printed
    in `fmt`; exit 1 if a point's bounds() failed."""
    from kernbench_cli.api import sweeps as api
    from kernbench_cli.errors import KernbenchError

    for option, given in (("--plot", plot), ("--prune-above", prune_above)):
        if given is not None:
            raise KernbenchError(f"--bounds-only runs nothing: {option} needs runs (drop one "
                                 "of them)")
    result = api.sweep(kernel, topology, params=param or [], set=sets or [], costs=costs,
                       zip=zipped, pair=pair or (), out=out, resume=resume, bounds_only=True,
                       replay=replay)
    rows = result.to_dicts()
    if fmt is Format.json:
        import json

        typer.echo(json.dumps(rows, sort_keys=True, indent=2))
    elif fmt is Format.csv:
        from kernbench_cli.report.bounds import sweep_csv
        from kernbench_cli.report.formats import csv_text

        typer.echo(csv_text(*sweep_csv(rows, list(result.axes))), nl=False)
    else:
        from rich.console import Console

        from kernbench_cli.report.bounds import sweep_table

        if fmt is Format.md:
            from kernbench_cli.report.formats import markdown

            typer.echo(markdown(sweep_table(rows)), nl=False)
        else:
            echo_rich(sweep_table(rows, Console().width))
    result.check()


def _print(rows: list[dict[str, Any]], axes: list[str], fmt: Format) -> None:
    """The sweep's rows in the format asked for: a table, the `--out` CSV, Markdown or
    every row's JSON."""
    if fmt is Format.json:
        import json

        typer.echo(json.dumps(rows, sort_keys=True, indent=2))
    elif fmt is Format.csv:
        from kernbench_cli.explore.sweep import csv_header, csv_row
        from kernbench_cli.report.formats import csv_text
        from kernbench_cli.report.metrics import names

        kept = names(r["result"] for r in rows)
        typer.echo(csv_text(csv_header(axes, kept), (csv_row(r, axes, kept) for r in rows)),
                   nl=False)
    else:
        from rich.console import Console

        from kernbench_cli.report.sweep import sweep_table

        if fmt is Format.md:
            from kernbench_cli.report.formats import markdown

            typer.echo(markdown(sweep_table(rows)), nl=False)
        else:
            echo_rich(sweep_table(rows, Console().width))


class _progress:
    """A Rich progress bar with ETA on terminals; one line per finished point otherwise.
    `start` hears how many points are left to run, `advance` each finished row, `stop` that
    the sweep has ended (however it ended)."""

    def __init__(self, tty: bool):
        self.tty, self.total, self.done = tty, 0, 0
        self.bar = None

    def start(self, total: int) -> None:
        self.total = total
        if self.tty and self.total:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

            self.bar = Progress("sweep", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                console=Console(stderr=True), transient=True)
            self.bar.__enter__()
            self.task = self.bar.add_task("sweep", total=self.total)

    def advance(self, row: dict[str, Any]) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.advance(self.task)
            return
        axes = " ".join(f"{k}={v}" for k, v in row["axes"].items())
        what = f"error: {row['error']}" if row["error"] else \
            f"pruned: lower bound {row['bounds']['lower_bound_ps'] / 1000:g} ns" \
            if row.get("pruned") else f"latency {row['result']['latency_ns']:g} ns"
        typer.echo(f"point {self.done}/{self.total} ({axes}): {what}", err=True)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None
