"""sharded_gemm's declared tolerance: a primitive f32 GEMM sums in f32 in another order
than the float64 reference."""

from __future__ import annotations

import math

import kernbench_cli as kb

SMALL = {"mode": "primitive", "dtype": "f32", "M": 4, "N": 256, "tile_m": 1, "tile_n": 16}


def test_a_primitive_f32_gemm_in_tiles_of_one_passes_at_its_stated_tolerance():
    """K = 512 in tiles of 1: 1,023 roundings of partial sums within 3 sqrt(512), each by
    at most 2^-24 of it. Off by 5.7e-5 (8.4e-5 at M = 64), it failed f32's 1e-5 on
    summation order alone; its atol is now that product, and its rtol f32's."""
    result = kb.run("sharded_gemm", params={**SMALL, "tile_k": 1})
    (check,) = [c for c in result.checks if c.kind == "verification"]
    assert check.passed and 1e-5 < check.max_abs_err <= check.atol
    assert check.atol == 1023 * 2.0**-24 * 3 * math.sqrt(512) and check.rtol == 1e-5
    # one tile over K: one rounding, as the reference's own; f32's tolerance stands
    result = kb.run("sharded_gemm", params={**SMALL, "tile_k": 512})
    (check,) = [c for c in result.checks if c.kind == "verification"]
    assert (check.atol, check.rtol) == (1e-5, 1e-5) and check.max_abs_err == 0
