"""A decoder step in float64, as transformers' Llama, Mistral and Qwen2 compute it.

Written from transformers' definitions (`LlamaDecoderLayer` and its kin), not from any
kernel: RMSNorm (``x / sqrt(mean(x^2) + eps) * w``); q, k, v projections with their
biases; rotate-half RoPE at the token's position (`models.rope`); GQA attention of
each query head over its KV head's cache and the new key, with the scores scaled by
``head_dim ** -0.5`` and, on a sliding-window layer of W, only the W latest positions
(``kv > q - W``); the O projection (with its bias), the residual; the gated MLP
``down(act(gate(h)) * up(h))`` (with its biases), the residual; the final norm and the
LM head. `act` is SiLU ``x / (1 + e^-x)``, exact GELU ``x/2 (1 + erf(x / sqrt 2))`` or
the tanh one ``x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.

`rnd` rounds to the weights' dtype where a kernel stores a value in that dtype (the
GEMM array's operands, the KV cache): the reference says what a step computes at that
precision, everything else in float64.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from kernbench_cli.models.hf import ModelConfig
from kernbench_cli.models.rope import cos_sin


def activation(name: str) -> Callable[[np.ndarray], np.ndarray]:
    """The MLP's activation, float64."""
    if name == "silu":
        return lambda x: x / (1 + np.exp(-x))
    if name == "gelu":
        erf = np.frompyfunc(math.erf, 1, 1)
        return lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2)).astype(np.float64))
    return lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(cfg: ModelConfig, weights: dict[str, np.ndarray], layers: range,
            x: np.ndarray, start: int, past: dict[int, tuple[np.ndarray, np.ndarray]],
            dtype: np.dtype, cached: Callable[[np.ndarray], np.ndarray] | None = None,
            ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """T new tokens per sequence (`x` [batch, T, hidden]) at positions start .. start + T - 1
    through `layers`, each attending causally to its layer's cache before them (`past`:
    layer -> (K, V) [batch, kv heads, start, head_dim], RoPE'd as cached) and to the new
    tokens up to itself. Returns, per layer, its output [batch, T, hidden]
    (``hidden_states.{i}``) and its new K and V rows as cached (``key.{i}``,
    ``value.{i}``, [batch, kv heads, T, head_dim]), and the last layer's output. `cached`
    gives a new K or V row's value as the cache holds it (None: as computed, rounded to
    `dtype`)."""
    def rnd(a: np.ndarray) -> np.ndarray:
        return a.astype(dtype).astype(np.float64)

    def f(name: str) -> np.ndarray:
        return weights[name].astype(np.float64)

    def linear(h: np.ndarray, name: str, bias: bool) -> np.ndarray:
        out = h @ f(name + ".weight").T
        return out + f(name + ".bias") if bias else out

    def rms(x: np.ndarray, name: str) -> np.ndarray:
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + cfg.eps) * f(name)

    d, hq, hkv, g = cfg.head_dim, cfg.heads, cfg.kv_heads, cfg.group
    b, t = x.shape[:2]
    pairs = [cos_sin(cfg.rope, d, start + k) for k in range(t)]
    cos = np.stack([c for c, _ in pairs])[None, :, None]  # [1, T, 1, d/2]
    sin = np.stack([s for _, s in pairs])[None, :, None]
    act = activation(cfg.act)

    def rope(v: np.ndarray) -> np.ndarray:  # rotate-half over the last axis
        v1, v2 = v[..., :d // 2], v[..., d // 2:]
        return np.concatenate([v1 * cos - v2 * sin, v2 * cos + v1 * sin], axis=-1)

    out = {}
    for i in layers:
        pre = f"model.layers.{i}."
        h = rnd(rms(x, pre + "input_layernorm.weight"))
        q = rnd(linear(h, pre + "self_attn.q_proj", cfg.qkv_bias)).reshape(b, t, hq, d)
        k = rnd(linear(h, pre + "self_attn.k_proj", cfg.qkv_bias)).reshape(b, t, hkv, d)
        v = rnd(linear(h, pre + "self_attn.v_proj", cfg.qkv_bias)).reshape(b, t, hkv, d)
        q, k = rnd(rope(q / math.sqrt(d))), rnd(rope(k))
        k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [b, kv heads, T, d]
        if cached is not None:
            k, v = cached(k), cached(v)
        out[f"key.{i}"], out[f"value.{i}"] = k, v
        keys = np.concatenate([past[i][0].astype(np.float64), k], axis=2)
        values = np.concatenate([past[i][1].astype(np.float64), v], axis=2)
        o = attention(q, keys, values, start, g, cfg.window(i))
        x = x + linear(rnd(o.reshape(b, t, hq * d)), pre + "self_attn.o_proj", cfg.o_bias)
        h = rnd(rms(x, pre + "post_attention_layernorm.weight"))
        gate = linear(h, pre + "mlp.gate_proj", cfg.mlp_bias)
        up = linear(h, pre + "mlp.up_proj", cfg.mlp_bias)
        x = x + linear(rnd(act(gate) * up), pre + "mlp.down_proj", cfg.mlp_bias)
        out[f"hidden_states.{i}"] = x
    return out, x


def attention(q: np.ndarray, keys: np.ndarray, values: np.ndarray, start: int, g: int,
              window: int | None) -> np.ndarray:
    """Softmax attention of queries `q` [b, T, heads, d] at positions start .. over `keys`
    and `values` [b, kv heads, n, d] at positions 0 .. n - 1, `g` query heads a KV head:
    a query sees the keys at or before it (and, in a window of W, after it - W)."""
    b, t, hq, d = q.shape
    kpos, qpos = np.arange(keys.shape[2]), start + np.arange(t)
    seen = kpos[None, :] <= qpos[:, None]
    if window is not None:
        seen &= kpos[None, :] > qpos[:, None] - window
    o = np.empty((b, t, hq, d))
    for j in range(b):
        for kv in range(keys.shape[1]):
            for head in range(kv * g, (kv + 1) * g):
                s = np.where(seen, q[j, :, head] @ keys[j, kv].T, -np.inf)
                w = np.exp(s - s.max(axis=1, keepdims=True))
                o[j, :, head] = (w / w.sum(axis=1, keepdims=True)) @ values[j, kv]
    return o


def head(cfg: ModelConfig, weights: dict[str, np.ndarray], x: np.ndarray,
         dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The final norm and the LM head of `x` [batch, hidden]: (logits in float64, the next
    token of each sequence)."""
    w = weights["model.norm.weight"].astype(np.float64)
    h = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + cfg.eps) * w
    logits = h.astype(dtype).astype(np.float64) @ weights["lm_head.weight"].astype(np.float64).T
    return logits, logits.argmax(axis=1).astype(np.float32)


def step(cfg: ModelConfig, weights: dict[str, np.ndarray], layers: range, context: int,
         dtype: np.dtype, cached: Callable[[np.ndarray], np.ndarray] | None = None,
         ) -> dict[str, np.ndarray]:
    """A request's step as `llama_decode` runs it: the prompt (``prompt_embeds`` [batch,
    prompt, hidden], if any) prefilled after each layer's `context` cached tokens
    (``model.layers.{i}.past_key``/``past_value``), then one decode step of
    ``inputs_embeds`` [batch, hidden] at the next position (or, [batch, steps, hidden],
    that many steps one after another, each step's input given). Returns, rounded to
    `dtype`:
    each layer's output after the (last) decode step (``hidden_states.{i}``), its
    ``logits`` and ``next_token`` (with steps: [steps, batch, ...]); with a prompt, the
    prompt's last token's after each layer (``prefill.hidden_states.{i}``), its
    ``prefill.logits`` and ``prefill.next_token`` (the first generated token), and the
    prompt's K and V as cached (``prefill.layers.{i}.key``/``value``). `cached`: as
    `forward`'s."""
    past = {i: (weights[f"model.layers.{i}.past_key"], weights[f"model.layers.{i}.past_value"])
            for i in layers}
    out: dict[str, np.ndarray] = {}
    if "prompt_embeds" in weights:
        got, x = forward(cfg, weights, layers, weights["prompt_embeds"].astype(np.float64),
                         context, past, dtype, cached)
        for i in layers:
            out[f"prefill.hidden_states.{i}"] = got[f"hidden_states.{i}"][:, -1].astype(dtype)
            for kind in ("key", "value"):
                out[f"prefill.layers.{i}.{kind}"] = got[f"{kind}.{i}"].astype(dtype)
            past[i] = tuple(np.concatenate([past[i][m].astype(np.float64), got[f"{kind}.{i}"]],
                                           axis=2) for m, kind in enumerate(("key", "value")))
        logits, token = head(cfg, weights, x[:, -1], dtype)
        out["prefill.logits"], out["prefill.next_token"] = logits.astype(dtype), token
        context += x.shape[1]
    embeds = weights["inputs_embeds"].astype(np.float64)
    steps = embeds.shape[1] if embeds.ndim == 3 else 0
    # steps teacher-forced, one after another: a causal pass of their inputs
    got, x = forward(cfg, weights, layers, embeds if steps else embeds[:, None], context, past,
                     dtype, cached)
    for i in layers:  # after the last step
        out[f"hidden_states.{i}"] = got[f"hidden_states.{i}"][:, -1].astype(dtype)
    if not steps:
        logits, token = head(cfg, weights, x[:, 0], dtype)
        out["logits"], out["next_token"] = logits.astype(dtype), token
        return out
    heads = [head(cfg, weights, x[:, k], dtype) for k in range(steps)]
    out["logits"] = np.stack([logits for logits, _ in heads]).astype(dtype)  # [steps, b, vocab]
    out["next_token"] = np.stack([token for _, token in heads])  # [steps, b]
    return out


def decode_step(cfg: ModelConfig, weights: dict[str, np.ndarray], layers: range,
                position: int, dtype: np.dtype) -> dict[str, np.ndarray]:
    """One token per sequence (``inputs_embeds`` [batch, hidden]) at `position`, after its
    cache (``model.layers.{i}.past_key``/``past_value``), through `layers`, the final norm
    and the LM head: ``hidden_states.{i}`` after each layer, ``logits`` and ``next_token``
    (`step` without a prompt)."""
    weights = {k: v for k, v in weights.items() if k != "prompt_embeds"}
    return step(cfg, weights, layers, position, dtype)
