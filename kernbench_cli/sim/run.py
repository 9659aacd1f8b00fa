"""Launch a kernel on a system and collect a `RunResult` (DESIGN.md, data flow 4-7)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import simpy

from kernbench_cli.address.physaddr import AddressMap
from kernbench_cli.config.units import format_time_ps
from kernbench_cli.errors import (
    AddressError,
    DeadlockError,
    KernbenchError,
    KernelError,
    ParamError,
)
from kernbench_cli.hw.memory import Memory
from kernbench_cli.hw.pe import ENGINES
from kernbench_cli.hw.system import System
from kernbench_cli.lang import DEFAULT_MAX_COMMANDS, bridge
from kernbench_cli.lang.dtypes import NAMES, TOLERANCE
from kernbench_cli.lang.tl import TL, Launch, kernel_line
from kernbench_cli.lang.trace import Replayer
from kernbench_cli.sim.host import Host
from kernbench_cli.sim.kernels import KernelModule
from kernbench_cli.sim.result import Check, EngineStats, RunResult
from kernbench_cli.sim.trace_file import TraceError

#: Shared blocks, reported one row per level over the units a run used.
SHARED_LEVELS = ("hbm", "noc", "ucie", "sip_link", "rack_link")


def run_kernel(kernel: KernelModule, amap: AddressMap, params: dict[str, Any], seed: int = 0,
               timing_only: bool = False, record: bool = False,
               max_commands: int = DEFAULT_MAX_COMMANDS) -> RunResult:
    """Run `kernel` on every PE of `amap`'s topology and verify it (unless timing only).

    With `record`, `result.trace` holds the command trace (see sim.trace_file).
    """
    wall = time.perf_counter()
    system = System(amap)
    memory = Memory(backed=not timing_only)
    host = Host(system, memory, seed, timing_only)
    args = _setup(kernel, host, params)
    launch, tls, threads = _launch(system, memory, timing_only, record)
    launch.max_commands = max_commands
    fn = kernel.fn("kernel")
    bridge.run(launch.env, threads, [_body(kernel, tl, fn, args) for tl in tls])
    _check_deadlock(kernel.shown, str(kernel.path), system, threads, tls)
    _check_unreceived(kernel.shown, system)
    outputs, checks = {}, []
    if not timing_only:
        outputs = _call(kernel, "outputs", host, args, params)
        checks = _verify(kernel, host, params, outputs)
    result = _collect(kernel.name, system, launch, tls, threads, params, seed, timing_only,
                      checks)
    result.inputs, result.outputs = host.inputs, outputs
    if hasattr(kernel.module, "bounds"):
        result.bounds = _call(kernel, "bounds", amap.topology, params)
    if record:
        result.trace = {
            "kernel": kernel.name, "params": params, "seed": seed,
            "topology": amap.topology.name,
            "topology_file": str(amap.topology.source.resolve()) if amap.topology.source else "",
            "memory": [list(a) for a in memory.allocations()],
            "pes": [tl._trace for tl in tls],
        }
    result.wall_s = time.perf_counter() - wall
    return result


def replay_trace(trace: dict[str, Any], amap: AddressMap, source: str) -> RunResult:
    """Re-time a recorded trace on `amap`'s topology: no kernel code, no values."""
    wall = time.perf_counter()
    system = System(amap)
    topo = amap.topology
    if len(trace["pes"]) > len(system.pes):
        raise TraceError(f"{source}: the trace has {len(trace['pes'])} PEs; topology "
                         f"{topo.name!r} has {len(system.pes)}")
    memory = Memory(backed=False)
    for addr, nbytes, name in trace["memory"]:
        for byte in (addr, addr + nbytes - 1):
            try:
                amap.decode(byte)
            except AddressError as exc:
                raise TraceError(f"{source}: allocation {name!r} at {addr:#x} does not exist in "
                                 f"topology {topo.name!r}: {exc}") from None
        memory.add(addr, nbytes, name)
    launch, tls, threads = _launch(system, memory, True, False)
    launch.replaying = True
    targets = [_replay_body(source, tl, entries) for tl, entries in zip(tls, trace["pes"],
                                                                        strict=False)]
    targets += [_idle] * (len(tls) - len(targets))
    bridge.run(launch.env, threads, targets)
    _check_deadlock(source, source, system, threads, tls)
    result = _collect(f"{trace['kernel']} (replay)", system, launch, tls, threads,
                      trace["params"], trace.get("seed", 0), True, [])
    result.wall_s = time.perf_counter() - wall
    return result


def _idle() -> None:
    return None


def _launch(system: System, memory: Memory, timing_only: bool, record: bool):
    env = simpy.Environment()
    costs = system.topology.cost_table
    launch = Launch(system, memory, costs.issue, costs.scheduler.plan, env, timing_only, record)
    threads = [bridge.PeThread(env, pe.pid) for pe in system.pes]
    tls = [TL(launch, pe, thread) for pe, thread in zip(system.pes, threads, strict=True)]
    return launch, tls, threads


def _replay_body(source: str, tl: TL, entries: list):
    def run() -> None:
        try:
            Replayer(tl).run(entries)
        except KernbenchError as exc:
            raise KernelError(f"replay of {source}: PE ({tl._pe.coord}) at "
                              f"t={format_time_ps(tl._cpu.time)}: {exc}") from None

    return run


def _setup(kernel: KernelModule, host: Host, params: dict[str, Any]) -> dict[str, Any]:
    try:
        args = kernel.fn("setup")(host, dict(params))
    except KernbenchError:
        raise
    except ValueError as exc:
        raise ParamError(f"{kernel.name}: {exc}") from None
    except Exception as exc:
        raise _located(kernel, exc, "setup") from exc
    if not isinstance(args, dict):
        raise ParamError(f"{kernel.shown}: setup must return the kernel's arguments as a dict")
    return args


def _call(kernel: KernelModule, name: str, *args: Any) -> Any:
    try:
        return kernel.fn(name)(*args)
    except KernbenchError:
        raise
    except Exception as exc:
        raise _located(kernel, exc, name) from exc


def _located(kernel: KernelModule, exc: BaseException, where: str) -> KernelError:
    line = kernel_line(str(kernel.path), exc.__traceback__)
    return KernelError(f"{kernel.shown}:{line if line else '?'}: in {where}: "
                       f"{type(exc).__name__}: {exc}")


def _body(kernel: KernelModule, tl: TL, fn, args: dict[str, Any]):
    def run() -> None:
        try:
            fn(tl, **args)
        except Exception as exc:
            raise _kernel_failure(kernel, tl, exc) from exc

    return run


def _kernel_failure(kernel: KernelModule, tl: TL, exc: BaseException) -> BaseException:
    """A kernel's error, with the kernel line, the PE and the simulated time."""
    line = kernel_line(str(kernel.path), exc.__traceback__)
    if line is None and not isinstance(exc, KernbenchError):
        return exc  # not the kernel's doing: a bug in kernbench keeps its traceback
    pe = tl._pe
    where = (f"{kernel.shown}:{line if line else '?'}: PE ({pe.coord}) "
             f"at t={format_time_ps(pe.cpu.time)}")
    if isinstance(exc, KernbenchError):
        return KernelError(f"{where}: {exc}")
    return KernelError(f"{where}: {type(exc).__name__}: {exc}")


def _check_deadlock(shown: str, path: str, system: System, threads: list, tls: list[TL]) -> None:
    stuck = [(t, tl) for t, tl in zip(threads, tls, strict=True) if not t.finished]
    if not stuck:
        return
    lines = []
    for thread, tl in stuck[:8]:
        frame = thread.glet.gr_frame
        line = None
        while frame is not None:
            if frame.f_code.co_filename == path:
                line = frame.f_lineno
                break
            frame = frame.f_back
        lines.append(f"PE ({tl._pe.coord}) at {shown}:{line or '?'} waits: "
                     f"{thread.blocked_on} (since t={format_time_ps(tl._cpu.time)})")
    more = f"; and {len(stuck) - 8} more" if len(stuck) > 8 else ""
    raise DeadlockError(f"deadlock: {len(stuck)} of {len(system.pes)} PEs still wait and "
                        "nothing is left to run: " + "; ".join(lines) + more)


def _check_unreceived(shown: str, system: System) -> None:
    """Messages sent but never received are a mis-wired kernel, not a finished one."""
    left = []
    for pe in system.pes:
        for direction, ring in pe.rings.items():
            chunks = list(ring.chunks) + [c for stash in ring.stash.values() for c in stash]
            senders = sorted({c.sender for c in chunks})
            if senders:
                names = ", ".join(f"PE ({system.coords[s]})" for s in senders)
                plural = "s" if len(chunks) != 1 else ""
                left.append(f"PE ({pe.coord}) ring {direction}: {len(chunks)} chunk{plural} from "
                            f"{names}")
    if left:
        more = f"; and {len(left) - 4} more rings" if len(left) > 4 else ""
        raise KernelError(f"{shown}: the kernel ended with messages never received: "
                          + "; ".join(left[:4]) + more)


def _verify(kernel: KernelModule, host: Host, params: dict[str, Any],
            outputs: dict[str, np.ndarray]) -> list[Check]:
    expected = _call(kernel, "reference", host, params)
    checks = []
    for name in sorted(expected):
        if name not in outputs:
            raise KernelError(f"{kernel.shown}: outputs() returned no {name!r}")
        got, want = outputs[name], expected[name]
        if got.shape != want.shape:
            raise KernelError(f"{kernel.shown}: output {name!r} has shape {list(got.shape)}, "
                              f"the reference {list(want.shape)}")
        dt = NAMES.get(got.dtype, "f32")
        atol, rtol = TOLERANCE[dt]
        g, w = got.astype(np.float64), want.astype(np.float64)
        err = np.abs(g - w)
        finite = bool(np.all(np.isfinite(g)))
        passed = finite and bool(np.all(err <= atol + rtol * np.abs(w)))
        max_err = float(err.max()) if err.size and finite else float("inf")
        checks.append(Check(name, dt, max_err, atol, rtol, passed))
    return checks


def _collect(kernel_name: str, system: System, launch: Launch, tls: list[TL],
             threads: list, params: dict[str, Any], seed: int, timing_only: bool,
             checks: list[Check]) -> RunResult:
    pes = system.pes
    latency = max(max(tl.last_end, pe.finish) for tl, pe in zip(tls, pes, strict=True))
    labels = tuple(str(pe.coord) for pe in pes)
    engines: dict[str, EngineStats] = {}
    for name in ENGINES:
        parts = [pe.engine(name) for pe in pes]
        engines[name] = EngineStats(name, labels, tuple(p.busy_ps for p in parts),
                                    tuple(p.ops for p in parts))
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
    flops = sum(r[8] for r in launch.oplog if r[3] in ("dot", "gemm_tile"))
    hbm_bytes = sum(c.bytes for c in calendars if c.level == "hbm")
    return RunResult(
        kernel=kernel_name, topology=topo.name,
        costs=topo.cost_table.name, num_pes=len(pes), params=dict(params), seed=seed,
        timing_only=timing_only, latency_ps=latency, commands=launch.commands, engines=engines,
        pe_labels=labels, cpu_stall_ps=tuple(pe.cpu.stall_ps for pe in pes), checks=checks,
        oplog=launch.oplog,
        peak_flops_per_ps=2 * gemm.rows * gemm.cols * topo.pe.clock / 10**12,
        flops=flops, hbm_bytes=hbm_bytes,
        hbm_peak_bytes_per_ps=topo.hbm.bandwidth * len(pes) / 10**12,
        switches=sum(t.switches for t in threads), events=sum(t.events for t in threads),
    )
