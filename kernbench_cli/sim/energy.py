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
              on the 16-bit datapath; MACs on each narrow one             gemm_mac_<datapath>
math          elements, by op class (a composite's dequantised tiles:     math.<class>
              dequant)
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

`by_region` counts the same actions per named region (`tl.region`), each by the
command that issued it: its own, or for a composite's tile transfers the composite's,
for a receive's copies out of ring slots the receive's (the DMA engines' ledger,
`hw.dma`). The regions' counts add up to the run's, which the energy invariant checks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from kernbench_cli.config.schema import EnergyConfig
from kernbench_cli.config.units import format_energy_aj, format_time_ps
from kernbench_cli.formats import gemm_datapath
from kernbench_cli.hw.engines import ENGINES
from kernbench_cli.hw.gemm import gemm_work
from kernbench_cli.hw.network import LEDGER
from kernbench_cli.hw.system import System
from kernbench_cli.hw.timing import Timing
from kernbench_cli.stream import (
    COMPOSITE,
    DOT,
    LOAD,
    MATH,
    MATH_CLASSES,
    NONE,
    READ,
    SEND,
    STORE,
)

#: The commands PE_SCHEDULER queues (the others PE_CPU does itself).
QUEUED = (LOAD, STORE, MATH, DOT, SEND, COMPOSITE)

#: The link levels, each billed per bit per link crossed.
LINKS = ("noc", "ucie", "sip_link", "rack_link")
#: The parts of a run's energy, in report order (the engine table's rows, then static).
PARTS = (*ENGINES, "ipcq", "hbm", "sram", *LINKS)
NARROW = ("fp8", "int8", "fp4", "int4")  # the array's narrow datapaths (gemm_mac_<name>)


@dataclass(frozen=True)
class Counts:
    """Every action a run did that costs energy (see the module docstring)."""

    commands: int
    queued: int
    dma_bytes: int
    mac_passes: int  # on the 16-bit datapath
    macs: dict[str, int]  # on each narrow datapath
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
    mac_passes, macs = asked_gemm_work(system, timing)
    return Counts(
        commands=sum(pe.cpu.ops for pe in pes),
        queued=sum(pe.scheduler.ops for pe in pes),
        dma_bytes=sum(pe.dma.bytes for pe in pes),
        mac_passes=mac_passes, macs=macs,
        elements=asked_elements(timing),
        ipcq_bytes=sum(r.bytes for pe in pes for r in pe.rings.values()),
        hbm_bytes=moved("hbm"),
        hbm_pages=sum(c.pages for c in calendars if c.level == "hbm"),
        page_bytes=topo.hbm.page_size,
        sram_bytes=moved("sram"),
        link_bytes={level: moved(level) for level in LINKS},
        pes=len(pes), cubes=topo.num_cubes, latency_ps=timing.latency_ps)


def by_region(system: System, timing: Timing) -> list[Counts]:
    """Per region (index 0: outside every named one), the dynamic actions of its
    commands (`pes`, `cubes` and `latency_ps` are 0: static energy is the run's)."""
    program = timing.program
    regions = len(program.regions)
    kinds = program.math_kinds
    commands = np.zeros(regions, dtype=np.int64)
    queued = np.zeros(regions, dtype=np.int64)
    work = [dict.fromkeys(("", *NARROW), 0) for _ in range(regions)]  # exact integers
    elements = np.zeros((regions, len(kinds)), dtype=np.int64)
    tables = _gemm_tables(system, timing)
    for op, arg, size, leaf in _chunks(timing):
        commands += np.bincount(leaf[op != READ], minlength=regions)
        queued += np.bincount(leaf[np.isin(op, QUEUED)], minlength=regions)
        for kind, table in tables:
            picked = (op == kind) & (arg != NONE)
            if picked.any():
                pairs = np.unique(np.stack([leaf[picked], arg[picked]]), axis=1,
                                  return_counts=True)
                for (r, j), n in zip(pairs[0].T.tolist(), pairs[1].tolist(), strict=True):
                    datapath, amount = table[j]
                    work[r][datapath] += amount * n
        is_math = op == MATH
        np.add.at(elements, (leaf[is_math], arg[is_math]), size[is_math])
    fixes = [0] * regions  # composites' dequantised tiles, in the composite's region
    for pid, proc in enumerate(timing.procs):
        for i, n in proc.dequant.items():
            fixes[timing.leaves[pid][i] if timing.leaves else 0] += n
    out = []
    for r in range(regions):
        by_class = dict.fromkeys(MATH_CLASSES, 0)
        for (op_class, _), n in zip(kinds, elements[r].tolist(), strict=True):
            by_class[op_class] += n
        by_class["dequant"] += fixes[r]
        row = dict(zip(LEDGER, timing.ledger[r], strict=True))
        out.append(Counts(
            commands=int(commands[r]), queued=int(queued[r]), dma_bytes=row["dma"],
            mac_passes=work[r][""], macs={k: work[r][k] for k in NARROW if work[r][k]},
            elements=by_class, ipcq_bytes=row["ipcq"],
            hbm_bytes=row["hbm"], hbm_pages=row["pages"],
            page_bytes=system.topology.hbm.page_size, sram_bytes=row["sram"],
            link_bytes={level: row[level] for level in LINKS}, pes=0, cubes=0, latency_ps=0))
    return out


def _gemm_tables(system: System, timing: Timing) -> list[tuple[int, list[tuple[str, int]]]]:
    """(DOT, its gemm shapes' `gemm_work`), (COMPOSITE, its composites')."""
    program, gemm = timing.program, system.topology.pe.gemm
    return [(DOT, [gemm_work(gemm, *shape) for shape in program.gemm_shapes]),
            (COMPOSITE, [gemm_work(gemm, c.m, c.k, c.n, gemm_datapath(c.a_format,
                                                                      c.b_format)[0])
                         for c in program.composites])]


def asked_gemm_work(system: System, timing: Timing) -> tuple[int, dict[str, int]]:
    """(MACs times array passes on the 16-bit datapath, MACs on each narrow one) over every
    DOT and composite the streams hold."""
    tables = _gemm_tables(system, timing)
    uses = [np.zeros(len(table), dtype=np.int64) for _, table in tables]  # per entry
    for op, arg, _, _ in _chunks(timing):
        for (kind, table), used in zip(tables, uses, strict=True):
            picked = arg[(op == kind) & (arg != NONE)]
            if picked.size:
                used += np.bincount(picked, minlength=len(table))
    work = dict.fromkeys(("", *NARROW), 0)
    for (_, table), used in zip(tables, uses, strict=True):
        for j in np.flatnonzero(used):  # then exact Python integers
            datapath, amount = table[j]
            work[datapath] += amount * int(used[j])
    return work.pop(""), {k: n for k, n in work.items() if n}


def asked_elements(timing: Timing) -> dict[str, int]:
    """MATH elements over every stream, by op class, and the elements the composites'
    plans dequantise (`dequant`)."""
    kinds = timing.program.math_kinds
    by_kind = np.zeros(len(kinds), dtype=np.int64)  # exact: no float weights
    for op, arg, size, _ in _chunks(timing):
        math = op == MATH
        np.add.at(by_kind, arg[math], size[math])
    out = dict.fromkeys(MATH_CLASSES, 0)
    for (op_class, _), n in zip(kinds, by_kind, strict=True):
        out[op_class] += int(n)
    out["dequant"] += sum(sum(proc.dequant.values()) for proc in timing.procs)
    return out


#: Commands whose columns the counts read at once (`_chunks`), at about 22 B each
CHUNK = 1 << 20


def _chunks(timing: Timing) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray,
                                              np.ndarray]]:
    """The `op` (uint8), `arg` and `size` (int64) columns of the streams and their commands'
    regions (uint32), end to end, a run of streams at a time (at most `CHUNK` commands, or
    one stream): the counts never hold a copy of every stream (a rack's decode step has
    34 million commands)."""
    streams, leaves = timing.program.streams, timing.leaves

    def joined(pids: list[int]) -> tuple[np.ndarray, ...]:
        cols = tuple(np.concatenate([np.frombuffer(getattr(streams[pid], name), dtype=dtype)
                                     for pid in pids])
                     for name, dtype in (("op", np.uint8), ("arg", np.int64),
                                         ("size", np.int64)))
        leaf = np.concatenate([np.frombuffer(leaves[pid], dtype=np.uint32)
                               if leaves[pid] is not None else
                               np.zeros(len(streams[pid].op), dtype=np.uint32) for pid in pids]) \
            if leaves else np.zeros(len(cols[0]), dtype=np.uint32)
        return (*cols, leaf)

    group: list[int] = []
    held = 0
    for pid, stream in enumerate(streams):
        if group and held + len(stream.op) > CHUNK:
            yield joined(group)
            group, held = [], 0
        group.append(pid)
        held += len(stream.op)
    if group:
        yield joined(group)


def account(counts: Counts, table: EnergyConfig) -> Energy:
    """Each count times its entry (attojoules)."""
    hbm_bit = table.hbm_cell + table.hbm_column + table.hbm_bank_group + table.hbm_tsv
    dynamic = {
        "cpu": counts.commands * table.cpu_command,
        "scheduler": counts.queued * table.scheduler_command,
        "dma": 8 * counts.dma_bytes * table.tcm,
        "gemm": counts.mac_passes * table.gemm_mac + sum(
            n * getattr(table, f"gemm_mac_{datapath}") for datapath, n in counts.macs.items()),
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
        "gemm": (c.mac_passes, "MAC passes", t.gemm_mac),  # and narrow MACs, below
        "ipcq": (c.ipcq_bytes, "B through ring slots", t.ipcq),
        "sram": (c.sram_bytes, "B", t.sram),
        **{level: (c.link_bytes[level], "link-bytes (B x links crossed)", getattr(t, level))
           for level in LINKS}}
    n, what, entry = counted[part]
    per = "/bit" if "B" in what else ""
    shown = f"{n:,} {what} x {e(entry)}{per}"
    if part == "gemm" and c.macs:
        narrow = "; ".join(f"{n:,} {datapath} MACs x {e(getattr(t, f'gemm_mac_{datapath}'))}"
                           for datapath, n in c.macs.items())
        return f"{shown}; {narrow}" if c.mac_passes else narrow
    return shown


def _watts(microwatts: int) -> str:
    return f"{microwatts / 10**6:g} W" if microwatts >= 10**6 else f"{microwatts / 1000:g} mW"
