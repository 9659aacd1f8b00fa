"""PhysAddr bit layout, the PE resource map (ADR-0031) and the allocators."""

from kernbench_cli.address.layout import UnitType
from kernbench_cli.address.physaddr import COMPONENTS, AddressMap, Decoded, PeCoord

__all__ = ["COMPONENTS", "AddressMap", "Decoded", "PeCoord", "UnitType"]
