"""Every tl op against numpy, in every dtype, with the dtype's tolerance."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernbench_cli.lang.dtypes import TOLERANCE
from tests.kernels.ops import OPS


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_op_matches_numpy(run, op, dtype):
    result = run("ops", params=(f"op={op}", f"dtype={dtype}"))
    (check,) = result.checks
    assert check.passed, (op, dtype, check)
    assert (check.atol, check.rtol) == TOLERANCE[check.dtype]


def test_a_wrong_result_fails_verification(run, tmp_path):
    """The check itself can fail: a kernel that adds where it should subtract."""
    text = (Path(__file__).parents[1] / "kernels" / "ops.py").read_text()
    wrong = text.replace('"sub": (lambda tl, x, y, w: x - y', '"sub": (lambda tl, x, y, w: x + y')
    assert wrong != text
    source = tmp_path / "ops_wrong.py"
    source.write_text(wrong)
    result = run(str(source), params=("op=sub",))
    (check,) = result.checks
    assert not check.passed
    assert result.verified is False


@pytest.mark.parametrize(("op", "passes"), [
    ("rsqrt", [("maximum", "cmp"), ("rsqrt", "sqrt")]),
    ("reciprocal", [("maximum", "cmp"), ("reciprocal", "div")]),
    ("abs", [("subtract", "add"), ("abs", "add")]),
    ("tanh", [("multiply", "mul"), ("subtract", "add"), ("tanh", "exp")]),
    ("where", [("subtract", "add"), ("maximum", "cmp"), ("where", "cmp"), ("where", "cmp")]),
    ("where_scalar", [("subtract", "add"), ("maximum", "cmp"), ("where", "cmp")]),
])
def test_new_math_ops_cost_their_op_class(run, op, passes):
    """Each PE_MATH command holds the unit ceil(elements / lanes) x op_cycles[class] cycles at
    1 GHz (default cost table: 32 lanes; add, mul, cmp 1 cycle; div, exp, sqrt 4), and its
    result is ready latency[class] cycles later; a `where` of two tensors is two passes of the
    comparator."""
    from kernbench_cli.config.schema import MathLatency, MathOpCycles

    cycles, latency = MathOpCycles(), MathLatency()
    result = run("ops", params=(f"op={op}", "dtype=f32"))
    maths = [r for r in result.oplog if r[2] == "math"]
    assert [r[3] for r in maths] == [name for name, _ in passes]
    elements = 24 * 40
    for record, (_, cls) in zip(maths, passes, strict=True):
        assert record[6] - record[5] == (-(-elements // 32) * getattr(cycles, cls)
                                         + getattr(latency, cls)) * 1000
