"""`tl`'s PE_MATH: elementwise functions, reductions, fills, casts and tensor arithmetic.

One call is one PE_MATH command over its elements (`MATH_KINDS` names the
op class the unit times it by), except `tl.where` of two tensors: two passes,
as a command names two producers. Values are computed in float32 and rounded
to the result dtype; mixed dtypes give f32 (`promote`), and so does
arithmetic on narrow tensors (the unit reads them as they are; a narrow
result is asked for with `.to`, `tl.full` or `tl.zeros`). A cast to a narrow
dtype quantises (the `cast` class); one from a narrow dtype dequantises (the
`dequant` class).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kernbench_cli.errors import KernelError, clip
from kernbench_cli.lang.dtypes import F32, Narrow, promote, rounded
from kernbench_cli.lang.tensor import Tensor
from kernbench_cli.lang.tl.checks import blocks, broadcast, dtype_of, reduced_shape, shape_of
from kernbench_cli.lang.tl.core import Core
from kernbench_cli.stream import MATH, MATH_KINDS, NONE


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1 / np.sqrt(x)


_ERF = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, exact to float64 (numpy has none), for float32 values."""
    return _ERF(np.asarray(x, np.float64)).astype(np.float64)


def _select(cond: np.ndarray, x: Any, y: Any) -> np.ndarray:
    return np.where(cond != 0, x, y)


def _reduction(fn: Callable, value: np.ndarray, axis: int | None, keepdims: bool) -> np.ndarray:
    return fn(value, axis=axis, keepdims=keepdims)


def _identity(value: np.ndarray) -> np.ndarray:
    return value


#: The PE_MATH kind (`MATH_KINDS` index) of each function `tl` computes values with.
_KIND_OF = {fn: [name for _, name in MATH_KINDS].index(name) for fn, name in (
    (np.add, "add"), (np.subtract, "subtract"), (np.negative, "negative"),
    (np.multiply, "multiply"), (np.divide, "divide"), (np.maximum, "maximum"),
    (np.minimum, "minimum"), (np.exp, "exp"), (np.log, "log"), (np.sqrt, "sqrt"),
    (np.max, "max"), (np.sum, "sum"), (_rsqrt, "rsqrt"), (np.reciprocal, "reciprocal"),
    (np.absolute, "abs"), (np.tanh, "tanh"), (_select, "where"), (erf, "erf"))}
_FILL, _CAST, _DEQUANT = (MATH_KINDS.index(kind) for kind in (
    ("add", "fill"), ("cast", "cast"), ("dequant", "dequantize")))
_MATH_CALLS = tuple(f"tl.{name}" for _, name in MATH_KINDS)  # how TCM errors name them
_SCALARS_OR_TENSORS = (Tensor, int, float)


class MathOps(Core):
    """`tl.exp` … `tl.sum`, `tl.full`, `tl.where`; a tensor's operators and `.to`."""

    def exp(self, x: Tensor) -> Tensor:
        return self._unary(np.exp, x)

    def log(self, x: Tensor) -> Tensor:
        return self._unary(np.log, x)

    def sqrt(self, x: Tensor) -> Tensor:
        return self._unary(np.sqrt, x)

    def rsqrt(self, x: Tensor) -> Tensor:
        """1 / sqrt(x), one PE_MATH command (the `sqrt` op class)."""
        return self._unary(_rsqrt, x)

    def reciprocal(self, x: Tensor) -> Tensor:
        """1 / x, one PE_MATH command (the `div` op class)."""
        return self._unary(np.reciprocal, x)

    def abs(self, x: Tensor) -> Tensor:
        return self._unary(np.absolute, x)

    def tanh(self, x: Tensor) -> Tensor:
        """One PE_MATH command (the `exp` op class: the special-function unit)."""
        return self._unary(np.tanh, x)

    def erf(self, x: Tensor) -> Tensor:
        """The error function, one PE_MATH command (the `exp` op class: the special-function
        unit), as exact GELU needs it: ``0.5 x (1 + erf(x / sqrt(2)))``."""
        return self._unary(erf, x)

    def where(self, cond: Tensor, x: Tensor | float, y: Tensor | float) -> Tensor:
        """`x` where `cond` is non-zero, else `y`; shapes broadcast. PE_MATH's `cmp` class:
        one command, or two passes when `x` and `y` are both tensors (a command names two
        producers, as the unit reads two operand streams)."""
        cond = self._own(cond, "where")
        for v in (x, y):
            if not isinstance(v, _SCALARS_OR_TENSORS):
                raise KernelError(f"tl.where: x and y must be tensors or numbers, got "
                                  f"{type(v).__name__}")
        tensors = [self._own(v, "where") for v in (x, y) if isinstance(v, Tensor)]
        shape = broadcast(cond.shape, *(v.shape for v in tensors))
        if shape is None:
            raise KernelError("tl.where: shapes " + " and ".join(
                str(list(v.shape)) for v in (cond, *tensors)) + " do not broadcast")
        dt = promote(*(v.dtype for v in tensors)) if tensors else F32
        values = (cond.value, *(v.value if isinstance(v, Tensor) else v for v in (x, y)))
        kind, count = _KIND_OF[_select], math.prod(shape)
        if len(tensors) < 2:
            return self._math(kind, cond.cmd, tensors[0].cmd if tensors else NONE, shape, dt,
                              count, _select, *values)
        first = self._math(kind, cond.cmd, tensors[0].cmd, shape, dt, count, _select, *values)
        return self._math(kind, first.cmd, tensors[1].cmd, shape, dt, count, _identity,
                          first.value)

    def maximum(self, x: Tensor | float, y: Tensor | float) -> Tensor:
        return self._binary(np.maximum, x, y)

    def minimum(self, x: Tensor | float, y: Tensor | float) -> Tensor:
        return self._binary(np.minimum, x, y)

    def max(self, x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return self._reduce(np.max, x, axis, keepdims)

    def sum(self, x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return self._reduce(np.sum, x, axis, keepdims)

    def zeros(self, shape: Sequence[int], dtype: str = "f32") -> Tensor:
        return self.full(shape, 0.0, dtype)

    def full(self, shape: Sequence[int], value: float, dtype: str = "f32") -> Tensor:
        if not isinstance(value, numbers.Real):
            raise KernelError(f"tl.full: value must be a number, got {type(value).__name__}")
        try:  # checked with or without values: a timing-only run passes what a run refuses
            float(value)
        except OverflowError:
            raise KernelError(f"tl.full: value {clip(value)} is beyond any float") from None
        shape_t, dt = shape_of(shape), dtype_of(dtype)
        return self._math(_FILL, NONE, NONE, shape_t, dt, math.prod(shape_t), np.full, shape_t,
                          value, F32)

    # -- the command, and the paths to it ---------------------------------------

    def _math(self, kind: int, a: int, b: int, shape: tuple[int, ...], dt: np.dtype,
              count: int, fn: Callable[..., np.ndarray], *args: Any) -> Tensor:
        """PE_MATH command `kind` (`MATH_KINDS`) over `count` elements; its value is
        ``fn(*args)`` rounded to `dt`. (Called from the kernel through two frames at least:
        `tl.full` and this.)"""
        if dt.__class__ is Narrow:
            blocks({_CAST: "Tensor.to", _FILL: "tl.full"}.get(kind, _MATH_CALLS[kind]), shape,
                   dt)
            nbytes = dt.nbytes(math.prod(shape))
        else:
            nbytes = math.prod(shape) * dt.itemsize
        i, tcm = self._make(MATH, a, b, count, kind, NONE, nbytes, _MATH_CALLS[kind], 3)
        value = rounded(fn(*args), dt) if self._values else None
        return Tensor(self, shape, dt, value, i, tcm, None, nbytes)

    def _unary(self, fn: Callable, x: Tensor) -> Tensor:
        kind = _KIND_OF[fn]
        x = self._own(x, MATH_KINDS[kind][1])
        dt = x.dtype if x.dtype.__class__ is not Narrow else F32
        return self._math(kind, x.cmd, NONE, x.shape, dt, x.numel, fn, x.value)

    def _binary(self, fn: Callable, x: Any, y: Any) -> Tensor:
        if x.__class__ is Tensor and x._tl is self:  # the common cases first, kept lean
            if y.__class__ is Tensor and y._tl is self:
                shape = x.shape if x.shape == y.shape else broadcast(x.shape, y.shape)
                if shape is not None:
                    dt = x.dtype if x.dtype == y.dtype and x.dtype.__class__ is not Narrow \
                        else F32
                    return self._math(_KIND_OF[fn], x.cmd, y.cmd, shape, dt, math.prod(shape),
                                      fn, x.value, y.value)
            elif y.__class__ is float or y.__class__ is int:
                dt = x.dtype if x.dtype.__class__ is not Narrow else F32
                return self._math(_KIND_OF[fn], x.cmd, NONE, x.shape, dt, x.numel, fn,
                                  x.value, y)
        elif y.__class__ is Tensor and y._tl is self and x.__class__ in (int, float):
            dt = y.dtype if y.dtype.__class__ is not Narrow else F32
            return self._math(_KIND_OF[fn], y.cmd, NONE, y.shape, dt, y.numel, fn, x,
                              y.value)
        return self._binary_slow(fn, x, y)

    def _binary_slow(self, fn: Callable, x: Any, y: Any) -> Tensor:
        """`_binary` for the rest: numbers of other types (bool, float64), and errors."""
        tensors = [v for v in (x, y) if isinstance(v, Tensor)]
        for v in (x, y):
            if not isinstance(v, _SCALARS_OR_TENSORS):
                raise KernelError(f"tl.{fn.__name__}: operands must be tensors or numbers, "
                                  f"got {type(v).__name__}")
            if isinstance(v, Tensor):
                self._own(v, fn.__name__)
        shape = broadcast(*(v.shape for v in tensors))
        if shape is None:
            raise KernelError(f"tl.{fn.__name__}: shapes "
                              f"{' and '.join(str(list(v.shape)) for v in tensors)} do not "
                              "broadcast")
        dt = promote(*(v.dtype for v in tensors))
        return self._math(_KIND_OF[fn], tensors[0].cmd,
                          tensors[1].cmd if len(tensors) == 2 else NONE, shape, dt,
                          math.prod(shape), fn,
                          *(v.value if isinstance(v, Tensor) else v for v in (x, y)))

    def _reduce(self, fn: Callable, x: Tensor, axis: int | None, keepdims: bool) -> Tensor:
        x = self._own(x, fn.__name__)
        if axis is not None and (isinstance(axis, bool) or not isinstance(axis, numbers.Integral)):
            raise KernelError(f"tl.{fn.__name__}: axis must be one axis (an int) or None for "
                              f"all, got {clip(axis)}")
        if not isinstance(keepdims, bool | np.bool_):
            raise KernelError(f"tl.{fn.__name__}: keepdims must be True or False, got "
                              f"{clip(keepdims)}")
        if axis is not None and not -x.ndim <= axis < x.ndim:
            raise KernelError(f"tl.{fn.__name__}: axis {axis} is out of range for shape "
                              f"{list(x.shape)}")
        axis, keepdims = None if axis is None else int(axis), bool(keepdims)
        shape = reduced_shape(x.shape, axis, keepdims)
        dt = x.dtype if x.dtype.__class__ is not Narrow else F32
        return self._math(_KIND_OF[fn], x.cmd, NONE, shape, dt, x.numel, _reduction, fn,
                          x.value, axis, keepdims)

    def _cast(self, x: Tensor, name: str) -> Tensor:
        """`x` in dtype `name`: quantised to a narrow dtype (the `cast` class), dequantised
        from one to a plain dtype (`dequant`), or converted."""
        x = self._own(x, "Tensor.to")
        dt = dtype_of(name)
        kind = _DEQUANT if x.dtype.__class__ is Narrow and dt.__class__ is not Narrow \
            else _CAST
        return self._math(kind, x.cmd, NONE, x.shape, dt, x.numel, _identity, x.value)
