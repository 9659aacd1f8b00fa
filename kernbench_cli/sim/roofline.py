"""Roofline bounds of every run: the least time each resource class needed for the work it
did, at its peak rate, whatever the kernel says of itself.

For each class the bound is that of its busiest unit (a PE's GEMM array or
vector unit, an HBM slice, a SRAM port, a link), since every unit works in
parallel with the others but no faster than its peak:

- ``gemm``: a PE's MACs x array passes / (rows x cols) cycles, a narrow
  datapath's MACs counted over the MACs a cell does on it per cycle;
- ``math``: a PE's elements x the op class's cycles / lanes;
- ``hbm``: a slice's bytes at its stream rate (the pin rate less refresh),
  or its DRAM pages at 4 activates per tFAW, whichever is longer;
- ``sram`` and each link level: a port's or link's bytes at its bandwidth.

The run's latency is at least every one of them (the `bounds` invariant
checks the byte and flop parts); how far above the tightest it is says how
much the schedule, the dependencies and the latencies cost. Kernels may
state bounds of their own (`bounds()`: what the algorithm must move); these
are what the run did move.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import ceil as math_ceil

from kernbench_cli.config.units import format_bandwidth, format_time_ps
from kernbench_cli.hw.engine import cycles_to_ps
from kernbench_cli.hw.gemm import peak_macs
from kernbench_cli.hw.network import transfer_ps
from kernbench_cli.hw.system import System
from kernbench_cli.hw.timing import Timing


@dataclass(frozen=True)
class Roof:
    """One resource class's bound: `ps` at its busiest unit, `unit` naming it, `how` the
    work and the peak it was divided by."""

    name: str
    ps: int
    unit: str
    how: str


def roofline(system: System, timing: Timing) -> list[Roof]:
    """The bound of every resource class the run used, tightest (longest) first."""
    topo, pes = system.topology, system.pes
    clock, gemm, math = topo.pe.clock, topo.pe.gemm, topo.pe.math
    roofs: list[Roof] = []
    def work(pe) -> Fraction:
        return peak_macs(gemm, pe.gemm.mac_passes, pe.gemm.macs)

    busiest = max(pes, key=lambda pe: (work(pe), -pe.pid), default=None)
    if busiest is not None and work(busiest):
        cycles = math_ceil(work(busiest) / (gemm.rows * gemm.cols))
        narrow = "".join(f" + {n:,} {datapath} MACs / {getattr(gemm.macs_per_cell, datapath)}"
                         for datapath, n in busiest.gemm.macs.items())
        roofs.append(Roof("gemm", cycles_to_ps(cycles, clock), f"PE ({busiest.coord})",
                          f"{busiest.gemm.mac_passes:,} MAC passes{narrow} / "
                          f"{gemm.rows}x{gemm.cols} MACs a cycle"))
    op_cycles = topo.pe.math.op_cycles

    def math_cycles(pe) -> int:
        return -(-sum(n * getattr(op_cycles, c) for c, n in pe.math.by_class.items())
                 // math.lanes)

    busiest = max(pes, key=lambda pe: (math_cycles(pe), -pe.pid), default=None)
    if busiest is not None and busiest.math.elements:
        roofs.append(Roof("math", cycles_to_ps(math_cycles(busiest), clock),
                          f"PE ({busiest.coord})", f"{busiest.math.elements:,} elements / "
                          f"{math.lanes} lanes, at each op class's cycles"))
    for level in ("hbm", "sram", "noc", "ucie", "sip_link", "rack_link"):
        roof = _busiest_calendar(system, level)
        if roof is not None:
            roofs.append(roof)
    return sorted(roofs, key=lambda r: (-r.ps, r.name))


def _busiest_calendar(system: System, level: str) -> Roof | None:
    best: Roof | None = None
    for cal in system.network.calendars():
        if cal.level != level or not cal.bytes:
            continue
        ps = transfer_ps(cal.bytes, cal.bandwidth)
        how = f"{cal.bytes:,} B at {format_bandwidth(cal.bandwidth)}"
        opening = cal.opening_ps(cal.pages) if cal.pages else 0
        if opening > ps:
            ps, how = opening, (f"{cal.pages:,} DRAM pages opened at {cal.activates} per "
                                f"tFAW ({format_time_ps(cal.faw_ps)})")
        if best is None or ps > best.ps:
            best = Roof(level, ps, f"{level} {cal.name}", how)
    return best
