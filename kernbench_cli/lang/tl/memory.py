"""`tl`'s memory: loads into TCM, stores from it, memory named in place, and free views.

A load is lazy (a tensor is a future of its command); a store writes the
value into simulated memory at issue, in program order. Views (indexing,
`.T`, `reshape`) issue no command and take no TCM: they name part of a
tensor, and depend on the command that made it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kernbench_cli.address.allocator import Sharded
from kernbench_cli.errors import KernelError
from kernbench_cli.lang.dtypes import as_dtype
from kernbench_cli.lang.tensor import Ref, Tensor
from kernbench_cli.lang.tl.checks import (
    aligned,
    block_rows,
    dtype_of,
    nbytes_of,
    offset,
    shape_of,
    span_bytes,
)
from kernbench_cli.lang.tl.core import Core
from kernbench_cli.stream import LOAD, NONE, STORE


class MemoryOps(Core):
    """`tl.load`, `tl.store`, `tl.ref`, `tl.shard`, `tl.itemsize`; tensor views."""

    def load(self, ptr: int, shape: Sequence[int], dtype: str, stride: int | None = None) -> Tensor:
        """Start moving `shape` of `dtype` at `ptr` into TCM (rows `stride` apart); lazy."""
        shape_t, dt = shape_of(shape), dtype_of(dtype)
        nbytes = nbytes_of(shape_t, dt)
        span = span_bytes(shape_t, dt, stride)
        aligned(ptr, dt, "tl.load")
        self._memory.check(ptr, span, "tl.load")
        i, tcm = self._make(LOAD, NONE, NONE, nbytes, span, ptr, nbytes, "tl.load",
                            block=block_rows(shape_t, stride))
        value = self._memory.read_f32(ptr, shape_t, dt, "tl.load", stride) \
            if self._values else None
        return Tensor(self, shape_t, dt, value, i, tcm, None, nbytes)

    def ref(self, ptr: int, shape: Sequence[int], dtype: str, stride: int | None = None) -> Ref:
        """Name `shape` of `dtype` at `ptr` without moving it (a composite operand)."""
        shape_t, dt = shape_of(shape), dtype_of(dtype)
        if len(shape_t) != 2:
            raise KernelError(f"tl.ref: shape must be 2D, got {list(shape_t)}")
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
            self._memory.write(ptr, as_dtype(tensor.value, tensor.dtype), "tl.store", stride)

    @staticmethod
    def itemsize(dtype: str) -> int:
        """Bytes per element of `dtype` (for pointer arithmetic)."""
        return dtype_of(dtype).itemsize

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
        return Tensor(self, value.shape, x.dtype, value if x.value is not None else None, x.cmd,
                      None, base=x)

    def _transpose(self, x: Tensor) -> Tensor:
        if x.ndim != 2:
            raise KernelError(f"Tensor.T needs a 2D tensor, got shape {list(x.shape)}")
        value = x.value.T if x.value is not None else None
        return Tensor(self, (x.shape[1], x.shape[0]), x.dtype, value, x.cmd, None, base=x)

    def _reshape(self, x: Tensor, shape: tuple[int, ...]) -> Tensor:
        shape_t = shape_of(shape)
        if math.prod(shape_t) != x.numel:
            raise KernelError(f"cannot reshape {list(x.shape)} to {list(shape_t)}")
        value = x.value.reshape(shape_t) if x.value is not None else None
        return Tensor(self, shape_t, x.dtype, value, x.cmd, None, base=x)


@functools.lru_cache(maxsize=256)
def _stand_in(shape: tuple[int, ...]) -> np.ndarray:
    """An array of `shape` that takes no memory: what views index when there are no values."""
    return np.broadcast_to(np.empty((), bool), shape)
