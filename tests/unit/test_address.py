"""PhysAddr layout, factories, decode and the resource map (ADR-0001, ADR-0031)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernbench_cli.address import AddressMap, PeCoord, UnitType
from kernbench_cli.address import layout as L
from kernbench_cli.address.physaddr import PE_COMPONENTS
from kernbench_cli.address.resource_map import DIRECTIONS
from kernbench_cli.config import load_topology
from kernbench_cli.errors import AddressError

# Every field at its full width: 16 racks x 16 SIPs x 32 cubes x 16 PEs.
FULL = """
[system]
racks = 16
sips_per_rack = 16
cubes_per_sip = 32
cube_mesh = [8, 4]
pes_per_cube = 16
pe_mesh = [4, 4]
[hbm]
slice_size = "8GiB"
"""


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> AddressMap:
    path = tmp_path_factory.mktemp("full") / "full.toml"
    path.write_text(FULL)
    return AddressMap.compile(load_topology(path))


def test_each_layout_covers_all_51_bits_once():
    for fields in (L.HBM_LAYOUT, L.RESOURCE_LAYOUT):
        mask = 0
        for f in fields:
            bits = ((1 << f.width) - 1) << f.lo
            assert mask & bits == 0, f"{f.name} overlaps an earlier field"
            mask |= bits
        assert mask == (1 << L.ADDR_BITS) - 1


def test_field_errors_name_field_and_width():
    with pytest.raises(AddressError) as info:
        L.CUBE.put(40)
    assert str(info.value) == "cube = 40 does not fit the 5-bit field [42:38] (0..31)"


def test_design_doc_example_decodes_to_cube_3_hbm_offset_0x1234(amaps):
    d = amaps["sip"].decode(0xE000001234)
    assert (d.kind, d.cube, d.component, d.component_offset) == ("hbm", 3, "hbm", 0x1234)
    assert d.text == "HBM rack=0 sip=0 cube=3 pe=0 offset=0x1234 (cube offset 0x1234)"


def test_a_tcm_address_is_unit_type_pe_with_the_pe_and_offset_below(amap):
    """A TCM address holds the cube, unit type PE, the PE and the offset, in the fields of
    ADR-0001's pe_tcm_addr (kept by ADR-0031), and decodes back to them."""
    addr = amap.pe_tcm_addr(0, 0, 1, 5, 0x40)
    assert addr == (1 << 38) | (UnitType.PE << 34) | (5 << 30) | 0x40
    d = amap.decode(addr)
    assert (d.unit_type, d.component, d.pe, d.component_offset) == ("PE", "tcm", 5, 0x40)


def test_ipcq_slot_formula_adr30(amap):
    r = amap.resources
    ipcq = r.get("ipcq")
    addr = amap.pe_ipcq_slot_addr(0, 0, 0, 3, "N", 2, 0x12)
    region = r.ipcq_slots * r.ipcq_slot_bytes
    assert L.PE_OFFSET.get(addr) == ipcq.start + 2 * region + 2 * r.ipcq_slot_bytes + 0x12
    d = amap.decode(addr)
    assert (d.direction, d.slot, d.text) == (
        "N", 2, "IPCQ ring rack=0 sip=0 cube=0 pe=3 dir=N slot=2 offset=0x12")


def test_pe_hbm_addr_is_the_pes_slice(amap):
    addr = amap.pe_hbm_addr(0, 0, 1, 3, 0x100)
    assert addr == amap.hbm_addr(0, 0, 1, 3 * amap.slice_bytes + 0x100)
    d = amap.decode(addr)
    assert (d.pe, d.component_offset) == (3, 0x100)


@pytest.mark.parametrize(("addr", "message"), [
    (-1, "address -1 is negative or not an integer"),
    (1 << 51, "address 0x8000000000000 is wider than 51 bits"),
    (2 << 38, "cube = 2 does not exist in topology 'default' (system.cubes_per_sip = 2: 0..1)"),
    (1 << 47, "rack = 1 does not exist in topology 'default' (system.racks = 1: 0..0)"),
    ((1 << 37) | (16 << 30), "HBM offset 0x400000000 is outside the cube's HBM "
                             "(system.pes_per_cube x hbm.slice_size) (16GiB: 0x0..0x3ffffffff)"),
    (8 << 30, "pe = 8 does not exist in topology 'default' (system.pes_per_cube = 8: 0..7)"),
    (5 << 34, "unit_type = 5 is not a unit type (PE=0, MCPU=1, SRAM=2)"),
    ((2 << 34) | (1 << 30), "pe = 1 in a SRAM address; the cube's SRAM is addressed with pe = 0"),
    (0x20_0000, "tcm offset 0x200000 is reserved: only 2MiB of pe.resources.tcm is in use "
                "(pe.tcm.size)"),
    (0x3F00_0000, "pe_offset 0x3f000000 falls in reserved space of the PE resource window "
                  "(no [pe.resources] range holds it)"),
])
def test_decode_errors_name_the_field(amap, addr, message):
    with pytest.raises(AddressError) as info:
        amap.decode(addr)
    assert str(info.value) == message


@pytest.mark.parametrize(("call", "message"), [
    (lambda m: m.pe_tcm_addr(0, 0, 0, 0, 2 * 2**20),
     "tcm offset 0x200000 is outside pe.tcm.size (2MiB: 0x0..0x1fffff)"),
    (lambda m: m.pe_ipcq_slot_addr(0, 0, 0, 0, "X", 0),
     "direction 'X' is not one of E, W, N, S"),
    (lambda m: m.pe_ipcq_slot_addr(0, 0, 0, 0, "E", 4),
     "slot = 4 does not exist (pe.ipcq.slots = 4: 0..3)"),
    (lambda m: m.pe_hbm_addr(0, 0, 0, 16, 0),
     "pe = 16 does not fit the 4-bit field [33:30] (0..15)"),
    (lambda m: m.cube_sram_addr(0, 0, 0, 8 * 2**20),
     "SRAM offset 0x800000 is outside sram.size (8MiB: 0x0..0x7fffff)"),
    (lambda m: m.component_addr("flash", PeCoord(0, 0, 0, 0), 0),
     "unknown component 'flash' (known: hbm, tcm, ipcq, scratchpad, regfile, status, sram, mcpu)"),
])
def test_factory_errors(amap, call, message):
    with pytest.raises(AddressError) as info:
        call(amap)
    assert str(info.value) == message


# ------------------------------------------------------------------ properties


def _coords(m: AddressMap):
    s = m.topology.system
    return st.builds(PeCoord, st.integers(0, s.racks - 1), st.integers(0, s.sips_per_rack - 1),
                     st.integers(0, s.cubes_per_sip - 1), st.integers(0, s.pes_per_cube - 1))


def _reencode(m: AddressMap, d) -> int:
    """The factory call that should produce the decoded address."""
    coord = PeCoord(d.rack, d.sip, d.cube, d.pe or 0)
    if d.component == "hbm":
        return m.hbm_addr(d.rack, d.sip, d.cube, d.hbm_offset)
    return m.component_addr(d.component, coord, d.component_offset)


def _used(m: AddressMap, component: str) -> int:
    if component == "hbm":
        return m.slice_bytes
    if component == "sram":
        return m.sram_bytes
    if component == "mcpu":
        return L.PE_WINDOW_BYTES
    return m.resources.get(component).used


@settings(max_examples=400, deadline=None)
@given(data=st.data(), component=st.sampled_from(["hbm", *PE_COMPONENTS, "sram", "mcpu"]))
def test_every_factory_round_trips_over_the_whole_legal_range(full, data, component):
    coord = data.draw(_coords(full))
    if component in ("sram", "mcpu"):
        coord = coord._replace(pe=0)
    offset = data.draw(st.integers(0, _used(full, component) - 1))
    addr = full.component_addr(component, coord, offset)
    assert 0 <= addr < 1 << L.ADDR_BITS
    d = full.decode(addr)
    assert (d.rack, d.sip, d.cube) == coord[:3]
    assert d.component == component
    assert d.component_offset == offset
    if component not in ("sram", "mcpu"):
        assert d.pe == coord.pe
    assert _reencode(full, d) == addr


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_ipcq_slots_round_trip(full, data):
    r = full.resources
    coord = data.draw(_coords(full))
    direction = data.draw(st.sampled_from(DIRECTIONS))
    slot = data.draw(st.integers(0, r.ipcq_slots - 1))
    offset = data.draw(st.integers(0, r.ipcq_slot_bytes - 1))
    d = full.decode(full.pe_ipcq_slot_addr(*coord, direction, slot, offset))
    assert (d.direction, d.slot, d.slot_offset) == (direction, slot, offset)


def _any_address():
    """Arbitrary 51-bit ints, and near-valid ones (valid fields, one perturbed)."""
    raw = st.integers(0, (1 << L.ADDR_BITS) - 1)
    hbm = st.builds(lambda hi, off: (hi << 37) | off, st.integers(0, (1 << 14) - 1),
                    st.integers(0, (1 << 37) - 1))
    res = st.builds(lambda hi, unit, pe, off: (hi << 38) | (unit << 34) | (pe << 30) | off,
                    st.integers(0, (1 << 13) - 1), st.integers(0, 7), st.integers(0, 15),
                    st.integers(0, (1 << 30) - 1))
    return st.one_of(raw, hbm, res)


@pytest.mark.parametrize("topology", ["full", "default"])
@settings(max_examples=600, deadline=None)
@given(addr=_any_address())
def test_decode_accepts_only_what_a_factory_produces(request, topology, addr):
    m = request.getfixturevalue("full") if topology == "full" else request.getfixturevalue("amap")
    try:
        d = m.decode(addr)
    except AddressError:
        return
    assert _reencode(m, d) == addr


# ---------------------------------------------------------------- resource map


def test_resource_layout_lists_ranges_and_reserved_gaps(amap):
    rows = amap.resources.layout()
    assert rows[0] == ("tcm", 0, 16 * 2**20, 2 * 2**20)
    assert [r[0] for r in rows] == ["tcm", "ipcq", "scratchpad", "reserved", "regfile", "status",
                                    "reserved"]
    for (_, _, end, _), (_, start, _, _) in itertools.pairwise(rows):
        assert end == start  # contiguous
    assert rows[-1][2] == L.PE_WINDOW_BYTES


def test_find_uses_the_sorted_table(amap):
    r = amap.resources
    assert r.find(0).name == "tcm"
    assert r.find(r.get("ipcq").start).name == "ipcq"
    assert r.find(r.get("ipcq").start - 1).name == "tcm"
    assert r.find(r.get("scratchpad").end) is None
