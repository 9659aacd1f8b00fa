"""Allocators: aligned blocks from each PE's HBM slice and resource ranges.

A `Pool` is a bump allocator over one contiguous run of addresses (one PE's
HBM slice, or one PE's TCM or scratchpad range). Kernels allocate their
tensors once in host setup and never free them, so bumping is the whole
story; `Pool.find` answers "which allocation holds this address" for bounds
checks. `SystemAllocator` makes each PE's pools on first use.

`SliceAllocator` is the host's: a bump pointer per PE's HBM slice, where a
symmetric allocation (one offset in every slice) costs as much as one in a
single slice, whatever the PE count. It keeps no record of what it handed
out (the host's `Memory` does).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable
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


#: Requests of this many bytes or more are placed from the top of a `FreeListPool`: 1/16 of
#: the shipped 2 MiB TCM (a [16, 8192] f32 hidden state is 512 KiB, a 128x128 f32 tile 64).
LARGE = 128 * 1024


class FreeListPool:
    """First-fit allocation with free, over ``[base, base + size)`` (a PE's TCM).

    Kernel tensors come and go; a block is freed when its tensor is dropped.
    Freed blocks wait in a cache by size, since a kernel's loop allocates the
    same tile sizes again and again (the one nearest the end it was placed from
    is taken first, whatever order they were freed in); they return to the free list (and
    coalesce) only when a request finds no room otherwise, when the free space
    is asked for, or, while a block from the top is in use, when the cache
    cannot serve a request (so that a small tensor is not placed high, past
    freed room not yet joined, where it would hold the large ones above it). A
    request the cache cannot serve takes the lowest-addressed free block it fits
    in at an aligned address; a large one (`large` bytes or more) the
    highest-addressed, at the highest aligned address there. Small tensors and
    large ones so keep to their own ends: a small tensor left between two large
    ones would split the room a third needs (a kernel's [rows, hidden] states,
    at 16 rows or more of a large model).

    A block is kept where it was placed from, the bottom or the top, and the
    two never cross: a block from the bottom ends below every block from the
    top in use. A request that finds no room on its size's side is placed from
    the other (a large tensor below small ones that sit high, a small one among
    large ones), and fails only when neither has room; its error gives the
    largest free block either side has.

    A block is named by its *handle*, what `alloc` returns and `free` takes: a
    block from the bottom by its address; one from the top by its address less
    ``base + size``, a negative number, its place counted from the top (never
    the streams' NONE: a block of 1 byte is only placed from the bottom). A
    command stream that keeps the handles so keeps a large tensor at the top of
    any TCM it is timed on, as a run there would place it. `peak` is the TCM
    such a stream needs: the most, at any time, of the highest end of a block
    from the bottom (from `base`) plus the deepest start of one from the top
    (from the top).

    The free list is three lists by address: block starts, sizes, and the
    room from a block's first `DEFAULT_ALIGN`-aligned byte to its end. Tensors
    of a few bytes leave slivers behind them (the 48 B after a 16 B tensor in a
    64 B slot) that are long enough for a request of their size but hold no
    aligned address; first fit over the sizes stopped at each one in Python,
    while over the room the first block that fits is the first found, in C.
    """

    def __init__(self, name: str, base: int, size: int, large: int = LARGE):
        self.name = name
        self.base = base
        self.size = size
        self.large = large
        self._top = base + size
        self._starts: list[int] = [base]  # free blocks, by address
        self._lengths: list[int] = [size]
        self._room: list[int] = [_room(base, size)]  # from the first aligned byte to the end
        self._sizes: dict[int, int] = {}  # allocated block's handle -> its size
        self._cached: dict[int, list[int]] = {}  # size -> freed blocks' handles of that size
        self._tops: set[int] = set()  # the handles of the blocks from the top, in use
        self._deep = 0  # the deepest start of a block from the top in use, from the top
        self.used = 0
        self.peak = 0  # bytes of TCM the blocks need, each kept at its own end

    def largest_free(self) -> int:
        self._flush()
        return max(self._lengths, default=0)

    def allocations(self) -> dict[int, int]:
        """{handle: bytes} of every block in use."""
        return dict(self._sizes)

    def state(self) -> tuple:
        """What decides where every later block goes, hashable: the free list, the blocks
        in use and the cache in its order (`peak`, a record of the past, is not in it)."""
        return (tuple(self._starts), tuple(self._lengths), tuple(sorted(self._sizes.items())),
                tuple(sorted((n, tuple(handles)) for n, handles in self._cached.items())))

    def restore(self, state: tuple) -> None:
        """Take `state` (one `state` returned); `peak` is left as it is."""
        starts, lengths, sizes, cached = state
        self._starts, self._lengths = list(starts), list(lengths)
        self._room = [_room(s, n) for s, n in zip(starts, lengths, strict=True)]
        self._sizes = dict(sizes)
        self._cached = {n: list(handles) for n, handles in cached}
        self._tops = {h for h in self._sizes if h < 0}
        self._deep = -min(self._tops, default=0)
        self.used = sum(self._sizes.values())

    def alloc(self, nbytes: int, what: str, align: int = DEFAULT_ALIGN) -> int:
        """The handle of `nbytes` fresh bytes aligned to `align`; AddressError when full."""
        if nbytes < 1:
            nbytes = 1
        cached = self._cached.get(nbytes)
        if cached:
            handle = cached[-1]
            if handle >= 0 and handle + nbytes + self._deep <= self._top:
                cached.pop()
                return self._took_low(handle, nbytes)
            if handle < 0 and self._top + handle >= self.base + self._low():
                cached.pop()
                return self._took_high(handle, nbytes)
        small = nbytes < self.large
        if self._tops and self._cached:  # blocks from the top in use: freed room joined first
            self._flush()
        handle = self._fit(nbytes, align, small)
        if handle is None and self._cached:
            self._flush()
            handle = self._fit(nbytes, align, small)
        if handle is None:
            self._full(nbytes, what)
        return self._took_low(handle, nbytes) if handle >= 0 else self._took_high(handle, nbytes)

    def _fit(self, nbytes: int, align: int, small: bool) -> int | None:
        """The handle of a fit for `nbytes` on the side of its size, else on the other."""
        for low in (small, not small):
            if not low and nbytes < 2:  # from the top, its handle could be -1 (NONE)
                continue
            if low:
                addr = self._first_fit(nbytes, align, self._top - self._deep)
                if addr is not None:
                    return addr
            else:
                addr = self._top_fit(nbytes, align, self.base + self._low())
                if addr is not None:
                    return addr - self._top
        return None

    def _took_low(self, addr: int, nbytes: int) -> int:
        self._sizes[addr] = nbytes
        self.used += nbytes
        if addr - self.base + nbytes + self._deep > self.peak:
            self.peak = addr - self.base + nbytes + self._deep
        return addr

    def _took_high(self, handle: int, nbytes: int) -> int:
        self._sizes[handle] = nbytes
        self.used += nbytes
        self._tops.add(handle)
        if -handle > self._deep:
            self._deep = -handle
        need = self._low() + self._deep
        if need > self.peak:
            self.peak = need
        return handle

    def _low(self) -> int:
        """The end of the highest block in use counted from the bottom, from `base`."""
        base = self.base
        return max((h - base + n for h, n in self._sizes.items() if h >= 0), default=0)

    def _full(self, nbytes: int, what: str) -> None:
        """Raise the error of a request that found no room on either side."""
        self._flush()
        sides = ((self.base, self._top - self._deep), (self.base + self._low(), self._top))
        room = max((min(s + n, end) - max(s, start) for start, end in sides
                    for s, n in zip(self._starts, self._lengths, strict=True)), default=0)
        raise AddressError(
            f"{self.name} is full: {what} needs {format_size(nbytes)} ({nbytes} B); "
            f"{self.size - self.used} B of {format_size(self.size)} free, the largest free "
            f"block it may take is {max(room, 0)} B")

    def _first_fit(self, nbytes: int, align: int, limit: int) -> int | None:
        """The address of `nbytes` in the lowest-addressed free block they fit in at an
        address aligned to `align`, ending at or below `limit` (the block split around
        them); None if none fits."""
        starts = self._starts
        if align == DEFAULT_ALIGN:  # the room says it: the first block with enough fits
            i = next(itertools.compress(itertools.count(), map(nbytes.__le__, self._room)),
                     None)
            if i is None:
                return None
            addr = -(-starts[i] // align) * align
        else:
            lengths = self._lengths
            for i in itertools.compress(itertools.count(), map(nbytes.__le__, lengths)):
                addr = -(-starts[i] // align) * align
                if addr + nbytes <= starts[i] + lengths[i]:
                    break
            else:
                return None
        if addr + nbytes > limit:  # the lowest fit is above it: so is every other
            return None
        self._split(i, addr, nbytes)
        return addr

    def _top_fit(self, nbytes: int, align: int, floor: int) -> int | None:
        """The address of `nbytes` at the highest address aligned to `align` where they fit
        in the highest-addressed free block they fit in, at or above `floor`; None if none
        fits."""
        starts, lengths = self._starts, self._lengths
        for i in range(len(starts) - 1, -1, -1):
            addr = (starts[i] + lengths[i] - nbytes) // align * align
            if addr < floor:  # the highest fit is below it: so is every other
                return None
            if addr >= starts[i]:
                self._split(i, addr, nbytes)
                return addr
        return None

    def _split(self, i: int, addr: int, nbytes: int) -> None:
        """Free block `i` less ``[addr, addr + nbytes)``: the head and tail left of it."""
        starts, lengths, room = self._starts, self._lengths, self._room
        start, end, tail = starts[i], starts[i] + lengths[i], addr + nbytes
        # `_room` of the head and of the tail, written out (a call each cost more)
        head_room = addr - -(-start // DEFAULT_ALIGN) * DEFAULT_ALIGN
        if end > tail:  # a tail is left: it stays at i, after the head if one is left too
            starts[i], lengths[i] = tail, end - tail
            room[i] = end - -(-tail // DEFAULT_ALIGN) * DEFAULT_ALIGN
            if addr > start:
                starts.insert(i, start)
                lengths.insert(i, addr - start)
                room.insert(i, head_room)
        elif addr > start:
            lengths[i], room[i] = addr - start, head_room
        else:
            del starts[i], lengths[i], room[i]

    def free(self, handle: int) -> None:
        nbytes = self._sizes.pop(handle)
        self.used -= nbytes
        if handle < 0:
            self._tops.discard(handle)
            self._deep = -min(self._tops, default=0)
        cached = self._cached.get(nbytes)
        if cached is None:
            self._cached[nbytes] = [handle]
        else:  # nearest its own end last, where `alloc` takes it
            bisect.insort(cached, handle, key=self._farthest_first)

    def _farthest_first(self, handle: int) -> int:
        """The order of a size's cache, which `alloc` takes from the end: a block farther
        from the end it was placed from first (of two as far, the one from the bottom).
        Freed blocks so return to a cache in an order that does not depend on the order
        they were freed in: a loop whose body frees the same blocks in another order
        leaves the allocator as it found it."""
        return -2 * (handle - self.base) if handle >= 0 else 2 * handle + 1

    def _flush(self) -> None:
        """Return every cached block to the free list, by address, joining touching blocks
        (each put in its place: a flush usually returns a few blocks to a list of tens)."""
        if not self._cached:
            return
        starts, lengths, room, top = self._starts, self._lengths, self._room, self._top
        for size, handles in self._cached.items():
            for h in handles:
                addr = h if h >= 0 else top + h
                end = addr + size
                i = bisect.bisect_left(starts, addr)
                if i and starts[i - 1] + lengths[i - 1] == addr:  # joins the block before
                    i -= 1
                    lengths[i] += size
                    if i + 1 < len(starts) and starts[i + 1] == end:  # ... and the one after
                        lengths[i] += lengths[i + 1]
                        del starts[i + 1], lengths[i + 1], room[i + 1]
                    room[i] = _room(starts[i], lengths[i])
                elif i < len(starts) and starts[i] == end:  # joins the block after
                    starts[i] = addr
                    lengths[i] += size
                    room[i] = _room(addr, lengths[i])
                else:
                    starts.insert(i, addr)
                    lengths.insert(i, size)
                    room.insert(i, _room(addr, size))
        self._cached.clear()


def _room(start: int, size: int) -> int:
    """Bytes from the first `DEFAULT_ALIGN`-aligned address of ``[start, start + size)`` to
    its end (0 or less if none is inside): the most an aligned request can take there."""
    return start + size - -(-start // DEFAULT_ALIGN) * DEFAULT_ALIGN


class SliceAllocator:
    """Aligned bump allocation in each of a list of equal slices (PEs' HBM slices, by pid),
    and at one offset in all of them (`alloc_symmetric`).

    A symmetric allocation starts above everything allocated in any slice and moves every
    slice's next free byte to its end: it is kept once, as a floor under the slices' own
    bump pointers, so it costs the same on 16 PEs as on 8,192. Errors are a `Pool`'s,
    word for word, naming the slice by `name(pid)`.
    """

    def __init__(self, bases: list[int], size: int, name: Callable[[int], str]):
        self.bases = bases
        self.size = size
        self.name = name
        self._next = [0] * len(bases)  # each slice's own next free offset
        self._floor = 0  # the end of the latest symmetric allocation
        self.top = 0  # the highest end of an allocation in any slice, from its base

    def alloc(self, pid: int, nbytes: int, what: str = "buffer",
              align: int = DEFAULT_ALIGN) -> int:
        """Address of `nbytes` fresh bytes in slice `pid`, aligned to `align`."""
        if nbytes <= 0:
            raise AddressError(f"{self.name(pid)}: cannot allocate {nbytes} bytes for {what}")
        if align <= 0 or align & (align - 1):
            raise AddressError(f"{self.name(pid)}: alignment {align} is not a power of two")
        start = self._next[pid]
        if start < self._floor:
            start = self._floor
        start = -(-start // align) * align
        end = start + nbytes
        if end > self.size:
            self._check(pid, start, nbytes, what, f"aligned to {align}")
        self._next[pid] = end
        if end > self.top:
            self.top = end
        return self.bases[pid] + start

    def alloc_symmetric(self, nbytes: int, what: str = "buffer") -> int:
        """The offset of `nbytes` in every slice, above all allocated so far (aligned to
        `DEFAULT_ALIGN`); `nbytes` may be 0."""
        offset = -(-self.top // DEFAULT_ALIGN) * DEFAULT_ALIGN
        self._check(0, offset, nbytes, what, f"at offset {offset:#x}")
        self._floor = self.top = offset + nbytes
        return offset

    def _check(self, pid: int, offset: int, nbytes: int, what: str, where: str) -> None:
        left = self.size - offset
        if nbytes > left:
            raise AddressError(f"{self.name(pid)} is full: {what} needs {format_size(nbytes)} "
                               f"({nbytes} B) {where}, {left} B of {format_size(self.size)} "
                               "left")


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
