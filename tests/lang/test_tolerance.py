"""A verification tolerance a kernel declares (its ``TOLERANCE``): used in place of its output
dtype's, shown in the result's checks, and refused, in one line naming the kernel, where it
is nonsense or tighter than the dtype can meet."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

import kernbench_cli as kb
from kernbench_cli.lang.dtypes import TOLERANCE, UNIT_ROUNDOFF, tolerance_problem
from tests.conftest import TESTS, test_topology

ONE = test_topology("one")
GEMM = TESTS / "kernels" / "f16_gemm_f32_out.py"


def _declaring(tmp_path, declaration: str):
    """The f16 GEMM kernel with `declaration` added at its end."""
    path = tmp_path / "gemm_tol.py"
    path.write_text(GEMM.read_text() + "\n" + declaration + "\n")
    return path


def test_summation_order_alone_fails_the_f32_default():
    """f16 products summed in f32 over 8 tiles of K, against the float64 reference: off by
    2^-12 at most, which f32's default (1e-5, 1e-5) does not allow."""
    result = kb.run(GEMM, topology=ONE, check=False)
    (check,) = [c for c in result.checks if c.kind == "verification"]
    assert (check.passed, check.dtype, check.atol, check.rtol) == (False, "f32", *TOLERANCE["f32"])
    assert check.max_abs_err == 2.0**-12


def test_a_declared_tolerance_passes_and_is_shown(cli, tmp_path):
    path = _declaring(tmp_path, 'TOLERANCE = {"out": (1e-3, 1e-5)}')
    result = kb.run(path, topology=ONE)
    (check,) = [c for c in result.checks if c.kind == "verification"]
    assert (check.passed, check.atol, check.rtol, check.max_abs_err) == (True, 1e-3, 1e-5,
                                                                         2.0**-12)
    assert result.verified is True
    code, out, _ = cli("run", str(path), "-t", ONE)
    assert code == 0
    assert ("PASS out: max |err| 0.000244 (tolerance declared by the kernel for its f32: "
            "atol 0.001 + rtol 1e-05 x |ref|)") in " ".join(out.split())


@pytest.mark.parametrize(("declaration", "problem"), [
    ('TOLERANCE = {"out": (-1e-3, 1e-5)}',
     "TOLERANCE['out'] (-0.001, 1e-05): atol and rtol must be finite numbers >= 0"),
    ('TOLERANCE = {"out": (float("nan"), 1e-5)}',
     "TOLERANCE['out'] (nan, 1e-05): atol and rtol must be finite numbers >= 0"),
    ('TOLERANCE = {"out": 1e-3}', "TOLERANCE['out'] must be (atol, rtol), two numbers, "
                                  "not 0.001"),
    ('TOLERANCE = [("out", 1e-3)]', "TOLERANCE must be a dict of output: (atol, rtol), not "
                                    "list"),
    ('TOLERANCE = {"out": (1e-3, 1e-9)}',
     "TOLERANCE['out'] rtol 1e-09 is tighter than f32 can meet: rounding a value to f32 may "
     "move it by 5.96e-08 of itself"),
    ('TOLERANCE = {"y": (1e-3, 1e-5)}', "TOLERANCE names 'y', which is not an output "
                                        "(outputs: out)"),
])
def test_a_bad_declaration_is_refused_naming_the_kernel(cli, tmp_path, declaration, problem):
    path = _declaring(tmp_path, declaration)
    code, _, err = cli("run", str(path), "-t", ONE)
    assert (code, err) == (2, f"error: {path}: {problem}\n")


def test_the_rtol_a_dtype_can_meet_is_its_unit_roundoff():
    assert UNIT_ROUNDOFF == {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}
    for dt, roundoff in UNIT_ROUNDOFF.items():
        assert tolerance_problem((0.0, roundoff), dt) is None
        assert "tighter than" in tolerance_problem((1.0, roundoff / 2), dt)
        assert tolerance_problem(TOLERANCE[dt], dt) is None  # the defaults meet their own rule
    assert tolerance_problem((0, 0)) is None  # no dtype: the form only
    assert tolerance_problem((True, 0.1)) == "must be (atol, rtol), two numbers, not (True, 0.1)"


# ------------------------------------------------------------------ ARGMAX

#: f32 scores of two rows; row 0's best two (index 1 and 2) are 1e-5 apart, within twice
#: f32's tolerance (2e-5 + 2e-5 x |ref|): either is a choice a correct kernel can make
SCORES = np.array([[1.0, 3.0, 2.99999, -1.0], [0.5, 0.25, 0.0, 2.0]], np.float32)


@pytest.fixture
def chooser(tmp_path):
    """A kernel module declaring output `token` an argmax of output `scores` (SCORES)."""
    from kernbench_cli.sim.kernels import load_kernel

    path = tmp_path / "chooser.py"
    path.write_text(
        "import numpy as np\nPARAMS = {}\nARGMAX = {'token': 'scores'}\n"
        f"S = np.array({SCORES.tolist()}, np.float32)\n"
        "def setup(host, p): return {}\ndef kernel(tl): pass\n"
        "def reference(host, p): return {'scores': S, 'token': S.argmax(-1).astype('f4')}\n"
        "def outputs(host, args, p): return {}\n")
    return load_kernel(str(path))


@pytest.mark.parametrize(("token", "passed", "shortfall"), [
    ([1, 3], True, 0.0),  # the reference's own choice
    ([2, 3], True, float(SCORES[0, 1] - SCORES[0, 2])),  # the near-tie's other side
    ([0, 3], False, 2.0),  # a score 2 below the best
    ([1, 0], False, 1.5),
    ([1.5, 3], False, None),  # not an index: NaN
    ([4, 3], False, None),  # past the scores
    ([-1, 3], False, None),
])
def test_an_argmax_output_passes_any_choice_a_correct_kernel_can_make(chooser, token, passed,
                                                                       shortfall):
    """A token is checked by its reference score's shortfall from the largest, within
    twice the scores' tolerance: the index itself may differ where two scores are that
    close (a near-tie a correct kernel may break either way)."""
    from kernbench_cli.sim.hooks import verify

    checks = verify(chooser, None, {}, {"scores": SCORES, "token": np.array(token, "f4")})
    check = next(c for c in checks if c.name == "token")
    assert (check.passed, check.dtype, check.atol, check.rtol, check.scores) == (
        passed, "f32", 2 * TOLERANCE["f32"][0], 2 * TOLERANCE["f32"][1], "scores")
    if shortfall is None:
        assert math.isnan(check.max_abs_err)
    else:
        assert check.max_abs_err == shortfall


@pytest.mark.parametrize(("declaration", "problem"), [
    ("ARGMAX = {'out': 'out'}", "ARGMAX must be a dict of output: the output whose argmax "
                                "it is (two names), not {'out': 'out'}"),
    ("ARGMAX = ['out']", "ARGMAX must be a dict of output: the output whose argmax it is "
                         "(two names), not ['out']"),
    ("ARGMAX = {'out': 'nosuch'}", "ARGMAX names 'nosuch', which is not an output (outputs: "
                                   "out)"),
])
def test_a_bad_argmax_declaration_is_refused_naming_the_kernel(cli, tmp_path, declaration,
                                                               problem):
    path = _declaring(tmp_path, declaration)
    code, _, err = cli("run", str(path), "-t", ONE)
    assert (code, err) == (2, f"error: {path}: {problem}\n")


@pytest.mark.parametrize(("answer", "problem"), [
    ('{"out": (-1.0, 0.0)}', "tolerances()['out'] (-1.0, 0.0): atol and rtol must be finite "
                             "numbers >= 0"),
    ("[1]", "tolerances() must be a dict of output: (atol, rtol), not list"),
    ('{"y": (1e-3, 1e-5)}', "tolerances() names 'y', which is not an output (outputs: out)"),
    ('{"out": (1e-3, 1e-9)}', "tolerances()['out'] rtol 1e-09 is tighter than f32 can meet: "
                             "rounding a value to f32 may move it by 5.96e-08 of itself"),
])
def test_a_bad_tolerances_answer_is_refused_naming_the_kernel(cli, tmp_path, answer, problem):
    path = _declaring(tmp_path, f"def tolerances(topology, p):\n    return {answer}")
    code, _, err = cli("run", str(path), "-t", ONE)
    assert (code, err) == (2, f"error: {path}: {problem}\n")


def test_tolerances_of_the_run_go_over_the_table(tmp_path):
    """`tolerances(topology, p)` answers for the run (here from its topology's PE count)
    and wins over `TOLERANCE`; the check says the kernel declared it."""
    path = _declaring(tmp_path, 'TOLERANCE = {"out": (1.0, 1e-5)}\n'
                                "def tolerances(topology, p):\n"
                                '    return {"out": (topology.num_pes * 1e-3, 1e-5)}')
    (check,) = [c for c in kb.run(path, topology=ONE).checks if c.kind == "verification"]
    assert (check.passed, check.atol, check.rtol) == (True, 1e-3, 1e-5)


@pytest.fixture
def identity(tmp_path):
    """A kernel module whose reference is whatever `REF` its test sets."""
    from kernbench_cli.sim.kernels import load_kernel

    path = tmp_path / "identity.py"
    path.write_text("PARAMS = {}\nREF = {}\ndef setup(host, p): return {}\n"
                    "def kernel(tl): pass\ndef reference(host, p): return dict(REF)\n"
                    "def outputs(host, args, p): return {}\n")
    return load_kernel(str(path))


@pytest.mark.parametrize(("want", "got", "passed", "note"), [
    ([1.0, 2.0], [1.0, 2.0], True, ""),
    ([np.nan, 2.0, np.inf], [np.nan, 2.0, np.inf], True,
     "2 of 3 values NaN or infinite in both the output and the reference: equal, with no "
     "error measured"),
    ([np.nan, np.nan], [np.nan, np.nan], True,
     "all 2 values NaN or infinite in both the output and the reference: equal, with no "
     "error measured"),
    ([np.nan], [np.nan], True, "all 1 value NaN or infinite in both the output and the "
                               "reference: equal, with no error measured"),
    ([], [], True, "no values: nothing compared"),
    ([np.nan, 2.0], [1.0, 2.0], False, ""),  # a number where the reference has NaN
])
def test_a_check_says_what_it_could_not_measure(identity, want, got, passed, note):
    """Values NaN or infinite in both pass as equal (numpy's equal_nan): the check says how
    many, so an all-NaN output beside an all-NaN reference is not a silent PASS."""
    from kernbench_cli.report.run import verification_text
    from kernbench_cli.sim.hooks import verify

    identity.module.REF = {"y": np.array(want, "f4")}
    (check,) = verify(identity, None, {}, {"y": np.array(got, "f4")})
    assert (check.passed, check.note) == (passed, note)
    text = verification_text(SimpleNamespace(timing_only=False, checks=[check]))
    assert text.endswith(f" ({note})") if note else text.endswith("x |ref|)")
