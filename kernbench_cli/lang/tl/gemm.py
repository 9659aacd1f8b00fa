"""`tl`'s GEMM: `tl.dot` on PE_GEMM, and whole GEMMs handed to PE_SCHEDULER (`composite`).

A dot's operands are tensors in TCM; a composite's may also be memory named
by `tl.ref`, which the scheduler streams in tiles. Whether some tile plan of
a composite fits the TCM free at issue is checked here (`hw.composite`'s
planner); which plan runs is the timing pass's choice. Values are
accumulated in float64 (`_matmul`), so every machine gets the same bits.

Narrow operands (`formats.gemm_datapath`): two of one family run on the
array's narrow datapath, their values as they are. A narrow operand the array
cannot take is dequantised to the array's format (bf16, or f32 against f32):
one in TCM by a PE_MATH command issued here before the GEMM (the `dequant`
class); one in memory tile by tile, by the scheduler (`hw.composite`). Its
value is rounded to that format.
"""

from __future__ import annotations

import numpy as np

from kernbench_cli.errors import KernelError
from kernbench_cli.formats import F32 as F32_CODE
from kernbench_cli.formats import gemm_datapath
from kernbench_cli.hw.composite import PlanCosts, plan_gemm
from kernbench_cli.lang.dtypes import DTYPES, F32, Narrow, code_of, rounded
from kernbench_cli.lang.tensor import Handle, Ref, Tensor
from kernbench_cli.lang.tl.checks import dtype_of, gemm_shape, offset, span_bytes
from kernbench_cli.lang.tl.core import Core
from kernbench_cli.stream import COMPOSITE, DOT, MATH, MATH_KINDS, NONE, Composite

F64 = np.dtype(np.float64)
_OPERANDS = (Tensor, Ref)
_FITS = PlanCosts(1.0, 0.0, 0.0)  # costs do not decide whether a plan fits
_DEQUANT = MATH_KINDS.index(("dequant", "dequantize"))


class GemmOps(Core):
    """`tl.dot` and `tl.composite`."""

    def dot(self, a: Tensor, b: Tensor, trans_b: bool = False, out_dtype: str = "f32") -> Tensor:
        """a @ b (or a @ b.T) on PE_GEMM; both operands in TCM."""
        a, b = self._own(a, "dot"), self._own(b, "dot")
        m, k, n = gemm_shape("tl.dot", a.shape, b.shape, trans_b)
        out_dt = _out_dtype("tl.dot", out_dtype)
        a, b, array = self._datapath("tl.dot", a, b)  # the array's rate follows it
        nbytes = m * n * out_dt.itemsize
        i, tcm = self._make(DOT, a.cmd, b.cmd, 2 * m * k * n,
                            self._launch.gemm_shape((m, k, n, array)), offset(a.tcm), nbytes,
                            "tl.dot")
        value = _matmul(a.value, b.value, trans_b, out_dt) if self._values else None
        return Tensor(self, (m, n), out_dt, value, i, tcm, None, nbytes)

    def composite(self, op: str = "gemm", *, a: Tensor | Ref, b: Tensor | Ref,
                  out_ptr: int | None = None, trans_b: bool = False, out_dtype: str | None = None,
                  out_stride: int | None = None) -> Handle:
        """Hand a whole GEMM to PE_SCHEDULER, which tiles it and streams operands (non-blocking).

        Operands are tensors in TCM or `tl.ref`s in memory. With `out_ptr` the
        result is stored there; without, it stays in TCM as ``wait(h)``'s value.
        """
        if op != "gemm":
            raise KernelError(f"tl.composite: op {op!r} is not supported (supported: 'gemm')")
        for name, x in (("a", a), ("b", b)):
            if not isinstance(x, _OPERANDS):
                raise KernelError(f"tl.composite: {name} must be a tensor or a tl.ref, got {x!r}")
            if isinstance(x, Tensor):
                self._own(x, "composite")
        m, k, n = gemm_shape("tl.composite", a.shape, b.shape, trans_b)
        out_dt = _out_dtype("tl.composite", out_dtype, a.dtype, b.dtype)
        given = (a, b)
        a, b, _ = self._datapath("tl.composite", a, b)  # a narrow tensor dequantised here
        row_stride = n if out_stride is None else out_stride
        if out_ptr is not None:
            self._memory.check(out_ptr, span_bytes((m, n), out_dt, row_stride),
                               "tl.composite out_ptr")
        a_tcm, b_tcm = isinstance(a, Tensor), isinstance(b, Tensor)
        moved = (0 if a_tcm else a.nbytes) + (0 if b_tcm else b.nbytes)
        i = self._emit(COMPOSITE, a.cmd if a_tcm else NONE, b.cmd if b_tcm else NONE, moved, NONE,
                       offset(a.tcm) if a_tcm else a.addr,
                       NONE if out_ptr is None else out_ptr)
        value = _matmul(*self._operand_values(a, b), trans_b, out_dt) if self._values else None
        out = None
        if out_ptr is None:
            out = self._result(i, (m, n), out_dt, value, "tl.composite result")
        free = self._tcm.size - self._tcm.used  # at best: other composites may hold some
        a_code, b_code = code_of(a.dtype), code_of(b.dtype)
        if plan_gemm(m, k, n, a_code, b_code, out_dt.itemsize, a_tcm, b_tcm, *self._gemm, free,
                     _FITS, 0 if a_tcm else a.row_stride, 0 if b_tcm else b.row_stride,
                     bool(trans_b)) is None:  # whether any plan fits, not which
            raise KernelError(f"tl.composite: no tile plan for a {m}x{k}x{n} GEMM fits the "
                              f"{free} B of free TCM")
        program = self._launch.program
        self._set_arg(i, len(program.composites))
        program.composites.append(Composite(
            m, k, n, a_code, b_code, out_dt.itemsize, a_tcm, b_tcm,
            NONE if a_tcm else a.addr, 0 if a_tcm else a.row_stride,
            NONE if b_tcm else b.addr, 0 if b_tcm else b.row_stride, bool(trans_b),
            NONE if out_ptr is None else out_ptr, row_stride))
        if out_ptr is not None and self._values:
            self._memory.write(out_ptr, value.astype(out_dt), "tl.composite", out_stride)
        return Handle(i, out, tuple(x for x, was in zip((a, b), given, strict=True)
                                    if x is not was))

    def _datapath(self, what: str, a: Tensor | Ref,
                  b: Tensor | Ref) -> tuple[Tensor | Ref, Tensor | Ref, int]:
        """(a, b, the format the array multiplies in) of a GEMM of `a` and `b`: a narrow
        tensor the array cannot take replaced by its dequantisation on PE_MATH (a narrow
        `tl.ref` stays: the scheduler dequantises its tiles)."""
        array, a_dq, b_dq = gemm_datapath(code_of(a.dtype), code_of(b.dtype))
        wide = F32 if array == F32_CODE else DTYPES["bf16"]
        if a_dq and isinstance(a, Tensor):
            a = self._dequantize(a, wide, what)
        if b_dq and isinstance(b, Tensor):
            b = self._dequantize(b, wide, what)
        return a, b, array

    def _dequantize(self, x: Tensor, wide: np.dtype, what: str) -> Tensor:
        """`x` dequantised to `wide` on PE_MATH (a command of the `dequant` class)."""
        nbytes = x.numel * wide.itemsize
        i, tcm = self._make(MATH, x.cmd, NONE, x.numel, _DEQUANT, NONE, nbytes,
                            f"{what}'s dequantisation of its {x.dtype_name} operand", 3)
        value = rounded(x.value, wide) if self._values else None
        return Tensor(self, x.shape, wide, value, i, tcm, None, nbytes)

    def _operand_values(self, a: Tensor | Ref, b: Tensor | Ref) -> list[np.ndarray]:
        """The values a GEMM of `a` and `b` multiplies: a narrow `tl.ref` the array cannot
        take read and rounded to the array's format, as the scheduler's tiles are."""
        array, *dequantised = gemm_datapath(code_of(a.dtype), code_of(b.dtype))
        wide = F32 if array == F32_CODE else DTYPES["bf16"]
        values = []
        for x, dq in zip((a, b), dequantised, strict=True):
            if isinstance(x, Tensor):
                values.append(x.value)
                continue
            stride = x.row_stride if x.row_stride != x.shape[1] else None
            if x.dtype.__class__ is not Narrow:  # memory's own bytes, not a copy
                values.append(self._memory.view(x.addr, x.shape, x.dtype, "tl.ref", stride))
                continue
            value = self._memory.read_f32(x.addr, x.shape, x.dtype, "tl.ref", stride)
            values.append(rounded(value, wide) if dq else value)
        return values


def _out_dtype(what: str, name: str | None, *operands: np.dtype | Narrow) -> np.dtype:
    """A GEMM's result dtype: `name`, or the first plain operand's dtype, else f32; a GEMM
    accumulates in f32, and its result is f16, bf16 or f32."""
    if name is None:
        return next((dt for dt in operands if dt.__class__ is not Narrow), F32)
    dt = dtype_of(name)
    if dt.__class__ is Narrow:
        raise KernelError(f"{what}: out_dtype {dt.name} is not f16, bf16 or f32 (a GEMM "
                          f"accumulates in f32; quantise its result with .to({dt.name!r}))")
    return dt


def _matmul(a: np.ndarray, b: np.ndarray, trans_b: bool, out: np.dtype) -> np.ndarray:
    """Accumulated in float64, rounded to float32 (the accumulator), then to the result dtype.

    float64 makes the value independent of the BLAS's summation order, which differs by
    CPU: products of f16/bf16/f32 operands are exact in it and sums almost always are, so
    every machine gets the same bits (numpy's f16 matmul would also be ~180x slower).
    Returned as a tensor value: float32, holding numbers of `out`.
    """
    a64, b64 = a.astype(F64), b.astype(F64)
    return rounded((a64 @ (b64.T if trans_b else b64)).astype(F32), out)
