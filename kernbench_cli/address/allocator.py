"""Allocators: aligned blocks from each PE's HBM slice and resource ranges.

A `Pool` is a bump allocator over one contiguous run of addresses (one PE's
HBM slice, or one PE's TCM or scratchpad range). Kernels allocate their
tensors once in host setup and never free them, so bumping is the whole
story; `Pool.find` answers "which allocation holds this address" for bounds
checks. `SystemAllocator` makes each PE's pools on first use.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from kernbench_cli.address.physaddr import AddressMap, PeCoord
from kernbench_cli.config.units import format_size
from kernbench_cli.errors import AddressError

DEFAULT_ALIGN = 64  # one HBM burst / cache line


@dataclass(frozen=True)
class Allocation:
    name: str
    addr: int
    nbytes: int

    @property
    def end(self) -> int:
        return self.addr + self.nbytes


class Pool:
    """Aligned bump allocation over ``[base, base + size)``."""

    def __init__(self, name: str, base: int, size: int):
        self.name = name
        self.base = base
        self.size = size
        self._next = base
        self._allocs: list[Allocation] = []
        self._starts: list[int] = []  # addresses of _allocs, ascending (bump order)

    @property
    def used(self) -> int:
        return self._next - self.base

    @property
    def free(self) -> int:
        return self.size - self.used

    def alloc(self, nbytes: int, what: str = "buffer", align: int = DEFAULT_ALIGN) -> int:
        """Address of `nbytes` fresh bytes aligned to `align`; AddressError when full."""
        if nbytes <= 0:
            raise AddressError(f"{self.name}: cannot allocate {nbytes} bytes for {what}")
        if align <= 0 or align & (align - 1):
            raise AddressError(f"{self.name}: alignment {align} is not a power of two")
        start = -(-self._next // align) * align
        if start + nbytes > self.base + self.size:
            raise AddressError(
                f"{self.name} is full: {what} needs {format_size(nbytes)} "
                f"({nbytes} B) aligned to {align}, {self.base + self.size - start} B of "
                f"{format_size(self.size)} left")
        self._next = start + nbytes
        self._allocs.append(Allocation(what, start, nbytes))
        self._starts.append(start)
        return start

    def find(self, addr: int) -> Allocation | None:
        """The allocation holding `addr`, or None."""
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self._allocs[i].end:
            return self._allocs[i]
        return None


class SystemAllocator:
    """Per-PE pools for a whole system, created on first use."""

    def __init__(self, amap: AddressMap):
        self.amap = amap
        self._pools: dict[tuple[str, PeCoord], Pool] = {}

    def pool(self, component: str, coord: PeCoord) -> Pool:
        """The pool of `component` ("hbm", "tcm", "scratchpad") at PE `coord`."""
        key = (component, coord)
        pool = self._pools.get(key)
        if pool is None:
            base = self.amap.component_addr(component, coord, 0)
            size = (self.amap.slice_bytes if component == "hbm"
                    else self.amap.resources.get(component).used)
            pool = Pool(f"{component} of PE ({coord})", base, size)
            self._pools[key] = pool
        return pool

    def alloc(self, component: str, coord: PeCoord, nbytes: int, what: str = "buffer",
              align: int = DEFAULT_ALIGN) -> int:
        return self.pool(component, coord).alloc(nbytes, what, align)

    def find(self, addr: int) -> Allocation | None:
        """The allocation holding `addr` in any pool made so far."""
        for pool in self._pools.values():
            if pool.base <= addr < pool.base + pool.size:
                return pool.find(addr)
        return None
