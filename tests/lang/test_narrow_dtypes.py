"""Narrow dtypes' numbers and bytes (`kernbench_cli.lang.narrow`): quantisation against
values worked by hand and against ml_dtypes, rounding to nearest even, saturation, the MX
shared scale of OCP MX v1.0 section 6.3, and the block layout in memory."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from kernbench_cli import formats
from kernbench_cli.lang.narrow import NARROW, from_bytes, quantize, rounded, to_bytes

F32 = np.float32


def _block(*values: float) -> np.ndarray:
    """A block of 32: `values`, then zeros."""
    out = np.zeros(32, F32)
    out[:len(values)] = values
    return out


@pytest.mark.parametrize(("name", "given", "want"), [
    # E4M3: 3 mantissa bits; ties to the even mantissa; +-448 at most, infinities too
    ("fp8", [0.3, 1.0625, 1.1875, 500.0, -1e9, np.inf, 2.0**-10], [
        0.3125, 1.0, 1.25, 448.0, -448.0, 448.0, 0.0]),
    # E5M2: 2 mantissa bits, +-57344 at most
    ("fp8e5m2", [1.125, 1.375, 60000.0, -np.inf], [1.0, 1.5, 57344.0, -57344.0]),
])
def test_fp8_rounds_to_nearest_even_and_saturates(name, given, want):
    got = rounded(np.array(given, F32), NARROW[name])
    assert got.tolist() == want


def test_fp8_keeps_nan():
    assert np.isnan(rounded(np.array([np.nan], F32), NARROW["fp8"])).all()


def test_int8_by_hand():
    """max|v| = 1: s = bf16(1/127) = 1.0078125 x 2^-7; 1/s = 127.007 -> 127, -0.5/s =
    -63.504 -> -64, 0.25/s = 31.75 -> 32; each value is its integer times s."""
    s = 1.0078125 * 2.0**-7
    elements, scales = quantize(_block(1.0, -0.5, 0.25), NARROW["int8"])
    assert scales.tolist() == [s]
    assert elements[:4].tolist() == [127, -64, 32, 0]
    assert rounded(_block(1.0, -0.5, 0.25), NARROW["int8"])[:3].tolist() == [127 * s, -64 * s,
                                                                            32 * s]


def test_int4_by_hand_ties_to_even_and_clamps_to_7():
    """max|v| = 7: s = 1; -3.5 -> -4 (the even one), 0.5 -> 0, 2.5 -> 2."""
    elements, scales = quantize(_block(7.0, 1.0, -3.5, 0.5, 2.5), NARROW["int4"])
    assert scales.tolist() == [1.0]
    assert elements[:5].astype(int).tolist() == [7, 1, -4, 0, 2]


def test_mxfp4_by_hand():
    """max|v| = 7: X = 2^(floor(log2 7) - 2) = 1; E2M1 holds 0, 0.5, 1, 1.5, 2, 3, 4, 6: 5 ->
    4 (a tie, to the even), 7 -> 6 (clamped to the largest normal), 0.75 -> 1 (a tie),
    -0.25 -> -0 (a tie). max|v| = 3: X = 2^(1 - 2) = 0.5: 3 is 6 x 0.5, 1 is 2 x 0.5."""
    got = rounded(_block(1.0, 3.0, 5.0, 7.0, -0.25, 0.75), NARROW["mxfp4"])
    assert got[:6].tolist() == [1.0, 3.0, 4.0, 6.0, 0.0, 1.0]
    elements, scales = quantize(_block(3.0, 1.0), NARROW["mxfp4"])
    assert scales.tolist() == [0.5] and elements[:2].astype(F32).tolist() == [6.0, 2.0]


def test_mxfp8_by_hand_and_its_saturation():
    """max|v| = 1: X = 2^(0 - 8); 0.1 / X = 25.6 -> 26 (E4M3 steps by 2 there) -> 26/256.
    max|v| = 1.9: X = 2^-8 still, 1.9 / X = 486.4 clamps to 448: 1.75 (the spec's rule)."""
    got = rounded(_block(1.0, 0.1), NARROW["mxfp8"])
    assert got[:2].tolist() == [1.0, 26 / 256]
    assert rounded(_block(1.9), NARROW["mxfp8"])[0] == 1.75


def test_mx_scale_of_zeros_tiny_values_and_non_finite_blocks():
    """A block of zeros: scale 2^-127 (E8M0 0x00); max|v| = 2^-140: the exponent clamps at
    -127, and the elements round to 0; an infinity or NaN: scale NaN (0xFF), every value
    NaN."""
    mx = NARROW["mxfp4"]
    _, scales = quantize(np.zeros((2, 32), F32), mx)
    assert scales.tolist() == [[2.0**-127], [2.0**-127]]
    assert to_bytes(np.zeros(32, F32), mx)[0] == 0
    assert rounded(_block(2.0**-140), mx).tolist() == [0.0] * 32
    for bad in (np.inf, np.nan):
        assert np.isnan(rounded(_block(1.0, bad), mx)).all()
        assert to_bytes(_block(1.0, bad), mx)[0] == 0xFF


def _mx_reference(values: np.ndarray, element, emax: int, limit: float) -> np.ndarray:
    """OCP MX v1.0 section 6.3 written out block by block with Python floats: X is the
    largest power of two <= max|v| over 2^emax; each v / X cast by ml_dtypes after
    clamping to the element's largest normal."""
    out = []
    for block in values.reshape(-1, 32).tolist():
        amax = max(abs(v) for v in block)
        shared = max(-127, math.frexp(amax)[1] - 1 - emax) if amax else -127
        x = 2.0**shared
        out += [float(np.array(min(max(v / x, -limit), limit)).astype(element)) * x
                for v in block]
    return np.array(out, F32).reshape(values.shape)


@pytest.mark.parametrize("name", ["mxfp8", "mxfp4"])
def test_mx_against_the_spec_written_out(name):
    dt = NARROW[name]
    values = (np.random.default_rng(3).standard_normal((8, 64)) * 10.0 ** np.arange(
        -3, 5).reshape(8, 1)).astype(F32)
    assert np.array_equal(rounded(values, dt),
                          _mx_reference(values, dt.element, dt.emax, dt.limit))


@pytest.mark.parametrize("name", ["fp8", "fp8e5m2"])
def test_fp8_in_range_is_ml_dtypes_cast(name):
    dt = NARROW[name]
    values = (np.random.default_rng(1).standard_normal(4096) * 30).astype(F32)
    assert np.array_equal(rounded(values, dt), values.astype(dt.element).astype(F32))


@pytest.mark.parametrize("name", ["int8", "int4"])
def test_int_against_a_loop(name):
    """Each block: s = bf16(max|v| / q); elements round(v / s) (ties to even) clamped to
    +-q, q = 127 or 7."""
    dt = NARROW[name]
    values = (np.random.default_rng(2).standard_normal((4, 64)) * 5).astype(F32)
    want = []
    for block in values.reshape(-1, 32):
        s = float(np.array(np.abs(block).max() / np.float32(dt.limit), F32).astype(
            ml_dtypes.bfloat16))
        want += [min(max(round(float(v) / s), -dt.limit), dt.limit) * s for v in block]
    assert np.array_equal(rounded(values, dt), np.array(want, F32).reshape(values.shape))


@pytest.mark.parametrize("name", sorted(NARROW))
def test_quantised_values_are_fixed_points_and_survive_their_bytes(name):
    dt = NARROW[name]
    values = (np.random.default_rng(4).standard_normal((3, 96)) * 4).astype(F32)
    once = rounded(values, dt)
    assert np.array_equal(rounded(once, dt), once)
    raw = to_bytes(values, dt)
    assert raw.dtype == np.uint8 and raw.shape == (3, dt.nbytes(96))
    assert np.array_equal(from_bytes(raw, dt, (3, 96)), once)
    assert np.array_equal(from_bytes(raw.reshape(-1), dt, (288,)), once.reshape(-1))


@pytest.mark.parametrize(("name", "block_bytes"), [
    ("fp8", 32), ("fp8e5m2", 32), ("int8", 34), ("int4", 18), ("mxfp8", 33), ("mxfp4", 17)])
def test_bytes_of_32_elements(name, block_bytes):
    """A block is its scale (E8M0: 1 B, bf16: 2 B) and its elements (4-bit: two a byte)."""
    dt = NARROW[name]
    assert dt.nbytes(32) == block_bytes == formats.nbytes(dt.code, 32)
    assert dt.nbytes(4096) == 128 * block_bytes


def test_a_block_in_memory_is_its_scale_then_its_elements_low_nibble_first():
    """mxfp4 [3, 1, 0, …]: X = 0.5 (E8M0 126), elements 6 (E2M1 0b0111) and 2 (0b0100): the
    first element byte is 0x47. int8 [1, -0.5, …]: the bf16 scale little-endian, then the
    integers."""
    raw = to_bytes(_block(3.0, 1.0), NARROW["mxfp4"])
    assert raw.tolist() == [126, 0x47] + [0] * 15
    raw = to_bytes(_block(1.0, -0.5), NARROW["int8"])
    scale = np.array([1.0078125 * 2.0**-7], ml_dtypes.bfloat16).view(np.uint16)[0]
    assert raw[:4].tolist() == [scale & 0xFF, scale >> 8, 127, 256 - 64]


def test_the_gemm_datapath_of_each_pair():
    """Narrow operands of one family run natively at the wider's rate; anything else
    dequantises each narrow operand to the array's format (bf16, or f32 against f32)."""
    f = formats
    assert f.gemm_datapath(f.FP8, f.FP8) == (f.FP8, False, False)
    assert f.gemm_datapath(f.MXFP8, f.MXFP4) == (f.MXFP8, False, False)
    assert f.gemm_datapath(f.INT4, f.INT8) == (f.INT8, False, False)
    assert f.gemm_datapath(f.F16, f.MXFP4) == (f.F16, False, True)
    assert f.gemm_datapath(f.MXFP4, f.F32) == (f.F32, True, False)
    assert f.gemm_datapath(f.INT8, f.FP8) == (f.F16, True, True)
    assert f.gemm_datapath(f.F16, f.F32) == (f.F32, False, False)


def test_itemsize_and_nbytes_for_pointer_arithmetic():
    """fp8's elements are whole bytes; a scaled dtype's bytes come in whole blocks."""
    from kernbench_cli.lang.tl import TL

    assert (TL.itemsize("fp8"), TL.itemsize("fp8e5m2"), TL.itemsize("bf16")) == (1, 1, 2)
    assert [TL.nbytes(name, 4096) for name in ("mxfp4", "mxfp8", "int4", "int8", "fp8")] == [
        2176, 4224, 2304, 4352, 4096]
