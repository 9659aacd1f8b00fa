"""Energy: every counted action of a run times its `[energy]` entry, plus static power.

A run's energy is counted, not estimated. The timing pass already counts
every byte on every shared resource (its calendars), every byte PE_DMA moves,
every command PE_CPU issues and PE_SCHEDULER queues, and the streams say
every MAC and MATH element; `count` gathers them into `Counts` and `account`
multiplies each by its table entry (`config.schema.EnergyConfig`), in
integer attojoules (1 µW for 1 ps is 1 aJ), so nothing drifts:

============  ==========================================================  ===================
part          count                                                       entry
============  ==========================================================  ===================
cpu           commands PE_CPU issued                                      cpu_command
scheduler     commands PE_SCHEDULER queued                                scheduler_command
dma           bits PE_DMA wrote into or read out of TCM                   tcm
gemm          MACs x array passes (an f32 GEMM: pe.gemm.passes.f32)       gemm_mac
math          elements, by op class                                       math.<class>
ipcq          bits through ring slots                                     ipcq
hbm           bits read or written; bits of every DRAM page opened        hbm_cell + hbm_column
                                                                          + hbm_bank_group
                                                                          + hbm_tsv; hbm_activate
sram          bits through the cube SRAM's port                           sram
noc, ucie,    bits over each link crossed (a NoC hop is a link)           noc, ucie, sip_link,
sip_link,                                                                 rack_link
rack_link
static        PEs x latency; cubes x latency                              pe_static, cube_static
============  ==========================================================  ===================

Not counted: clock trees and control beyond the per-command figures, the
host, and anything the model does not time (DRAM refresh's own energy is in
the cube's static power).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernbench_cli.config.schema import EnergyConfig
from kernbench_cli.config.units import format_energy_aj, format_time_ps
from kernbench_cli.hw.gemm import gemm_passes
from kernbench_cli.hw.system import System
from kernbench_cli.hw.timing import Timing
from kernbench_cli.stream import COMPOSITE, DOT, MATH, NONE

#: The link levels, each billed per bit per link crossed.
LINKS = ("noc", "ucie", "sip_link", "rack_link")
#: The parts of a run's energy, in report order (the engine table's rows, then static).
PARTS = ("cpu", "scheduler", "dma", "gemm", "math", "ipcq", "hbm", "sram", *LINKS)
MATH_CLASSES = ("add", "mul", "div", "cmp", "exp", "log", "sqrt", "reduce", "cast")


@dataclass(frozen=True)
class Counts:
    """Every action a run did that costs energy (see the module docstring)."""

    commands: int
    queued: int
    dma_bytes: int
    mac_passes: int
    elements: dict[str, int]  # by MATH op class
    ipcq_bytes: int
    hbm_bytes: int
    hbm_pages: int
    page_bytes: int
    sram_bytes: int
    link_bytes: dict[str, int]  # by link level, summed over the links (a hop each)
    pes: int
    cubes: int
    latency_ps: int


@dataclass(frozen=True)
class Energy:
    """A run's energy in attojoules: `dynamic[part]` for each of `PARTS`, and static; with
    the counts and the table it was computed from."""

    dynamic: dict[str, int]
    pe_static: int
    cube_static: int
    counts: Counts
    table: EnergyConfig

    @property
    def static(self) -> int:
        return self.pe_static + self.cube_static

    @property
    def total(self) -> int:
        return sum(self.dynamic.values()) + self.static


def count(system: System, timing: Timing) -> Counts:
    """What the run `timing` did on `system`, from its engines, calendars and streams."""
    pes = system.pes
    calendars = system.network.calendars()

    def moved(level: str) -> int:
        return sum(c.bytes for c in calendars if c.level == level)

    topo = system.topology
    return Counts(
        commands=sum(pe.cpu.ops for pe in pes),
        queued=sum(pe.scheduler.ops for pe in pes),
        dma_bytes=sum(pe.dma.bytes for pe in pes),
        mac_passes=asked_mac_passes(system, timing),
        elements=asked_elements(timing),
        ipcq_bytes=sum(r.bytes for pe in pes for r in pe.rings.values()),
        hbm_bytes=moved("hbm"),
        hbm_pages=sum(c.pages for c in calendars if c.level == "hbm"),
        page_bytes=topo.hbm.page_size,
        sram_bytes=moved("sram"),
        link_bytes={level: moved(level) for level in LINKS},
        pes=len(pes), cubes=topo.num_cubes, latency_ps=timing.latency_ps)


def asked_mac_passes(system: System, timing: Timing) -> int:
    """MACs times array passes over every DOT and composite the streams hold."""
    program, gemm = timing.program, system.topology.pe.gemm
    op, arg, _ = _columns(timing)
    total = 0
    for kind, table in (
            (DOT, [m * k * n * gemm_passes(gemm, width)
                   for m, k, n, width in program.gemm_shapes]),
            (COMPOSITE, [c.m * c.k * c.n * gemm_passes(gemm, max(c.a_itemsize, c.b_itemsize))
                         for c in program.composites])):
        picked = arg[(op == kind) & (arg != NONE)]
        if picked.size:  # how often each table entry ran, then exact Python integers
            uses = np.bincount(picked, minlength=len(table))
            total += sum(table[j] * int(uses[j]) for j in np.flatnonzero(uses))
    return total


def asked_elements(timing: Timing) -> dict[str, int]:
    """MATH elements over every stream, by op class."""
    kinds = timing.program.math_kinds
    op, arg, size = _columns(timing)
    math = op == MATH
    by_kind = np.zeros(len(kinds), dtype=np.int64)  # exact: no float weights
    np.add.at(by_kind, arg[math], size[math])
    out = dict.fromkeys(MATH_CLASSES, 0)
    for (op_class, _), n in zip(kinds, by_kind, strict=True):
        out[op_class] += int(n)
    return out


def _columns(timing: Timing) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The `op`, `arg` and `size` columns of every stream, end to end (int64)."""
    streams = timing.program.streams
    return tuple(np.concatenate([np.frombuffer(getattr(s, name), dtype=getattr(s, name).typecode)
                                 for s in streams] or [np.zeros(0)]).astype(np.int64)
                 for name in ("op", "arg", "size"))


def account(counts: Counts, table: EnergyConfig) -> Energy:
    """Each count times its entry (attojoules)."""
    hbm_bit = table.hbm_cell + table.hbm_column + table.hbm_bank_group + table.hbm_tsv
    dynamic = {
        "cpu": counts.commands * table.cpu_command,
        "scheduler": counts.queued * table.scheduler_command,
        "dma": 8 * counts.dma_bytes * table.tcm,
        "gemm": counts.mac_passes * table.gemm_mac,
        "math": sum(n * getattr(table.math, c) for c, n in counts.elements.items()),
        "ipcq": 8 * counts.ipcq_bytes * table.ipcq,
        "hbm": 8 * (counts.hbm_bytes * hbm_bit
                    + counts.hbm_pages * counts.page_bytes * table.hbm_activate),
        "sram": 8 * counts.sram_bytes * table.sram,
    }
    for level in LINKS:
        dynamic[level] = 8 * counts.link_bytes[level] * getattr(table, level)
    return Energy(dynamic, counts.pes * table.pe_static * counts.latency_ps,
                  counts.cubes * table.cube_static * counts.latency_ps, counts, table)


def basis(part: str, energy: Energy) -> str:
    """What `part` of `energy` counted, as count x entry (for the energy table)."""
    c, t = energy.counts, energy.table

    def e(aj: int) -> str:  # an entry, in pJ as the docs give them
        return f"{aj / 10**6:g} pJ"
    if part == "static":
        return (f"{c.pes:,} PEs x {_watts(t.pe_static)} + {c.cubes:,} cubes x "
                f"{_watts(t.cube_static)}, for {format_time_ps(c.latency_ps)}")
    if part == "hbm":
        bit = t.hbm_cell + t.hbm_column + t.hbm_bank_group + t.hbm_tsv
        return (f"{c.hbm_bytes:,} B x {e(bit)}/bit; {c.hbm_pages:,} pages opened x "
                f"{format_energy_aj(8 * c.page_bytes * t.hbm_activate)}")
    if part == "math":
        return "; ".join(f"{n:,} {name} x {e(getattr(t.math, name))}"
                         for name, n in c.elements.items() if n)
    counted = {
        "cpu": (c.commands, "commands", t.cpu_command),
        "scheduler": (c.queued, "commands", t.scheduler_command),
        "dma": (c.dma_bytes, "B into or out of TCM", t.tcm),
        "gemm": (c.mac_passes, "MAC passes", t.gemm_mac),
        "ipcq": (c.ipcq_bytes, "B through ring slots", t.ipcq),
        "sram": (c.sram_bytes, "B", t.sram),
        **{level: (c.link_bytes[level], "link-bytes (B x links crossed)", getattr(t, level))
           for level in LINKS}}
    n, what, entry = counted[part]
    per = "/bit" if "B" in what else ""
    return f"{n:,} {what} x {e(entry)}{per}"


def _watts(microwatts: int) -> str:
    return f"{microwatts / 10**6:g} W" if microwatts >= 10**6 else f"{microwatts / 1000:g} mW"
