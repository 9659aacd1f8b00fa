"""Kernel dtypes: f16, bf16 (ml_dtypes) and f32, and their tolerances: the default per
dtype, and the rule a tolerance a kernel declares (its ``TOLERANCE``) must meet.

Arithmetic runs in float32 and rounds to the result dtype (numpy's native
float16 matmul is ~180x slower than float32, and bf16 has no native
arithmetic at all).
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from kernbench_cli.errors import KernelError, clip

DTYPES: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
}
NAMES = {dt: name for name, dt in DTYPES.items()}

#: Verification tolerance per output dtype: |out - ref| <= atol + rtol * |ref|.
#: About 4 ulps of the format at 1.0, since results are rounded once or twice.
TOLERANCE: dict[str, tuple[float, float]] = {
    "f32": (1e-5, 1e-5),
    "f16": (4e-3, 4e-3),
    "bf16": (3e-2, 3e-2),
}

#: The unit roundoff of each dtype: how far, relative to a value, rounding it to the dtype
#: may move it (half an ulp at 1.0). A declared rtol below it asks for more than an output
#: rounded once can give.
UNIT_ROUNDOFF: dict[str, float] = {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}


def tolerance_problem(value: object, dt: str | None = None) -> str | None:
    """What is wrong with a tolerance a kernel declares for an output (None: nothing): it is
    ``(atol, rtol)``, two finite numbers >= 0, and, for an output of dtype `dt`, rtol is at
    least the dtype's `UNIT_ROUNDOFF`."""
    numbers = isinstance(value, tuple | list) and len(value) == 2 and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    if not numbers:
        return f"must be (atol, rtol), two numbers, not {clip(value)}"
    atol, rtol = value
    if not all(math.isfinite(v) and v >= 0 for v in value):
        return f"({atol!r}, {rtol!r}): atol and rtol must be finite numbers >= 0"
    if dt is not None and rtol < UNIT_ROUNDOFF[dt]:
        return (f"rtol {rtol:g} is tighter than {dt} can meet: rounding a value to {dt} may "
                f"move it by {UNIT_ROUNDOFF[dt]:.3g} of itself")
    return None


def dtype(name: object) -> np.dtype:
    """The numpy dtype of a kernel dtype name (or of a numpy dtype kernbench knows)."""
    if isinstance(name, str) and name in DTYPES:
        return DTYPES[name]
    try:
        dt = np.dtype(name)  # type: ignore[call-overload]
    except TypeError:
        dt = None
    if dt is None or dt not in NAMES:
        raise KernelError(f"unknown dtype {name!r} (known: {', '.join(DTYPES)})")
    return dt


def promote(*dtypes: np.dtype) -> np.dtype:
    """Result dtype of an operation: the common one, else f32."""
    first = dtypes[0]
    return first if all(d == first for d in dtypes) else DTYPES["f32"]


F32 = DTYPES["f32"]


def as_dtype(value: np.ndarray, dt: np.dtype) -> np.ndarray:
    """A tensor's float32 value in dtype `dt` (no copy for f32)."""
    return value.astype(dt, copy=False)


def rounded(value: np.ndarray, dt: np.dtype) -> np.ndarray:
    """`value` rounded to dtype `dt`, kept as float32 (a tensor's value)."""
    if dt == F32:
        return value.astype(F32, copy=False)
    return value.astype(dt).astype(F32)
