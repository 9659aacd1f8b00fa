"""Physical invariants, checked on every run (and replay): a violation is a model bug.

- work: the GEMM engines computed the flops the kernel's commands asked for
  (a composite's tiles add up to 2·M·K·N), PE_MATH the elements;
- bytes: the DMA engines moved the bytes the commands asked for (a
  composite's by its tile plan's formula, `hw.composite.traffic`);
- bounds: the latency is at least every resource's work at its peak rate
  (each PE's GEMM array, each HBM slice and link);
- bandwidth: no HBM slice or link carried bytes faster than its bandwidth,
  or outside a reservation (`Calendar.overdrawn`);
- TCM: tensors and composite tile buffers never held more than a PE's TCM.

Each is computed from two sides that the model keeps apart (what the streams
asked for against what the engines and calendars recorded), so a model bug
that drops or invents work shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernbench_cli.errors import KernbenchError
from kernbench_cli.hw.network import PS_PER_S
from kernbench_cli.hw.system import System
from kernbench_cli.hw.timing import Timing
from kernbench_cli.stream import COMPOSITE, DOT, LOAD, MATH, NONE, RECV, SEND, STORE


class InvariantError(KernbenchError):
    """A physical invariant does not hold: a bug in kernbench's model."""

    exit_code = 1


@dataclass(frozen=True)
class Invariant:
    name: str
    passed: bool
    detail: str  # the figures compared


def check(system: System, timing: Timing) -> list[Invariant]:
    """Every invariant of the run `timing` timed on `system`."""
    program, pes = timing.program, system.pes
    flops = elements = moved = 0
    for stream in program.streams:
        for op, size, arg in zip(stream.op, stream.size, stream.arg, strict=True):
            if op == DOT:
                flops += size
            elif op == MATH:
                elements += size
            elif op in (LOAD, STORE, SEND, RECV):  # a receive: PE_DMA copies it out
                moved += size
            elif op == COMPOSITE and arg != NONE:
                c = program.composites[arg]
                flops += 2 * c.m * c.k * c.n
    moved += timing.planned_bytes
    done_flops = sum(pe.gemm.flops for pe in pes)
    done_elements = sum(pe.math.elements for pe in pes)
    done_bytes = sum(pe.dma.bytes for pe in pes)
    out = [
        _same("gemm work", "flops", done_flops, flops),
        _same("math work", "elements", done_elements, elements),
        _same("dma bytes", "bytes", done_bytes, moved),
        _bounds(system, timing),
        _bandwidth(system),
        _tcm(system, timing),
    ]
    return out


def enforce(invariants: list[Invariant]) -> None:
    """InvariantError naming the first invariant that does not hold, with its figures."""
    for inv in invariants:
        if not inv.passed:
            raise InvariantError(f"model invariant violated ({inv.name}): {inv.detail}; this is "
                                 "a bug in kernbench, please report it")


def _same(name: str, unit: str, done: int, asked: int) -> Invariant:
    return Invariant(name, done == asked, f"the engines did {done:,} {unit}, the commands "
                                          f"asked for {asked:,}")


def _bounds(system: System, timing: Timing) -> Invariant:
    """latency >= work / peak rate, for every GEMM array, HBM slice and link."""
    latency = timing.latency_ps
    gemm = system.topology.pe.gemm
    peak_flops = 2 * gemm.rows * gemm.cols * system.topology.pe.clock  # per second
    worst, what = 0, "nothing"
    for pe in system.pes:
        need = -(-pe.gemm.flops * PS_PER_S // peak_flops)
        if need > worst:
            worst, what = need, f"PE ({pe.coord})'s GEMM array ({pe.gemm.flops:,} flops)"
    for cal in system.network.calendars():
        need = -(-cal.bytes * PS_PER_S // cal.bandwidth)
        if need > worst:
            worst, what = need, f"{cal.level} {cal.name} ({cal.bytes:,} B)"
    return Invariant("bounds", latency >= worst,
                     f"the latency is {latency:,} ps; the busiest resource, {what}, needs "
                     f"{worst:,} ps at its peak rate")


def _bandwidth(system: System) -> Invariant:
    for cal in system.network.calendars():
        if cal.overdrawn is not None:
            t, duration, nbytes = cal.overdrawn
            return Invariant("bandwidth", False,
                             f"{cal.level} {cal.name} carried {nbytes:,} B in {duration:,} ps "
                             f"from t={t:,} ps, above its {cal.bandwidth:,} B/s or outside its "
                             "reservations")
    return Invariant("bandwidth", True, "no HBM slice or link above its bandwidth")


def _tcm(system: System, timing: Timing) -> Invariant:
    size = system.topology.pe.tcm.size
    worst = max(timing.procs, key=lambda p: p.tcm_peak[0], default=None)
    peak = worst.tcm_peak[0] if worst is not None else 0
    where = f"PE ({system.coords[worst.pid]})" if worst is not None else "no PE"
    return Invariant("tcm", peak <= size, f"at most {peak:,} B of TCM in use ({where}), "
                                          f"of {size:,} B")
