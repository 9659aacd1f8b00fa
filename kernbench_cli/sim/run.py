"""Launch a kernel on a system and collect a `RunResult`: set up inputs, run, verify, report.

A run is two passes. The functional pass (`lang`) runs every PE's kernel in
program order with values and emits its command stream; every argument,
shape, address and TCM error, a receive whose message is never sent, and
the command limit are found there. The timing pass (`hw.timing`) times the
streams on the engine model. Errors carry the simulated time, so when the
functional pass fails the timing pass still times what the PEs issued up to
there: the error reported is the earliest in simulated time (ties to the
lower PE index), at the time the failing PE got to it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernbench_cli.address.physaddr import AddressMap
from kernbench_cli.config.loader import config_digest
from kernbench_cli.config.units import format_time_ps
from kernbench_cli.errors import (
    AddressError,
    ConfigError,
    DeadlockError,
    KernbenchError,
    KernelError,
    clip,
)
from kernbench_cli.fileio import unchanged_files
from kernbench_cli.hw.engines import ENGINES
from kernbench_cli.hw.gemm import peak_macs
from kernbench_cli.hw.ipcq import chunks_for
from kernbench_cli.hw.system import System
from kernbench_cli.hw.timing import Stuck, Timing, TimingError
from kernbench_cli.lang import DEFAULT_MAX_COMMANDS
from kernbench_cli.lang.bridge import Dropped
from kernbench_cli.lang.confine import Interrupted, confined, printing_to_stderr
from kernbench_cli.lang.memory import Memory
from kernbench_cli.lang.tl import CommandLimit, Launch, ShortcutMissed, functional_pass, kernel_line
from kernbench_cli.lang.watchdog import (
    DEFAULT_KERNEL_TIMEOUT,
    KernelTimeout,
    MemoryLow,
    hook_limit,
    memory_left,
    watchdog,
)
from kernbench_cli.sim import bounds as stated_bounds
from kernbench_cli.sim import energy, hooks, invariants
from kernbench_cli.sim.critical import critical_path
from kernbench_cli.sim.host import Host
from kernbench_cli.sim.kernels import KernelModule, files_read
from kernbench_cli.sim.races import find_races
from kernbench_cli.sim.regions import regions
from kernbench_cli.sim.regions import spans as region_spans
from kernbench_cli.sim.result import EngineStats, RunResult, Verification
from kernbench_cli.sim.roofline import roofline
from kernbench_cli.sim.trace_file import Trace, TraceError
from kernbench_cli.sim.watch import Watch
from kernbench_cli.stream import Program, Stream

#: Shared blocks, reported one row per level over the units a run used.
SHARED_LEVELS = ("hbm", "sram", "noc", "ucie", "sip_link", "rack_link")


def _quiet(fn):
    """Run `fn` with numpy's floating-point warnings off: a kernel's NaNs and overflows are
    judged by verification (and the kernel writer's reference), not printed by numpy. What
    the kernel prints goes to stderr, so `--json` on stdout stays JSON (this thread's prints
    only: `printing_to_stderr`). The kernel's code runs `confined` (no threads, no
    `os._exit` or `os.fork`, its own KeyboardInterrupt an error); both end with the call."""
    @functools.wraps(fn)
    def quiet(*args, **kwargs):
        with np.errstate(all="ignore"), printing_to_stderr(), confined():
            return fn(*args, **kwargs)
    return quiet


@dataclass(frozen=True)
class Timed:
    """A run as `metrics()` sees it: its latency, each named region's time on the critical
    path (``{}`` when it names none), and its energy in attojoules; per named region, the
    dynamic energy of its commands' actions and the first start and last end of its
    commands over every PE; the static energy (static power over the latency)."""

    latency_ps: int
    regions: dict[str, int]
    energy_aj: int = 0
    region_energy_aj: dict[str, int] = field(default_factory=dict)
    region_bounds: dict[str, tuple[int, int]] = field(default_factory=dict)
    static_aj: int = 0
    #: per named region, each time the PEs entered it (a loop's k-th pass through it on
    #: every PE): the first start and last end of that pass's commands over every PE
    region_passes: dict[str, list[tuple[int, int]]] = field(default_factory=dict)


@_quiet
def run_kernel(kernel: KernelModule, amap: AddressMap, params: dict[str, Any], seed: int = 0,
               timing_only: bool = False, max_commands: int = DEFAULT_MAX_COMMANDS,
               oplog: bool = False, watch: Watch | None = None, races: bool = False,
               kernel_timeout: float = DEFAULT_KERNEL_TIMEOUT, dedup: bool = True,
               shortcuts: bool = True) -> RunResult:
    """Run `kernel` on every PE of `amap`'s topology and verify it (unless timing only).

    With `oplog`, `result.oplog` lists every engine occupation; with `races`,
    `result.races` the data races between PEs. `result.trace` is what `kernbench run
    --record` writes. `watch` follows the progress. A kernel whose Python issues no
    command for `kernel_timeout` seconds is stopped, as is its module's other code
    (setup, reference, …) that runs that long with no progress; a run that leaves the
    machine short of memory too (`lang.watchdog`). `dedup` (the default) times one PE
    per class of PEs that time alike (`hw.symmetry`; the same results), without it every
    PE. `shortcuts` (the default) copies a timing-only run's repetitions of a loop body
    proven alike (`tl.repeat`; the same streams), without it runs every one.
    """
    with hook_limit(kernel_timeout), files_read(kernel, params) as digests, \
            hooks.callers_randomness():
        result = _run_kernel(kernel, amap, params, seed, timing_only, max_commands, oplog,
                             watch or Watch(), races, kernel_timeout, dedup, shortcuts)
    result.file_digests = result.trace.files = digests
    return result


def _run_kernel(kernel: KernelModule, amap: AddressMap, params: dict[str, Any], seed: int,
                timing_only: bool, max_commands: int, oplog: bool, watch: Watch, races: bool,
                kernel_timeout: float, dedup: bool, shortcuts: bool) -> RunResult:
    """`run_kernel`, its arguments in order."""
    wall = time.perf_counter()
    try:
        system, memory, host, args, kernel_file, launch, failures = _set_up_and_run(
            kernel, amap, params, seed, timing_only, max_commands, watch, kernel_timeout,
            shortcuts)
    except ShortcutMissed:  # it stopped inside a copy: run it as it would run without
        system, memory, host, args, kernel_file, launch, failures = _set_up_and_run(
            kernel, amap, params, seed, timing_only, max_commands, watch, kernel_timeout,
            False)
    try:
        outputs, unread = {}, None
        if not timing_only and not failures:  # read now: simulated memory goes before timing
            try:
                outputs = hooks.call(kernel, "outputs", host, args, params)
            except KernbenchError as exc:  # reported where it was: after the timing pass's errors
                unread = exc
            memory.release()
        program = launch.program
        timing = _timing_pass(system, program, kernel.shown, watch, oplog and not failures, dedup)
        if failures:
            raise _first_failure(kernel, kernel_file, system, failures)
        if timing.stuck:
            raise _deadlock(kernel.shown, system, program, timing.stuck)
        _check_unreceived(kernel.shown, launch)
        counts, by_region = energy.count(system, timing), energy.by_region(system, timing)
        model_checks = invariants.check(system, timing, counts, by_region)
        invariants.enforce(model_checks)
        if unread is not None:
            raise unread
        checks = [] if timing_only else hooks.verify(kernel, host, params, outputs)
        taken = hooks.resolved(kernel, amap.topology, params)  # as the run took them: its result's
        result = _collect(kernel.name, system, timing, taken, seed, timing_only, checks)
        result.kernel_digest = kernel.digest
        _analyse(result, system, timing, counts, model_checks, races, by_region)
        result.switches = launch.hub.switches
        result.repeats = dict(launch.repeats)
        result.inputs, result.outputs = host.inputs, outputs
        _stated(kernel, amap.topology, params, result)
        if not timing_only and hasattr(kernel.module, "quality"):  # after metrics: beside them
            result.metrics.update(hooks.checked_metrics(kernel, hooks.call(
                kernel, "quality", host, params, outputs)))
        result.trace = _trace(kernel, system, taken, seed, memory, program)
        result.wall_s = time.perf_counter() - wall
        return result
    finally:
        launch.hub.stop()  # the kernels still waiting (the run failed), done with now


def _set_up_and_run(kernel: KernelModule, amap: AddressMap, params: dict[str, Any],
                    seed: int, timing_only: bool, max_commands: int, watch: Watch,
                    kernel_timeout: float, shortcuts: bool) -> tuple:
    """The host's setup and the functional pass (`run_kernel`'s arguments): the system,
    memory, host, the kernel's arguments, its file, the launch and the PEs' failures."""
    watch.begin("setting up", None)
    hooks.seed_globals(seed)  # again where a missed shortcut makes the program again
    system = System(amap)
    memory = Memory(backed=not timing_only)
    watch.host = host = Host(system, memory, seed, timing_only)
    args = hooks.setup(kernel, host, params)
    fn = hooks.kernel_fn(kernel, args)
    kernel_file = fn.__code__.co_filename
    launch = Launch(system, memory, timing_only, kernel_file, max_commands, shortcuts)
    failures: dict[int, BaseException] = {}

    def body(tl) -> None:
        try:
            with np.errstate(all="ignore"):  # a greenlet has its own context: see `_quiet`
                fn(tl, **args)
            left_open = tl._left_open()
            if left_open is not None:
                raise left_open
        except (Interrupted, KernelTimeout, MemoryLow, Dropped):
            raise  # the whole pass stops
        except ShortcutMissed as exc:
            if exc.ours:
                raise  # made again without shortcuts
            failures[tl.pid] = exc  # the kernel's own
        except BaseException as exc:  # sys.exit(), KeyboardInterrupt: the kernel's errors too
            failures[tl.pid] = exc

    watch.begin("functional pass", launch)
    try:
        _functional(kernel, kernel_file, launch, body, kernel_timeout, failures)
    except BaseException:
        launch.hub.stop()
        raise
    return system, memory, host, args, kernel_file, launch, failures


def _functional(kernel: KernelModule, kernel_file: str, launch: Launch, body,
                kernel_timeout: float, failures: dict[int, BaseException]) -> None:
    """The functional pass, ended as a run reports it: a timeout, the machine's memory
    running out or the command limit (if it stopped every PE that stopped) is the run's
    error at once (no timing pass after it: timing a loop without end cut at 100 M
    commands took minutes and more memory than the pass); an exception the kernel's own
    code did not raise is a bug in kernbench, with its traceback."""
    system = launch.system
    try:
        functional_pass(launch, body, watchdog(lambda: launch.commands, kernel_timeout))
    except KernelTimeout as exc:
        raise _timed_out(kernel, kernel_file, system, launch, exc) from None
    except MemoryError as exc:  # the watchdog's `MemoryLow` in a PE's kernel, or not
        thread = launch.hub.current  # its PE and line if raised in the kernel's code
        mine = thread is not None and kernel_line(kernel_file, exc.__traceback__) is not None
        raise _out_of_memory(kernel, kernel_file, launch, thread.pid if mine else None,
                             exc) from None
    # a failure the kernel took (and carried on) is its PE's failure still
    failures.update({pid: exc for pid, (exc, _) in launch.failed.items()})
    if failures and all(isinstance(exc, CommandLimit) for exc in failures.values()):
        pid, exc = next(iter(failures.items()))  # the PE that issued the one too many
        line = kernel_line(kernel_file, exc.__traceback__)
        raise KernelError(f"{kernel.shown}:{line}: PE ({system.coords[pid]}): {exc}")
    for pid, exc in failures.items():
        if isinstance(exc, MemoryError):
            raise _out_of_memory(kernel, kernel_file, launch, pid, exc)
        if not isinstance(exc, KernbenchError) and kernel_line(kernel_file, exc.__traceback__) \
                is None:
            raise exc  # not the kernel's doing: a bug in kernbench keeps its traceback


def _timing_pass(system: System, program: Program, shown: str, watch: Watch, oplog: bool,
                 dedup: bool) -> Timing:
    """The timing pass of `program` on `system`, watched for the machine's memory (the
    watchdog's floor; `hw` does not import `lang`), its errors as a run reports them
    (`shown`: what ran)."""
    timing = Timing(system, program, oplog=oplog, dedup=dedup)
    watch.begin("timing pass", timing)
    try:
        with watchdog(None, 0):  # the machine's memory only
            timing.run()
    except TimingError as exc:
        raise _timing_failed(shown, system, exc) from None
    except MemoryError:
        raise KernelError(f"{shown}: this machine ran out of memory timing "
                          f"{program.commands:,} commands on {len(system.pes):,} PEs") from None
    return timing


def _out_of_memory(kernel: KernelModule, kernel_file: str, launch: Launch, pid: int | None,
                   exc: BaseException | None) -> KernelError:
    """The functional pass filled the machine's memory: what held it (the command streams,
    and with values the tensors) and what stops a kernel that loops sooner. Or, where PE
    `pid`'s own code asked numpy for an array larger than the memory left (`_too_large`),
    that allocation's failure."""
    where = kernel.shown
    if pid is not None:
        line = kernel_line(kernel_file, exc.__traceback__)
        where += f":{line if line else '?'}: PE ({launch.system.coords[pid]})"
        if _too_large(exc):  # not the streams' doing
            return KernelError(f"{where}: {hooks.described(exc)}")
    held = "the command streams" if launch.timing_only else \
        "the command streams and the tensors' values (--timing-only keeps none)"
    count = f"{launch.commands:,} command{'s' if launch.commands != 1 else ''}"
    return KernelError(f"{where}: this machine ran out of memory after the kernel issued "
                       f"{count}, holding {held}; a loop without end? "
                       f"--max-commands {launch.max_commands:,} stops it sooner")


def _too_large(exc: BaseException) -> bool:
    """Whether `exc` is numpy refusing one array larger than the memory left now (its
    `shape` and `dtype`): that array's failure, not the run's growth filling the machine
    (whose last allocation, however small, is the one that fails)."""
    import math

    shape, dtype = getattr(exc, "shape", None), getattr(exc, "dtype", None)
    if isinstance(exc, MemoryLow) or shape is None or dtype is None:
        return False
    left = memory_left()
    return left is not None and math.prod(shape) * dtype.itemsize > left[0]


def _trace(kernel: KernelModule, system: System, params: dict[str, Any], seed: int,
           memory: Memory, program) -> Trace:
    """What `kernbench run --record` writes of this run."""
    topo = system.topology
    costs = topo.cost_table.source
    return Trace(kernel.name, dict(params), seed, topo.name,
                 str(topo.source.resolve()) if topo.source else "",
                 memory.allocations(), program, topo.overrides,
                 str(costs.resolve()) if costs else "",
                 slice_base=system.slice_bases, slice_bytes=system.amap.slice_bytes,
                 digests={"topology": config_digest(topo),
                          "costs": config_digest(topo.cost_table),
                          **({"kernel": kernel.digest} if kernel.digest else {})})


def _stated(kernel: KernelModule, topology, params: dict[str, Any], result: RunResult) -> None:
    """What the kernel itself states of its run: `bounds()` (the latency checked to be at
    least each) and `metrics()`, checked."""
    if hasattr(kernel.module, "bounds"):
        result.bounds = stated_bounds.checked(kernel, hooks.call(kernel, "bounds", topology,
                                                                 params))
        stated_bounds.check_latency(kernel.shown, result.latency_ps, result.bounds)
    if hasattr(kernel.module, "metrics"):
        result.metrics = hooks.checked_metrics(kernel, hooks.call(
            kernel, "metrics", topology, params, _timed(result)))


def _analyse(result: RunResult, system: System, timing: Timing, counts, model_checks,
             races: bool, by_region: list) -> None:
    """What a run and a replay both work out of a finished timing pass: the invariants'
    verdicts, energy, roofline, critical path, regions and, if asked, races."""
    table = system.topology.energy
    result.energy = energy.account(counts, table)
    result.roofline = roofline(system, timing)
    result.critical_path = critical_path(system, timing)
    explained = invariants.explained(result.critical_path)
    result.invariants = [*model_checks, explained]
    invariants.enforce([explained])
    result.region_spans = region_spans(timing.program, timing)
    result.regions = regions(timing.program, result.critical_path, result.region_spans,
                             [sum(energy.account(c, table).dynamic.values()) for c in by_region])
    if races:
        result.races = find_races(timing, system.amap)


def _timing_failed(shown: str, system: System, exc: TimingError) -> KernelError:
    """The error a run or replay reports for a stream the timing pass could not time: where
    and when, with the exit code of its kind (a time out of range is bad input)."""
    error = KernelError(f"{shown}: PE ({system.coords[exc.pid]}) at "
                        f"t={format_time_ps(exc.time_ps)}: {exc}")
    error.exit_code = exc.exit_code
    return error


def replay_address_map(trace: Trace, source: str, topology: str | None = None,
                       costs: Path | None = None, sets: Sequence[str] = (),
                       recorded_sets: bool = True) -> AddressMap:
    """The configuration a replay of `trace` (read from `source`) times on: `topology`, or
    the run's own (its file if still there, else the shipped topology of its name); `costs`,
    or the run's cost table (TraceError if that file is gone: another table would time
    another machine); the run's `--set` items (unless not `recorded_sets`), then `sets`,
    later ones winning. What the trace gave (a file it names, a recorded `--set` item) is
    said to come from `source` when it is at fault."""
    from kernbench_cli.address import load_address_map

    files: list[str] = []  # files named by the trace: their problems are the trace's
    given_topology, given_costs = topology, costs
    if topology is None:
        topology = _recorded_topology(trace, source)
        files.append(topology)
    if costs is None and trace.costs_file:
        costs = Path(trace.costs_file)
        if not costs.is_file():
            raise TraceError(f"{source}: the run used the cost table {trace.costs_file}, "
                             "which is not there; give --costs")
        files.append(trace.costs_file)
    recorded = list(trace.sets) if recorded_sets else []
    try:
        amap = load_address_map(topology, costs, recorded)
    except KernbenchError as exc:
        raise _from_trace(exc, source, files) from None
    taken = {"topology": topology if given_topology is None else None,
             "costs": (trace.costs_file or amap.topology.cost_table.name)
             if given_costs is None else None}
    if any(taken.values()) and trace.digests:  # the digests are of the run's items applied
        _same_as_recorded(trace, source, amap if recorded_sets or not trace.sets else
                          _with_items(trace, source, topology, costs), taken)
    return load_address_map(topology, costs, [*recorded, *sets]) if sets else amap


def _with_items(trace: Trace, source: str, topology: str, costs: Path | None) -> AddressMap:
    """The configuration with the trace's `--set` items, which its digests are of; a
    TraceError if they no longer load on it (they did when it was recorded): the files
    cannot be checked, and may have changed."""
    from kernbench_cli.address import load_address_map

    try:
        return load_address_map(topology, costs, list(trace.sets))
    except KernbenchError as exc:
        raise TraceError(f"{source}: the run's --set items no longer load on the topology "
                         f"and cost table it was recorded on ({exc.lines()[0]}), so they "
                         "cannot be checked against it (edited since?); give --topology "
                         "and --costs to replay on them as they are") from None


def _same_as_recorded(trace: Trace, source: str, amap: AddressMap,
                      taken: dict[str, str | None]) -> None:
    """TraceError unless the topology and cost table a replay takes from `trace` (`taken`:
    what it loaded for each, None if given) resolve, with the run's `--set` items (`amap`),
    to the digests the run recorded: an edited file, or a shipped topology standing in for
    a file gone, would time another machine under the run's names."""
    now = {"topology": config_digest(amap.topology),
           "costs": config_digest(amap.topology.cost_table)}
    for key, option in (("topology", "--topology"), ("costs", "--costs")):
        was = trace.digests.get(key)
        if taken[key] and was is not None and now[key] != was:
            what = "topology" if key == "topology" else "cost table"
            raise TraceError(f"{source}: the run's {what} {taken[key]} is not the one it "
                             f"was recorded on (#{was} then, #{now[key]} now: edited since, "
                             f"or another of its name); give {option} to replay on it as "
                             "it is")


def _recorded_topology(trace: Trace, source: str) -> str:
    """The run's topology: its file if still there, else the shipped one of its name."""
    from kernbench_cli.shipped import shipped_topologies

    if trace.topology_file and Path(trace.topology_file).is_file():
        return trace.topology_file
    if trace.topology in shipped_topologies():
        return trace.topology
    where = f"its file {trace.topology_file} is not there" if trace.topology_file else \
        "it names no file"
    raise TraceError(f"{source}: the run's topology {trace.topology!r}: {where}, and no "
                     "shipped topology has that name; give --topology")


def _from_trace(exc: KernbenchError, source: str, files: list[str]) -> KernbenchError:
    """`exc`, each of its lines saying it came from trace `source`: a recorded `--set` item
    (every `--set` here is one), a file the trace named (`files`)."""
    def said(line: str) -> str:
        if line.startswith("--set "):
            return f"{source}: the run's recorded {line} (--no-recorded-sets leaves them out)"
        named = next((f for f in files if line.startswith(f"{f}: ")), None)
        return line if named is None else \
            f"{line} (read because {source} names it; --topology or --costs gives another)"

    if isinstance(exc, ConfigError):
        return ConfigError([said(p) for p in exc.problems])
    error = TraceError(said(str(exc)))
    error.exit_code = exc.exit_code
    return error


def replay_trace(trace: Trace, amap: AddressMap, source: str, oplog: bool = False,
                 watch: Watch | None = None, races: bool = False,
                 dedup: bool = True) -> RunResult:
    """Re-time a recorded trace on `amap`'s topology: the timing pass alone (`dedup`: as
    `run_kernel`'s). Each file the recorded run's parameters named (`trace.files`) must
    still be the one it read, through the replay: its bounds and metrics read it again,
    and would be another model's."""
    with unchanged_files(_recorded_files(trace, source), source, "replay") as digests:
        for name, digest in trace.files.items():
            if digests.get(name) != digest:
                now = f"#{digests[name]} now" if name in digests else "no regular file there now"
                raise TraceError(f"{source}: -p {name}={trace.params[name]} is not the file the "
                                 f"recorded run read (#{digest} then, {now}): restore it, or run "
                                 "again")
        result = _replay(trace, amap, source, oplog, watch, races, dedup)
    result.file_digests = digests
    return result


def _recorded_files(trace: Trace, source: str) -> dict[str, str]:
    """The files `trace.files` names, by parameter: each must be a parameter of the run
    that names a file."""
    for name in trace.files:
        value = trace.params.get(name)
        if not isinstance(value, str) or not value.strip():
            raise TraceError(f"{source}: damaged trace: files names {clip(name)}, which is not "
                             "a parameter of the run that names a file")
    return {name: trace.params[name] for name in trace.files}


def _replay(trace: Trace, amap: AddressMap, source: str, oplog: bool, watch: Watch | None,
            races: bool, dedup: bool) -> RunResult:
    """`replay_trace`, its files checked."""
    wall = time.perf_counter()
    system = System(amap)
    topo = amap.topology
    program = trace.program
    pes = len(program.streams)
    if pes > len(system.pes):
        raise TraceError(f"{source}: the trace has {pes} PEs; topology {topo.name!r} has "
                         f"{len(system.pes)}")
    for addr, nbytes, name in trace.memory:
        for byte in (addr, addr + nbytes - 1):
            try:
                amap.decode(byte)
            except AddressError as exc:
                raise TraceError(f"{source}: allocation {name!r} at {addr:#x} does not exist in "
                                 f"topology {topo.name!r}: {exc}") from None
    for pid, peak in enumerate(program.tcm_peak):
        if peak > topo.pe.tcm.size:
            raise TraceError(f"{source}: PE ({system.coords[pid]}) uses {peak} B of TCM; "
                             f"topology {topo.name!r} has {topo.pe.tcm.size} B")
    read = program.ring_capacity
    if read is not None and read != (topo.pe.ipcq.slots, topo.pe.ipcq.slot_size):
        raise TraceError(f"{source}: the kernel cut its messages for IPCQ rings of {read[0]} "
                         f"slots of {read[1]} B (tl.ring_capacity); topology {topo.name!r} has "
                         f"{topo.pe.ipcq.slots} of {topo.pe.ipcq.slot_size} B, where a run "
                         "would make another program: run it there instead")
    extra = len(system.pes) - pes
    if extra:  # the topology's other PEs run nothing
        program = Program(program.streams + [Stream() for _ in range(extra)],
                          program.gemm_shapes, program.math_kinds, program.composites,
                          program.tcm_peak + [0] * extra, program.regions,
                          program.region_marks + [[] for _ in range(extra)],
                          program.ring_capacity)
    timing = _timing_pass(system, program, f"replay of {source}", watch or Watch(), oplog,
                          dedup)
    if timing.stuck:
        raise _deadlock(source, system, program, timing.stuck)
    counts, by_region = energy.count(system, timing), energy.by_region(system, timing)
    model_checks = invariants.check(system, timing, counts, by_region)
    invariants.enforce(model_checks)
    result = _collect(f"{trace.kernel} (replay)", system, timing, trace.params, trace.seed,
                      True, [])
    result.kernel_digest = trace.digests.get("kernel", "")
    result.recorded_on = {"topology": trace.topology, **(
        {"topology_digest": trace.digests["topology"]} if "topology" in trace.digests else {}),
        "pes": pes}
    module = _shipped(trace)
    if _same_grid(trace, topo):  # bounds of another grid say nothing of these streams
        result.bounds = _said(module, "bounds", topo, dict(trace.params))
        stated_bounds.check_latency(result.kernel, result.latency_ps, result.bounds)
    _analyse(result, system, timing, counts, model_checks, races, by_region)
    result.metrics = _said(module, "metrics", topo, dict(trace.params), _timed(result))
    result.wall_s = time.perf_counter() - wall
    return result


def _same_grid(trace: Trace, topology) -> bool:
    """Whether `topology` is the one `trace` was recorded on, but for keys other than
    ``system.`` ones (its PEs, cubes and meshes): where a kernel's bounds hold for the
    recorded streams."""
    def grid(sets) -> list[str]:
        return [item for item in sets if item.strip().startswith("system.")]

    return topology.name == trace.topology and grid(topology.overrides) == grid(trace.sets)


def _timed(result: RunResult) -> Timed:
    """What a kernel's `metrics()` is told of its run."""
    bounds: dict[str, tuple[int, int]] = {}
    passes: dict[str, list[tuple[int, int]]] = {}
    seen: dict[tuple[int, str], int] = {}  # (PE, region) -> its stretches so far
    for pid, name, start, end in result.region_spans:
        first, last = bounds.get(name, (start, end))
        bounds[name] = (min(first, start), max(last, end))
        k = seen[(pid, name)] = seen.get((pid, name), -1) + 1
        got = passes.setdefault(name, [])
        if k == len(got):
            got.append((start, end))
        else:
            got[k] = (min(got[k][0], start), max(got[k][1], end))
    en = result.energy
    return Timed(result.latency_ps, {r.name: r.path_ps for r in result.regions},
                 en.total if en is not None else 0,
                 {r.name: r.energy_aj for r in result.regions}, bounds,
                 en.static if en is not None else 0, passes)


def _shipped(trace: Trace) -> Any:
    """The module of the shipped kernel a trace is a recording of, to state its bounds and
    metrics (`_said`; its code is not needed to time the trace); None for other kernels."""
    from kernbench_cli.sim.kernels import load_kernel, shipped_kernels

    return load_kernel(trace.kernel).module if trace.kernel in shipped_kernels() else None


def _said(module: Any, hook: str, *args: Any) -> dict:
    """What `module`'s (`_shipped`'s) `bounds()` or `metrics()` states for a replayed trace
    of it; nothing without one."""
    if module is None or not hasattr(module, hook):
        return {}
    try:
        return getattr(module, hook)(*args)
    except Exception:  # params the kernel's version here does not know: state nothing
        return {}


def _timed_out(kernel: KernelModule, kernel_file: str, system: System, launch: Launch,
               exc: KernelTimeout) -> KernelError:
    line = kernel_line(kernel_file, exc.__traceback__)
    thread = launch.hub.current
    pe = f" PE ({system.coords[thread.pid]})" if thread is not None else ""
    return KernelError(f"{kernel.shown}:{line if line else '?'}:{pe} issued no command for "
                       f"{exc.limit:g} s of wall-clock time: an endless loop in the kernel's "
                       "Python? (--kernel-timeout changes the limit)")


def _first_failure(kernel: KernelModule, kernel_file: str, system: System,
                   failures: dict[int, BaseException]) -> KernelError:
    """The kernel error that happened first in simulated time, with its line, PE and time."""
    pid = min(failures, key=lambda p: (system.pes[p].cpu.time, p))
    exc = failures[pid]
    line = kernel_line(kernel_file, exc.__traceback__) or getattr(exc, "at_line", 0)
    where = (f"{kernel.shown}:{line if line else '?'}: PE ({system.coords[pid]}) "
             f"at t={format_time_ps(system.pes[pid].cpu.time)}")
    if isinstance(exc, KernbenchError):
        return KernelError(f"{where}: {exc}")
    return KernelError(f"{where}: {hooks.described(exc)}")


def _deadlock(shown: str, system: System, program: Program, stuck: list[Stuck]) -> DeadlockError:
    lines = []
    for s in stuck[:8]:
        line = program.streams[s.pid].line[s.index]
        lines.append(f"PE ({system.coords[s.pid]}) at {shown}:{line or '?'} waits: {s.what} "
                     f"(since t={format_time_ps(s.time_ps)})")
    more = f"; and {len(stuck) - 8} more" if len(stuck) > 8 else ""
    return DeadlockError(f"deadlock: {len(stuck)} of {len(system.pes)} PEs still wait and "
                         "nothing is left to run: " + "; ".join(lines) + more)


def _check_unreceived(shown: str, launch: Launch) -> None:
    """Messages sent but never received are a mis-wired kernel, not a finished one."""
    system = launch.system
    ipcq = system.topology.pe.ipcq
    rings: dict[tuple[int, str], dict[int, int]] = {}  # (receiver, ring) -> sender: chunks
    for (src, dst), box in launch.mail.items():
        if box:
            direction = system.arrival_direction(system.coords[src], system.coords[dst])
            chunks = sum(chunks_for(n, ipcq.slot_size) for n, _, _ in box)
            senders = rings.setdefault((dst, direction), {})
            senders[src] = senders.get(src, 0) + chunks
    left = []
    for (dst, direction), senders in sorted(rings.items(), key=lambda item: (
            item[0][0], "EWNS".index(item[0][1]))):
        chunks = sum(senders.values())
        names = ", ".join(f"PE ({system.coords[s]})" for s in sorted(senders))
        plural = "s" if chunks != 1 else ""
        left.append(f"PE ({system.coords[dst]}) ring {direction}: {chunks} chunk{plural} from "
                    f"{names}")
    if left:
        more = f"; and {len(left) - 4} more rings" if len(left) > 4 else ""
        raise KernelError(f"{shown}: the kernel ended with messages never received: "
                          + "; ".join(left[:4]) + more)


def _collect(kernel_name: str, system: System, timing: Timing, params: dict[str, Any],
             seed: int, timing_only: bool, checks: list[Verification]) -> RunResult:
    pes = system.pes
    labels = tuple(str(pe.coord) for pe in pes)
    engines: dict[str, EngineStats] = {}
    waits = {"cpu": tuple(pe.cpu.stall_ps for pe in pes),
             "dma": tuple(pe.dma.wait_ps for pe in pes)}
    for name in ENGINES:
        parts = [pe.engine(name) for pe in pes]
        engines[name] = EngineStats(name, labels, tuple(p.busy_ps for p in parts),
                                    tuple(p.ops for p in parts), waits.get(name, ()))
    rings = [(f"{pe.coord} {d}", ring) for pe in pes for d, ring in pe.rings.items()
             if ring.ops]
    if rings:
        engines["ipcq"] = EngineStats("ipcq", tuple(n for n, _ in rings),
                                      tuple(r.busy_ps for _, r in rings),
                                      tuple(r.ops for _, r in rings))
    calendars = system.network.calendars()
    for level in SHARED_LEVELS:
        used = [c for c in calendars if c.level == level and c.ops]
        if used:
            engines[level] = EngineStats(level, tuple(c.name for c in used),
                                         tuple(c.busy_ps for c in used),
                                         tuple(c.ops for c in used))
    topo = system.topology
    gemm = topo.pe.gemm
    hbm_bytes = sum(c.bytes for c in calendars if c.level == "hbm")
    program = timing.program
    high_water = tuple((used, when, program.streams[p.pid].line[at] if at < p.n else 0)
                       for p in timing.procs for used, when, at in (p.tcm_peak,))
    return RunResult(
        lines=[s.line for s in program.streams],
        kernel=kernel_name, topology=topo.name,
        costs=topo.cost_table.name, topology_digest=config_digest(topo),
        costs_digest=config_digest(topo.cost_table), overrides=topo.overrides,
        num_pes=len(pes), params=dict(params), seed=seed,
        timing_only=timing_only, latency_ps=timing.latency_ps,
        commands=timing.program.commands, engines=engines, pe_labels=labels,
        cpu_stall_ps=tuple(pe.cpu.stall_ps for pe in pes), checks=checks, oplog=timing.oplog,
        peak_flops_per_ps=2 * gemm.rows * gemm.cols * topo.pe.clock / 10**12,
        clock_hz=topo.pe.clock,
        flops=sum(pe.gemm.flops for pe in pes), hbm_bytes=hbm_bytes,
        array_flops=float(sum(pe.gemm.flops - 2 * sum(pe.gemm.macs.values())
                              + 2 * peak_macs(gemm, 0, pe.gemm.macs) for pe in pes)),
        array_cycles=float(sum(peak_macs(gemm, pe.gemm.mac_passes, pe.gemm.macs)
                               for pe in pes)),
        hbm_peak_bytes_per_ps=topo.hbm.bandwidth * len(pes) / 10**12,
        events=timing.events, tcm_high_water=high_water, tcm_bytes=topo.pe.tcm.size,
    )

