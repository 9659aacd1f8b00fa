"""Allocators: aligned blocks from each PE's HBM slice and resource ranges.

A `Pool` is a bump allocator over one contiguous run of addresses (one PE's
HBM slice, or one PE's TCM or scratchpad range). Kernels allocate their
tensors once in host setup and never free them, so bumping is the whole
story; `Pool.find` answers "which allocation holds this address" for bounds
checks. `SystemAllocator` makes each PE's pools on first use.
"""

from __future__ import annotations

import bisect
import itertools
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
        return self._take(start, nbytes, what, f"aligned to {align}")

    def alloc_at(self, addr: int, nbytes: int, what: str = "buffer") -> int:
        """Allocate `nbytes` exactly at `addr` (>= the next free byte): symmetric layouts."""
        if addr < self._next:
            raise AddressError(f"{self.name}: {addr:#x} is already in use")
        return self._take(addr, nbytes, what, f"at offset {addr - self.base:#x}")

    def _take(self, addr: int, nbytes: int, what: str, where: str) -> int:
        left = self.base + self.size - addr
        if nbytes > left:
            raise AddressError(f"{self.name} is full: {what} needs {format_size(nbytes)} "
                               f"({nbytes} B) {where}, {left} B of {format_size(self.size)} left")
        self._next = addr + nbytes
        self._allocs.append(Allocation(what, addr, nbytes))
        self._starts.append(addr)
        return addr

    def find(self, addr: int) -> Allocation | None:
        """The allocation holding `addr`, or None."""
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self._allocs[i].end:
            return self._allocs[i]
        return None


class FreeListPool:
    """First-fit allocation with free, over ``[base, base + size)`` (a PE's TCM).

    Kernel tensors come and go; a block is freed when its tensor is dropped.
    Freed blocks wait in a cache by size, since a kernel's loop allocates the
    same tile sizes again and again; they return to the free list (and
    coalesce) only when a request finds no room otherwise, or when the free
    space is asked for. The free list is two lists, block starts and sizes by
    address, so that first fit scans the sizes in C.
    """

    def __init__(self, name: str, base: int, size: int):
        self.name = name
        self.base = base
        self.size = size
        self._starts: list[int] = [base]  # free blocks, by address
        self._lengths: list[int] = [size]
        self._sizes: dict[int, int] = {}  # allocated block -> its size
        self._cached: dict[int, list[int]] = {}  # size -> freed blocks of that size
        self.used = 0
        self.peak = 0  # the end of the highest block ever allocated, from `base`

    def largest_free(self) -> int:
        self._flush()
        return max(self._lengths, default=0)

    def allocations(self) -> dict[int, int]:
        """{address: bytes} of every block in use."""
        return dict(self._sizes)

    def alloc(self, nbytes: int, what: str, align: int = DEFAULT_ALIGN) -> int:
        nbytes = max(nbytes, 1)
        cached = self._cached.get(nbytes)
        if cached:
            addr = cached.pop()
            self._sizes[addr] = nbytes
            self.used += nbytes
            return addr
        addr = self._first_fit(nbytes, align)
        if addr is None and self._cached:
            self._flush()
            addr = self._first_fit(nbytes, align)
        if addr is None:
            raise AddressError(
                f"{self.name} is full: {what} needs {format_size(nbytes)} ({nbytes} B); "
                f"{self.size - self.used} B of {format_size(self.size)} free, the largest free "
                f"block is {self.largest_free()} B")
        self._sizes[addr] = nbytes
        self.used += nbytes
        if addr + nbytes - self.base > self.peak:
            self.peak = addr + nbytes - self.base
        return addr

    def _first_fit(self, nbytes: int, align: int) -> int | None:
        starts, lengths = self._starts, self._lengths
        # blocks at least `nbytes` long, found in C; the first whose aligned start fits wins
        for i in itertools.compress(itertools.count(), map(nbytes.__le__, lengths)):
            start, size = starts[i], lengths[i]
            addr = -(-start // align) * align
            if addr + nbytes <= start + size:
                head, tail = addr - start, start + size - (addr + nbytes)
                new_starts = ([start] if head else []) + ([addr + nbytes] if tail else [])
                starts[i:i + 1] = new_starts
                lengths[i:i + 1] = ([head] if head else []) + ([tail] if tail else [])
                return addr
        return None

    def free(self, addr: int) -> None:
        nbytes = self._sizes.pop(addr)
        self.used -= nbytes
        cached = self._cached.get(nbytes)
        if cached is None:
            self._cached[nbytes] = [addr]
        else:
            cached.append(addr)

    def _flush(self) -> None:
        """Return every cached block to the free list, by address, joining touching blocks."""
        if not self._cached:
            return
        blocks = [*zip(self._starts, self._lengths, strict=True),
                  *((addr, size) for size, addrs in self._cached.items() for addr in addrs)]
        self._cached.clear()
        blocks.sort()
        starts, lengths = [blocks[0][0]], [blocks[0][1]]
        for start, size in blocks[1:]:
            if starts[-1] + lengths[-1] == start:
                lengths[-1] += size
            else:
                starts.append(start)
                lengths.append(size)
        self._starts, self._lengths = starts, lengths


@dataclass(frozen=True)
class Sharded:
    """A symmetric allocation: `shape` of `dtype` at `offset` in every PE's HBM slice.

    Kernels turn it into an address with ``tl.shard(x)`` (this PE's copy) or
    ``tl.shard(x, pid=k)`` (PE k's copy).
    """

    name: str
    offset: int
    shape: tuple[int, ...]
    dtype: str
    nbytes: int


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
            size = {"hbm": self.amap.slice_bytes, "sram": self.amap.sram_bytes}.get(component)
            if size is None:
                size = self.amap.resources.get(component).used
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
