"""The 51-bit PhysAddr layout (ADR-0001), declared once as named bit fields.

::

    [50:47] rack   [46:43] sip   [42:38] cube (sip_seg)   [37] window
    window = 1 (HBM):          [36:0]  hbm_offset   (128 GiB per cube)
    window = 0 (PE resource):  [36:34] unit_type    (PE | MCPU | SRAM)
                               [33:30] pe
                               [29]    ext
                               [28:0]  sub_offset
    pe_offset = [29:0] = ext:sub_offset, one unit's 1 GiB resource window

Everything else (which component an offset belongs to) is the topology's
business: see `address.resource_map`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from kernbench_cli.errors import AddressError

ADDR_BITS = 51


@dataclass(frozen=True)
class BitField:
    """Bits ``[hi:lo]`` of an address, inclusive, as in a datasheet."""

    name: str
    hi: int
    lo: int

    def __post_init__(self) -> None:
        # precomputed: `get` runs for every DMA the simulator routes
        object.__setattr__(self, "width", self.hi - self.lo + 1)
        object.__setattr__(self, "limit", 1 << self.width)
        object.__setattr__(self, "mask", self.limit - 1)

    width: int = 0
    limit: int = 0  # one past the largest value the field holds
    mask: int = 0

    def get(self, addr: int) -> int:
        return (addr >> self.lo) & self.mask

    def put(self, value: int) -> int:
        """`value` shifted into place; AddressError if it does not fit."""
        if not 0 <= value < self.limit:
            raise AddressError(
                f"{self.name} = {value} does not fit the {self.width}-bit field "
                f"[{self.hi}:{self.lo}] (0..{self.limit - 1})")
        return value << self.lo


RACK = BitField("rack", 50, 47)
SIP = BitField("sip", 46, 43)
CUBE = BitField("cube", 42, 38)
WINDOW = BitField("window", 37, 37)
HBM_OFFSET = BitField("hbm_offset", 36, 0)
UNIT_TYPE = BitField("unit_type", 36, 34)
PE = BitField("pe", 33, 30)
EXT = BitField("ext", 29, 29)
SUB_OFFSET = BitField("sub_offset", 28, 0)
PE_OFFSET = BitField("pe_offset", 29, 0)

HBM_WINDOW = 1
RESOURCE_WINDOW = 0

#: The two ways the 51 bits divide, each covering every bit exactly once.
HBM_LAYOUT = (RACK, SIP, CUBE, WINDOW, HBM_OFFSET)
RESOURCE_LAYOUT = (RACK, SIP, CUBE, WINDOW, UNIT_TYPE, PE, EXT, SUB_OFFSET)

HBM_WINDOW_BYTES = HBM_OFFSET.limit  # 128 GiB
PE_WINDOW_BYTES = PE_OFFSET.limit  # 1 GiB


class UnitType(IntEnum):
    """The unit a resource-window address belongs to (ADR-0001)."""

    PE = 0
    MCPU = 1
    SRAM = 2


