"""Kernel dtypes: f16, bf16 (ml_dtypes) and f32, the narrow ones (`lang.narrow`: fp8,
fp8e5m2, int8, int4, mxfp8, mxfp4), and their tolerances: the default per dtype, and the
rule a tolerance a kernel declares (its ``TOLERANCE``) must meet.

A plain dtype is a numpy dtype; a narrow one a `Narrow` (no numpy dtype says "int4 with a
scale per 32 elements"). `nbytes`, `rounded` and `as_dtype` take either.

Arithmetic runs in float32 and rounds to the result dtype (numpy's native
float16 matmul is ~180x slower than float32, and bf16 has no native
arithmetic at all); arithmetic on narrow tensors gives f32.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from kernbench_cli.errors import KernelError, clip
from kernbench_cli.lang.narrow import NARROW, Narrow, from_bytes, to_bytes
from kernbench_cli.lang.narrow import rounded as narrow_rounded

PLAIN: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f32": np.dtype(np.float32),
}
DTYPES: dict[str, np.dtype | Narrow] = {**PLAIN, **NARROW}
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


def dtype(name: object) -> np.dtype | Narrow:
    """The dtype of a kernel dtype name (or of a numpy dtype kernbench knows): a numpy
    dtype, or a `Narrow`."""
    if isinstance(name, str) and name in DTYPES:
        return DTYPES[name]
    if isinstance(name, Narrow):
        return name
    try:
        dt = np.dtype(name)  # type: ignore[call-overload]
    except TypeError:
        dt = None
    if dt is None or dt not in NAMES:
        raise KernelError(f"unknown dtype {name!r} (known: {', '.join(DTYPES)})")
    return dt


def promote(*dtypes: np.dtype | Narrow) -> np.dtype:
    """Result dtype of an operation: the common one, else f32 (f32 for narrow dtypes)."""
    first = dtypes[0]
    return first if first.__class__ is not Narrow and all(d == first for d in dtypes) \
        else F32


F32 = DTYPES["f32"]


def is_narrow(dt: np.dtype | Narrow) -> bool:
    return dt.__class__ is Narrow


def nbytes(dt: np.dtype | Narrow, count: int) -> int:
    """Bytes of `count` elements of `dt` (a narrow dtype's packed elements and scales)."""
    return dt.nbytes(count) if dt.__class__ is Narrow else count * dt.itemsize


def code_of(dt: np.dtype | Narrow) -> int:
    """The stream format of `dt` (`kernbench_cli.formats`): a plain dtype's is its size."""
    return dt.code if dt.__class__ is Narrow else dt.itemsize


def as_dtype(value: np.ndarray, dt: np.dtype | Narrow) -> np.ndarray:
    """A tensor's float32 value in dtype `dt` (no copy for f32; float32 values for a
    narrow dtype, which numpy has no type for)."""
    return value if dt.__class__ is Narrow else value.astype(dt, copy=False)


def reinterpret(value: np.ndarray, was: np.dtype | Narrow, dt: np.dtype | Narrow,
                shape: tuple[int, ...]) -> np.ndarray:
    """The float32 value of `shape` of `dt` that the bytes of float32 `value` of dtype `was`
    hold (a message received as another dtype than it was sent)."""
    raw = to_bytes(value, was) if was.__class__ is Narrow else \
        np.ascontiguousarray(value.astype(was, copy=False))
    raw = raw.reshape(-1).view(np.uint8)
    if dt.__class__ is Narrow:
        return from_bytes(raw, dt, shape)
    return raw.view(dt).reshape(shape).astype(F32)


def rounded(value: np.ndarray, dt: np.dtype | Narrow) -> np.ndarray:
    """`value` rounded to dtype `dt`, kept as float32 (a tensor's value)."""
    if dt == F32:
        return value.astype(F32, copy=False)
    if dt.__class__ is Narrow:
        return narrow_rounded(value, dt)
    return value.astype(dt).astype(F32)
