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


def decode_step(cfg: ModelConfig, weights: dict[str, np.ndarray], layers: range,
                position: int, dtype: np.dtype) -> dict[str, np.ndarray]:
    """One token per sequence (``inputs_embeds`` [batch, hidden]) at `position` through
    `layers`, the final norm and the LM head: ``hidden_states.{i}`` after each layer,
    ``logits`` and ``next_token``. `weights` holds Hugging Face's names and [out, in]
    layouts, and each layer's cache before the step, ``model.layers.{i}.past_key`` and
    ``past_value`` [batch, kv heads, position, head_dim]."""
    def rnd(a: np.ndarray) -> np.ndarray:
        return a.astype(dtype).astype(np.float64)

    def f(name: str) -> np.ndarray:
        return weights[name].astype(np.float64)

    def linear(h: np.ndarray, name: str, bias: bool) -> np.ndarray:
        out = h @ f(name + ".weight").T
        return out + f(name + ".bias") if bias else out

    def rms(x: np.ndarray, name: str) -> np.ndarray:
        return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + cfg.eps) * f(name)

    d, hq, hkv, g = cfg.head_dim, cfg.heads, cfg.kv_heads, cfg.group
    cos, sin = cos_sin(cfg.rope, d, position)
    act = activation(cfg.act)

    def rope(t: np.ndarray) -> np.ndarray:  # rotate-half over the last axis
        t1, t2 = t[..., :d // 2], t[..., d // 2:]
        return np.concatenate([t1 * cos - t2 * sin, t2 * cos + t1 * sin], axis=-1)

    x = f("inputs_embeds")
    b, out = x.shape[0], {}
    for i in layers:
        pre = f"model.layers.{i}."
        h = rnd(rms(x, pre + "input_layernorm.weight"))
        q = rnd(linear(h, pre + "self_attn.q_proj", cfg.qkv_bias)).reshape(b, hq, d)
        k = rnd(linear(h, pre + "self_attn.k_proj", cfg.qkv_bias)).reshape(b, hkv, 1, d)
        v = rnd(linear(h, pre + "self_attn.v_proj", cfg.qkv_bias)).reshape(b, hkv, 1, d)
        q, k = rnd(rope(q / math.sqrt(d))), rnd(rope(k))
        keys = np.concatenate([f(pre + "past_key"), k], axis=2)
        values = np.concatenate([f(pre + "past_value"), v], axis=2)
        window = cfg.window(i)
        if window is not None:  # the W latest positions, the new one's included
            keys, values = keys[:, :, -window:], values[:, :, -window:]
        o = np.empty((b, hq, d))
        for j in range(b):
            for kv in range(hkv):
                s = q[j, kv * g:(kv + 1) * g] @ keys[j, kv].T
                w = np.exp(s - s.max(axis=1, keepdims=True))
                o[j, kv * g:(kv + 1) * g] = (w / w.sum(axis=1, keepdims=True)) @ values[j, kv]
        x = x + linear(rnd(o.reshape(b, hq * d)), pre + "self_attn.o_proj", cfg.o_bias)
        h = rnd(rms(x, pre + "post_attention_layernorm.weight"))
        gate = linear(h, pre + "mlp.gate_proj", cfg.mlp_bias)
        up = linear(h, pre + "mlp.up_proj", cfg.mlp_bias)
        x = x + linear(rnd(act(gate) * up), pre + "mlp.down_proj", cfg.mlp_bias)
        out[f"hidden_states.{i}"] = x.astype(dtype)
    logits = rnd(rms(x, "model.norm.weight")) @ f("lm_head.weight").T
    out["logits"] = logits.astype(dtype)
    out["next_token"] = logits.argmax(axis=1).astype(np.float32)
    return out
