"""A Hugging Face decoder config (`config.json`), modelled key by key or refused.

`read_config` reads a config.json as transformers reads it for the families kernbench
models (`FAMILIES`: llama, mistral, qwen2): every key is either read (with the family's
own default when it is absent, as the transformers config class has it), known not to
change the math of a decode step (metadata, training-only settings), or refused with a
`ParamError` naming the file, the key and its value. A key kernbench does not know is
refused too: it may change the math, and a figure for another model is worse than
none. What each family reads, after transformers 5:

- the sizes (`hidden_size`, `intermediate_size`, `num_attention_heads`,
  `num_hidden_layers`, `vocab_size`; `num_key_value_heads`, `head_dim`);
- `rms_norm_eps`; `hidden_act` (silu, gelu, gelu_new, gelu_pytorch_tanh);
- RoPE: `rope_theta` and `rope_scaling` (or transformers 5's `rope_parameters`) of
  type default, linear, dynamic, yarn or llama3 (`rope_utils`);
- biases: llama's `attention_bias` (q, k, v and o projections) and `mlp_bias`;
  qwen2's q, k and v projections always have one;
- sliding windows: mistral's `sliding_window` (every layer); qwen2's
  `use_sliding_window`, `sliding_window` and `max_window_layers` (layers from
  `max_window_layers` on), or its `layer_types`. A window of W keys attends to the W
  latest positions, the new token's included (transformers' `sliding_window_overlay`:
  ``kv > q - W``);
- `tie_word_embeddings` (the LM head is the embedding table: one table in HBM).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernbench_cli.errors import KernbenchError, ParamError
from kernbench_cli.fileio import parse_json, read_input

MAX_CONFIG_BYTES = 1 << 20  # a config.json is a few KiB
MAX_LAYERS = 1024  # the largest released decoders have ~130 layers
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu",
               "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3")
_ROPE_KEYS = {
    "default": set(),
    "linear": {"factor"},
    "dynamic": {"factor"},
    "yarn": {"factor", "original_max_position_embeddings", "attention_factor", "beta_fast",
             "beta_slow", "mscale", "mscale_all_dim", "truncate"},
    "llama3": {"factor", "low_freq_factor", "high_freq_factor",
               "original_max_position_embeddings"},
}
_ROPE_REQUIRED = {"linear": {"factor"}, "dynamic": {"factor"}, "yarn": {"factor"},
                  "llama3": {"factor", "low_freq_factor", "high_freq_factor"}}

#: Per family: its `architectures` entry and the keys it reads, with transformers'
#: defaults (None: required; `...`: derived, see `read_config`).
FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("LlamaForCausalLM", {
        "num_key_value_heads": ..., "head_dim": ..., "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "max_position_embeddings": 2048, "attention_bias": False,
        "mlp_bias": False, "tie_word_embeddings": False}),
    "mistral": ("MistralForCausalLM", {
        "num_key_value_heads": 8, "head_dim": ..., "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "max_position_embeddings": 4096 * 32, "sliding_window": 4096,
        "tie_word_embeddings": False}),
    "qwen2": ("Qwen2ForCausalLM", {
        "num_key_value_heads": 32, "head_dim": ..., "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "max_position_embeddings": 32768, "use_sliding_window": False,
        "sliding_window": 4096, "max_window_layers": 28, "layer_types": None,
        "tie_word_embeddings": False}),
}
#: Families whose `num_key_value_heads` may be null (read as the attention heads):
#: transformers types Mistral's as an int and refuses null
_KV_NULL = {"llama", "qwen2"}
_SIZES = ("hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers",
          "vocab_size")
#: Keys that do not change a decode step's math in any family: metadata, tokens,
#: generation and training settings (dropout is off in inference), output switches.
_INERT = frozenset((
    "_name_or_path", "architectures", "model_type", "transformers_version", "torch_dtype",
    "dtype", "use_cache", "initializer_range", "attention_dropout", "bos_token_id",
    "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "pretraining_tp", "return_dict", "output_attentions", "output_hidden_states",
    "chunk_size_feed_forward", "is_encoder_decoder", "is_decoder", "id2label", "label2id",
    "problem_type", "tokenizer_class", "torchscript", "prefix", "finetuning_task",
    "task_specific_params", "tie_encoder_decoder", "add_cross_attention",
    "cross_attention_hidden_size",
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
    "bad_words_ids", "num_return_sequences", "output_scores", "return_dict_in_generate",
    "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
    "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
    "tf_legacy_loss", "use_bfloat16", "pruned_heads", "_attn_implementation_autoset",
))

#: Keys a family's transformers model never reads, left in published configs by other
#: code (Qwen2-VL's `use_mrope` in Qwen2 text configs; nanotron's in SmolLM2's), taken
#: with the values that cannot mean another model (true interleaved RoPE, or mrope, would)
_INERT_AS = {"qwen2": {"use_mrope": (False, None)},
             "llama": {"is_llama_config": (True, False, None),
                       "rope_interleaved": (False, None)}}


@dataclass(frozen=True)
class Rope:
    """RoPE as transformers computes it (`modeling_rope_utils`): `inv_freq` and the cos/sin
    scale (`attention_scaling`) for a position."""

    kind: str  # one of ROPE_TYPES
    theta: float
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max: int = 0  # original_max_position_embeddings
    max_positions: int = 0  # the config's max_position_embeddings
    attention_factor: float | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True
    where: str = field(default="", compare=False)  # the config and key, for errors

    @property
    def end(self) -> int:
        """The positions the model holds: `max_position_embeddings`, or with yarn the
        context it extends to, factor x original_max_position_embeddings, if more (Qwen2.5
        adds yarn, factor 4 over 32,768, for 131,072; transformers rotates any position
        alike, and serving stacks take that as the model's length)."""
        if self.kind == "yarn":
            return max(self.max_positions,
                       int(self.factor * (self.original_max or self.max_positions)))
        return self.max_positions

    @property
    def end_named(self) -> str:
        """`end` and what it is, for messages."""
        if self.end != self.max_positions:
            return f"yarn's factor x original_max_position_embeddings, {self.end:,}"
        return f"max_position_embeddings {self.end:,}"


@dataclass(frozen=True)
class ModelConfig:
    """A decoder's shape and math, as read from its config (see the module)."""

    name: str  # the shipped model's name, or the config file's path
    family: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    vocab: int
    eps: float
    act: str  # "silu", "gelu" (erf) or "gelu_tanh"
    rope: Rope
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    tied: bool = False
    windows: tuple[int | None, ...] = ()  # per layer: its sliding window, or None

    def window(self, layer: int) -> int | None:
        return self.windows[layer] if self.windows else None

    @property
    def group(self) -> int:
        """Query heads per KV head."""
        return self.heads // self.kv_heads


def read_config(path: Path) -> ModelConfig:
    """The config.json at `path`, modelled or refused (`ParamError`, naming file and key)."""
    where = f"config {path}"
    try:
        data = read_input(path, MAX_CONFIG_BYTES, "a Hugging Face config.json")
    except KernbenchError as exc:
        raise ParamError(f"config {exc}") from None
    try:
        raw = parse_json(data.decode("utf-8"), where)
    except UnicodeDecodeError:
        raise ParamError(f"{where}: is not UTF-8 text") from None
    except RecursionError:
        raise ParamError(f"{where}: JSON nested too deeply") from None
    except KernbenchError as exc:
        raise ParamError(str(exc)) from None
    except ValueError as exc:
        raise ParamError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ParamError(f"{where}: expected a JSON object of keys, got "
                         f"{_kind(raw)}")
    return from_dict(raw, str(path), where)


def from_dict(raw: dict[str, Any], name: str, where: str) -> ModelConfig:
    """A config given as a dict (see `read_config`); `where` names it in errors."""
    family = _family(raw, where)
    defaults = FAMILIES[family][1]
    known = set(_SIZES) | set(defaults) | _INERT | {"rope_theta", "rope_scaling",
                                                     "rope_parameters"}
    inert = _INERT_AS.get(family, {})
    for key in raw:
        if key in inert and any(raw[key] is value for value in inert[key]):
            continue
        if key not in known:
            raise ParamError(f"{where}: key {_shown(key)} ({_shown(raw[key])}) is not one "
                             f"kernbench models for model_type {family!r}; it may change the "
                             "math, so the config is refused (see the config table in "
                             "docs/workloads.md)")
    c = _Reader(raw, defaults, where)
    sizes = {k: c.positive_int(k) for k in _SIZES}
    heads = sizes["num_attention_heads"]
    kv = _kv_heads(raw, family, c, heads)
    head_dim = c.positive_int("head_dim") if not c.absent("head_dim") else None
    if family == "llama" and head_dim is not None and sizes["hidden_size"] % heads:
        raise ParamError(f"{where}: hidden_size {sizes['hidden_size']} is not a multiple of "
                         f"num_attention_heads {heads}: transformers refuses a llama config "
                         "so, head_dim given or not")
    if head_dim is None:
        if sizes["hidden_size"] % heads:
            raise ParamError(f"{where}: hidden_size {sizes['hidden_size']} is not a multiple of "
                             f"num_attention_heads {heads}, and no head_dim is given")
        head_dim = sizes["hidden_size"] // heads
    if heads % kv:
        raise ParamError(f"{where}: num_attention_heads {heads} is not a multiple of "
                         f"num_key_value_heads {kv} (each KV head serves a group of query "
                         "heads)")
    if head_dim % 2:
        raise ParamError(f"{where}: head_dim {head_dim} is odd; RoPE rotates pairs of "
                         "dimensions (rotate-half needs an even head_dim)")
    layers = sizes["num_hidden_layers"]
    if layers > MAX_LAYERS:
        raise ParamError(f"{where}: num_hidden_layers {layers:,} is more than kernbench "
                         f"models ({MAX_LAYERS:,})")
    act = c.string("hidden_act")
    if act not in ACTIVATIONS:
        raise ParamError(f"{where}: hidden_act {_shown(act)} is not one kernbench models "
                         f"({', '.join(ACTIVATIONS)})")
    eps = c.positive_float("rms_norm_eps")
    if isinstance(c.get("rms_norm_eps"), int):
        raise c.fail("rms_norm_eps", "a number with a point or an exponent (transformers "
                     "refuses an integer here)", c.get("rms_norm_eps"))
    rope = _rope(raw, c, where, head_dim)
    bias = c.flag("attention_bias") if "attention_bias" in defaults else False
    return ModelConfig(
        name=name, family=family, hidden=sizes["hidden_size"],
        intermediate=sizes["intermediate_size"], heads=heads, kv_heads=kv,
        head_dim=head_dim, layers=layers, vocab=sizes["vocab_size"], eps=eps,
        act=ACTIVATIONS[act], rope=rope, qkv_bias=bias or family == "qwen2", o_bias=bias,
        mlp_bias=c.flag("mlp_bias") if "mlp_bias" in defaults else False,
        tied=c.flag("tie_word_embeddings"), windows=_windows(family, c, layers, where))


def _kv_heads(raw: dict[str, Any], family: str, c: _Reader, heads: int) -> int:
    """`num_key_value_heads` as transformers reads it: absent, the family's default (the
    attention heads where it has none); null, the attention heads where its class takes
    null (mistral's refuses it)."""
    default = c.defaults["num_key_value_heads"]
    if "num_key_value_heads" in raw and raw["num_key_value_heads"] is None and \
            family not in _KV_NULL:
        raise ParamError(f"{c.where}: num_key_value_heads is null, which transformers refuses "
                         f"for model_type {family!r} (give the KV heads, or leave the key out "
                         f"for its {default})")
    if (default is ... or "num_key_value_heads" in raw) and c.absent("num_key_value_heads"):
        return heads
    return c.positive_int("num_key_value_heads")


def _family(raw: dict[str, Any], where: str) -> str:
    model_type, arch = raw.get("model_type"), raw.get("architectures")
    names = ", ".join(FAMILIES)
    if model_type is None and arch is None:
        raise ParamError(f"{where}: no model_type (kernbench models {names})")
    if model_type is not None and (not isinstance(model_type, str) or
                                   model_type not in FAMILIES):  # a list is no key
        raise ParamError(f"{where}: model_type {_shown(model_type)} is not one kernbench "
                         f"models ({names}); its math differs, so it is refused")
    if arch is not None:
        if not (isinstance(arch, list) and len(arch) == 1 and isinstance(arch[0], str)):
            raise ParamError(f"{where}: architectures {_shown(arch)}: expected a list of one "
                             "class name")
        by_class = {cls: fam for fam, (cls, _) in FAMILIES.items()}
        if arch[0] not in by_class:
            raise ParamError(f"{where}: architectures {_shown(arch)} is not one kernbench "
                             f"models ({', '.join(by_class)})")
        if model_type is not None and by_class[arch[0]] != model_type:
            raise ParamError(f"{where}: architectures {arch[0]} does not go with model_type "
                             f"{_shown(model_type)}")
        model_type = by_class[arch[0]]
    return model_type


class _Reader:
    """Typed reads of a config's keys, each error naming the file and the key."""

    def __init__(self, raw: dict[str, Any], defaults: dict[str, Any], where: str):
        self.raw, self.defaults, self.where = raw, defaults, where

    def absent(self, key: str) -> bool:
        """Not given, or given as null (which transformers also reads as its default)."""
        return self.raw.get(key) is None

    def get(self, key: str) -> Any:
        """The key's value as given (null included), else the family's default."""
        if key in self.raw:
            return self.raw[key]
        if key not in self.defaults or self.defaults[key] is ...:
            raise ParamError(f"{self.where}: missing {key}")
        return self.defaults[key]

    def fail(self, key: str, want: str, value: Any) -> ParamError:
        return ParamError(f"{self.where}: {key} must be {want}, got {_shown(value)}")

    def positive_int(self, key: str) -> int:
        value = self.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise self.fail(key, "a positive integer", value)
        return value

    def positive_float(self, key: str) -> float:
        value = self.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not \
                math.isfinite(value) or value <= 0:
            raise self.fail(key, "a positive number", value)
        return float(value)

    def flag(self, key: str) -> bool:
        value = self.get(key)
        if not isinstance(value, bool):
            raise self.fail(key, "true or false", value)
        return value

    def string(self, key: str) -> str:
        value = self.get(key)
        if not isinstance(value, str):
            raise self.fail(key, "a string", value)
        return value


#: `rope_scaling` keys whose null means "not given", as transformers reads them (its own
#: default, or worked out); any other's null is refused (transformers fails on it)
_NULL_IS_ABSENT = {"attention_factor", "mscale", "mscale_all_dim", "beta_fast", "beta_slow"}


def _rope_number(c: _Reader, key: str, params: dict[str, Any], name: str, default: Any,
                 low: float = 0.0, above: bool = False) -> Any:
    """`params[name]` (`default` if absent, or null where `_NULL_IS_ABSENT`): a finite
    number of at least `low`, or with `above` more than it (a divisor); else the reader's
    error naming ``key.name``. A `default` of None stays None (worked out later)."""
    value = params.get(name)
    if value is None and (name not in params or name in _NULL_IS_ABSENT):
        value = default
        if value is None:
            return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or \
            not math.isfinite(value) or value < low or (above and value == low):
        raise c.fail(f"{key}.{name}", f"a number {'above' if above else 'of at least'} "
                     f"{low:g}", value)
    return value


def _rope(raw: dict[str, Any], c: _Reader, where: str, head_dim: int) -> Rope:
    """RoPE's parameters: `rope_scaling` (or `rope_parameters`) over `rope_theta`."""
    if raw.get("rope_scaling") is not None and raw.get("rope_parameters") is not None:
        raise ParamError(f"{where}: both rope_scaling and rope_parameters are given; give one")
    key = "rope_parameters" if raw.get("rope_parameters") is not None else "rope_scaling"
    params = {} if raw.get(key) is None else raw[key]  # false, 0, []: no scaling? refused
    if not isinstance(params, dict):
        raise c.fail(key, "an object (or null)", params)
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ParamError(f"{where}: {key}.rope_type {_shown(kind)} is not one kernbench "
                         f"models ({', '.join(ROPE_TYPES)})")
    theta = params.get("rope_theta", raw.get("rope_theta", 10000.0))
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or \
            not math.isfinite(theta) or theta <= 1:
        raise c.fail("rope_theta", "a number above 1", theta)
    allowed = _ROPE_KEYS[kind] | {"rope_type", "type", "rope_theta", "partial_rotary_factor"}
    for name, value in params.items():
        if name not in allowed:
            raise ParamError(f"{where}: {key}.{name} ({_shown(value)}) is not read for "
                             f"rope_type {kind!r}; refused (it would change the math)")
    missing = _ROPE_REQUIRED.get(kind, set()) - set(params)
    if missing:
        raise ParamError(f"{where}: {key} of rope_type {kind!r} needs "
                         f"{', '.join(sorted(missing))}")
    partial = params.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0))
    if partial != 1.0 or isinstance(partial, bool):
        raise ParamError(f"{where}: partial_rotary_factor {_shown(partial)}: kernbench rotates "
                         "whole heads only (1.0)")
    number = functools.partial(_rope_number, c, key, params)
    max_positions = c.positive_int("max_position_embeddings")
    original = number("original_max_position_embeddings", max_positions, 1)
    if original is not None and not isinstance(original, int):
        raise c.fail(f"{key}.original_max_position_embeddings", "an integer", original)
    truncate = params.get("truncate", True)
    if not isinstance(truncate, bool):
        raise c.fail(f"{key}.truncate", "true or false", truncate)
    rope = Rope(kind, float(theta), factor=number("factor", 1.0, 1.0),
                low_freq_factor=number("low_freq_factor", 1.0, above=True),
                high_freq_factor=number("high_freq_factor", 4.0),
                original_max=original, max_positions=max_positions,
                attention_factor=number("attention_factor", None),
                beta_fast=number("beta_fast", 32.0, above=True),
                beta_slow=number("beta_slow", 1.0, above=True),
                mscale=number("mscale", None), mscale_all_dim=number("mscale_all_dim", None),
                truncate=truncate, where=f"{where}: {key}")
    if kind == "llama3" and rope.high_freq_factor <= rope.low_freq_factor:
        raise ParamError(f"{where}: {key}: high_freq_factor {rope.high_freq_factor} must be "
                         f"above low_freq_factor {rope.low_freq_factor}")
    if kind == "dynamic" and head_dim <= 2:
        raise ParamError(f"{where}: rope_type dynamic needs a head_dim above 2")
    return rope


def _windows(family: str, c: _Reader, layers: int, where: str) -> tuple[int | None, ...]:
    """Each layer's sliding window (None: full attention), as the family reads them."""
    if family == "llama":
        return ()
    window = c.get("sliding_window")
    if window is not None and (not isinstance(window, int) or isinstance(window, bool)
                               or window <= 0):
        raise c.fail("sliding_window", "a positive integer or null", window)
    if family == "mistral":
        return (window,) * layers if window is not None else ()
    if not c.flag("use_sliding_window"):
        window = None
    kinds = raw_kinds = c.raw.get("layer_types")
    if raw_kinds is None:
        first = c.get("max_window_layers")
        if not isinstance(first, int) or isinstance(first, bool) or first < 0:
            raise c.fail("max_window_layers", "a non-negative integer", first)
        kinds = ["sliding_attention" if window is not None and i >= first else
                 "full_attention" for i in range(layers)]
    elif not (isinstance(kinds, list) and len(kinds) == layers and all(
            k in ("sliding_attention", "full_attention") for k in kinds)):
        raise c.fail("layer_types", f"a list of {layers} 'full_attention' or "
                     "'sliding_attention'", kinds)
    if window is None and "sliding_attention" in kinds:
        raise ParamError(f"{where}: layer_types has sliding_attention layers but no "
                         "sliding_window is in use (use_sliding_window, sliding_window)")
    out = tuple(window if k == "sliding_attention" else None for k in kinds)
    return out if any(w is not None for w in out) else ()


def _kind(value: Any) -> str:
    return {type(None): "null", bool: "a boolean", int: "a number", float: "a number",
            str: "a string", list: "a list", dict: "an object"}.get(type(value), "a value")


def _shown(value: Any) -> str:
    """A config value as an error shows it: short, one line."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}… ({_kind(value)})"
