"""Tensors of the kernel language: on-PE values, and the commands that make them.

A `Tensor` lives in the PE's TCM (`tcm`: its offset there; a view has none).
`cmd` is the index of the command that produces it in the PE's stream: a
command that consumes the tensor depends on that one, and the timing pass
starts it no earlier than its producer ends. The kernel sees values only:
reading one (`numpy()`, `float()`, `bool()`) is where the CPU waits in time.
A `Ref` names memory without moving it (a composite operand). Arithmetic
operators issue PE_MATH commands; indexing is a free view.

Values are float32 arrays holding numbers of the tensor's dtype (rounded to
it), so that every op works in float32 without converting its inputs.

This module sits below `lang.tl`: a tensor knows the `tl` that made it only
as a `Maker`, the few steps it asks of it, declared here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from kernbench_cli.errors import KernelError
from kernbench_cli.lang.dtypes import NAMES, Narrow

if TYPE_CHECKING:
    from kernbench_cli.address.allocator import FreeListPool


class Maker(Protocol):
    """What a tensor asks of the PE's `tl` that made it (`lang.tl.TL` is one): its TCM, to
    free the tensor's when it is dropped, and the commands and views its methods and
    operators are."""

    _tcm: FreeListPool

    def _read(self, x: Tensor) -> np.ndarray: ...

    def _view(self, x: Tensor, index: Any) -> Tensor: ...

    def _transpose(self, x: Tensor) -> Tensor: ...

    def _reshape(self, x: Tensor, shape: tuple[int, ...]) -> Tensor: ...

    def _cast(self, x: Tensor, name: str) -> Tensor: ...

    def _unary(self, fn: Callable, x: Tensor) -> Tensor: ...

    def _binary(self, fn: Callable, x: Any, y: Any) -> Tensor: ...


class Tensor:
    """An on-PE value: shape, dtype, value (None when timing only), producing command."""

    __slots__ = ("_base", "_tl", "cmd", "dtype", "nbytes", "shape", "tcm", "value")

    def __init__(self, tl: Maker, shape: tuple[int, ...], dtype: np.dtype | Narrow,
                 value: np.ndarray | None, cmd: int, tcm: int | None,
                 base: Tensor | None = None, nbytes: int | None = None):
        self._tl = tl
        self.shape = shape
        self.dtype = dtype
        self.value = value
        self.cmd = cmd
        self.tcm = tcm  # TCM offset (negative: from the top), None for a view
        self._base = base
        if nbytes is None:
            nbytes = math.prod(shape) * dtype.itemsize if dtype.__class__ is not Narrow else \
                dtype.nbytes(math.prod(shape))
        self.nbytes = nbytes

    def __del__(self) -> None:
        try:
            tcm = self.tcm
        except AttributeError:  # an interrupt cut its __init__ short: it holds no TCM
            return
        if tcm is not None:  # dropped: its TCM is free again
            self._tl._tcm.free(tcm)

    def __repr__(self) -> str:
        return f"Tensor({NAMES[self.dtype]}{list(self.shape)}, made by command {self.cmd})"

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
        return float(self._scalar("float(tensor)"))

    def __bool__(self) -> bool:
        return bool(self._scalar("bool(tensor)"))

    def item(self) -> Any:
        return self._scalar("Tensor.item()").item()

    def _scalar(self, how: str) -> np.ndarray:
        """The value of a one-element tensor, read (`how` names the read in the error)."""
        if self.numel != 1:
            raise KernelError(f"{how}: the tensor has {self.numel:,} elements (shape "
                              f"{list(self.shape)}); only one of a single element reads as a "
                              "number")
        return self._tl._read(self)

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
        return self._tl._binary(np.add, self, other)

    def __radd__(self, other: Any) -> Tensor:
        return self._tl._binary(np.add, other, self)

    def __sub__(self, other: Any) -> Tensor:
        return self._tl._binary(np.subtract, self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return self._tl._binary(np.subtract, other, self)

    def __mul__(self, other: Any) -> Tensor:
        return self._tl._binary(np.multiply, self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return self._tl._binary(np.multiply, other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return self._tl._binary(np.divide, self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return self._tl._binary(np.divide, other, self)

    def __neg__(self) -> Tensor:
        return self._tl._unary(np.negative, self)


@dataclass(frozen=True)
class Ref:
    """Memory named by a kernel: `shape` of `dtype` at `addr`, rows `row_stride` apart."""

    addr: int
    shape: tuple[int, int]
    dtype: np.dtype | Narrow
    row_stride: int

    @property
    def nbytes(self) -> int:
        count = self.shape[0] * self.shape[1]
        return count * self.dtype.itemsize if self.dtype.__class__ is not Narrow else \
            self.dtype.nbytes(count)


@dataclass
class Handle:
    """A composite in flight: `cmd` is its command; `out` its result if kept in TCM;
    `held` the operands it made itself (a dequantised copy), in TCM while the handle lives."""

    cmd: int
    out: Tensor | None
    held: tuple[Tensor | Ref, ...] = ()
