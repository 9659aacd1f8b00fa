"""Rich views of a compiled topology: the system tree and the resource map."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from kernbench_cli.address import AddressMap
from kernbench_cli.config.units import (
    format_bandwidth,
    format_frequency,
    format_size,
    format_size_approx,
)
from kernbench_cli.config.units import format_time_ps as t


def _link(cfg) -> str:
    return f"{format_bandwidth(cfg.bandwidth)}, {t(cfg.latency)}"


def system_tree(amap: AddressMap) -> Tree:
    topo = amap.topology
    s, pe, costs = topo.system, topo.pe, topo.cost_table
    tree = Tree(Text.assemble((topo.name, "bold"),
                              f": {topo.num_pes} PEs  {topo.description}".rstrip()))
    racks = tree.add(f"rack x{s.racks}  (rack_link {_link(topo.rack_link)})")
    sips = racks.add(f"SIP x{s.sips_per_rack}  (sip_link {_link(topo.sip_link)})")
    cubes = sips.add(f"cube x{s.cubes_per_sip}, mesh {s.cube_mesh[0]}x{s.cube_mesh[1]}  "
                     f"(UCIe {_link(topo.ucie)}; SRAM {format_size(topo.sram.size)})")
    pes = cubes.add(f"PE x{s.pes_per_cube}, mesh {s.pe_mesh[0]}x{s.pe_mesh[1]}  "
                    f"(NoC {_link(topo.noc)} per hop; clock {format_frequency(pe.clock)})")
    issue = costs.issue
    pes.add(Text.assemble(
        f"cpu        issue: composite {t(issue.composite)}, load {t(issue.load)}, "
        f"store {t(issue.store)}, dot {t(issue.dot)}, math {t(issue.math)}, "
        f"send {t(issue.send)}, recv {t(issue.recv)}, wait {t(issue.wait)}  ",
        (f"(costs: {costs.name})", "dim")))
    pes.add(f"scheduler  queue {pe.scheduler.queue_depth}, plan {t(costs.scheduler.plan)}")
    pes.add(f"dma        setup {t(pe.dma.setup)}")
    pes.add(f"gemm       {pe.gemm.rows}x{pe.gemm.cols} {_DATAFLOWS[pe.gemm.dataflow]} "
            "systolic array")
    pes.add(f"math       {pe.math.lanes} lanes")
    pes.add(f"tcm        {format_size(pe.tcm.size)}")
    pes.add(f"ipcq       4 directions x {pe.ipcq.slots} slots x {format_size(pe.ipcq.slot_size)}")
    pes.add(f"hbm        slice {format_size(topo.hbm.slice_size)}, "
            f"{format_bandwidth(topo.hbm.bandwidth)}, {t(topo.hbm.latency)}")
    tree.add(peaks(topo))
    return tree


_DATAFLOWS = {"os": "output-stationary", "ws": "weight-stationary", "is": "input-stationary"}


def peaks(topo) -> str:
    """The system's peak rates: what a roofline divides a run's work by."""
    from kernbench_cli.hw.network import hbm_stream_bandwidth

    pe, hbm = topo.pe, topo.hbm
    flops = 2 * pe.gemm.rows * pe.gemm.cols * pe.clock  # per PE, 16-bit operands
    stream = hbm_stream_bandwidth(hbm)
    return (f"peaks: {flops / 1e12:.4g} TFLOP/s per PE (f16/bf16; f32 / "
            f"{pe.gemm.passes.f32}), {flops * topo.num_pes / 1e12:.4g} TFLOP/s in all; HBM "
            f"{format_bandwidth(stream)} per PE streamed ({format_bandwidth(hbm.bandwidth)} "
            f"pins less refresh), {format_bandwidth(stream * topo.num_pes)} in all; ridge "
            f"{flops / stream:.3g} flop/B; PE_MATH {pe.math.lanes * pe.clock / 1e9:.4g} "
            f"G elements/s per PE; per link NoC {format_bandwidth(topo.noc.bandwidth)}, UCIe "
            f"{format_bandwidth(topo.ucie.bandwidth)}, SIP "
            f"{format_bandwidth(topo.sip_link.bandwidth)}, rack "
            f"{format_bandwidth(topo.rack_link.bandwidth)}")


def resource_table(amap: AddressMap, width: int | None = None) -> Table:
    """The PE resource window, a row per component; without its end column (start + size)
    when the table would not fit `width` columns."""
    from kernbench_cli.report.fit import drop_to_fit, dropped_caption

    table, dropped = drop_to_fit(lambda out: _resources(amap, out), ("end",), width)
    if dropped:
        table.caption = dropped_caption(dropped, width).replace("--json has every field",
                                                                "end = start + size")
    return table


def _resources(amap: AddressMap, dropped) -> Table:
    table = Table(title="PE resource window (ADR-0031), offsets within pe_offset [29:0]")
    columns = [c for c in ("component", "start", "end", "size", "in use") if c not in dropped]
    for column in columns:
        table.add_column(column, justify="left" if column == "component" else "right")
    for name, start, end, used in amap.resources.layout():
        cells = {"component": name, "start": f"{start:#011x}", "end": f"{end:#011x}",
                 "size": format_size_approx(end - start),
                 "in use": format_size(used) if used else "-"}
        table.add_row(*(cells[c] for c in columns), style="dim" if name == "reserved" else None)
    return table
