"""Tensors of the kernel language: futures of on-PE values.

A `Tensor` lives in the PE's TCM. It is a future: `ready` is the simulated
time its producing command ends; a command that consumes it waits for that
time, and only reading its value (`numpy()`, `float()`, `bool()`) makes the
PE's CPU wait. A `Ref` names memory without moving it (a composite operand).
Arithmetic operators issue PE_MATH commands; indexing is a free view.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from kernbench_cli.lang.dtypes import NAMES

if TYPE_CHECKING:
    from kernbench_cli.lang.tl import TL


class Tensor:
    """An on-PE value: shape, dtype, value (None when timing only), ready time."""

    __slots__ = ("__weakref__", "_base", "_tl", "dtype", "nbytes", "ready", "shape", "tcm", "tid",
                 "value")

    def __init__(self, tl: TL, shape: tuple[int, ...], dtype: np.dtype, value: np.ndarray | None,
                 ready: int, tcm: int | None, base: Tensor | None = None,
                 nbytes: int | None = None):
        self._tl = tl
        self.shape = shape
        self.dtype = dtype
        self.value = value
        self.ready = ready
        self.tcm = tcm  # TCM address, None for a view
        self._base = base
        self.nbytes = math.prod(shape) * dtype.itemsize if nbytes is None else nbytes
        self.tid = tl._next_tid  # creation number on its PE: how traces name it
        tl._next_tid += 1

    def __del__(self) -> None:
        tl = self._tl
        if tl._trace is not None:
            tl._trace.append(["del", self.tid])
        self.free()

    def free(self) -> None:
        """Give back this tensor's TCM (a replay does so where the recorded kernel did)."""
        if self.tcm is not None:
            self._tl._tcm.free(self.tcm)
            self.tcm = None

    def __repr__(self) -> str:
        return f"Tensor({NAMES[self.dtype]}{list(self.shape)}, ready={self.ready}ps)"

    @property
    def dtype_name(self) -> str:
        return NAMES[self.dtype]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    # -- reading values makes the CPU wait -----------------------------------
    def numpy(self) -> np.ndarray:
        return self._tl._read(self)

    def __float__(self) -> float:
        return float(self._tl._read(self))

    def __bool__(self) -> bool:
        return bool(self._tl._read(self))

    def item(self) -> Any:
        return self._tl._read(self).item()

    # -- views -----------------------------------------------------------------
    def __getitem__(self, index: Any) -> Tensor:
        return self._tl._view(self, index)

    @property
    def T(self) -> Tensor:
        return self._tl._transpose(self)

    def reshape(self, *shape: int) -> Tensor:
        return self._tl._reshape(self, shape[0] if len(shape) == 1 and isinstance(
            shape[0], tuple) else shape)

    def to(self, dtype: str) -> Tensor:
        return self._tl._cast(self, dtype)

    # -- arithmetic issues PE_MATH commands -------------------------------------
    def __add__(self, other: Any) -> Tensor:
        return self._tl._binary("add", np.add, self, other)

    def __radd__(self, other: Any) -> Tensor:
        return self._tl._binary("add", np.add, other, self)

    def __sub__(self, other: Any) -> Tensor:
        return self._tl._binary("add", np.subtract, self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return self._tl._binary("add", np.subtract, other, self)

    def __mul__(self, other: Any) -> Tensor:
        return self._tl._binary("mul", np.multiply, self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return self._tl._binary("mul", np.multiply, other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return self._tl._binary("div", np.divide, self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return self._tl._binary("div", np.divide, other, self)

    def __neg__(self) -> Tensor:
        return self._tl._unary("add", np.negative, self)


@dataclass(frozen=True)
class Ref:
    """Memory named by a kernel: `shape` of `dtype` at `addr`, rows `row_stride` apart."""

    addr: int
    shape: tuple[int, int]
    dtype: np.dtype
    row_stride: int

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * self.dtype.itemsize


@dataclass
class Handle:
    """A composite in flight: done at `end`; `out` is its result if kept in TCM.

    `hid` is its creation number on its PE (how traces name it).
    """

    end: int
    out: Tensor | None
    hid: int
