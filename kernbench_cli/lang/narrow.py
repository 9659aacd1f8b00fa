"""Narrow dtypes: what their numbers are, and their bytes in memory.

========= ================ ============================================ ===================
dtype     element          scale                                        bytes per element
========= ================ ============================================ ===================
fp8       E4M3 (OCP E4M3FN) none                                         1
fp8e5m2   E5M2             none                                         1
int8      int8, +-127      bf16, per 32 elements of a row (symmetric)    34 / 32
int4      int4, +-7        bf16, per 32 elements of a row (symmetric)    18 / 32
mxfp8     E4M3             E8M0 (a power of two), per 32 elements        33 / 32
mxfp4     E2M1             E8M0 (a power of two), per 32 elements        17 / 32
========= ================ ============================================ ===================

Quantising rounds to nearest, ties to even, and saturates: a value beyond
the format's largest is stored as the largest, of its sign (for fp8 an
infinity too); NaN stays NaN (fp8), and a NaN or an infinity makes a scaled
format's block NaN (its scale: max|v| is not finite).

- fp8: the value, clamped to +-448 (E4M3) or +-57344 (E5M2), cast (ml_dtypes'
  float8_e4m3fn and float8_e5m2: the OCP 8-bit formats).
- int8, int4: per block, the scale ``s = bf16(max|v| / q)`` (q = 127 or 7)
  and the elements ``clamp(round(v / s), -q, q)``; a block of zeros has
  scale 0. The value of an element is ``element x s``.
- mxfp8, mxfp4 (OCP Microscaling Formats v1.0, section 6.3): per block the
  shared scale ``X = 2^(floor(log2(max|v|)) - emax)``, emax the element
  format's largest exponent (8 for E4M3, 2 for E2M1), its exponent clamped
  to E8M0's -127..127 (a block of zeros: 2^-127); the elements ``v / X``
  rounded to the element format, clamped to its largest normal (448, 6).
  A block holding an infinity or NaN has scale NaN (E8M0 0xFF): its
  elements read as NaN. The value of an element is ``element x X``.

A value, once quantised, is exact in float32 (a tensor's value), and
quantising it again gives it back, but for an int8 or int4 block whose bf16 scale is
subnormal (its largest value below some 1e-38): that scale is coarse enough to differ
the second time.

In memory each block of a scaled format is its scale (E8M0: 1 byte; bf16: 2,
little-endian) then its elements, 4-bit ones two to a byte (the first in the
low nibble): `kernbench_cli.formats` has the sizes the timing model uses.
Blocks run along the last axis, so a row's length must be a multiple of 32.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from kernbench_cli import formats

F32 = np.dtype(np.float32)
_BF16 = np.dtype(ml_dtypes.bfloat16)


class Narrow:
    """A narrow kernel dtype: `name`, its stream format `code` (`kernbench_cli.formats`),
    its `element` numpy dtype, and how it scales (`kind`: "fp8", "int" or "mx")."""

    __slots__ = ("code", "element", "emax", "format", "kind", "limit", "name")

    def __init__(self, name: str, code: int, element: type, kind: str, limit: float,
                 emax: int = 0):
        self.name, self.code, self.kind = name, code, kind
        self.element = np.dtype(element)
        self.limit = limit  # the largest element (its magnitude)
        self.emax = emax  # MX: the element format's largest exponent
        self.format = formats.FORMATS[code]

    def __repr__(self) -> str:
        return f"Narrow({self.name})"

    @property
    def block(self) -> int:
        """Elements sharing one scale (1: no scale)."""
        return self.format.block

    def nbytes(self, count: int) -> int:
        return self.format.nbytes(count)


NARROW: dict[str, Narrow] = {n.name: n for n in (
    Narrow("fp8", formats.FP8, ml_dtypes.float8_e4m3fn, "fp8", 448.0),
    Narrow("fp8e5m2", formats.FP8, ml_dtypes.float8_e5m2, "fp8", 57344.0),
    Narrow("int8", formats.INT8, np.int8, "int", 127.0),
    Narrow("int4", formats.INT4, ml_dtypes.int4, "int", 7.0),
    Narrow("mxfp8", formats.MXFP8, ml_dtypes.float8_e4m3fn, "mx", 448.0, emax=8),
    Narrow("mxfp4", formats.MXFP4, ml_dtypes.float4_e2m1fn, "mx", 6.0, emax=2),
)}


def quantize(values: np.ndarray, dt: Narrow) -> tuple[np.ndarray, np.ndarray | None]:
    """(elements, scales) of float32 `values` in `dt`: elements of `dt.element` in
    `values`' shape, and for a scaled format one scale per block of the last axis (a
    float32 array of shape ``(..., n / 32)``); None for fp8."""
    values = np.asarray(values, F32)
    if dt.kind == "fp8":
        return np.clip(values, -dt.limit, dt.limit).astype(dt.element), None
    blocks = values.reshape(*values.shape[:-1], -1, dt.block)
    amax = np.max(np.abs(blocks), axis=-1, initial=0.0)
    bad = ~np.isfinite(amax)
    scales = _int_scales(amax, dt.limit) if dt.kind == "int" else _mx_scales(amax, dt.emax)
    scales[bad] = np.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = blocks.astype(np.float64) / scales[..., None]  # exact in float64 for MX
    scaled[~np.isfinite(scaled)] = 0.0  # scale 0 (a block of zeros) or NaN
    if dt.kind == "int":
        scaled = np.rint(scaled)  # ties to even
    elements = np.clip(scaled, -dt.limit, dt.limit).astype(dt.element)
    return elements.reshape(values.shape), scales


def _int_scales(amax: np.ndarray, limit: float) -> np.ndarray:
    """bf16(max|v| / q) per block, as float32 (q: the element's limit, 127 or 7)."""
    return (amax / np.float32(limit)).astype(_BF16).astype(F32)


def _mx_scales(amax: np.ndarray, emax: int) -> np.ndarray:
    """2^(floor(log2(amax)) - emax), its exponent clamped to -127..127, as float32."""
    _, exp = np.frexp(amax)  # amax = m 2^exp, m in [0.5, 1): floor(log2(amax)) = exp - 1
    shared = np.where(amax > 0, exp - 1 - emax, -127)
    return np.ldexp(np.float32(1.0), np.clip(shared, -127, 127)).astype(F32)


def dequantize(elements: np.ndarray, scales: np.ndarray | None, dt: Narrow) -> np.ndarray:
    """The float32 values of `elements` (and their blocks' `scales`) of `dt`: exact."""
    values = elements.astype(F32)
    if scales is None:
        return values
    blocks = values.reshape(*values.shape[:-1], -1, dt.block) * scales[..., None]
    return blocks.reshape(values.shape)


def rounded(values: np.ndarray, dt: Narrow) -> np.ndarray:
    """`values` quantised to `dt` and read back, as float32 (a tensor's value)."""
    return dequantize(*quantize(values, dt), dt)


def to_bytes(values: np.ndarray, dt: Narrow) -> np.ndarray:
    """The bytes of float32 `values` stored as `dt`: uint8, each row of the last axis its
    blocks in turn (scale, then elements), shape ``(..., dt.nbytes(n))``."""
    # C order first: a tensor's value may be a view in another order (a transpose's)
    elements, scales = quantize(np.ascontiguousarray(values), dt)
    codes = elements.view(np.uint8)
    if dt.format.bits == 4:  # two to a byte, the first in the low nibble
        codes = (codes[..., 0::2] & 0xF) | (codes[..., 1::2] & 0xF) << 4
    if scales is None:
        return codes
    if dt.kind == "mx":
        scale_bytes = scales.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)[..., None]
    else:
        scale_bytes = scales.astype(_BF16).view(np.uint16).astype("<u2").view(np.uint8)
        scale_bytes = scale_bytes.reshape(*scales.shape, 2)
    blocks = codes.reshape(*scales.shape, -1)
    return np.concatenate([scale_bytes, blocks], axis=-1).reshape(*values.shape[:-1], -1)


def from_bytes(raw: np.ndarray, dt: Narrow, shape: tuple[int, ...]) -> np.ndarray:
    """The float32 values of `shape` that bytes `raw` (uint8, `to_bytes`' layout, rows of
    the last axis in turn) hold in `dt`."""
    fmt = dt.format
    rows = np.ascontiguousarray(raw).reshape(-1, fmt.nbytes(shape[-1]))
    codes, scales = rows, None
    if fmt.scale_bytes:
        blocks = rows.reshape(len(rows), -1, fmt.block_bytes)
        codes = blocks[..., fmt.scale_bytes:].reshape(len(rows), -1)
        scale_raw = np.ascontiguousarray(blocks[..., :fmt.scale_bytes])
        scales = (scale_raw.view(ml_dtypes.float8_e8m0fnu) if dt.kind == "mx" else
                  scale_raw.view("<u2").astype(np.uint16).view(_BF16))[..., 0].astype(F32)
        scales = scales.reshape(*shape[:-1], -1)
    if fmt.bits == 4:
        codes = np.stack([codes & 0xF, codes >> 4], axis=-1)
    if dt.kind == "int":  # two's complement: a byte, or a nibble
        elements = codes.view(np.int8) if fmt.bits == 8 else (codes.astype(np.int8) ^ 8) - 8
    else:
        elements = np.ascontiguousarray(codes).view(dt.element)
    return dequantize(elements.reshape(shape), scales, dt)
