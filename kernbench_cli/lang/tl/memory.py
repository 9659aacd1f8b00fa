"""`tl`'s memory: loads into TCM, stores from it, memory named in place, and free views.

A load is lazy (a tensor is a future of its command); a store writes the
value into simulated memory at issue, in program order. Views (indexing,
`.T`, `reshape`) issue no command and take no TCM: they name part of a
tensor, and depend on the command that made it.

A narrow tensor moves its bytes in memory (`lang.narrow`: packed elements and
their blocks' scales), and a store quantises its value to its dtype. Shapes,
strides and views of a scaled dtype keep whole blocks of 32 along the rows.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kernbench_cli.address.allocator import Sharded
from kernbench_cli.errors import KernelError
from kernbench_cli.lang.dtypes import Narrow, nbytes
from kernbench_cli.lang.tensor import Ref, Tensor
from kernbench_cli.lang.tl.checks import (
    aligned,
    block_rows,
    blocks,
    dtype_of,
    nbytes_of,
    offset,
    shape_of,
    span_bytes,
)
from kernbench_cli.lang.tl.core import Core
from kernbench_cli.stream import LOAD, NONE, STORE


class MemoryOps(Core):
    """`tl.load`, `tl.store`, `tl.ref`, `tl.shard`, `tl.itemsize`, `tl.nbytes`; tensor
    views."""

    def load(self, ptr: int, shape: Sequence[int], dtype: str, stride: int | None = None) -> Tensor:
        """Start moving `shape` of `dtype` at `ptr` into TCM (rows `stride` apart); lazy."""
        shape_t, dt = shape_of(shape), dtype_of(dtype)
        if dt.__class__ is Narrow:
            blocks("tl.load", shape_t, dt)
        size = nbytes_of(shape_t, dt)
        span = span_bytes(shape_t, dt, stride)
        aligned(ptr, dt, "tl.load")
        self._memory.check(ptr, span, "tl.load")
        i, tcm = self._make(LOAD, NONE, NONE, size, span, ptr, size, "tl.load",
                            block=block_rows(shape_t, stride))
        value = self._memory.read_f32(ptr, shape_t, dt, "tl.load", stride) \
            if self._values else None
        return Tensor(self, shape_t, dt, value, i, tcm, None, size)

    def ref(self, ptr: int, shape: Sequence[int], dtype: str, stride: int | None = None) -> Ref:
        """Name `shape` of `dtype` at `ptr` without moving it (a composite operand)."""
        shape_t, dt = shape_of(shape), dtype_of(dtype)
        if len(shape_t) != 2:
            raise KernelError(f"tl.ref: shape must be 2D, got {list(shape_t)}")
        blocks("tl.ref", shape_t, dt)
        aligned(ptr, dt, "tl.ref")
        self._memory.check(ptr, span_bytes(shape_t, dt, stride), "tl.ref")
        return Ref(ptr, shape_t, dt, shape_t[1] if stride is None else stride)

    def store(self, ptr: int, tensor: Tensor, stride: int | None = None) -> None:
        """Write `tensor` to memory at `ptr` (rows `stride` apart)."""
        tensor = self._own(tensor, "store")
        span = span_bytes(tensor.shape, tensor.dtype, stride)
        aligned(ptr, tensor.dtype, "tl.store")
        self._memory.check(ptr, span, "tl.store")
        self._emit(STORE, tensor.cmd, NONE, tensor.nbytes, span, offset(tensor.tcm), ptr,
                   block=block_rows(tensor.shape, stride))
        if self._values:
            self._memory.write_value(ptr, tensor.value, tensor.dtype, "tl.store", stride)

    @staticmethod
    def itemsize(dtype: str) -> int:
        """Bytes per element of `dtype` (for pointer arithmetic); `tl.nbytes` for a scaled
        dtype, whose elements are not whole bytes."""
        dt = dtype_of(dtype)
        if dt.__class__ is Narrow and dt.block > 1:
            raise KernelError(f"tl.itemsize: {dt.name} has no whole bytes per element (a "
                              f"block of {dt.block} and its scale take "
                              f"{dt.nbytes(dt.block)} B): use tl.nbytes({dt.name!r}, n)")
        return dt.element.itemsize if dt.__class__ is Narrow else dt.itemsize

    @staticmethod
    def nbytes(dtype: str, count: int) -> int:
        """Bytes `count` elements of `dtype` take in memory (a scaled dtype's: whole blocks
        of packed elements and their scales), for pointer arithmetic."""
        dt = dtype_of(dtype)
        if not isinstance(count, (int, np.integer)) or count.__class__ is bool or count < 0:
            raise KernelError(f"tl.nbytes expects a count of elements >= 0, got {count!r}")
        if dt.__class__ is Narrow and count % dt.block:
            raise KernelError(f"tl.nbytes: {count} elements of {dt.name} are not whole "
                              f"blocks of {dt.block}")
        return nbytes(dt, int(count))

    def shard(self, allocation: Sharded, pid: int | None = None) -> int:
        """Address of PE `pid`'s copy (this PE's by default) of a symmetric allocation."""
        if not isinstance(allocation, Sharded):
            raise KernelError(f"tl.shard expects a sharded allocation, got {allocation!r}")
        coord = self._coord_of(self._pid if pid is None else pid)
        return self._launch.system.amap.pe_hbm_addr(*coord, allocation.offset)

    # -- views (free) ----------------------------------------------------------

    def _view(self, x: Tensor, index: Any) -> Tensor:
        try:  # the value's view, or a stand-in of no memory (zero strides) for its shape
            value = (x.value if x.value is not None else _stand_in(x.shape))[index]
        except (IndexError, TypeError, ValueError) as exc:
            raise KernelError(f"tensor index {index!r} on shape {list(x.shape)}: {exc}") from None
        if x.dtype.__class__ is Narrow and x.dtype.block > 1:
            _whole_blocks(x, index, value.shape)
        return Tensor(self, value.shape, x.dtype, value if x.value is not None else None, x.cmd,
                      None, base=x)

    def _transpose(self, x: Tensor) -> Tensor:
        if x.ndim != 2:
            raise KernelError(f"Tensor.T needs a 2D tensor, got shape {list(x.shape)}")
        if x.dtype.__class__ is Narrow and x.dtype.block > 1:
            raise KernelError(f"Tensor.T: {x.dtype.name}'s blocks run along the rows; a "
                              "transposed view would split them (.to('bf16') first, or "
                              "trans_b=True in a GEMM)")
        value = x.value.T if x.value is not None else None
        return Tensor(self, (x.shape[1], x.shape[0]), x.dtype, value, x.cmd, None, base=x)

    def _reshape(self, x: Tensor, shape: tuple[int, ...]) -> Tensor:
        shape_t = shape_of(shape)
        if math.prod(shape_t) != x.numel:
            raise KernelError(f"cannot reshape {list(x.shape)} to {list(shape_t)}")
        blocks("Tensor.reshape", shape_t, x.dtype)
        value = x.value.reshape(shape_t) if x.value is not None else None
        return Tensor(self, shape_t, x.dtype, value, x.cmd, None, base=x)


def _whole_blocks(x: Tensor, index: Any, shape: tuple[int, ...]) -> None:
    """KernelError unless view `x[index]` (of `shape`) of a scaled dtype is whole blocks of
    `x`'s rows: its rows, runs of whole blocks of `x`'s rows in order."""
    block = x.dtype.block
    if shape and shape[-1] % block == 0:
        columns = np.broadcast_to(np.arange(x.shape[-1]), x.shape)[index]
        runs = columns.reshape(-1, block)
        if (runs[:, 0] % block == 0).all() and (np.diff(runs, axis=1) == 1).all():
            return
    raise KernelError(f"tensor index {index!r} on shape {list(x.shape)}: the view splits "
                      f"{x.dtype.name}'s blocks of {block} elements along the rows")


@functools.lru_cache(maxsize=256)
def _stand_in(shape: tuple[int, ...]) -> np.ndarray:
    """An array of `shape` that takes no memory: what views index when there are no values."""
    return np.broadcast_to(np.empty((), bool), shape)
