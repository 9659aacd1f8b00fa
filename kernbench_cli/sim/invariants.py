"""Physical invariants, checked on every run (and replay): a violation is a model bug.

- work: the GEMM engines computed the flops the kernel's commands asked for
  (a composite's tiles add up to 2·M·K·N), PE_MATH the elements;
- bytes: the DMA engines moved the bytes the commands asked for (a
  composite's by its tile plan's formula, `hw.composite.traffic`);
- bounds: the latency is at least every resource's work at its peak rate
  (each PE's GEMM array, each HBM slice and link);
- bandwidth: every HBM slice, SRAM port and link is timed at the bandwidth
  the configuration gives it (a slice: its peak less refresh); none carried
  bytes faster than that, summed over the transfers on it at every instant
  (fair-shared flows' rate histories), or outside a reservation
  (circuit-style: `Calendar.overdrawn`); and every flow's rates carried its
  bytes by its end;
- TCM: tensors and composite tile buffers never held more than a PE's TCM,
  and the tiles a composite ran (their sizes, recomputed as they ran) fit the
  buffers its plan reserved.

Each is computed from two sides that the model keeps apart (what the streams
asked for against what the engines and calendars recorded), so a model bug
that drops or invents work shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

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
    topo = system.topology
    hbm = topo.hbm
    configured = {"hbm": hbm.bandwidth * (hbm.refresh_interval - hbm.refresh_time)
                  // hbm.refresh_interval, "sram": topo.sram.bandwidth,
                  "noc": topo.noc.bandwidth, "ucie": topo.ucie.bandwidth,
                  "sip_link": topo.sip_link.bandwidth, "rack_link": topo.rack_link.bandwidth}
    for cal in system.network.calendars():
        what = f"{cal.level} {cal.name}"
        if cal.bandwidth != configured[cal.level]:
            return Invariant("bandwidth", False, f"{what} is timed at {cal.bandwidth:,} B/s; "
                                                 f"the configuration gives "
                                                 f"{configured[cal.level]:,} B/s")
        if cal.overdrawn is not None:
            t, duration, nbytes = cal.overdrawn
            return Invariant("bandwidth", False,
                             f"{what} carried {nbytes:,} B in {duration:,} ps "
                             f"from t={t:,} ps, above its {cal.bandwidth:,} B/s or outside its "
                             "reservations")
        wrong = _flows_fit(cal.flows, configured[cal.level])
        if wrong:
            return Invariant("bandwidth", False, f"{what} {wrong}")
    return Invariant("bandwidth", True, "no HBM slice or link above its configured bandwidth")


def _flows_fit(flows: list, bandwidth: int) -> str:
    """What is wrong with the fair-shared `flows` of one resource ('' if nothing): their
    rates summed above `bandwidth` at some instant, or a flow whose rates did not carry its
    bytes by its end."""
    changes: list[tuple[int, int, Fraction]] = []
    for flow in flows:
        carried = Fraction(0)
        for start, end, rate in flow.rates():
            changes.append((start, 1, rate))
            changes.append((end, 0, -rate))  # at one instant: ends before starts
            carried += rate * (end - start)
        if carried < flow.nbytes * PS_PER_S:
            return (f"carried {flow.nbytes:,} B from t={flow.start:,} ps to {flow.end:,} ps at "
                    f"rates that move only {float(carried / PS_PER_S):,.0f} B")
    total = Fraction(0)
    for t, _, rate in sorted(changes, key=lambda c: (c[0], c[1])):
        total += rate
        if total > bandwidth:
            return (f"carried {float(total):,.0f} B/s at t={t:,} ps over its flows, above its "
                    f"{bandwidth:,} B/s")
    return ""


def _tcm(system: System, timing: Timing) -> Invariant:
    """Tensors and reserved tile buffers within the TCM, and every composite's tiles (as
    they ran) within the buffers its plan reserved."""
    size = system.topology.pe.tcm.size
    over = max(timing.procs, key=lambda p: p.tile_worst[0] - p.tile_worst[1], default=None)
    if over is not None and over.tile_worst[0] > over.tile_worst[1]:
        used, reserved, index = over.tile_worst
        return Invariant("tcm", False, f"PE ({system.coords[over.pid]})'s composite (command "
                                       f"{index}) ran tiles needing {used:,} B of buffers; "
                                       f"its plan reserved {reserved:,} B")
    worst = max(timing.procs, key=lambda p: p.tcm_peak[0], default=None)
    peak = worst.tcm_peak[0] if worst is not None else 0
    where = f"PE ({system.coords[worst.pid]})" if worst is not None else "no PE"
    return Invariant("tcm", peak <= size, f"at most {peak:,} B of TCM in use ({where}), "
                                          f"of {size:,} B")
