"""The worked kernels of docs/kernels.md: row-wise softmax and RMSNorm, sharded over PEs."""

from __future__ import annotations

import numpy as np
import pytest

from kernbench_cli.config.schema import MathLatency, MathOpCycles


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("kernel", ["softmax", "rmsnorm"])
def test_values_match_numpy(run, kernel, dtype):
    result = run(kernel, "default", params=("rows=64", "cols=96", "block=2", f"dtype={dtype}"))
    (check,) = result.checks
    assert check.passed, check
    y = result.outputs["y"].astype(np.float64)
    if kernel == "softmax":
        np.testing.assert_allclose(y.sum(axis=1), 1.0, atol=0.02)


def test_softmax_time_is_its_math_passes_per_block(run):
    """One PE, f32, one block of 8 x 64: the PE_MATH commands, each ceil(elements / 32 lanes)
    x op_cycles at 1 GHz, then its class's latency: max (reduce, 512), subtract (add, 512), exp
    (exp, 512), sum (reduce, 512), reciprocal (div, 8), multiply (mul, 512)."""
    c, lat = MathOpCycles(), MathLatency()
    result = run("softmax", "one", params=("rows=8", "cols=64", "block=8", "dtype=f32"))
    maths = [(r[3], r[6] - r[5]) for r in result.oplog if r[2] == "math"]
    lanes = 32
    expected = [("max", 512 // lanes * c.reduce + lat.reduce),
                ("subtract", 512 // lanes * c.add + lat.add),
                ("exp", 512 // lanes * c.exp + lat.exp),
                ("sum", 512 // lanes * c.reduce + lat.reduce),
                ("reciprocal", 1 * c.div + lat.div), ("multiply", 512 // lanes * c.mul + lat.mul)]
    assert maths == [(name, cycles * 1000) for name, cycles in expected]


def test_rmsnorm_preset_sets_the_hidden_size(run):
    result = run("rmsnorm", "default", params=("model=llama3-8b", "rows=16", "block=1"),
                 timing_only=True)
    assert (result.params["cols"], result.params["eps"]) == (4096, 1e-5)


@pytest.mark.parametrize(("kernel", "params", "message"), [
    ("softmax", ("rows=100",), "softmax: rows = 100 does not divide over the 16 PEs (try -p "
                               "rows=96)"),
    ("rmsnorm", ("rows=64", "block=3"), "rmsnorm: a PE's 4 rows are not a multiple of block = 3"),
    ("rmsnorm", ("cols=262144", "block=4"), "rmsnorm: a block of 4 x 262144 needs 13631488 B of "
                                            "TCM, more than the 2097152 B a PE has; lower -p "
                                            "block"),
])
def test_parameters_that_cannot_run_say_why(cli, kernel, params, message):
    code, out, err = cli("run", kernel, *(a for p in params for a in ("-p", p)))
    assert (code, out, err) == (2, "", f"error: {message}\n")


@pytest.mark.parametrize("kernel", ["softmax", "rmsnorm", "sharded_gemm", "gqa_attention"])
def test_defaults_scale_to_the_rack(kernel):
    """The shipped kernels' defaults divide over every shipped topology's PEs."""
    from kernbench_cli.address import load_address_map
    from kernbench_cli.sim.kernels import load_kernel, parse_params

    module = load_kernel(kernel)
    for topology, pes in (("default", 16), ("sip", 128), ("rack", 8192)):
        assert load_address_map(topology).topology.num_pes == pes
        params = parse_params(module, [], pes)
        size = params.get("rows") or params.get("N") or params.get("seq_len")
        assert size % pes == 0 and size >= pes, (topology, params)
