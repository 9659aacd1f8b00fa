"""PhysAddr encode and decode for one topology (ADR-0001, ADR-0031).

`AddressMap.compile(topology)` checks that the topology fits the 51-bit
layout and compiles the PE resource map; its methods are the address
factories and `decode`. Encode and decode share one set of checks, so decode
accepts exactly the addresses the factories can produce: every field in
range, every coordinate present in the topology, every offset inside the
configured part of its component.

Addresses are plain ``int`` (the simulator handles millions of them);
`Decoded` is the inspected form.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from kernbench_cli.address import layout as L
from kernbench_cli.address.resource_map import (
    DIRECTIONS,
    USED_BY,
    ResourceMap,
    compile_resource_map,
)
from kernbench_cli.config.schema import Topology
from kernbench_cli.config.units import format_size
from kernbench_cli.errors import AddressError, ConfigError, NotInTopology

#: Component names, as `kernbench encode` and `Decoded.component` spell them.
PE_COMPONENTS = ("tcm", "ipcq", "scratchpad", "regfile", "status")
COMPONENTS = ("hbm", *PE_COMPONENTS, "sram", "mcpu")

_TITLES = {"hbm": "HBM", "tcm": "TCM", "ipcq": "IPCQ ring", "scratchpad": "Scratchpad",
           "regfile": "Register file", "status": "Status", "sram": "SRAM", "mcpu": "MCPU"}


class PeCoord(NamedTuple):
    """Where a PE sits: rack, SIP in rack, cube in SIP, PE in cube."""

    rack: int
    sip: int
    cube: int
    pe: int

    def __str__(self) -> str:
        return f"rack={self.rack} sip={self.sip} cube={self.cube} pe={self.pe}"


def pe_coords(topology) -> list[PeCoord]:
    """Every PE of `topology`, in program-id order (rack, SIP, cube, PE)."""
    s = topology.system
    return [PeCoord(r, si, c, p) for r in range(s.racks) for si in range(s.sips_per_rack)
            for c in range(s.cubes_per_sip) for p in range(s.pes_per_cube)]


@dataclass(frozen=True)
class Decoded:
    """Every field of one address, and what it points at.

    `component_offset` is the byte offset inside the component: inside the
    PE's HBM slice for ``hbm``, inside the IPCQ range for ``ipcq`` (whose
    `direction`/`slot` say which ring slot; the human line shows the offset
    inside that slot). Fields that do not apply are None.
    """

    addr: int
    kind: str  # "hbm" | "pe_resource"
    rack: int
    sip: int
    cube: int
    unit_type: str | None
    pe: int | None
    ext: int | None
    component: str
    component_offset: int
    direction: str | None = None
    slot: int | None = None
    slot_offset: int | None = None
    hbm_offset: int | None = None

    @property
    def text(self) -> str:
        where = f"rack={self.rack} sip={self.sip} cube={self.cube}"
        if self.pe is not None and self.component not in ("sram", "mcpu"):
            where += f" pe={self.pe}"
        title = _TITLES[self.component]
        if self.component == "ipcq":
            return (f"{title} {where} dir={self.direction} slot={self.slot} "
                    f"offset={self.slot_offset:#x}")
        if self.component == "hbm":
            return (f"{title} {where} offset={self.component_offset:#x} "
                    f"(cube offset {self.hbm_offset:#x})")
        return f"{title} {where} offset={self.component_offset:#x}"

    def to_dict(self) -> dict[str, Any]:
        """The `kernbench decode --json` object (integers stay integers; `text` is for people)."""
        return {
            "addr": self.addr, "kind": self.kind, "rack": self.rack, "sip": self.sip,
            "cube": self.cube, "unit_type": self.unit_type, "pe": self.pe, "ext": self.ext,
            "component": self.component, "component_offset": self.component_offset,
            "direction": self.direction, "slot": self.slot, "text": self.text,
        }


class AddressMap:
    """The address factories and decoder of one compiled topology."""

    def __init__(self, topology: Topology, resources: ResourceMap):
        self.topology = topology
        self.resources = resources
        s = topology.system
        self._extent = {"rack": (s.racks, "system.racks"),
                        "sip": (s.sips_per_rack, "system.sips_per_rack"),
                        "cube": (s.cubes_per_sip, "system.cubes_per_sip"),
                        "pe": (s.pes_per_cube, "system.pes_per_cube")}
        self.slice_bytes = topology.hbm.slice_size
        self.cube_hbm_bytes = s.pes_per_cube * topology.hbm.slice_size
        self.sram_bytes = topology.sram.size

    @classmethod
    def compile(cls, topology: Topology) -> AddressMap:
        """Check the topology against the layout; ConfigError lists every problem."""
        file = topology.source or Path("<topology>")
        problems = _check_fits_layout(topology, file)
        try:
            resources = compile_resource_map(topology)
        except ConfigError as exc:
            problems.extend(exc.problems)
        if problems:
            raise ConfigError(problems)
        return cls(topology, resources)

    # ----------------------------------------------------------------- checks

    def _coords(self, **coords: int) -> int:
        """Check coordinates against field widths and the topology; return their bits."""
        addr = 0
        for name, value in coords.items():
            field = getattr(L, name.upper())
            addr |= field.put(value)
            count, key = self._extent[name]
            if value >= count:
                raise NotInTopology(f"{name} = {value} does not exist in topology "
                                   f"{self.topology.name!r} ({key} = {count}: 0..{count - 1})")
        return addr

    def _within(self, what: str, offset: int, limit: int, key: str) -> None:
        if not 0 <= offset < limit:
            raise NotInTopology(f"{what} offset {offset:#x} is outside {key} "
                               f"({format_size(limit)}: 0x0..{limit - 1:#x})")

    # -------------------------------------------------------------- factories

    def hbm_addr(self, rack_id: int, sip_id: int, cube_id: int, offset: int) -> int:
        """A byte of a cube's HBM; `offset` counts from the start of the cube's window."""
        base = self._coords(rack=rack_id, sip=sip_id, cube=cube_id)
        self._within("HBM", offset, self.cube_hbm_bytes,
                     "the cube's HBM (system.pes_per_cube x hbm.slice_size)")
        return base | L.WINDOW.put(L.HBM_WINDOW) | offset

    def pe_hbm_addr(self, rack_id: int, sip_id: int, cube_id: int, pe_id: int, offset: int) -> int:
        """A byte of PE `pe_id`'s HBM slice."""
        self._coords(pe=pe_id)
        self._within("HBM slice", offset, self.slice_bytes, "hbm.slice_size")
        return self.hbm_addr(rack_id, sip_id, cube_id, pe_id * self.slice_bytes + offset)

    def pe_tcm_addr(self, rack_id: int, sip_id: int, cube_id: int, pe_id: int,
                    tcm_offset: int) -> int:
        """A byte of a PE's TCM (unit_type PE, as before ADR-0031: D4)."""
        return self._pe_resource("tcm", rack_id, sip_id, cube_id, pe_id, tcm_offset)

    def pe_ipcq_addr(self, rack_id: int, sip_id: int, cube_id: int, pe_id: int,
                     ipcq_offset: int) -> int:
        """A byte of a PE's IPCQ range; see `pe_ipcq_slot_addr` for direction and slot."""
        return self._pe_resource("ipcq", rack_id, sip_id, cube_id, pe_id, ipcq_offset)

    def pe_ipcq_slot_addr(self, rack_id: int, sip_id: int, cube_id: int, pe_id: int,
                          direction: str, slot: int, offset: int = 0) -> int:
        """Byte `offset` of ring slot `slot` of the ring facing `direction` (E, W, N, S)."""
        r = self.resources
        if direction not in DIRECTIONS:
            raise AddressError(f"direction {direction!r} is not one of {', '.join(DIRECTIONS)}")
        if not 0 <= slot < r.ipcq_slots:
            raise AddressError(f"slot = {slot} does not exist (pe.ipcq.slots = {r.ipcq_slots}: "
                               f"0..{r.ipcq_slots - 1})")
        self._within("IPCQ slot", offset, r.ipcq_slot_bytes, "pe.ipcq.slot_size")
        return self.pe_ipcq_addr(rack_id, sip_id, cube_id, pe_id,
                                 r.ipcq_offset(direction, slot, offset))

    def pe_scratchpad_addr(self, rack_id: int, sip_id: int, cube_id: int, pe_id: int,
                           offset: int) -> int:
        return self._pe_resource("scratchpad", rack_id, sip_id, cube_id, pe_id, offset)

    def pe_regfile_addr(self, rack_id: int, sip_id: int, cube_id: int, pe_id: int,
                        offset: int) -> int:
        return self._pe_resource("regfile", rack_id, sip_id, cube_id, pe_id, offset)

    def pe_status_addr(self, rack_id: int, sip_id: int, cube_id: int, pe_id: int,
                       offset: int) -> int:
        return self._pe_resource("status", rack_id, sip_id, cube_id, pe_id, offset)

    def cube_sram_addr(self, rack_id: int, sip_id: int, cube_id: int, offset: int) -> int:
        """A byte of the cube-shared SRAM (unit_type SRAM, pe field 0)."""
        base = self._coords(rack=rack_id, sip=sip_id, cube=cube_id)
        self._within("SRAM", offset, self.sram_bytes, "sram.size")
        return base | L.UNIT_TYPE.put(L.UnitType.SRAM) | offset

    def cube_mcpu_addr(self, rack_id: int, sip_id: int, cube_id: int, offset: int) -> int:
        """A byte of the cube's management CPU window (unit_type MCPU, pe field 0).

        kernbench models no MCPU; the window is named so decode can print it.
        """
        base = self._coords(rack=rack_id, sip=sip_id, cube=cube_id)
        self._within("MCPU", offset, L.PE_WINDOW_BYTES, "the MCPU window")
        return base | L.UNIT_TYPE.put(L.UnitType.MCPU) | offset

    def component_addr(self, component: str, coord: PeCoord, offset: int) -> int:
        """Any factory by component name (`kernbench encode`, the allocators)."""
        rack, sip, cube, pe = coord
        if component == "hbm":
            return self.pe_hbm_addr(rack, sip, cube, pe, offset)
        if component in PE_COMPONENTS:
            return self._pe_resource(component, rack, sip, cube, pe, offset)
        if component == "sram":
            return self.cube_sram_addr(rack, sip, cube, offset)
        if component == "mcpu":
            return self.cube_mcpu_addr(rack, sip, cube, offset)
        raise AddressError(f"unknown component {component!r} (known: {', '.join(COMPONENTS)})")

    def _pe_resource(self, component: str, rack: int, sip: int, cube: int, pe: int,
                     offset: int) -> int:
        base = self._coords(rack=rack, sip=sip, cube=cube, pe=pe)
        r = self.resources.get(component)
        self._within(component, offset, r.used, USED_BY.get(component, f"pe.resources.{component}"))
        return base | L.UNIT_TYPE.put(L.UnitType.PE) | (r.start + offset)

    def locate(self, addr: int) -> tuple[PeCoord, str]:
        """(PE where `addr` is reached, its kind: "hbm", "pe", "sram" or "mcpu"): the DMA's
        routing question.

        HBM belongs to the PE whose slice holds it; a PE resource to that PE;
        the cube's SRAM and MCPU are reached at PE 0 of the cube (their port on
        its NoC). Assumes `addr` is valid (allocated memory); `decode` is the
        checking path.
        """
        rack, sip, cube = L.RACK.get(addr), L.SIP.get(addr), L.CUBE.get(addr)
        if L.WINDOW.get(addr) == L.HBM_WINDOW:
            return PeCoord(rack, sip, cube, L.HBM_OFFSET.get(addr) // self.slice_bytes), "hbm"
        unit = L.UNIT_TYPE.get(addr)
        if unit == L.UnitType.SRAM:
            return PeCoord(rack, sip, cube, 0), "sram"
        if unit == L.UnitType.MCPU:
            return PeCoord(rack, sip, cube, 0), "mcpu"
        return PeCoord(rack, sip, cube, L.PE.get(addr)), "pe"

    # ----------------------------------------------------------------- decode

    def decode(self, addr: int) -> Decoded:
        """Split `addr` into its fields; AddressError names the field at fault."""
        if not isinstance(addr, int) or addr < 0:
            raise AddressError(f"address {addr!r} is negative or not an integer")
        if addr >> L.ADDR_BITS:
            raise AddressError(f"address {addr:#x} is wider than {L.ADDR_BITS} bits")
        rack, sip, cube = L.RACK.get(addr), L.SIP.get(addr), L.CUBE.get(addr)
        self._coords(rack=rack, sip=sip, cube=cube)
        if L.WINDOW.get(addr) == L.HBM_WINDOW:
            off = L.HBM_OFFSET.get(addr)
            self._within("HBM", off, self.cube_hbm_bytes,
                         "the cube's HBM (system.pes_per_cube x hbm.slice_size)")
            pe, slice_off = divmod(off, self.slice_bytes)
            return Decoded(addr, "hbm", rack, sip, cube, None, pe, None, "hbm", slice_off,
                           hbm_offset=off)
        unit_bits, pe, ext = L.UNIT_TYPE.get(addr), L.PE.get(addr), L.EXT.get(addr)
        off = L.PE_OFFSET.get(addr)
        try:
            unit = L.UnitType(unit_bits)
        except ValueError:
            names = ", ".join(f"{u.name}={u.value}" for u in L.UnitType)
            raise AddressError(f"unit_type = {unit_bits} is not a unit type ({names})") from None
        common = (addr, "pe_resource", rack, sip, cube, unit.name, pe, ext)
        if unit is not L.UnitType.PE:
            if pe != 0:
                raise AddressError(f"pe = {pe} in a {unit.name} address; the cube's {unit.name} "
                                   "is addressed with pe = 0")
            if unit is L.UnitType.SRAM:
                self._within("SRAM", off, self.sram_bytes, "sram.size")
                return Decoded(*common, "sram", off)
            return Decoded(*common, "mcpu", off)
        self._coords(pe=pe)
        r = self.resources.find(off)
        if r is None:
            raise NotInTopology(f"pe_offset {off:#x} falls in reserved space of the PE resource "
                               "window (no [pe.resources] range holds it)")
        comp_off = off - r.start
        if comp_off >= r.used:
            raise NotInTopology(f"{r.name} offset {comp_off:#x} is reserved: only "
                               f"{format_size(r.used)} of pe.resources.{r.name} is in use "
                               f"({USED_BY.get(r.name, 'the range')})")
        if r.name != "ipcq":
            return Decoded(*common, r.name, comp_off)
        direction, slot, slot_off = self.resources.ipcq_place(comp_off)
        return Decoded(*common, "ipcq", comp_off, direction, slot, slot_off)


def _check_fits_layout(topo: Topology, file: Path) -> list[str]:
    s = topo.system
    problems = []
    for key, value, field in (("racks", s.racks, L.RACK), ("sips_per_rack", s.sips_per_rack, L.SIP),
                              ("cubes_per_sip", s.cubes_per_sip, L.CUBE),
                              ("pes_per_cube", s.pes_per_cube, L.PE)):
        if value > field.limit:
            problems.append(f"{file}: system.{key}: {value} does not fit the {field.width}-bit "
                            f"{field.name} field of a PhysAddr (at most {field.limit})")
    cube_hbm = s.pes_per_cube * topo.hbm.slice_size
    if cube_hbm > L.HBM_WINDOW_BYTES:
        problems.append(f"{file}: hbm.slice_size: {s.pes_per_cube} PEs x "
                        f"{format_size(topo.hbm.slice_size)} = {format_size(cube_hbm)} exceeds a "
                        f"cube's {format_size(L.HBM_WINDOW_BYTES)} HBM window")
    if topo.sram.size > L.PE_WINDOW_BYTES:
        problems.append(f"{file}: sram.size: {format_size(topo.sram.size)} exceeds the "
                        f"{format_size(L.PE_WINDOW_BYTES)} SRAM window")
    return problems
