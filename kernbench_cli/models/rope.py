"""Rotary position embeddings as transformers computes them (`modeling_rope_utils`).

For a token at `position` the rotation of pair i of a head is the angle ``position x
inv_freq[i]``; cos and sin are scaled by the type's `attention_scaling` (yarn's mscale;
1 otherwise). Each type's `inv_freq`, after transformers 5:

- default: ``1 / theta ** (2i / d)``;
- linear: the default over `factor`;
- dynamic (NTK): the default with ``theta x (factor x s / m - (factor - 1)) ** (d / (d -
  2))`` for a sequence of s = position + 1 tokens longer than m =
  `max_position_embeddings` (transformers recomputes it as the sequence grows: a token
  at a time, as decode steps are; a prefill pass past m takes its last position's for
  every token, which is not modelled: `decoder._check_positions` refuses it);
- yarn: a ramp between the default and the default over `factor`, by the correction
  range of `beta_fast`/`beta_slow` rotations within `original_max_position_embeddings`;
  cos and sin scaled by ``0.1 ln(factor) + 1`` (or the mscale ratio, or
  `attention_factor`);
- llama3: the default over `factor` for wavelengths above ``original / low_freq_factor``,
  unchanged below ``original / high_freq_factor``, and smoothed between.

transformers computes `inv_freq` in float32; this does it in float64 (the difference
is far below the bf16 roundoff the kernel works at).
"""

from __future__ import annotations

import math

import numpy as np

from kernbench_cli.models.hf import Rope


def inv_freq(rope: Rope, dim: int, seq_len: int) -> tuple[np.ndarray, float]:
    """(inverse frequencies of the dim / 2 pairs, cos/sin scale) for a sequence of
    `seq_len` tokens."""
    base = rope.theta
    if rope.kind == "dynamic" and seq_len > rope.max_positions:
        base *= (rope.factor * seq_len / rope.max_positions - (rope.factor - 1)) ** (
            dim / (dim - 2))
    exponent = np.arange(0, dim, 2, dtype=np.float64) / dim
    freq = 1.0 / base ** exponent
    if rope.kind == "linear":
        return freq / rope.factor, 1.0
    if rope.kind == "llama3":
        return _llama3(rope, freq), 1.0
    if rope.kind == "yarn":
        return _yarn(rope, dim, base ** exponent)
    return freq, 1.0


#: the largest finite float32: cos and sin beyond it are refused (the kernel rotates in f32)
_F32_MAX = float(np.finfo(np.float32).max)


def cos_sin(rope: Rope, dim: int, position: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of each pair's angle for the token at `position` (float64, dim / 2). A
    RoPE that gives none finite in float32 there (a scaling that overflows) is a
    `ValueError` naming the config's key."""
    try:
        with np.errstate(over="raise", divide="raise", invalid="raise"):
            freq, scale = inv_freq(rope, dim, position + 1)
            angle = position * freq
            cos, sin = np.cos(angle) * scale, np.sin(angle) * scale
        fine = bool(np.abs(cos).max(initial=0) <= _F32_MAX and
                    np.abs(sin).max(initial=0) <= _F32_MAX)
    except (OverflowError, ZeroDivisionError, FloatingPointError, ValueError):
        fine = False
    if not fine:
        raise ValueError(f"{rope.where or 'rope'}: rope_type {rope.kind} gives no finite cos "
                         f"and sin in float32 at position {position}; refused")
    return cos, sin


def _llama3(rope: Rope, freq: np.ndarray) -> np.ndarray:
    low_wavelen = rope.original_max / rope.low_freq_factor
    high_wavelen = rope.original_max / rope.high_freq_factor
    wavelen = 2 * math.pi / freq
    scaled = np.where(wavelen > low_wavelen, freq / rope.factor, freq)
    smooth = (rope.original_max / wavelen - rope.low_freq_factor) / (
        rope.high_freq_factor - rope.low_freq_factor)
    smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled)


def _yarn(rope: Rope, dim: int, pos_freqs: np.ndarray) -> tuple[np.ndarray, float]:
    factor, base = rope.factor, rope.theta

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    scaling = rope.attention_factor
    if scaling is None:
        scaling = mscale(factor, rope.mscale) / mscale(factor, rope.mscale_all_dim) \
            if rope.mscale and rope.mscale_all_dim else mscale(factor)

    def correction(rotations: float) -> float:
        return dim * math.log(rope.original_max / (rotations * 2 * math.pi)) / (
            2 * math.log(base))

    low, high = correction(rope.beta_fast), correction(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrapolation = 1 - ramp
    freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return freq, float(scaling)
