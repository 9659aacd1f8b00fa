"""`kernbench run`: simulate a kernel on a topology and report where the time went."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from kernbench_cli.cli.common import (
    DEDUP_DEFAULT,
    SHORTCUTS_DEFAULT,
    CostsOpt,
    DedupOpt,
    JsonOpt,
    ParamOpt,
    PerPeOpt,
    ProgressOpt,
    SeedOpt,
    SetOpt,
    ShortcutsOpt,
    TopologyOpt,
    echo_rich,
    following,
    output_path,
)
from kernbench_cli.errors import KernbenchError
from kernbench_cli.fileio import check_outputs
from kernbench_cli.lang import DEFAULT_MAX_COMMANDS
from kernbench_cli.lang.watchdog import DEFAULT_KERNEL_TIMEOUT
from kernbench_cli.report.trace_filter import trace_filter

ChromeTraceOpt = Annotated[Path | None, typer.Option(
    "--chrome-trace", parser=output_path,
    help="Write a Perfetto/Chrome timeline here: engines, shared resources, rings, critical "
         "path (gzip-compressed when the name ends in .gz).")]
TracePesOpt = Annotated[str | None, typer.Option(
    "--trace-pes", metavar="PES",
    help="Draw only these PEs in the timeline: indexes and ranges, e.g. 0-3,8.")]
TraceWindowOpt = Annotated[str | None, typer.Option(
    "--trace-window", metavar="START,END",
    help="Draw only what overlaps this time window in the timeline, e.g. 10us,25us.")]
OplogOpt = Annotated[Path | None, typer.Option(
    "--oplog", parser=output_path,
    help="Write the op log here: a JSON line per command, addresses decoded "
         "(gzip-compressed when the name ends in .gz).")]
CriticalPathOpt = Annotated[Path | None, typer.Option(
    "--critical-path", parser=output_path,
    help="Write the critical path here: a JSON line per step.")]
SaveOpt = Annotated[Path | None, typer.Option(
    parser=output_path, help="Write inputs and outputs to this .npz file.")]
TimingOnlyOpt = Annotated[bool, typer.Option(
    "--timing-only", help="Skip values and verification (faster; for sweeps).")]
RecordOpt = Annotated[Path | None, typer.Option(
    parser=output_path, help="Write the command trace to this file, for `kernbench replay`.")]
RacesOpt = Annotated[bool, typer.Option(
    "--races", help="Look for data races between PEs; exit 1 if any.")]
MaxCommandsOpt = Annotated[int, typer.Option(
    help="Stop a kernel that issues more commands than this (an endless loop).", min=1,
    metavar="INT")]
KernelTimeoutOpt = Annotated[float, typer.Option(
    help="Stop a kernel whose Python issues no command for this many seconds of wall time "
         "(an endless loop); 0: no limit.", min=0, metavar="SECONDS")]
SensitivityOpt = Annotated[bool, typer.Option(
    "--sensitivity", help="Then re-time the run by replay with each timing key made 2x "
                          "better, and rank what each saves.")]


def run(
    kernel: Annotated[str, typer.Argument(help="Kernel name (sharded_gemm, …) or .py path.",
                                          metavar="KERNEL")],
    topology: TopologyOpt = None,
    costs: CostsOpt = None,
    sets: SetOpt = None,
    param: ParamOpt = None,
    per_pe: PerPeOpt = False,
    as_json: JsonOpt = False,
    save: SaveOpt = None,
    seed: SeedOpt = 0,
    timing_only: TimingOnlyOpt = False,
    record: RecordOpt = None,
    chrome_trace: ChromeTraceOpt = None,
    trace_pes: TracePesOpt = None,
    trace_window: TraceWindowOpt = None,
    oplog: OplogOpt = None,
    critical_path: CriticalPathOpt = None,
    races: RacesOpt = False,
    max_commands: MaxCommandsOpt = DEFAULT_MAX_COMMANDS,
    kernel_timeout: KernelTimeoutOpt = DEFAULT_KERNEL_TIMEOUT,
    sensitive: SensitivityOpt = False,
    progress: ProgressOpt = False,
    dedup: DedupOpt = DEDUP_DEFAULT,
    shortcuts: ShortcutsOpt = SHORTCUTS_DEFAULT,
    bounds_only: BoundsOnlyOpt = False,
) -> None:
    """Run KERNEL on every PE of the topology, verify it, and report the time."""
    from kernbench_cli.api import runs as api

    if bounds_only:
        refuse_with_bounds_only({
            "--save": save, "--record": record, "--chrome-trace": chrome_trace,
            "--trace-pes": trace_pes, "--trace-window": trace_window, "--oplog": oplog,
            "--critical-path": critical_path, "--races": races, "--sensitivity": sensitive,
            "--per-pe": per_pe})
        show_bounds(kernel, topology, costs, sets, param, as_json)
        return
    if save is not None and timing_only:
        raise KernbenchError("--save needs values: it cannot go with --timing-only")
    module = api.load_kernel(kernel, kernel_timeout=kernel_timeout)
    topo = api.load_topology(topology, costs=costs, set=sets or ())
    keep = trace_filter(trace_pes, trace_window, topo.num_pes, chrome_trace)
    check_outputs({"--save": save, "--record": record, "--chrome-trace": chrome_trace,
                   "--oplog": oplog, "--critical-path": critical_path})
    from kernbench_cli.sim.watch import Watch

    watch = Watch()
    with following(f"{module.name} on {topo.num_pes} PEs", watch, progress):
        result = api.run(module, topo, params=param or (), seed=seed, timing_only=timing_only,
                         max_commands=max_commands, kernel_timeout=kernel_timeout,
                         oplog=chrome_trace is not None or oplog is not None, watch=watch,
                         races=races, per_pe=per_pe, check=False, dedup=dedup,
                         shortcuts=shortcuts)
    _write_outputs(chrome_trace, keep, oplog, critical_path, result, save, record)
    show(result, as_json, per_pe, sensitive)
    result.check()


BoundsOnlyOpt = Annotated[bool, typer.Option(
    "--bounds-only",
    help="Print the kernel's analytic lower bounds (its bounds()) and the largest, with "
         "nothing simulated (the setup is made shapes only: what a run refuses is refused); "
         "options that ask for a run's output are refused.")]


def refuse_with_bounds_only(given: dict[str, Any]) -> None:
    """KernbenchError naming the first option of `given` (option: its value; None or False
    where it was not given) that asks for what only a run produces."""
    for option, value in given.items():
        if value is not None and value is not False:
            raise KernbenchError(f"--bounds-only simulates nothing: {option} asks for a run's "
                                 "output (drop one of them)")


def show_bounds(kernel: str, topology: str | None, costs: Path | None,
                sets: list[str] | None, param: list[str] | None, as_json: bool) -> None:
    """`run --bounds-only`: the kernel's bounds (`kb.bounds`) as a summary, or its JSON."""
    from kernbench_cli.api.bounds import bounds

    found = bounds(kernel, topology, params=param or (), set=sets or (), costs=costs)
    if as_json:
        typer.echo(json.dumps(found.to_dict(), sort_keys=True, indent=2))
        return
    from kernbench_cli.report.bounds import summary

    echo_rich(summary(found.to_dict()))


def replay(
    trace: Annotated[Path, typer.Argument(help="A trace written by `kernbench run --record`.")],
    topology: Annotated[str | None, typer.Option(
        "--topology", "-t", metavar="NAME|PATH",
        help="Topology name or TOML path; without it, the trace's own.")] = None,
    costs: CostsOpt = None,
    sets: SetOpt = None,
    per_pe: PerPeOpt = False,
    as_json: JsonOpt = False,
    chrome_trace: ChromeTraceOpt = None,
    trace_pes: TracePesOpt = None,
    trace_window: TraceWindowOpt = None,
    oplog: OplogOpt = None,
    critical_path: CriticalPathOpt = None,
    races: RacesOpt = False,
    recorded_sets: Annotated[bool, typer.Option(
        "--recorded-sets/--no-recorded-sets",
        help="Apply the run's own --set items first (yours after them win).")] = True,
    progress: ProgressOpt = False,
    dedup: DedupOpt = DEDUP_DEFAULT,
) -> None:
    """Re-time a recorded run without its kernel code or values (for cost sweeps).

    Without --topology the trace's own topology is used, without --costs its cost
    table, and its --set items apply before yours (--no-recorded-sets: not at all).
    """
    from kernbench_cli.api import runs as api

    data = api.load_trace(trace)
    topo = api.load_topology(topology, costs=costs, set=sets or (), trace=data,
                             recorded_sets=recorded_sets)
    keep = trace_filter(trace_pes, trace_window, topo.num_pes, chrome_trace)
    check_outputs({"--chrome-trace": chrome_trace, "--oplog": oplog,
                   "--critical-path": critical_path})
    from kernbench_cli.sim.watch import Watch

    watch = Watch()
    with following(f"replaying {data.kernel} on {topo.num_pes} PEs", watch, progress):
        result = api.replay(data, topo, oplog=chrome_trace is not None or oplog is not None,
                            watch=watch, races=races, per_pe=per_pe, check=False,
                            dedup=dedup)
    _write_outputs(chrome_trace, keep, oplog, critical_path, result)
    show(result, as_json, per_pe)
    result.check()


def _write_outputs(chrome_trace: Path | None, keep, oplog: Path | None,
                   critical_path: Path | None, result, save: Path | None = None,
                   record: Path | None = None) -> None:
    """The optional files of a run (an API `Result`): a Chrome trace of what `keep` (a
    `TraceFilter` or None) keeps, the op log, the critical path, its values (`save`) and
    its trace (`record`); each written whole or not at all, and all of them or none (an
    interrupt while one is written leaves the others as they were too), gzip-compressed
    where its name ends in .gz (not `save` and `record`: formats of their own); none if
    the trace window misses the run."""
    from kernbench_cli.fileio import written_together
    from kernbench_cli.report.trace_filter import check_window

    if chrome_trace is not None:
        check_window(keep, result.raw.latency_ps)
    with written_together():
        _write_each(chrome_trace, keep, oplog, critical_path, result, save, record)


def _write_each(chrome_trace: Path | None, keep, oplog: Path | None,
                critical_path: Path | None, result, save: Path | None,
                record: Path | None) -> None:
    """`_write_outputs`' files, one after another."""
    from kernbench_cli.fileio import atomic_write, gzipped_if_named

    raw, amap = result.raw, result.address_map
    if save is not None:
        _save_npz(save, {**result.inputs, **result.outputs})
    if record is not None:
        from kernbench_cli.sim.trace_file import write_trace

        write_trace(record, raw.trace)
    if critical_path is not None:
        from kernbench_cli.report.run import critical_path_lines

        text = "".join(line + "\n" for line in critical_path_lines(raw)).encode()
        atomic_write(critical_path, gzipped_if_named(critical_path, lambda out: out.write(text)),
                     "--critical-path")
    if chrome_trace is not None:
        from kernbench_cli.report.chrome_trace import chrome_trace as make_trace
        from kernbench_cli.report.chrome_trace import dumps

        text = dumps(make_trace(raw, amap, keep)).encode()
        atomic_write(chrome_trace, gzipped_if_named(chrome_trace, lambda out: out.write(text)),
                     "--chrome-trace")
    if oplog is not None:
        from kernbench_cli.report.oplog import oplog_lines

        def write(out) -> None:
            for line in oplog_lines(raw, amap):
                out.write(line.encode() + b"\n")

        atomic_write(oplog, gzipped_if_named(oplog, write), "--oplog")


def show(result, as_json: bool, per_pe: bool, sensitive: bool = False) -> None:
    """A result (an API `Result`) as Rich tables, or as its JSON object with --json; with
    `sensitive`, what each key made 2x better changes (`api.sensitivity`), by replay."""
    found = None
    if sensitive:
        from kernbench_cli.api.sensitivity import sensitivity

        found = sensitivity(result)
    if as_json:
        data = result.to_dict()
        if found is not None:
            data["sensitivity"] = found.to_dict()
        typer.echo(json.dumps(data, sort_keys=True, indent=2))
    else:
        from rich.console import Console

        from kernbench_cli.report import run as report
        from kernbench_cli.report.sensitivity import sensitivity_table

        width = Console().width
        echo_rich(report.render(result.raw, per_pe, width),
                  *([sensitivity_table(found, width)] if found is not None else []))


def _save_npz(path: Path, arrays: dict) -> None:
    import numpy as np

    from kernbench_cli.fileio import atomic_write

    atomic_write(path, lambda out: np.savez(out, **{k: np.asarray(v) for k, v in
                                                    arrays.items()}), "--save")
