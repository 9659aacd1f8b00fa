"""Physical invariants, checked on every run (and replay): a violation is a model bug.

- work: the GEMM engines computed the flops the kernel's commands asked for
  (a composite's tiles add up to 2·M·K·N), PE_MATH the elements;
- bytes: the DMA engines moved the bytes the commands asked for (a
  composite's by its tile plan's formula, `hw.composite.traffic`);
- bounds: the latency is at least every resource's work at its peak rate
  (each PE's GEMM array, each HBM slice and link), and at least the busy time
  of every engine, IPCQ ring (its slot-time over its slots) and link;
- bandwidth: every HBM slice, SRAM port and link is timed at the bandwidth
  the configuration gives it (a slice: its peak less refresh); none carried
  bytes faster than that, summed over the transfers on it at every instant
  (fair-shared flows' rates, metered as the pass runs: `hw.flows.FairShare`), or
  outside a reservation (circuit-style: `Calendar.overdrawn`); and every flow's
  rates carried its bytes by its end;
- TCM: tensors and composite tile buffers never held more than a PE's TCM,
  and the tiles a composite ran (their sizes, recomputed as they ran) fit the
  buffers its plan reserved;
- critical path: every stretch of the run's critical path is explained by a recorded
  cause (`sim.critical`);
- energy: the energy reported (each count times its `[energy]` entry, exact
  integer attojoules) equals the energy recomputed unit by unit from every
  engine, ring and calendar, whose MAC and MATH element counts must equal
  the streams'.

Each is computed from two sides that the model keeps apart (what the streams
asked for against what the engines and calendars recorded), so a model bug
that drops or invents work shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kernbench_cli.errors import KernbenchError
from kernbench_cli.hw.engines import ENGINES
from kernbench_cli.hw.gemm import peak_macs
from kernbench_cli.hw.network import PS_PER_S
from kernbench_cli.hw.ratio import ratio
from kernbench_cli.hw.system import System
from kernbench_cli.hw.timing import Timing
from kernbench_cli.sim.energy import LINKS, PARTS, Counts, account
from kernbench_cli.stream import COMPOSITE, DOT, LOAD, MATH, NONE, RECV, SEND, STORE

#: Commands whose size is bytes PE_DMA moves
MOVES = (LOAD, STORE, SEND, RECV)


class InvariantError(KernbenchError):
    """A physical invariant does not hold: a bug in kernbench's model."""

    exit_code = 1


@dataclass(frozen=True)
class Invariant:
    name: str
    passed: bool
    detail: str  # the figures compared


def check(system: System, timing: Timing, counts: Counts,
          regions: list[Counts] | None = None) -> list[Invariant]:
    """Every invariant of the run `timing` timed on `system`; `counts` are the actions its
    energy is reported from (`sim.energy.count`), `regions` the same per named region
    (`sim.energy.by_region`)."""
    program, pes = timing.program, system.pes
    flops = elements = moved = 0
    for stream in program.streams:  # a PE's sums fit 64 bits (exa-bytes and -flops)
        op = np.frombuffer(stream.op, dtype=np.uint8)
        size = np.frombuffer(stream.size, dtype=np.int64)
        flops += int(size[op == DOT].sum())
        elements += int(size[op == MATH].sum())
        moved += int(size[np.isin(op, MOVES)].sum())  # a receive: PE_DMA copies it out
        args = np.frombuffer(stream.arg, dtype=np.int64)
        for arg in args[(op == COMPOSITE) & (args != NONE)].tolist():
            c = program.composites[arg]
            flops += 2 * c.m * c.k * c.n
    moved += timing.planned_bytes
    elements += sum(sum(proc.dequant.values()) for proc in timing.procs)  # composites' tiles
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
        _energy(system, counts, regions),
    ]
    return out


def enforce(invariants: list[Invariant]) -> None:
    """InvariantError naming the first invariant that does not hold, with its figures."""
    for inv in invariants:
        if not inv.passed:
            raise InvariantError(f"model invariant violated ({inv.name}): {inv.detail}; this is "
                                 "a bug in kernbench, please report it")


def explained(path) -> Invariant:
    """The critical path tiles the run with steps the records explain: a stretch nothing
    recorded explains (`sim.critical`'s "unexplained") is a model bug, never a bound."""
    lost = sum(s.end_ps - s.start_ps for s in path.steps if s.cause == "unexplained")
    return Invariant("critical path", not lost,
                     f"{lost:,} ps of the {path.latency_ps:,} ps critical path are explained by "
                     "no recorded cause" if lost else
                     f"{len(path.steps):,} steps explain the {path.latency_ps:,} ps")


def _same(name: str, unit: str, done: int, asked: int) -> Invariant:
    return Invariant(name, done == asked, f"the engines did {done:,} {unit}, the commands "
                                          f"asked for {asked:,}")


def _bounds(system: System, timing: Timing) -> Invariant:
    """latency >= work / peak rate, for every GEMM array, HBM slice and link, and >= the
    busy time of every engine, ring and link."""
    latency = timing.latency_ps
    gemm = system.topology.pe.gemm
    peak_flops = 2 * gemm.rows * gemm.cols * system.topology.pe.clock  # per second
    worst, what = 0, "nothing"
    for pe in system.pes:
        narrow = sum(pe.gemm.macs.values())  # at their datapaths' MACs per cell
        work = pe.gemm.flops - 2 * narrow + 2 * peak_macs(gemm, 0, pe.gemm.macs)
        need = math.ceil(work * PS_PER_S / peak_flops)
        if need > worst:
            worst, what = need, f"PE ({pe.coord})'s GEMM array ({pe.gemm.flops:,} flops)"
    for cal in system.network.calendars():
        need = -(-cal.bytes * PS_PER_S // cal.bandwidth)
        if need > worst:
            worst, what = need, f"{cal.level} {cal.name} ({cal.bytes:,} B)"
    busy, who = _busiest(system)
    if latency < busy:
        return Invariant("bounds", False, f"the latency is {latency:,} ps; {who} was busy "
                                          f"{busy:,} ps")
    return Invariant("bounds", latency >= worst,
                     f"the latency is {latency:,} ps; the busiest resource, {what}, needs "
                     f"{worst:,} ps at its peak rate")


def _busiest(system: System) -> tuple[int, str]:
    """The longest busy time of any engine, ring or calendar, and whose it is."""
    units = [(pe.engine(name).busy_ps, f"PE ({pe.coord})'s {name}")
             for pe in system.pes for name in ENGINES]
    units += [(ring.busy_ps, f"PE ({pe.coord})'s IPCQ ring {side}")
              for pe in system.pes for side, ring in pe.rings.items()]
    units += [(cal.busy_ps, f"{cal.level} {cal.name}") for cal in system.network.calendars()]
    return max(units, key=lambda unit: unit[0])


def _bandwidth(system: System) -> Invariant:
    """Every resource timed at its configured bandwidth; none above it, circuit-style
    (`Calendar.overdrawn`) or fair-shared; every fair-shared flow's rates carried its bytes.

    Fair-shared flows are checked from what `hw.flows.FairShare` metered as the pass
    ran, apart from its solver: each resource's summed rate, exact, followed through
    every start, end and re-solve, the highest it reached (transient states within an
    instant included, which a right solver keeps within the bandwidth too), and the
    first flow whose rates, summed over its life, moved fewer bytes than it had by its
    end. Here the highest sum is held to the configured bandwidth: no re-solving after
    the pass, and nothing kept per flow.
    """
    topo = system.topology
    hbm = topo.hbm
    configured = {"hbm": hbm.bandwidth * (hbm.refresh_interval - hbm.refresh_time)
                  // hbm.refresh_interval, "sram": topo.sram.bandwidth,
                  "noc": topo.noc.bandwidth, "ucie": topo.ucie.bandwidth,
                  "sip_link": topo.sip_link.bandwidth, "rack_link": topo.rack_link.bandwidth}
    for cal in system.network.calendars():
        what = f"{cal.level} {cal.name}"
        bandwidth = configured[cal.level]
        if cal.bandwidth != bandwidth:
            return Invariant("bandwidth", False, f"{what} is timed at {cal.bandwidth:,} B/s; "
                                                 f"the configuration gives {bandwidth:,} B/s")
        if cal.overdrawn is not None:
            t, duration, nbytes = cal.overdrawn
            return Invariant("bandwidth", False,
                             f"{what} carried {nbytes:,} B in {duration:,} ps "
                             f"from t={t:,} ps, above its {cal.bandwidth:,} B/s or outside its "
                             "reservations")
        if cal.flow_short is not None:
            nbytes, start, end, carried = cal.flow_short
            return Invariant("bandwidth", False,
                             f"{what} carried {nbytes:,} B from t={start:,} ps to {end:,} ps "
                             f"at rates that move only {float(ratio(carried, PS_PER_S)):,.0f} B")
        if cal.flow_peak > bandwidth:
            return Invariant("bandwidth", False,
                             f"{what} carried {float(cal.flow_peak):,.0f} B/s at "
                             f"t={cal.flow_peak_at:,} ps over its flows, above its "
                             f"{bandwidth:,} B/s")
    return Invariant("bandwidth", True, "no HBM slice or link above its configured bandwidth")


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


def _energy(system: System, counts: Counts, regions: list[Counts] | None) -> Invariant:
    """The reported energy against one recomputed from each unit's own counters, and
    against the sum of the regions' (each action counted by the command that issued
    it)."""
    table, pes = system.topology.energy, system.pes
    reported = account(counts, table)
    per_bit = {"hbm": table.hbm_cell + table.hbm_column + table.hbm_bank_group
               + table.hbm_tsv, "sram": table.sram, **{k: getattr(table, k) for k in LINKS}}
    again = dict.fromkeys(PARTS, 0)
    by_class: dict[str, int] = {}
    macs_by: dict[str, int] = {}
    for pe in pes:
        again["cpu"] += pe.cpu.ops * table.cpu_command
        again["scheduler"] += pe.scheduler.ops * table.scheduler_command
        again["dma"] += 8 * pe.dma.bytes * table.tcm
        again["gemm"] += pe.gemm.mac_passes * table.gemm_mac + sum(
            n * getattr(table, f"gemm_mac_{datapath}") for datapath, n in pe.gemm.macs.items())
        for datapath, n in pe.gemm.macs.items():
            macs_by[datapath] = macs_by.get(datapath, 0) + n
        for op_class, n in pe.math.by_class.items():
            again["math"] += n * getattr(table.math, op_class)
            by_class[op_class] = by_class.get(op_class, 0) + n
        again["ipcq"] += sum(8 * ring.bytes * table.ipcq for ring in pe.rings.values())
    page = system.topology.hbm.page_size
    for cal in system.network.calendars():
        again[cal.level] += 8 * cal.bytes * per_bit[cal.level]
        again[cal.level] += 8 * cal.pages * page * table.hbm_activate if cal.pages else 0
    macs = sum(pe.gemm.mac_passes for pe in pes)
    if macs != counts.mac_passes or by_class != counts.elements or macs_by != counts.macs:
        return Invariant("energy", False, f"the engines did {macs:,} MAC passes, narrow MACs "
                                          f"{macs_by} and MATH elements {by_class}; the "
                                          f"streams asked for {counts.mac_passes:,}, "
                                          f"{counts.macs} and {counts.elements}")
    static = (len(pes) * table.pe_static + system.topology.num_cubes * table.cube_static) \
        * counts.latency_ps
    for part in PARTS:
        if again[part] != reported.dynamic[part]:
            return Invariant("energy", False, f"{part}: {reported.dynamic[part]:,} aJ "
                                              f"reported, {again[part]:,} aJ recomputed "
                                              "from its units")
    if static != reported.static or sum(again.values()) + static != reported.total:
        return Invariant("energy", False, f"static {reported.static:,} aJ reported, "
                                          f"{static:,} aJ recomputed")
    for part in PARTS if regions is not None else ():
        summed = sum(account(r, table).dynamic[part] for r in regions)
        if summed != reported.dynamic[part]:
            return Invariant("energy", False, f"{part}: {reported.dynamic[part]:,} aJ "
                                              f"reported, {summed:,} aJ over the regions")
    return Invariant("energy", True, f"{reported.total:,} aJ: every count times its "
                                     "[energy] entry, recomputed unit by unit")
