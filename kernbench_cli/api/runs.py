"""`kb.run` and `kb.replay`, and what they load: kernels, topologies, recorded traces.

Each function takes what the matching CLI option takes, as Python values: a topology by
name or path (or one `load_topology` returned), ``set={"pe.gemm.rows": 8}`` for the
`--set` items and ``params={"seq_len": 8192}`` for the `-p` ones (mappings are turned
into the CLI's ``KEY=VALUE`` items and read by the same code; a list of such items is
taken as it is). Bad input raises the `KernbenchError` the CLI would print, with the same
message. The heavy modules (numpy, SimPy, the model) are imported on the first call.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernbench_cli.api import arguments as args
from kernbench_cli.api.result import Result
from kernbench_cli.config.schema import Topology
from kernbench_cli.errors import KernbenchError, ParamError, clip
from kernbench_cli.fileio import MAX_JSON_INT
from kernbench_cli.lang import DEFAULT_MAX_COMMANDS
from kernbench_cli.lang.watchdog import (
    DEFAULT_KERNEL_TIMEOUT,
    MIN_KERNEL_TIMEOUT,
    holds_caller_timer,
    hook_limit,
)

if TYPE_CHECKING:
    from kernbench_cli.address.physaddr import AddressMap
    from kernbench_cli.sim.kernels import KernelModule
    from kernbench_cli.sim.trace_file import Trace
    from kernbench_cli.sim.watch import Watch

Sets = Mapping[str, Any] | Sequence[str] | None
Params = Mapping[str, Any] | Sequence[str] | None


@holds_caller_timer
def load_kernel(kernel: str | Path, *,
                kernel_timeout: float = DEFAULT_KERNEL_TIMEOUT) -> KernelModule:
    """A shipped kernel by name (``"gqa_attention"``) or a kernel file by path, imported and
    checked; `ParamError` if there is none or it is malformed. `kb.run` takes it in place of
    a name (its module code then runs once, not per run). Its import is stopped if it runs
    `kernel_timeout` seconds (0: no limit)."""
    from kernbench_cli.sim.kernels import load_kernel as load

    check_kernel_timeout(kernel_timeout)
    with hook_limit(kernel_timeout):
        return load(args.name_or_path(kernel, "kernel", "a kernel name or .py path", True))


def load_topology(topology: str | Path | None = None, *, costs: str | Path | None = None,
                  set: Sets = None,  # `set`, as the CLI says it
                  trace: Trace | str | Path | Result | None = None,
                  recorded_sets: bool = True) -> Topology:
    """A topology by name (``"sip"``) or TOML path (None: ``default``), with its cost table
    (``costs`` overrides the one it names) and the ``set`` overrides, validated as
    `kernbench topology validate` does (`ConfigError` lists every problem).

    With ``trace`` (from `load_trace`; or a trace file, or a `Result` of `run`, as `replay`
    takes them), the configuration a replay of it times on: the run's
    own topology unless ``topology`` is given, its cost table unless ``costs`` is, and its
    ``--set`` items before ``set`` (unless not ``recorded_sets``), as `kernbench replay`.
    """
    from kernbench_cli.config.loader import set_items

    spec = args.name_or_path(topology, "topology", "a topology name or TOML path (or None)")
    costs_path = args.path(costs, "costs")
    items = set_items(set)
    args.flags(recorded_sets=recorded_sets)
    if trace is not None:
        trace = _recording(trace)  # a path or a run's Result too, as replay takes them
        from kernbench_cli.sim.run import replay_address_map

        amap = replay_address_map(trace, trace_source(trace), spec, costs_path, items,
                                  recorded_sets)
    else:
        from kernbench_cli.address import load_address_map

        amap = load_address_map(spec, costs_path, items)
    return amap.topology


def load_trace(path: str | Path) -> Trace:
    """A trace file written by `kernbench run --record`, read and checked (`TraceError`)."""
    from kernbench_cli.sim.trace_file import read_trace

    return read_trace(args.path(path, "path", required=True))


def trace_source(trace: Trace) -> str:
    """How messages name `trace`: its file, or for a run's own trace, that run."""
    return trace.source or f"the recording of {trace.kernel}"


def check_kernel_timeout(seconds: float) -> None:
    """`kernel_timeout` (`--kernel-timeout`): 0 (no limit), or at least the watch's tick."""
    args.number(seconds, "kernel_timeout")
    if seconds != 0 and not seconds >= MIN_KERNEL_TIMEOUT:  # NaN too
        raise KernbenchError(f"--kernel-timeout {seconds:g}: needs 0 (no limit) or at least "
                             f"{MIN_KERNEL_TIMEOUT:g} s (the watch looks every millisecond)")


def _check_counts(seed: Any, max_commands: Any) -> None:
    """`seed` and `max_commands` are what the CLI's options allow (INT, at least 0 and 1)."""
    check_seed(seed)
    if isinstance(max_commands, bool) or not isinstance(max_commands, int) or max_commands < 1:
        raise ParamError(f"max_commands={max_commands!r}: needs an integer of at least 1")


def check_seed(seed: Any) -> None:
    """`seed` is what `--seed` allows: an integer from 0 to 2^64 - 1 (a result holds it, and
    is read back as JSON: `fileio.MAX_JSON_INT`)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_JSON_INT:
        raise ParamError(f"seed={clip(seed)}: needs an integer from 0 to 2^64 - 1")


def compiled(topology: str | Path | Topology | None, costs: str | Path | None,
             sets: Sets) -> AddressMap:
    """The compiled address map of a topology given by name or path, or already loaded."""
    from kernbench_cli.address.physaddr import AddressMap

    return AddressMap.compile(loaded_topology(topology, costs, sets))


def loaded_topology(topology: str | Path | Topology | None, costs: str | Path | None,
                    sets: Sets) -> Topology:
    """A topology given by name or path, loaded, or one already loaded (then `costs` and
    `sets` are refused: they go to `load_topology`)."""
    args.one_of(topology, "topology", (str, os.PathLike, Topology, type(None)),
                "a topology name, a TOML path or a kb.load_topology Topology")
    if isinstance(topology, Topology):
        if costs is not None or sets:
            raise KernbenchError("costs= and set= go to load_topology (or give the topology by "
                                 "name or path): this topology is loaded already")
        return topology
    return load_topology(topology, costs=costs, set=sets)


def _result(raw, amap: AddressMap, per_pe: bool, shown: str, check: bool) -> Result:
    """The API's `Result` of the simulator's; with `check`, `Result.check()` raised, the
    exception holding the result as its `result`."""
    from kernbench_cli.report.run import race_lines, to_json

    lines = tuple(race_lines(raw, amap, shown)) if raw.races else ()
    result = Result.from_dict(to_json(raw, per_pe), raw=raw, address_map=amap,
                              race_lines=lines)
    if check:
        try:
            result.check()
        except KernbenchError as exc:
            exc.result = result
            raise
    return result


@holds_caller_timer
def run(kernel: str | Path | KernelModule, topology: str | Path | Topology | None = None, *,
        params: Params = None, set: Sets = None,  # `set`, as the CLI says it
        costs: str | Path | None = None, timing_only: bool = False, seed: int = 0,
        per_pe: bool = False, races: bool = False, oplog: bool = False,
        max_commands: int = DEFAULT_MAX_COMMANDS,
        kernel_timeout: float = DEFAULT_KERNEL_TIMEOUT, watch: Watch | None = None,
        check: bool = True, dedup: bool = True, shortcuts: bool = True) -> Result:
    """Run `kernel` on every PE of `topology` and verify it: `kernbench run`.

    ``result.to_dict()`` is what ``run --json`` prints for the same arguments (with
    ``--per-pe``, ``--races`` for `per_pe`, `races`). `timing_only` skips values and
    verification; `oplog` keeps the op log in ``result.raw.oplog``; `watch` follows the
    progress (`sim.watch.Watch`). With `check` (the default) a failed verification or a
    race found raises `VerificationError` or `RaceError` as the CLI's exit 1 does; the
    exception's ``result`` is the result. Every other error is raised as the CLI's.
    `dedup` (the default; ``--no-dedup`` is `dedup=False`) times one PE per class of
    PEs that time alike: the same results, sooner where PEs repeat each other.
    `shortcuts` (the default; ``--no-shortcuts`` is `shortcuts=False`) copies, timing
    only, the repetitions of a loop body proven alike to the ones before (`tl.repeat`,
    a decoder layer): the same results, sooner.
    """
    check_kernel_timeout(kernel_timeout)
    _check_counts(seed, max_commands)
    args.flags(timing_only=timing_only, per_pe=per_pe, races=races, oplog=oplog, check=check,
               dedup=dedup, shortcuts=shortcuts)
    args.watch(watch)
    from kernbench_cli.sim.kernels import KernelModule, param_items, parse_params
    from kernbench_cli.sim.run import run_kernel

    module = kernel if isinstance(kernel, KernelModule) else \
        load_kernel(kernel, kernel_timeout=kernel_timeout)
    amap = compiled(topology, costs, set)
    with hook_limit(kernel_timeout):  # its scaled defaults: the kernel's code
        values = parse_params(module, param_items(params), amap.topology.num_pes)
    raw = run_kernel(module, amap, values, seed=seed, timing_only=timing_only,
                     max_commands=max_commands, oplog=oplog, watch=watch, races=races,
                     kernel_timeout=kernel_timeout, dedup=dedup, shortcuts=shortcuts)
    return _result(raw, amap, per_pe, module.shown, check)


@holds_caller_timer
def replay(trace: str | Path | Trace | Result, topology: str | Path | Topology | None = None,
           *, costs: str | Path | None = None, set: Sets = None,
           recorded_sets: bool = True, per_pe: bool = False, races: bool = False,
           oplog: bool = False, watch: Watch | None = None, check: bool = True,
           dedup: bool = True) -> Result:
    """Re-time a recorded run without its kernel code or values: `kernbench replay`.

    `trace` is a trace file (`run --record`), a loaded one (`load_trace`), or a `Result` of
    `run` (its own recording, kept in memory). Without `topology` the run's own is used,
    without `costs` its cost table, and its ``--set`` items apply before `set` (none with
    ``recorded_sets=False``); a `Topology` from `load_topology(trace=…)` is used as it is.
    ``result.to_dict()`` is what ``replay --json`` prints. `check` as in `run`.
    """
    args.flags(recorded_sets=recorded_sets, per_pe=per_pe, races=races, oplog=oplog,
               check=check, dedup=dedup)
    args.watch(watch)
    data = _recording(trace)
    if isinstance(topology, Topology):
        amap = compiled(topology, costs, set)
    else:
        from kernbench_cli.address.physaddr import AddressMap

        amap = AddressMap.compile(load_topology(topology, costs=costs, set=set, trace=data,
                                                recorded_sets=recorded_sets))
    from kernbench_cli.sim.run import replay_trace

    source = trace_source(data)
    raw = replay_trace(data, amap, source, oplog=oplog, watch=watch, races=races,
                       dedup=dedup)
    return _result(raw, amap, per_pe, source, check)


def _recording(trace: str | Path | Trace | Result) -> Trace:
    """The trace `replay` times: read from a file, or the one a run's result holds."""
    from kernbench_cli.sim.trace_file import Trace

    args.one_of(trace, "trace", (Trace, Result, str, os.PathLike),
                "a trace file, a kb.load_trace trace or a Result of kb.run")
    if isinstance(trace, Trace):
        return trace
    if isinstance(trace, Result):
        recorded = getattr(trace.raw, "trace", None)
        if recorded is None:
            raise KernbenchError(f"{trace.kernel}: this result holds no recording (a replay's, "
                                 "or one rebuilt from a dict); replay a result of kb.run or a "
                                 "trace file")
        return recorded
    return load_trace(trace)
