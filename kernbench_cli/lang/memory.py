"""The contents of memory: what loads read and stores write.

Values exist only where something was allocated (by host setup through the
allocators, or by the TCM of a kernel's tensors). An access outside every
allocation, or running past the end of one, is an AddressError naming the
address. With ``backed=False`` (timing-only runs) nothing is stored and
every read returns zeros of the right shape without touching memory.

Blocks are cut from slabs of `SLAB_BYTES` (zero pages until written), not
allocated one by one: a rack's 8,192 PEs place tens of thousands of small
inputs, and small allocations freed leave the process's heap as large as
before. `release` gives the bytes back to the system once a run has read
what it needs (its outputs), before the timing pass.

An input the host places (`add` with its array) is not copied when its bytes
are a few runs of that array, as a KV cache's shard is: the block reads
those runs where they are, and gets bytes of its own (a copy) before its
first write or a read across two runs. The host's array is never written.
The same holds for a value placed in every PE's slice (`add_copies`): one
read-only block (the input's runs, or one copy) serves every slice until
that slice is written.

A narrow dtype's values (`lang.narrow`) are read from and written as its
bytes: packed elements and their blocks' scales (`read_f32`, `write_value`).
"""

from __future__ import annotations

import bisect
import itertools
import math

import numpy as np

from kernbench_cli.errors import AddressError
from kernbench_cli.lang.narrow import Narrow, from_bytes, to_bytes

SLAB_BYTES = 64 << 20  # the arrays blocks are cut from; a larger block is one of its own
_ALIGN = 64  # where a block starts in its slab
_MAX_RUNS = 64  # an array of more runs than this is copied in (a run costs a Python object)


class Shared:
    """A block's bytes as read-only runs of a host array, in order."""

    __slots__ = ("runs", "starts")

    def __init__(self, runs: list[np.ndarray]):
        self.runs = runs
        self.starts = list(itertools.accumulate((len(run) for run in runs[:-1]), initial=0))

    def run(self, offset: int, nbytes: int) -> tuple[np.ndarray, int] | None:
        """(the run, the offset in it) holding ``[offset, offset + nbytes)``; None if no
        single run does."""
        j = bisect.bisect_right(self.starts, offset) - 1
        at = offset - self.starts[j]
        return (self.runs[j], at) if at + nbytes <= len(self.runs[j]) else None


class Memory:
    """Byte arrays per allocation, found by address.

    Allocations are kept in the order they were made (columns: base, size, name, bytes),
    so adding one costs the same however many there are; the index by address is sorted
    once, at the first look-up after an addition (a host places everything before the
    kernel runs).
    """

    def __init__(self, backed: bool = True):
        self.backed = backed
        self._bases: list[int] = []
        self._sizes: list[int] = []
        self._names: list[str] = []
        #: each allocation's bytes: its own, a host array's (`Shared`), or None (not backed)
        self._data: list[np.ndarray | Shared | None] = []
        self._order: list[int] = []  # allocations by address (the index)
        self._sorted: list[int] = []  # their bases, ascending
        self._indexed = True  # whether the index covers every allocation
        # (base, end, name) of the allocations checked last, newest first: a kernel's loop
        # touches a few tensors in turn (A, B, C of a GEMM)
        self._recent: list[tuple[int, int, str]] = []
        self._slab = np.zeros(0, dtype=np.uint8)  # where the next small block is cut
        self.released = False

    def add(self, addr: int, nbytes: int, name: str, source: np.ndarray | None = None,
            share: bool = False) -> None:
        """Register an allocation of `nbytes` at `addr`, holding `source`'s values in C order
        (read in place with `share`: a host's input, never written then) or zeros, when
        backed."""
        data = None
        if self.backed:
            runs = _runs(source) if share and source is not None else None
            data = self._cut(nbytes) if runs is None else Shared(runs)
            if source is not None and runs is None:
                np.ndarray(source.shape, source.dtype, data)[...] = source
        if self._recent:
            self._recent.clear()
        self._bases.append(addr)
        self._sizes.append(nbytes)
        self._names.append(name)
        self._data.append(data)
        self._indexed = False

    def add_copies(self, addrs: list[int], nbytes: int, name: str,
                   source: np.ndarray | None = None, share: bool = False) -> None:
        """Register an allocation of `nbytes` at each of `addrs`, each holding `source`'s
        values (or zeros) as `add` would, when backed. The copies are one read-only block
        until each is first written (then it gets bytes of its own), so placing a value in
        every PE's slice costs one copy of it, or none with `share`."""
        data = None
        if self.backed:
            runs = _runs(source) if share and source is not None else None
            if runs is None:
                own = np.zeros(nbytes, dtype=np.uint8)
                if source is not None:
                    np.ndarray(source.shape, source.dtype, own)[...] = source
                own.flags.writeable = False
                runs = [own]
            data = Shared(runs)
        count = len(addrs)
        self._bases.extend(addrs)
        self._sizes.extend([nbytes] * count)
        self._names.extend([name] * count)
        self._data.extend([data] * count)
        self._indexed = False
        self._recent.clear()

    def _cut(self, nbytes: int) -> np.ndarray:
        """`nbytes` zeros of their own: the front of the current slab, or of a new one."""
        if nbytes > SLAB_BYTES // 4:
            return np.zeros(nbytes, dtype=np.uint8)
        if nbytes > len(self._slab):
            self._slab = np.zeros(SLAB_BYTES, dtype=np.uint8)
        data = self._slab[:nbytes]
        self._slab = self._slab[-(-nbytes // _ALIGN) * _ALIGN:]
        return data

    def release(self) -> None:
        """Drop every block's bytes (the allocations stay known); reading or writing them
        afterwards is an error of kernbench's own."""
        self._data = [None] * len(self._data)
        self._slab = np.zeros(0, dtype=np.uint8)
        self.released = True

    def allocations(self) -> list[tuple[int, int, str]]:
        """(address, bytes, name) of every allocation, by address."""
        order = self._index()
        return list(zip(self._sorted, map(self._sizes.__getitem__, order),
                        map(self._names.__getitem__, order), strict=True))

    def check(self, addr: int, nbytes: int, what: str) -> str:
        """The name of the allocation holding [addr, addr + nbytes); AddressError if none."""
        for base, end, name in self._recent:
            if base <= addr and addr + nbytes <= end:
                return name
        i, offset = self._find(addr, nbytes, what)
        name = self._names[i]
        self._recent.insert(0, (addr - offset, addr - offset + self._sizes[i], name))
        del self._recent[4:]
        return name

    def extent(self, addr: int, what: str) -> tuple[int, int]:
        """(base, bytes) of the allocation holding `addr`; AddressError if none (`what`
        names the address in it)."""
        i, offset = self._find(addr, 1, what)
        return addr - offset, self._sizes[i]

    def _find(self, addr: int, nbytes: int, what: str) -> tuple[int, int]:
        """(allocation, offset in it) of the allocation holding ``[addr, addr + nbytes)``."""
        order = self._index()
        j = bisect.bisect_right(self._sorted, addr) - 1
        i = order[j] if j >= 0 else -1
        if i < 0 or addr >= self._bases[i] + self._sizes[i]:
            raise AddressError(f"{what} at {addr:#x}: no allocation holds this address")
        size, name = self._sizes[i], self._names[i]
        offset = addr - self._bases[i]
        if offset + nbytes > size:
            raise AddressError(f"{what} of {nbytes} B at {addr:#x} runs past the end of "
                               f"{name!r} ({size} B at {self._bases[i]:#x}) by "
                               f"{offset + nbytes - size} B")
        return i, offset

    def _index(self) -> list[int]:
        """The allocations by address (sorted now if any was added since): allocations at
        one address newest first, as inserting each before its equals would order them."""
        if not self._indexed:
            count = len(self._bases)
            newest_first = np.array(self._bases[::-1], dtype=np.int64)
            order = count - 1 - np.argsort(newest_first, kind="stable")
            self._order = order.tolist()
            self._sorted = newest_first[count - 1 - order].tolist()
            self._indexed = True
        return self._order

    def _bytes(self, i: int, offset: int, nbytes: int,
               own: bool) -> tuple[np.ndarray | None, int]:
        """(bytes, offset in them) of ``[offset, offset + nbytes)`` of allocation `i`: a run
        of a host's array if one holds them and not `own` (to write), else the block's own
        bytes (copied from the host's array the first time)."""
        data = self._data[i]
        if data.__class__ is Shared:
            found = None if own else data.run(offset, nbytes)
            if found is not None:
                return found
            runs, data = data.runs, self._cut(self._sizes[i])
            np.concatenate(runs, out=data)
            self._data[i] = data
        return data, offset

    def view(self, addr: int, shape: tuple[int, ...], dtype: np.dtype, what: str = "read",
             row_stride: int | None = None, own: bool = False) -> np.ndarray | None:
        """The array at `addr` (rows `row_stride` elements apart if given), as a view of
        memory (read-only unless `own`, for a write): valid until the next write. None
        when memory is not backed."""
        count = math.prod(shape)
        itemsize = np.dtype(dtype).itemsize
        span = _span(shape, count, row_stride)
        data, offset = self._bytes(*self._find(addr, span * itemsize, what), span * itemsize,
                                   own)
        if data is None:
            if self.released:
                raise RuntimeError(f"{what} at {addr:#x}: simulated memory was released")
            return None
        if row_stride is None:
            return np.ndarray(shape, dtype, data, offset)
        return np.ndarray(shape, dtype, data, offset, (row_stride * itemsize, itemsize))

    def read(self, addr: int, shape: tuple[int, ...], dtype: np.dtype, what: str = "read",
             row_stride: int | None = None) -> np.ndarray:
        """A copy of the array at `addr` (zeros when memory is not backed)."""
        value = self.view(addr, shape, dtype, what, row_stride)
        return np.zeros(shape, dtype) if value is None else value.copy()

    def read_f32(self, addr: int, shape: tuple[int, ...], dtype: np.dtype | Narrow,
                 what: str = "read", row_stride: int | None = None) -> np.ndarray:
        """The array at `addr` converted to float32 (one copy, as a load into TCM makes); a
        narrow dtype's values decoded from its bytes."""
        if dtype.__class__ is Narrow:
            raw_shape, raw_dtype, raw_stride = _raw(shape, dtype, row_stride)
            raw = self.view(addr, raw_shape, raw_dtype, what, raw_stride)
            return np.zeros(shape, np.float32) if raw is None else from_bytes(raw, dtype, shape)
        value = self.view(addr, shape, dtype, what, row_stride)
        return np.zeros(shape, np.float32) if value is None else value.astype(np.float32)

    def write_value(self, addr: int, value: np.ndarray, dtype: np.dtype | Narrow,
                    what: str = "write", row_stride: int | None = None) -> None:
        """Store float32 `value` at `addr` as `dtype` (rows `row_stride` elements apart): cast,
        or a narrow dtype quantised to its bytes."""
        if dtype.__class__ is not Narrow:
            self.write(addr, value.astype(dtype, copy=False), what, row_stride)
            return
        shape, _, stride = _raw(value.shape, dtype, row_stride)
        self.write(addr, to_bytes(value, dtype).reshape(shape), what, stride)

    def write(self, addr: int, value: np.ndarray, what: str = "write",
              row_stride: int | None = None) -> None:
        """Store `value` at `addr` (rows `row_stride` elements apart if given)."""
        target = self.view(addr, value.shape, value.dtype, what, row_stride, own=True)
        if target is not None:
            target[...] = value


def _raw(shape: tuple[int, ...], dt: Narrow,
         stride: int | None) -> tuple[tuple[int, ...], np.dtype, int | None]:
    """(shape, dtype, row stride) of the bytes of `shape` of narrow `dt` in memory: a
    strided block's rows, or all its bytes in a row."""
    if stride is None:
        return (dt.nbytes(math.prod(shape)),), np.dtype(np.uint8), None
    return (shape[0], dt.nbytes(shape[1])), np.dtype(np.uint8), dt.nbytes(stride)


def _span(shape: tuple[int, ...], count: int, row_stride: int | None) -> int:
    """Elements from the first to one past the last of a (strided) 2D block."""
    if row_stride is None:
        return count
    rows, cols = shape
    return (rows - 1) * row_stride + cols if rows else 0


def _runs(array: np.ndarray) -> list[np.ndarray] | None:
    """`array`'s bytes in C order as read-only views of its contiguous runs, or None when
    they are more than `_MAX_RUNS` runs (or runs of one element)."""
    inner, run = array.ndim, array.itemsize  # the trailing axes laid out C-contiguous
    while inner and (array.shape[inner - 1] == 1 or array.strides[inner - 1] == run):
        run *= array.shape[inner - 1]
        inner -= 1
    if inner == array.ndim or math.prod(array.shape[:inner]) > _MAX_RUNS:
        return None
    runs = []
    for index in np.ndindex(array.shape[:inner]):
        part = array[index].reshape(-1).view(np.uint8)
        part.flags.writeable = False
        runs.append(part)
    return runs
