"""Hugging Face configs: each key modelled as transformers reads it, or refused naming it.

`kernbench_cli.models.hf` reads a config.json for llama, mistral and qwen2; these tests
pin what it reads (defaults, windows, biases, RoPE) and that anything else is refused
with one line naming the file, the key and the value.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from kernbench_cli.errors import ParamError
from kernbench_cli.fileio import file_digest
from kernbench_cli.models.hf import MAX_LAYERS, from_dict, read_config
from kernbench_cli.models.rope import cos_sin, inv_freq

BASE = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 96,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4,
        "vocab_size": 100}


def cfg(**keys):
    return from_dict({**BASE, **keys}, "c.json", "config c.json")


def refused(message: str, **keys) -> None:
    with pytest.raises(ParamError) as err:
        cfg(**keys)
    assert str(err.value) == "config c.json: " + message


def test_keys_the_model_never_reads_are_taken_where_their_value_means_nothing():
    """Published configs carry keys of other code their transformers model never reads:
    Qwen2 text configs Qwen2-VL's `use_mrope` (false), SmolLM2 nanotron's
    `is_llama_config` and `rope_interleaved` (false). A value that would mean another
    model (mrope, interleaved RoPE) is refused."""
    plain = cfg()
    assert cfg(is_llama_config=True, rope_interleaved=False) == plain
    assert cfg(model_type="qwen2", use_mrope=False) == cfg(model_type="qwen2")
    for keys in ({"rope_interleaved": True}, {"model_type": "qwen2", "use_mrope": True},
                 {"use_mrope": False}, {"model_type": "qwen2", "use_mrope": 0}):
        with pytest.raises(ParamError, match="it may change the math"):
            cfg(**keys)


def test_a_plain_llama_takes_transformers_defaults():
    c = from_dict({k: v for k, v in BASE.items() if k != "num_key_value_heads"}, "c", "c")
    assert (c.kv_heads, c.head_dim, c.eps, c.act, c.rope.kind, c.rope.theta) == \
        (4, 16, 1e-6, "silu", "default", 10000.0)  # MHA without num_key_value_heads
    assert not (c.qkv_bias or c.o_bias or c.mlp_bias or c.tied or c.windows)


def test_mistral_defaults_to_a_window_of_4096_and_null_means_none():
    assert cfg(model_type="mistral").windows == (4096,) * 4
    assert cfg(model_type="mistral", sliding_window=None).windows == ()
    assert cfg(model_type="mistral", sliding_window=16).window(3) == 16
    # MistralConfig's num_key_value_heads defaults to 8, not to the heads
    raw = {k: v for k, v in BASE.items() if k != "num_key_value_heads"}
    assert from_dict({**raw, "model_type": "mistral", "num_attention_heads": 8}, "c",
                     "c").kv_heads == 8


def test_qwen2_without_num_key_value_heads_has_32_as_transformers_reads_it():
    """Qwen2Config's default is 32, not the heads (it was read as MHA: 64 heads made twice
    the cache transformers builds); null is the heads; 16 heads cannot group 32."""
    raw = {k: v for k, v in BASE.items() if k != "num_key_value_heads"}
    qwen = {**raw, "model_type": "qwen2", "hidden_size": 2048}
    assert from_dict({**qwen, "num_attention_heads": 64}, "c", "c").kv_heads == 32
    assert from_dict({**qwen, "num_attention_heads": 64, "num_key_value_heads": None}, "c",
                     "c").kv_heads == 64
    with pytest.raises(ParamError) as err:
        from_dict({**qwen, "num_attention_heads": 16}, "c", "c")
    assert str(err.value).startswith("c: num_attention_heads 16 is not a multiple of "
                                     "num_key_value_heads 32 ")


def test_qwen2_slides_from_max_window_layers_only_when_asked():
    q = {"model_type": "qwen2", "sliding_window": 16}
    assert cfg(**q).windows == ()  # use_sliding_window defaults to false
    assert cfg(**q, use_sliding_window=True, max_window_layers=2).windows == \
        (None, None, 16, 16)
    assert cfg(**q, use_sliding_window=True, layer_types=[
        "sliding_attention", "full_attention", "sliding_attention", "full_attention"
    ]).windows == (16, None, 16, None)
    c = cfg(**q)
    assert c.qkv_bias and not c.o_bias and not c.mlp_bias  # q, k, v biases always


def test_llama_biases_and_head_dim_apart_from_the_hidden_size():
    c = cfg(attention_bias=True, mlp_bias=True, head_dim=32)
    assert (c.qkv_bias, c.o_bias, c.mlp_bias, c.head_dim, c.heads * c.head_dim) == \
        (True, True, True, 32, 128)


@pytest.mark.parametrize(("act", "modelled"), [
    ("silu", "silu"), ("swish", "silu"), ("gelu", "gelu"), ("gelu_new", "gelu_tanh"),
    ("gelu_pytorch_tanh", "gelu_tanh")])
def test_activations(act, modelled):
    assert cfg(hidden_act=act).act == modelled


@pytest.mark.parametrize(("message", "keys"), [
    ("model_type 'gemma2' is not one kernbench models (llama, mistral, qwen2); its math "
     "differs, so it is refused", {"model_type": "gemma2"}),
    ("model_type ['llama'] is not one kernbench models (llama, mistral, qwen2); its math "
     "differs, so it is refused", {"model_type": ["llama"]}),
    ("model_type {'a': 'llama'} is not one kernbench models (llama, mistral, qwen2); its "
     "math differs, so it is refused", {"model_type": {"a": "llama"}}),
    ("key 'attn_logit_softcapping' (50.0) is not one kernbench models for model_type "
     "'llama'; it may change the math, so the config is refused (see the config table in "
     "docs/workloads.md)", {"attn_logit_softcapping": 50.0}),
    ("key 'sliding_window' (16) is not one kernbench models for model_type 'llama'; it "
     "may change the math, so the config is refused (see the config table in "
     "docs/workloads.md)", {"sliding_window": 16}),
    ("key 'attention_bias' (True) is not one kernbench models for model_type 'mistral'; "
     "it may change the math, so the config is refused (see the config table in "
     "docs/workloads.md)", {"model_type": "mistral", "attention_bias": True}),
    ("key 'quantization_config' ({'bits': 4}) is not one kernbench models for model_type "
     "'llama'; it may change the math, so the config is refused (see the config table in "
     "docs/workloads.md)", {"quantization_config": {"bits": 4}}),
    ("rope_scaling.rope_type 'longrope' is not one kernbench models (default, linear, "
     "dynamic, yarn, llama3)", {"rope_scaling": {"rope_type": "longrope", "factor": 2.0}}),
    ("rope_scaling.low_freq_factor (1.0) is not read for rope_type 'linear'; refused (it "
     "would change the math)", {"rope_scaling": {"rope_type": "linear", "factor": 2.0,
                                                 "low_freq_factor": 1.0}}),
    ("rope_scaling of rope_type 'llama3' needs high_freq_factor, low_freq_factor",
     {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}),
    ("partial_rotary_factor 0.5: kernbench rotates whole heads only (1.0)",
     {"rope_scaling": {"rope_type": "default", "partial_rotary_factor": 0.5}}),
    ("hidden_act 'relu' is not one kernbench models (silu, swish, gelu, gelu_new, "
     "gelu_pytorch_tanh)", {"hidden_act": "relu"}),
    ("architectures MistralForCausalLM does not go with model_type 'llama'",
     {"architectures": ["MistralForCausalLM"]}),
    ("num_attention_heads 4 is not a multiple of num_key_value_heads 3 (each KV head "
     "serves a group of query heads)", {"num_key_value_heads": 3}),
    ("head_dim 15 is odd; RoPE rotates pairs of dimensions (rotate-half needs an even "
     "head_dim)", {"head_dim": 15}),
    ("hidden_size 66 is not a multiple of num_attention_heads 4, and no head_dim is given",
     {"hidden_size": 66}),
    ("hidden_size must be a positive integer, got '64'", {"hidden_size": "64"}),
    ("hidden_size must be a positive integer, got 64.0", {"hidden_size": 64.0}),
    ("num_hidden_layers must be a positive integer, got True", {"num_hidden_layers": True}),
    ("rms_norm_eps must be a positive number, got [1e-05]", {"rms_norm_eps": [1e-5]}),
    # what transformers 5's strict configs refuse (each checked against its LlamaConfig
    # and MistralConfig): an integer epsilon, mistral's null KV heads, and a llama whose
    # hidden size is no multiple of its heads even with head_dim given
    ("rms_norm_eps must be a number with a point or an exponent (transformers refuses an "
     "integer here), got 1", {"rms_norm_eps": 1}),
    ("num_key_value_heads is null, which transformers refuses for model_type 'mistral' "
     "(give the KV heads, or leave the key out for its 8)",
     {"model_type": "mistral", "num_key_value_heads": None}),
    ("hidden_size 66 is not a multiple of num_attention_heads 4: transformers refuses a "
     "llama config so, head_dim given or not", {"hidden_size": 66, "head_dim": 16}),
    ("rope_theta must be a number above 1, got [10000.0]", {"rope_theta": [10000.0]}),
    ("mlp_bias must be true or false, got 'no'", {"mlp_bias": "no"}),
    (f"num_hidden_layers 1,000,000,000 is more than kernbench models ({MAX_LAYERS:,})",
     {"num_hidden_layers": 10**9}),
    ("layer_types must be a list of 4 'full_attention' or 'sliding_attention', got "
     "['full_attention']", {"model_type": "qwen2", "layer_types": ["full_attention"]}),
    ("rope_scaling must be an object (or null), got False", {"rope_scaling": False}),
    ("rope_scaling must be an object (or null), got 0", {"rope_scaling": 0}),
    ("rope_parameters must be an object (or null), got []", {"rope_parameters": []}),
    ("partial_rotary_factor True: kernbench rotates whole heads only (1.0)",
     {"rope_scaling": {"rope_type": "default", "partial_rotary_factor": True}}),
    ("layer_types has sliding_attention layers but no sliding_window is in use "
     "(use_sliding_window, sliding_window)",
     {"model_type": "qwen2", "layer_types": ["sliding_attention"] * 4}),
])
def test_what_is_refused_and_how_it_is_said(message, keys):
    refused(message, **keys)


def test_a_long_value_or_key_is_cut_in_the_message():
    """A hidden_act of 100,000 characters was printed whole."""
    refused("hidden_act 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx… (a string) is not one "
            "kernbench models (silu, swish, gelu, gelu_new, gelu_pytorch_tanh)",
            hidden_act="x" * 100_000)
    with pytest.raises(ParamError) as err:
        cfg(**{"k" * 1000: 1})
    assert str(err.value).startswith("config c.json: key 'kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk… "
                                     "(a string) (1) is not one kernbench models")


def test_a_missing_size_is_named():
    with pytest.raises(ParamError, match=r"^config c.json: missing vocab_size$"):
        from_dict({k: v for k, v in BASE.items() if k != "vocab_size"}, "c",
                  "config c.json")


@pytest.mark.parametrize(("text", "message"), [
    ("[1, 2]", "expected a JSON object of keys, got a list"),
    ("null", "expected a JSON object of keys, got null"),
    ("7", "expected a JSON object of keys, got a number"),
    ('{"hidden_size": NaN}', "hidden_size: NaN is not a number kernbench reads (finite, "
                             "integers within 64 bits; JSON has no NaN or Infinity)"),
    ('{"rope_theta": Infinity}', "rope_theta: Infinity is not a number kernbench reads "
                                 "(finite, integers within 64 bits; JSON has no NaN or "
                                 "Infinity)"),
    ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
    ('{"a": ', "not valid JSON (Expecting value: line 1 column 7 (char 6))"),
    ('{"hidden_size": 64, "hidden_size": 512}', "key 'hidden_size' is given twice in one "
                                                "object"),
    ('{"model_type": "llama hidden_size intermediate_size vocab_size"}',
     "model_type 'llama hidden_size intermediate_size vocab_size' is not one kernbench "
     "models (llama, mistral, qwen2); its math differs, so it is refused"),
])
def test_a_config_file_is_read_strictly(tmp_path, text, message):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ParamError) as err:
        read_config(path)
    assert str(err.value) == f"config {path}: {message}"


def test_a_config_that_is_not_a_regular_file_is_refused_at_once(tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)  # reading it would block forever
    with pytest.raises(ParamError, match=r"is not a regular file, expected a Hugging Face "
                                         r"config\.json$"):
        read_config(fifo)
    with pytest.raises(ParamError, match="is a directory"):
        read_config(tmp_path)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (2 << 20))
    with pytest.raises(ParamError, match=r"is too large for a Hugging Face config\.json"):
        read_config(big)
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"model_type": "ll\xe9ma"}')
    with pytest.raises(ParamError, match=r"is not UTF-8 text$"):
        read_config(latin)


def test_a_pseudo_file_is_refused_not_read_forever(cli):
    """/proc files stat as regular and of size 0: one whose bytes come and go is refused
    as what it is (not as "changed during the run", which running again would not cure),
    and one that waits for data (/proc/kmsg, readable as root) at once, not blocking."""
    with pytest.raises(ParamError, match=r"^config /proc/self/status: a pseudo-file \(its "
                                         r"size, 0, is not its bytes'"):
        read_config(Path("/proc/self/status"))
    code, _, err = cli("run", "llama_decode", "-p", "config=/proc/self/status",
                       "--bounds-only")
    assert code == 2 and "a pseudo-file" in err
    assert file_digest(Path("/proc/self/status")) is None
    if os.access("/proc/kmsg", os.R_OK):
        with pytest.raises(ParamError, match=r"^config /proc/kmsg: (a pseudo-file|cannot "
                                             r"read)"):  # waiting, or with a message
            read_config(Path("/proc/kmsg"))
        assert file_digest(Path("/proc/kmsg")) is None


def test_yarn_extends_the_positions_to_its_factor_times_the_original():
    """Qwen2.5's model card adds yarn (factor 4 over 32,768) for 131,072 positions, its
    max_position_embeddings left at 32,768: the model holds the larger; other RoPEs, and
    a yarn whose max_position_embeddings is already past it, hold max_position_embeddings."""
    qwen = cfg(max_position_embeddings=32768, rope_scaling={
        "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}).rope
    assert (qwen.end, qwen.end_named) == (
        131072, "yarn's factor x original_max_position_embeddings, 131,072")
    deepseek = cfg(max_position_embeddings=163840, rope_scaling={
        "type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096}).rope
    assert deepseek.end == 163840
    linear = cfg(max_position_embeddings=4096, rope_scaling={"type": "linear",
                                                             "factor": 4.0}).rope
    assert (linear.end, linear.end_named) == (4096, "max_position_embeddings 4,096")


def test_rope_llama3_keeps_high_frequencies_and_divides_low_ones():
    """llama3 scaling with an original context of 64: a pair whose wavelength is below
    64 / high_freq_factor keeps its frequency, one above 64 / low_freq_factor takes it
    over `factor` (transformers' `_compute_llama3_parameters`)."""
    rope = cfg(rope_theta=10000.0, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 64}).rope
    plain, _ = inv_freq(cfg().rope, 16, 1)
    scaled, _ = inv_freq(rope, 16, 1)
    wavelen = 2 * math.pi / plain
    assert all(s == p for s, p, w in zip(scaled, plain, wavelen, strict=True) if w < 16)
    assert all(s == p / 8 for s, p, w in zip(scaled, plain, wavelen, strict=True) if w > 64)


def test_rope_dynamic_scales_only_past_the_trained_context():
    rope = cfg(max_position_embeddings=32, rope_scaling={"rope_type": "dynamic",
                                                         "factor": 2.0}).rope
    plain = inv_freq(cfg().rope, 16, 1)[0]
    assert (inv_freq(rope, 16, 32)[0] == plain).all()
    base = 10000.0 * (2.0 * 64 / 32 - 1) ** (16 / 14)  # 64 tokens: theta x (2 x 2 - 1)^(8/7)
    scaled = inv_freq(rope, 16, 64)[0]
    assert scaled[0] == 1.0  # the first pair turns at base ** 0 whatever the base
    assert scaled[-1] == pytest.approx(1 / base ** (14 / 16), rel=1e-15)


def test_rope_yarn_scales_cos_and_sin_by_its_mscale():
    rope = cfg(rope_scaling={"rope_type": "yarn", "factor": 4.0,
                             "original_max_position_embeddings": 64}).rope
    cos, sin = cos_sin(rope, 16, 0)
    assert cos == pytest.approx([0.1 * math.log(4.0) + 1.0] * 8, rel=1e-15)
    assert (sin == 0).all()


@pytest.mark.parametrize(("name", "scaling"), [
    ("beta_fast", {"rope_type": "yarn", "factor": 4.0, "beta_fast": 0}),
    ("beta_slow", {"rope_type": "yarn", "factor": 4.0, "beta_slow": 0.0}),
    ("low_freq_factor", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 0,
                         "high_freq_factor": 4.0}),
])
def test_a_rope_divisor_of_zero_is_refused_naming_it(name, scaling):
    """transformers divides by these: 0 was a ZeroDivisionError in the kernel's setup."""
    value = scaling[name]
    refused(f"rope_scaling.{name} must be a number above 0, got {value}", rope_scaling=scaling)


@pytest.mark.parametrize(("name", "scaling"), [
    ("factor", {"rope_type": "linear", "factor": None}),
    ("factor", {"rope_type": "dynamic", "factor": None}),
    ("factor", {"rope_type": "yarn", "factor": None}),
    ("low_freq_factor", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": None,
                         "high_freq_factor": 4.0}),
    ("high_freq_factor", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": None}),
    ("original_max_position_embeddings", {"rope_type": "yarn", "factor": 4.0,
                                          "original_max_position_embeddings": None}),
])
def test_a_rope_number_given_as_null_is_refused_naming_it(name, scaling):
    """transformers reads these as numbers (a null fails there): they were a TypeError in the
    kernel's setup (a dynamic one's only once a position passed the trained context)."""
    low = 0 if name in ("low_freq_factor", "high_freq_factor") else 1
    what = "above" if name == "low_freq_factor" else "of at least"
    refused(f"rope_scaling.{name} must be a number {what} {low}, got None", rope_scaling=scaling)


def test_a_null_yarn_beta_or_scale_is_transformers_default():
    """yarn's `beta_fast`/`beta_slow` null: transformers' 32 and 1 (`get(…) or 32`);
    `attention_factor`, `mscale`, `mscale_all_dim` null: worked out, as when absent."""
    given = {"rope_type": "yarn", "factor": 4.0, "beta_fast": None, "beta_slow": None,
             "attention_factor": None, "mscale": None, "mscale_all_dim": None}
    assert cfg(rope_scaling=given).rope == cfg(rope_scaling={"rope_type": "yarn",
                                                             "factor": 4.0}).rope


@pytest.mark.parametrize(("scaling", "position"), [
    ({"rope_type": "yarn", "factor": 4.0, "beta_fast": 1e-320}, 0),  # log(inf) in the ramp
    ({"rope_type": "dynamic", "factor": 1e300}, 5000),  # its base past the trained context
    ({"rope_type": "yarn", "factor": 4.0, "attention_factor": 1e300}, 0),  # beyond float32
])
def test_a_rope_with_no_finite_cos_and_sin_is_refused_naming_the_key(scaling, position):
    rope = cfg(max_position_embeddings=2048, rope_scaling=scaling).rope
    with pytest.raises(ValueError) as err:
        cos_sin(rope, 16, position)
    assert str(err.value) == (f"config c.json: rope_scaling: rope_type {scaling['rope_type']} "
                              f"gives no finite cos and sin in float32 at position {position}; "
                              "refused")


def test_the_shipped_test_configs_are_read(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**BASE, "torch_dtype": "bfloat16",
                                "transformers_version": "5.24.0", "use_cache": True,
                                "rope_scaling": None, "tie_word_embeddings": True}))
    c = read_config(path)
    assert c.tied and c.rope.kind == "default" and c.name == str(path)


def test_what_transformers_takes_of_those_is_modelled():
    """The other side of transformers 5's refusals: mistral's hidden size need not be a
    multiple of its heads when head_dim is given; llama's and qwen2's null KV heads are the
    attention heads; an integer rope_theta is a number."""
    c = cfg(model_type="mistral", hidden_size=66, head_dim=16)
    assert (c.hidden, c.head_dim) == (66, 16)
    assert cfg(num_key_value_heads=None).kv_heads == 4
    assert cfg(model_type="qwen2", num_key_value_heads=None).kv_heads == 4
    assert cfg(rope_theta=10000).rope.theta == 10000.0
