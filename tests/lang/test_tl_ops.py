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
