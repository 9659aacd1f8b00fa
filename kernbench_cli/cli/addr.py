"""`kernbench decode` and `kernbench encode`: PhysAddr for people.

Both stay light: no numpy, no simpy, no Rich tables (the decode benchmark
holds them to the start-up time of a bare Typer command).
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer

from kernbench_cli.address import load_address_map
from kernbench_cli.cli.common import JsonOpt, TopologyOpt, parse_int
from kernbench_cli.errors import AddressError, NotInTopology


class Component(StrEnum):
    hbm = "hbm"
    tcm = "tcm"
    ipcq = "ipcq"
    scratchpad = "scratchpad"
    regfile = "regfile"
    status = "status"
    sram = "sram"
    mcpu = "mcpu"


class Direction(StrEnum):
    E = "E"
    W = "W"
    N = "N"
    S = "S"


#: `kernbench decode`'s exit code for an address the layout allows but the topology lacks.
EXIT_NOT_IN_TOPOLOGY = 3


def decode(
    addr: Annotated[str, typer.Argument(help="Address: hex (0x…, _ allowed) or decimal.",
                                        metavar="ADDR")],
    topology: TopologyOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Decode a 51-bit PhysAddr into its fields and the component it names.

    The fields of any 51-bit address are shown. Exit 0 when the topology has
    the place it names; 3 when the layout allows it but the topology does not
    have it (a rack too many, HBM past the slices); 2 when the layout itself
    forbids it (an unknown unit type) or the address is not a 51-bit number.
    """
    from kernbench_cli.address import layout as L

    value = parse_int(addr, "address")
    if value >> L.ADDR_BITS:
        raise AddressError(f"address {value:#x} is wider than {L.ADDR_BITS} bits")
    amap = load_address_map(topology)
    try:
        decoded, problem, code = amap.decode(value), None, 0
    except NotInTopology as exc:
        verdict = f"not in topology {amap.topology.name!r}"
        decoded, problem, code = None, f"{verdict}: {exc}", EXIT_NOT_IN_TOPOLOGY
    except AddressError as exc:
        verdict = "not a valid PhysAddr"
        decoded, problem, code = None, f"{verdict}: {exc}", exc.exit_code
    fields = L.HBM_LAYOUT if L.WINDOW.get(value) == L.HBM_WINDOW else L.RESOURCE_LAYOUT
    if as_json:
        out = decoded.to_dict() if decoded else {
            "addr": value, "kind": "hbm" if fields is L.HBM_LAYOUT else "pe_resource",
            **{f.name: f.get(value) for f in fields if f is not L.WINDOW}}
        if problem:
            out["problem"] = problem
        print(json.dumps(out, indent=2))
        if problem:
            typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(code)
    print(decoded.text if decoded else f"{value:#x}: {verdict}; its fields:")
    print(f"  {'addr':<11}{value:#x}")
    for f in fields:
        bits = f"[{f.hi}:{f.lo}]" if f.width > 1 else f"[{f.hi}]"
        shown = f.get(value)
        note = ""
        if f is L.WINDOW:
            note = " HBM" if shown == L.HBM_WINDOW else " PE resource"
        elif f is L.UNIT_TYPE:
            note = f" {decoded.unit_type}" if decoded else _unit_name(L, shown)
        text = f"{shown:#x}" if f.width > 8 else str(shown)
        print(f"  {f.name:<11}{text + note:<16}{bits}")
    if decoded and decoded.component not in ("hbm",):
        print(f"  {'component':<11}{decoded.component} +{decoded.component_offset:#x}")
    if problem:
        typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(code)


def _unit_name(L, bits: int) -> str:
    try:
        return f" {L.UnitType(bits).name}"
    except ValueError:
        return " none"


def encode(
    component: Annotated[Component, typer.Argument(help="What the address names.")],
    rack: Annotated[str, typer.Option(help="Rack index.", metavar="INT")] = "0",
    sip: Annotated[str, typer.Option(help="SIP index in the rack.", metavar="INT")] = "0",
    cube: Annotated[str, typer.Option(help="Cube index in the SIP.", metavar="INT")] = "0",
    pe: Annotated[str, typer.Option(help="PE index in the cube (0 for sram, mcpu).",
                                    metavar="INT")] = "0",
    offset: Annotated[str, typer.Option(help="Byte offset in the component (in the slot "
                                               "with --dir/--slot).", metavar="INT")] = "0",
    direction: Annotated[Direction | None, typer.Option("--dir", help="IPCQ ring direction.")]
    = None,
    slot: Annotated[str | None, typer.Option(help="IPCQ ring slot.", metavar="INT")] = None,
    topology: TopologyOpt = None,
) -> None:
    """Build a PhysAddr from its parts (the inverse of decode) and print it in hex."""
    from kernbench_cli.address import PeCoord

    amap = load_address_map(topology)
    coord = PeCoord(*(parse_int(v, n) for v, n in ((rack, "--rack"), (sip, "--sip"),
                                                    (cube, "--cube"), (pe, "--pe"))))
    off = parse_int(offset, "--offset")
    if (direction is None) != (slot is None):
        raise AddressError("--dir and --slot go together (an IPCQ ring slot)")
    if direction is not None:
        if component is not Component.ipcq:
            raise AddressError(f"--dir and --slot apply to ipcq, not {component.value}")
        value = amap.pe_ipcq_slot_addr(*coord, direction.value, parse_int(slot, "--slot"), off)
    else:
        if component in (Component.sram, Component.mcpu) and coord.pe != 0:
            raise AddressError(f"{component.value} is one per cube: use --pe 0")
        value = amap.component_addr(component.value, coord, off)
    print(f"{value:#x}")
