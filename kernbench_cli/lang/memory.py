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
"""

from __future__ import annotations

import bisect
import math

import numpy as np

from kernbench_cli.errors import AddressError

SLAB_BYTES = 64 << 20  # the arrays blocks are cut from; a larger block is one of its own
_ALIGN = 64  # where a block starts in its slab



class Memory:
    """Byte arrays per allocation, found by address."""

    def __init__(self, backed: bool = True):
        self.backed = backed
        self._bases: list[int] = []
        self._blocks: list[tuple[int, str, np.ndarray | None]] = []  # (size, name, bytes)
        # (base, end, name) of the allocations checked last, newest first: a kernel's loop
        # touches a few tensors in turn (A, B, C of a GEMM)
        self._recent: list[tuple[int, int, str]] = []
        self._slab = np.zeros(0, dtype=np.uint8)  # where the next small block is cut
        self.released = False

    def add(self, addr: int, nbytes: int, name: str) -> None:
        """Register an allocation of `nbytes` at `addr` (zero-filled when backed)."""
        i = bisect.bisect_left(self._bases, addr)
        data = self._cut(nbytes) if self.backed else None
        self._recent.clear()
        self._bases.insert(i, addr)
        self._blocks.insert(i, (nbytes, name, data))

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
        self._blocks = [(size, name, None) for size, name, _ in self._blocks]
        self._slab = np.zeros(0, dtype=np.uint8)
        self.released = True

    def allocations(self) -> list[tuple[int, int, str]]:
        """(address, bytes, name) of every allocation, by address."""
        return [(base, size, name) for base, (size, name, _) in zip(self._bases, self._blocks,
                                                                    strict=True)]

    def check(self, addr: int, nbytes: int, what: str) -> str:
        """The name of the allocation holding [addr, addr + nbytes); AddressError if none."""
        for base, end, name in self._recent:
            if base <= addr and addr + nbytes <= end:
                return name
        size, name, _, offset = self._find(addr, nbytes, what)
        self._recent.insert(0, (addr - offset, addr - offset + size, name))
        del self._recent[4:]
        return name

    def _find(self, addr: int, nbytes: int, what: str) -> tuple[int, str, np.ndarray | None, int]:
        i = bisect.bisect_right(self._bases, addr) - 1
        if i < 0 or addr >= self._bases[i] + self._blocks[i][0]:
            raise AddressError(f"{what} at {addr:#x}: no allocation holds this address")
        size, name, data = self._blocks[i]
        offset = addr - self._bases[i]
        if offset + nbytes > size:
            raise AddressError(f"{what} of {nbytes} B at {addr:#x} runs past the end of "
                               f"{name!r} ({size} B at {self._bases[i]:#x}) by "
                               f"{offset + nbytes - size} B")
        return size, name, data, offset

    def view(self, addr: int, shape: tuple[int, ...], dtype: np.dtype, what: str = "read",
             row_stride: int | None = None) -> np.ndarray | None:
        """The array at `addr` (rows `row_stride` elements apart if given), as a view of
        memory: valid until the next write. None when memory is not backed."""
        count = math.prod(shape)
        itemsize = np.dtype(dtype).itemsize
        span = _span(shape, count, row_stride)
        _, _, data, offset = self._find(addr, span * itemsize, what)
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

    def read_f32(self, addr: int, shape: tuple[int, ...], dtype: np.dtype, what: str = "read",
                 row_stride: int | None = None) -> np.ndarray:
        """The array at `addr` converted to float32 (one copy, as a load into TCM makes)."""
        value = self.view(addr, shape, dtype, what, row_stride)
        return np.zeros(shape, np.float32) if value is None else value.astype(np.float32)

    def write(self, addr: int, value: np.ndarray, what: str = "write",
              row_stride: int | None = None) -> None:
        """Store `value` at `addr` (rows `row_stride` elements apart if given)."""
        target = self.view(addr, value.shape, value.dtype, what, row_stride)
        if target is not None:
            target[...] = value


def _span(shape: tuple[int, ...], count: int, row_stride: int | None) -> int:
    """Elements from the first to one past the last of a (strided) 2D block."""
    if row_stride is None:
        return count
    rows, cols = shape
    return (rows - 1) * row_stride + cols if rows else 0
