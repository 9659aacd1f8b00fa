"""PhysAddr bit layout, the PE resource map (ADR-0031) and the allocators."""

from collections.abc import Sequence
from pathlib import Path

from kernbench_cli.address.layout import UnitType
from kernbench_cli.address.physaddr import COMPONENTS, AddressMap, Decoded, PeCoord

__all__ = ["COMPONENTS", "AddressMap", "Decoded", "PeCoord", "UnitType", "load_address_map"]


def load_address_map(topology: str | None, costs: Path | None = None,
                     sets: Sequence[str] = ()) -> AddressMap:
    """A topology by name or path (None: the default), with `--set` overrides `sets`, loaded
    and compiled (data flow 1-2)."""
    from kernbench_cli.config import load_topology
    from kernbench_cli.shipped import resolve_topology

    return AddressMap.compile(load_topology(resolve_topology(topology), costs, sets))
