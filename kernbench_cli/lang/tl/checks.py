"""The checks `tl` calls make on their arguments, and the shapes and sizes they work out.

Each raises `KernelError` with a one-line message (the launcher adds the
kernel line, the PE and the time). Pure functions of their arguments, shared
by every concern of `tl`; the common, valid case returns first.
"""

from __future__ import annotations

import functools
import math
import operator
from typing import Any

import numpy as np

from kernbench_cli.errors import KernelError, clip
from kernbench_cli.lang.dtypes import DTYPES, NAMES, Narrow, dtype, nbytes
from kernbench_cli.stream import NONE


def offset(tcm: int | None) -> int:
    """A TCM offset as a stream field: `NONE` for a tensor that has none (a view)."""
    return NONE if tcm is None else tcm


def _size(n: Any) -> int:
    """One size of a shape: an integer, not a bool (True is not a size of 1)."""
    if isinstance(n, bool | np.bool_):
        raise TypeError(n)
    return operator.index(n)


def shape_of(shape: Any) -> tuple[int, ...]:
    """`shape` as a tuple of positive sizes (an integer is a 1D shape)."""
    if shape.__class__ is tuple and shape and all(
            n.__class__ is int and n > 0 for n in shape):
        return shape
    given = shape
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        out = tuple(_size(n) for n in shape)
    except TypeError:
        raise KernelError(f"shape must be a sequence of integers, got {clip(given)}") from None
    if not out or any(n <= 0 for n in out):
        raise KernelError(f"shape must be non-empty with positive sizes, got {clip(list(out))}")
    if math.prod(out) >= 2**40:
        raise KernelError(f"shape {clip(list(out))} has {math.prod(out):.3g} elements: more "
                          "than any memory holds")
    return out


def dtype_of(name: Any) -> np.dtype | Narrow:
    """The dtype of a kernel dtype name ("f16", "mxfp4", …)."""
    return DTYPES.get(name) or dtype(name)


def nbytes_of(shape: tuple[int, ...], dt: np.dtype | Narrow) -> int:
    return math.prod(shape) * dt.itemsize if dt.__class__ is not Narrow else \
        dt.nbytes(math.prod(shape))


def blocks(what: str, shape: tuple[int, ...], dt: np.dtype | Narrow) -> None:
    """A tensor of a scaled dtype holds whole blocks: its rows (last axis) are a multiple
    of the block (fp8's elements are whole bytes: any shape)."""
    if dt.__class__ is Narrow and shape[-1] % dt.block:
        raise KernelError(f"{what}: {dt.name} stores blocks of {dt.block} elements along the "
                          f"last axis, and shape {list(shape)} has rows of {shape[-1]} "
                          f"(not a multiple of {dt.block})")


def aligned(ptr: int, dt: np.dtype | Narrow, what: str) -> None:
    """A memory address must be a multiple of its dtype's size (the DMA moves whole
    elements; a narrow dtype's elements and blocks are whole bytes)."""
    if dt.__class__ is Narrow:
        return
    if isinstance(ptr, (int, np.integer)) and ptr % dt.itemsize:
        raise KernelError(f"{what}: address {ptr:#x} is not aligned for {NAMES[dt]}: it "
                          f"needs a multiple of {dt.itemsize} B ({ptr % dt.itemsize} B past one)")


def block_rows(shape: tuple[int, ...], stride: int | None) -> int:
    """The rows a load or store moves as separate runs of memory: a strided block's rows,
    or 1 for a contiguous one."""
    return shape[0] if stride is not None and len(shape) == 2 and shape[0] else 1


def span_bytes(shape: tuple[int, ...], dt: np.dtype | Narrow, stride: int | None) -> int:
    """The bytes of memory from the first element of `shape` (rows `stride` apart) to the
    last."""
    if stride is None:
        return nbytes_of(shape, dt)
    if len(shape) != 2:
        raise KernelError(f"a row stride needs a 2D shape, got {list(shape)}")
    if stride < shape[1]:
        raise KernelError(f"row stride {stride} is less than the row length {shape[1]}")
    if dt.__class__ is Narrow and stride % dt.block:
        raise KernelError(f"row stride {stride} is not a multiple of {dt.name}'s block of "
                          f"{dt.block} elements")
    return nbytes(dt, (shape[0] - 1) * stride + shape[1])


def gemm_shape(what: str, a: tuple[int, ...], b: tuple[int, ...],
               trans_b: bool) -> tuple[int, int, int]:
    """(m, k, n) of a @ b (b transposed with `trans_b`); `what` names the call."""
    if len(a) != 2 or len(b) != 2:
        raise KernelError(f"{what}: operands must be 2D, got {list(a)} and {list(b)}")
    kb, n = (b[1], b[0]) if trans_b else b
    if a[1] != kb:
        shown = f"{list(b)} (transposed)" if trans_b else str(list(b))
        raise KernelError(f"{what}: shapes {list(a)} and {shown} do not match "
                          f"({a[1]} != {kb})")
    return a[0], a[1], n


@functools.lru_cache(maxsize=1024)
def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    """numpy's broadcast of `shapes`, or None when they do not broadcast. Cached: a kernel's
    loop broadcasts the same few pairs of shapes (a row of maxima against its tile) over
    and over."""
    rank = max(len(shape) for shape in shapes)
    out = [1] * rank
    for shape in shapes:
        for i, n in enumerate(shape, rank - len(shape)):
            if n != out[i]:
                if out[i] != 1 and n != 1:
                    return None
                out[i] = max(n, out[i])
    return tuple(out)


def reduced_shape(shape: tuple[int, ...], axis: int | None,
                  keepdims: bool) -> tuple[int, ...]:
    """The shape a reduction over `axis` (all axes for None) leaves (at least 1D)."""
    if axis is None:
        return tuple(1 for _ in shape) if keepdims else (1,)
    axis %= len(shape)
    if keepdims:
        return (*shape[:axis], 1, *shape[axis + 1:])
    return (*shape[:axis], *shape[axis + 1:]) or (1,)
