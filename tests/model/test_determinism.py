"""Same inputs, byte-identical results: in one process and across processes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ARGS = {
    "gemm": ["run", "sharded_gemm", "-p", "mode=primitive", "-p", "M=32", "-p", "K=128", "-p",
             "N=512", "--json", "--per-pe"],
    "attention": ["run", "gqa_attention", "-t", "sip", "-p", "seq_len=2048", "--json"],
}


@pytest.mark.parametrize("case", sorted(ARGS))
def test_json_is_byte_identical_across_processes_and_hash_seeds(kernbench, case):
    def output(hash_seed: str) -> bytes:
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        return kernbench.run(*ARGS[case], env=env, text=False, check=True).stdout

    first = output("1")
    assert first == output("12345")
    assert b'"latency_ps"' in first


def test_op_log_and_golden_record_are_identical_in_one_process(run):
    from kernbench_cli.golden.record import make_record

    a = run("gqa_attention", "two_sips", ("seq_len=1024",))
    b = run("gqa_attention", "two_sips", ("seq_len=1024",))
    assert a.oplog == b.oplog
    assert make_record("x", a) == make_record("x", b)


def test_golden_records_match_across_processes():
    probe = ("from kernbench_cli.golden.run import run_case\n"
             "from kernbench_cli.golden.cases import CASES\n"
             "from kernbench_cli.golden.record import dumps\n"
             "print(dumps(run_case(CASES[1])))\n")
    outs = {subprocess.run([sys.executable, "-c", probe], capture_output=True, check=True,
                           env=dict(os.environ, PYTHONHASHSEED=seed)).stdout
            for seed in ("0", "777")}
    assert len(outs) == 1


def test_same_input_same_op_log_and_latency(run):
    """Two runs of the primitive GEMM in one process: the same latency and op log."""
    params = ("M=32", "K=128", "N=512", "mode=primitive")
    a = run("sharded_gemm", "default", params)
    b = run("sharded_gemm", "default", params)
    assert a.latency_ps == b.latency_ps
    assert a.oplog == b.oplog


RANDOM_KERNEL = """import random
import numpy as np
PARAMS = {}
def setup(host, p):
    return {"n": random.randint(1, 1000) + int(np.random.randint(1, 1000))}
def kernel(tl, n):
    tl.cycles(n * 100 + random.randint(0, 1000))
def reference(host, p): return {}
def outputs(host, args, p): return {}
"""


def test_a_kernel_drawing_from_the_global_generators_is_seeded_by_the_run(tmp_path):
    """A kernel that draws from Python's `random` or numpy's global generator (not
    `host.rng`) gets the same numbers each run of one seed, so the same result; the
    caller's generators are as they were after the run."""
    import random

    import numpy as np

    import kernbench_cli as kb

    path = tmp_path / "draws.py"
    path.write_text(RANDOM_KERNEL)
    kb.run(str(path))  # whatever its first run imports (rich draws a number as it loads)
    random.seed(99)
    np.random.seed(99)
    python, numpy = random.getstate(), np.random.get_state()

    def latency(seed: int) -> int:
        return kb.run(str(path), seed=seed).latency_ps

    first = latency(0)
    assert (random.getstate(), np.random.get_state()[1].tolist()) == (python,
                                                                      numpy[1].tolist())
    assert {latency(0), latency(0)} == {first}
    random.seed(0)  # setup's numbers: the seed's, as a kernel given them as constants has
    np.random.seed([0])  # them (drawing as many, for the kernel's own draws after)
    n = random.randint(1, 1000) + int(np.random.randint(1, 1000))
    fixed = tmp_path / "fixed.py"
    fixed.write_text(RANDOM_KERNEL.replace(
        "random.randint(1, 1000) + int(np.random.randint(1, 1000))",
        f"(random.randint(1, 1000), np.random.randint(1, 1000), {n})[2]"))
    assert kb.run(str(fixed)).latency_ps == first
    assert len({latency(seed) for seed in (1, 2, 3, 2**40 + 5)}) > 1
