"""`kernbench kernels`: the shipped kernels listed, and one kernel's parameters, choices
and presets."""

from __future__ import annotations


def test_kernels_lists_the_shipped_kernels(cli):
    code, out, _ = cli("kernels")
    assert code == 0
    assert "gqa_attention" in out and "sharded_gemm" in out


def test_kernels_name_shows_parameters_choices_and_presets(cli):
    code, out, _ = cli("kernels", "gqa_attention")
    assert code == 0
    assert "stores the output [batch, heads_q, D]" in out  # docstrings are not Rich markup
    assert "│ seq_len   │ 4096    │ tokens    │ KV-cache length, split over the PEs;" in out
    assert "│ dtype     │ f16     │ str       │ element type" in out
    assert "-p model=llama3-8b sets heads_q=32, heads_kv=8, head_dim=128" in out
    assert cli("kernels", "nope")[0] == 2


def test_kernels_are_described_under_python_oo(kernbench):
    """`python -OO` drops docstrings, and with them every kernel's description: the list's
    "what it is" column and a kernel's text were empty. They are read from the source."""
    import os

    env = {**os.environ, "PYTHONOPTIMIZE": "2", "COLUMNS": "200"}
    listed = kernbench.run("kernels", env=env)
    assert listed.returncode == 0 and "GQA fused attention for LLM decoding" in listed.stdout
    shown = kernbench.run("kernels", "all_reduce", env=env)
    assert shown.returncode == 0 and shown.stdout.startswith("Collectives benchmark")
