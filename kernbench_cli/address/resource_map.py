"""ADR-0031: the PE resource window divided into component ranges.

ADR-0031 left the concrete ranges (its D2) open; kernbench answers it by
configuration. `[pe.resources]` in a topology gives each component a start
and size inside one PE's 1 GiB resource window; `compile_resource_map`
checks them and returns one sorted `ResourceMap` that decode, the factories
and the allocators share.

A range is the address space a component owns; `used` is how much of it the
configured hardware fills (the TCM size, the IPCQ rings). Offsets past `used`
and gaps between ranges are reserved: encode refuses them and decode reports
them.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, fields
from pathlib import Path

from kernbench_cli.address.layout import PE_WINDOW_BYTES
from kernbench_cli.config.schema import Topology
from kernbench_cli.config.units import format_size
from kernbench_cli.errors import ConfigError

#: Ranges (and so the components in them) start on this boundary at least.
RANGE_ALIGN = 4096

#: IPCQ ring directions, in the order of their regions inside the IPCQ range.
DIRECTIONS = ("E", "W", "N", "S")

#: The configuration that decides how much of a range is in use.
USED_BY = {"tcm": "pe.tcm.size", "ipcq": "4 directions x pe.ipcq.slots x pe.ipcq.slot_size"}


@dataclass(frozen=True)
class PeResourceRange:
    """One component's range: offsets ``[start, end)`` of the PE window."""

    name: str
    start: int
    end: int
    used: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class ResourceMap:
    """The compiled, sorted, non-overlapping PE resource ranges."""

    ranges: tuple[PeResourceRange, ...]
    ipcq_slots: int
    ipcq_slot_bytes: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "_starts", [r.start for r in self.ranges])

    def get(self, name: str) -> PeResourceRange:
        for r in self.ranges:
            if r.name == name:
                return r
        raise KeyError(name)

    def find(self, pe_offset: int) -> PeResourceRange | None:
        """The range holding `pe_offset`, or None in a gap."""
        i = bisect.bisect_right(self._starts, pe_offset) - 1  # type: ignore[attr-defined]
        if i >= 0 and pe_offset < self.ranges[i].end:
            return self.ranges[i]
        return None

    @property
    def ipcq_region_bytes(self) -> int:
        """Bytes of one direction's ring: slots x slot size."""
        return self.ipcq_slots * self.ipcq_slot_bytes

    def ipcq_offset(self, direction: str, slot: int, offset: int = 0) -> int:
        """ADR-0030: ``direction_idx * slot_region_size + slot_idx * slot_size + offset``."""
        return (DIRECTIONS.index(direction) * self.ipcq_region_bytes
                + slot * self.ipcq_slot_bytes + offset)

    def ipcq_place(self, ipcq_offset: int) -> tuple[str, int, int]:
        """Inverse of `ipcq_offset`: (direction, slot, offset in slot)."""
        d, rest = divmod(ipcq_offset, self.ipcq_region_bytes)
        slot, offset = divmod(rest, self.ipcq_slot_bytes)
        return DIRECTIONS[d], slot, offset

    def layout(self) -> list[tuple[str, int, int, int]]:
        """Every range and gap of the window, as (name, start, end, used)."""
        rows, cursor = [], 0
        for r in self.ranges:
            if r.start > cursor:
                rows.append(("reserved", cursor, r.start, 0))
            rows.append((r.name, r.start, r.end, r.used))
            cursor = r.end
        if cursor < PE_WINDOW_BYTES:
            rows.append(("reserved", cursor, PE_WINDOW_BYTES, 0))
        return rows


def compile_resource_map(topo: Topology) -> ResourceMap:
    """Check `[pe.resources]` and compile it; ConfigError lists every problem."""
    file = topo.source or Path("<topology>")
    specs = topo.pe.resources
    ipcq_bytes = len(DIRECTIONS) * topo.pe.ipcq.slots * topo.pe.ipcq.slot_size
    needs = {"tcm": topo.pe.tcm.size, "ipcq": ipcq_bytes}
    problems: list[str] = []
    ranges = []
    for f in fields(specs):
        spec = getattr(specs, f.name)
        key = f"pe.resources.{f.name}"
        start, end = spec.start, spec.start + spec.size
        if start % RANGE_ALIGN or spec.size % RANGE_ALIGN:
            problems.append(f"{file}: {key}: start {start:#x} and size {spec.size:#x} must be "
                            f"multiples of {RANGE_ALIGN:#x} (4 KiB)")
        if end > PE_WINDOW_BYTES:
            problems.append(f"{file}: {key}: [{start:#x}, {end:#x}) ends outside the PE "
                            f"resource window [0x0, {PE_WINDOW_BYTES:#x})")
        used = spec.size
        if f.name in needs:
            used = needs[f.name]
            if used > spec.size:
                problems.append(f"{file}: {key}: range of {format_size(spec.size)} cannot hold "
                                f"{USED_BY[f.name]} = {format_size(used)}")
        ranges.append(PeResourceRange(f.name, start, end, min(used, spec.size)))
    ranges.sort(key=lambda r: (r.start, r.name))
    reach = None  # the earlier range that ends last
    for b in ranges:
        if reach is not None and b.start < reach.end:
            problems.append(f"{file}: pe.resources.{b.name}: [{b.start:#x}, {b.end:#x}) overlaps "
                            f"pe.resources.{reach.name} [{reach.start:#x}, {reach.end:#x})")
        if reach is None or b.end > reach.end:
            reach = b
    if problems:
        raise ConfigError(problems)
    return ResourceMap(tuple(ranges), topo.pe.ipcq.slots, topo.pe.ipcq.slot_size)
