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
