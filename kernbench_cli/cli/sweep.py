"""`kernbench sweep`: one kernel over axes of `--set` keys and parameters, on local workers."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from kernbench_cli.cli.common import CostsOpt, JsonOpt, SeedOpt, echo_rich
from kernbench_cli.errors import KernbenchError, SweepError

MAX_JOBS = 1024  # worker processes a sweep may start


def sweep(
    kernel: Annotated[str, typer.Argument(help="Kernel name (sharded_gemm, …) or .py path.")],
    topology: Annotated[str | None, typer.Option(
        "--topology", "-t", metavar="NAME|PATH",
        help="Topology name or TOML path; without it, default (with --replay, the "
             "recording's).")] = None,
    costs: CostsOpt = None,
    sets: Annotated[list[str] | None, typer.Option(
        "--set", metavar="KEY=V1,V2,…",
        help="A topology or costs. key and its values (an axis if several); repeatable.")]
    = None,
    param: Annotated[list[str] | None, typer.Option(
        "--param", "-p", metavar="NAME=V1,V2,…",
        help="A kernel parameter and its values (an axis if several); repeatable.")] = None,
    zipped: Annotated[bool, typer.Option(
        "--zip", help="Pair the axes' values in order instead of taking every combination.")]
    = False,
    seed: SeedOpt = 0,
    timing_only: Annotated[bool, typer.Option(
        "--timing-only", help="Skip values and verification (faster).")] = False,
    jobs: Annotated[int | None, typer.Option(
        "--jobs", "-j", help="Worker processes (default: the CPU count).", metavar="INT")]
    = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Write a row per finished point to this .jsonl or .csv file.")] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Skip the points already in --out; append the rest.")] = False,
    replay: Annotated[Path | None, typer.Option(
        "--replay", help="Replay this recording (run --record) at every point; only --set "
                         "axes, no -p.")] = None,
    no_replay: Annotated[bool, typer.Option(
        "--no-replay", help="Run every point, even when only cost-table keys vary.")] = False,
    plot: Annotated[Path | None, typer.Option(
        "--plot", help="Draw the sweep to this .png, .svg or .pdf (needs kernbench[plot]).")]
    = None,
    x: Annotated[str | None, typer.Option(
        "--x", metavar="AXIS",
        help="The axis along the plot's x (default: the first that varies).")] = None,
    y: Annotated[str, typer.Option(
        "--y", metavar="METRIC",
        help="The plot's metric: latency, gemm_mac_utilization or hbm_gbps.")]
    = "latency",
    dask: Annotated[str | None, typer.Option(
        "--dask", metavar="ADDRESS", envvar="DASK_SCHEDULER_ADDRESS",
        help="Run the points on this Dask scheduler (tcp://HOST:8786; needs kernbench[dask]).")]
    = None,
    as_json: JsonOpt = False,
) -> None:
    """Run KERNEL at every point of the axes; a table of the points, as given."""
    from kernbench_cli.sweep import Results, Spec, cost_only, points, record, run_dask, run_local

    _check_options(kernel, topology, costs, replay, out, plot, resume, jobs, dask)
    todo = points(sets or [], param or [], zipped)
    axis_keys = list(todo[0].axes) if todo else []
    if plot is not None:
        from kernbench_cli.report.plot import check

        check(plot, x, y, axis_keys)
    spec = Spec(kernel, topology, str(costs) if costs else None, seed, timing_only,
                str(replay) if replay else None)
    results = Results(out, axis_keys, _identity(spec) if out is not None else "")
    if resume:
        results.load()
    rows: dict[int, dict[str, Any]] = {}
    for point in todo:
        if point.key in results.done:
            rows[point.index] = {**results.done[point.key], "point": point.index}
    left = [p for p in todo if p.index not in rows]
    if replay is not None and any(p.params != todo[0].params for p in todo):
        raise KernbenchError("--replay: -p cannot vary (the recording fixed the kernel's "
                             "parameters)")
    tty = sys.stderr.isatty()
    scratch = None
    try:
        if replay is None and timing_only and not no_replay and left and cost_only(todo):
            # one recording serves every point: record once, replay each
            import tempfile

            scratch = tempfile.TemporaryDirectory(prefix="kernbench-sweep-")
            trace = Path(scratch.name) / "sweep.kbtrace"
            record(spec, todo[0], trace)
            spec.trace = str(trace)
        with _progress(len(left), tty) as advance:
            def on_row(row: dict[str, Any]) -> None:
                rows[row["point"]] = row
                results.write(row)
                advance(row)

            if left and dask:
                run_dask(dask, spec, left, on_row)
            elif left:
                run_local(spec, left, jobs or os.cpu_count() or 1, on_row)
    finally:
        results.close()
        if scratch is not None:
            scratch.cleanup()
    ordered = [rows[p.index] for p in todo]
    if as_json:
        import json

        typer.echo(json.dumps(ordered, sort_keys=True, indent=2))
    else:
        from rich.console import Console

        from kernbench_cli.report.sweep import sweep_table

        echo_rich(sweep_table(ordered, Console().width))
    if plot is not None:
        from kernbench_cli.report.plot import plot as draw

        where = topology or "default"
        draw(plot, ordered, x, y, f"{kernel} on {where}: {len(ordered)} points")
    failed = [r for r in ordered if r["error"]]
    if failed:
        raise SweepError(f"{len(failed)} of {len(ordered)} points failed (their rows say why)")


class _progress:
    """A Rich progress bar with ETA on terminals; one line per finished point otherwise."""

    def __init__(self, total: int, tty: bool):
        self.total, self.tty, self.done = total, tty, 0
        self.bar = None

    def __enter__(self):
        if self.tty and self.total:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

            self.bar = Progress("sweep", BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                console=Console(stderr=True), transient=True)
            self.bar.__enter__()
            self.task = self.bar.add_task("sweep", total=self.total)
        return self.advance

    def advance(self, row: dict[str, Any]) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.advance(self.task)
            return
        axes = " ".join(f"{k}={v}" for k, v in row["axes"].items())
        what = f"error: {row['error']}" if row["error"] else \
            f"latency {row['result']['latency_ns']:g} ns"
        typer.echo(f"point {self.done}/{self.total} ({axes}): {what}", err=True)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


def _check_options(kernel: str, topology: str | None, costs: Path | None,
                   replay: Path | None, out: Path | None, plot: Path | None, resume: bool,
                   jobs: int | None, dask: str | None) -> None:
    """What can be checked before any point runs: the options, the kernel, and that the
    outputs may be written (not over a file the points read)."""
    from kernbench_cli.fileio import check_outputs, note_input
    from kernbench_cli.sim.kernels import kernel_file

    if out is not None and out.suffix not in (".jsonl", ".csv"):
        raise KernbenchError(f"--out {str(out)!r}: the results file must end in .jsonl or .csv")
    if resume and out is None:
        raise KernbenchError("--resume needs --out, the results file to resume")
    if jobs is not None and not 1 <= jobs <= MAX_JOBS:
        raise KernbenchError(f"--jobs {jobs}: needs 1 to {MAX_JOBS} workers")
    if dask:
        from kernbench_cli.sweep import check_dask_address

        check_dask_address(dask)
    kernel_file(kernel)  # an unknown kernel is bad input, before any point runs
    for given in (kernel, topology, costs, replay):  # files the points read
        if given is not None and Path(given).is_file():
            note_input(Path(given))
    check_outputs({"--out": out, "--plot": plot}, rewrites=("--out",) if resume else ())


def _identity(spec) -> str:
    """The sweep's identity (`sweep.identity`), its kernel and configuration checked."""
    from kernbench_cli.address import load_address_map
    from kernbench_cli.sim.kernels import kernel_file
    from kernbench_cli.sweep import identity

    path, _ = kernel_file(spec.kernel)
    costs = Path(spec.costs) if spec.costs else None
    if spec.trace is None:
        amap = load_address_map(spec.topology, costs)
    else:
        from kernbench_cli.sim.run import replay_address_map
        from kernbench_cli.sim.trace_file import read_trace

        amap = replay_address_map(read_trace(Path(spec.trace)), spec.trace, spec.topology,
                                  costs)
    return identity(spec, path, amap)
