"""The llama_decode workload: one decode step, verified against a float64 reference of
Hugging Face's Llama, its mapping, regions, time per token and representative layers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernbench_cli.sim.regions import OUTSIDE

SMALL = "tests/configs/small_llama.json"
NARROW = "tests/configs/narrow_llama.json"  # 8 hidden, 12 MLP, 10 words, 1 KV head
OPERATORS = ["rmsnorm", "qkv", "kv_append", "attention", "o_proj", "attn_all_reduce", "mlp",
             "mlp_all_reduce", "lm_head"]


def _passed(result) -> None:
    assert result.verified, [(c.name, c.max_abs_err) for c in result.checks]
    names = {c.name for c in result.checks}
    assert {"hidden_states.0", "hidden_states.1", "logits", "next_token"} <= names


def test_the_tiny_model_verifies_and_times_each_operator(run):
    result = run("llama_decode", "default")
    _passed(result)
    by = {r.name: r for r in result.regions}
    assert list(by) == [*OPERATORS, OUTSIDE]
    assert sum(r.path_ps for r in result.regions) == result.latency_ps
    m = {k: v for k, (v, _) in result.metrics.items()}
    assert m["tpot_ps"] == result.latency_ps
    assert m["tokens_per_s"] == pytest.approx(1e12 / result.latency_ps)
    assert m["tpot_over_hbm_bound"] == pytest.approx(result.latency_ps / m["hbm_bound_ps"])


@pytest.mark.parametrize("params", [
    (f"config={SMALL}", "batch=2", "context=37"),  # another shape: MHA, uneven shards
    ("context=0",),  # an empty cache: the new token attends to itself alone
    ("pp=2", "batch=2"),  # two pipeline stages of 8 PEs, a layer each
    pytest.param(("batch=3", "context=5", "algo=hier"), marks=pytest.mark.slow),  # shards
])                                                                # mostly empty
def test_other_shapes_verify(run, params):
    result = run("llama_decode", "default", params)
    _passed(result)
    token = next(c for c in result.checks if c.name == "next_token")
    assert token.max_abs_err == 0  # the argmax is the reference's, exactly


def test_empty_shares_of_o_mlp_and_the_vocabulary_are_skipped(run):
    """On 16 PEs a model this narrow leaves PEs no rows of O (8 dims), of the MLP (12) or
    of the vocabulary (10 words): they place nothing, multiply nothing, and their
    (max, index) pair never wins the argmax."""
    result = run("llama_decode", "default", (f"config={NARROW}", "batch=2", "context=5"))
    _passed(result)
    assert next(c for c in result.checks if c.name == "next_token").max_abs_err == 0


@pytest.mark.slow
def test_representative_layers_scale_to_the_full_step_exactly(run):
    full = run("llama_decode", "default", ("layers=7",), timing_only=True)
    for timed in (4, 5):
        part = run("llama_decode", "default", (f"layers={timed}", "scale_to=7"),
                   timing_only=True)
        m = {k: v for k, (v, _) in part.metrics.items()}
        assert m["scaling_exact"] == 1.0
        assert m["tpot_ps"] == full.latency_ps


def test_save_writes_hugging_face_names_and_layouts(cli, tmp_path):
    out = tmp_path / "step.npz"
    code, _, err = cli("run", "llama_decode", "-p", "batch=2", "-p", "context=9", "--save",
                       str(out))
    assert code == 0, err
    saved = np.load(out)
    shapes = {k: saved[k].shape for k in saved.files}
    want = {  # tiny: hidden 256, 8 heads of 32, 2 KV heads, intermediate 512, vocab 1024
        "model.layers.0.self_attn.q_proj.weight": (256, 256),
        "model.layers.0.self_attn.k_proj.weight": (64, 256),
        "model.layers.1.mlp.down_proj.weight": (256, 512),
        "model.layers.0.input_layernorm.weight": (256,),
        "model.norm.weight": (256,),
        "lm_head.weight": (1024, 256),
        "model.layers.1.past_key": (2, 2, 9, 32),
        "inputs_embeds": (2, 256),
    }
    for name, shape in want.items():
        assert any(k.endswith(name) and shapes[k] == shape for k in shapes), (name, shapes)
    assert any(k.endswith("hidden_states.1") and shapes[k] == (2, 256) for k in shapes)
    assert any(k.endswith("logits") and shapes[k] == (2, 1024) for k in shapes)


def test_a_bad_config_is_one_line(cli, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"hidden_size": 64}))
    code, _, err = cli("run", "llama_decode", "-p", f"config={bad}")
    assert code == 2
    assert err.startswith(f"error: llama_decode: config {bad}: missing intermediate_size, ")


def test_a_replay_states_the_same_time_per_token(cli, tmp_path):
    trace = tmp_path / "step.kbt"
    code, out, err = cli("run", "llama_decode", "--timing-only", "--json", "--record",
                         str(trace))
    assert code == 0, err
    run = json.loads(out)
    code, out, err = cli("replay", str(trace), "--json")
    assert code == 0, err
    replay = json.loads(out)
    assert replay["metrics"] == run["metrics"] and replay["regions"] == run["regions"]
    assert run["metrics"]["energy_per_token_uj"] == pytest.approx(
        run["energy_pj"]["total"] / 1e6)


def test_pipeline_stages_hand_the_hidden_state_on(run):
    one = run("llama_decode", "default", ("layers=2",), timing_only=True)
    two = run("llama_decode", "default", ("layers=2", "pp=2"), timing_only=True)
    by = {r.name: r for r in two.regions}
    assert "pp_handoff" in by and by["pp_handoff"].commands == 16  # 8 sends, 8 receives
    assert "pp_handoff" not in {r.name for r in one.regions}
    # a stage's all-reduces span 8 PEs instead of 16: each is shorter
    assert by["attn_all_reduce"].path_ps < {r.name: r for r in one.regions}[
        "attn_all_reduce"].path_ps
