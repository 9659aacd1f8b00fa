"""Parity of `llama_decode` with Hugging Face transformers itself, in float64.

For each config.json given (default: every file under tests/configs/hf/), dtype and
shape, this script

1. runs ``kernbench run llama_decode -p config=PATH -p dtype=D -p batch=B -p context=L
   -p pp=P --save OUT.npz`` (the kernbench of this interpreter, as a subprocess);
2. builds the model class the config names (``AutoConfig`` then
   ``AutoModelForCausalLM.from_config``: LlamaForCausalLM, MistralForCausalLM,
   Qwen2ForCausalLM, ...) in float64, eval mode, ``attn_implementation="eager"``;
3. loads every weight of the file into it by its Hugging Face name, strictly: every
   weight in the file must be a parameter of the model with the same shape, and every
   parameter must be set from the file. The one exception is the input embedding
   ``model.embed_tokens.weight`` when it is not tied to ``lm_head.weight``: a step fed
   ``inputs_embeds`` never reads it, so it is filled with NaN (any use would show). A
   tied pair is one parameter: set from whichever of the two names the file holds
   (equal, if it holds both);
4. fills transformers' own cache from the file's ``past_key``/``past_value``
   ([batch, kv heads, context, head_dim] per layer) with
   ``DynamicCache(ddp_cache_data=[(K0, V0), (K1, V1), ...], config=model.config)``,
   which gives each layer the cache class its attention type needs (a
   ``DynamicSlidingWindowLayer`` for a sliding-window layer: Mistral's
   ``sliding_window``, Qwen2's ``layer_types``) and advances each to `context` tokens;
5. runs one forward step: ``model(inputs_embeds=x[:, None], position_ids=[[context]] x
   batch, cache=cache, use_cache=True)`` (the new token at position `context`; the
   mask and the cache offsets come from the cache), with a forward hook on every
   decoder layer for its raw output (transformers' ``hidden_states`` tuple ends with
   the final norm's output, not the last layer's);
6. compares, in float64, each layer's output with the file's ``hidden_states.{i}`` and
   the logits with ``logits``: relative L2 error per sequence, ``|kb - hf| / |hf|``,
   the largest over the batch; and the next token with transformers' argmax.

Tolerance. kernbench is transformers' step with roundings to the dtype added where it
hands values to the GEMM array or the KV cache (each normed input to a GEMM, the q/k/v
outputs, the RoPE'd q and k, the attention probabilities handed to P·V, the attention
output, the MLP activation) and where it saves its outputs (the hidden states and the
logits are written in the dtype); the weights, the cache and the input are the same
numbers on both sides (exact in the dtype), and kernbench keeps the residual stream,
norms, softmax and accumulation in f32 (relative 2^-24: 1/65536 of a bf16 unit).
transformers in float64 rounds nowhere else, except that its RMSNorm, softmax and RoPE
angles run in float32 (the angle at position p is off by about p x 2^-24 rad; its share
of a hidden state's relative L2 stays far below a unit at the contexts run here).

With unit roundoff u (bf16 2^-8, f16 2^-11), rounding a vector to the dtype perturbs
it by a relative L2 error of at most u (each element by at most u), and about 0.42 u
when mantissas are spread evenly on a log scale. The roundings are independent, so
their errors add in quadrature; a GEMM with random weights (kernbench's are scaled
1/sqrt(in)) carries a relative error of its input to about the same relative error of
its output, and each layer's branches add their errors to a residual stream of similar
size. So the error after s stages (s = i + 1 after layer i; s = layers + 1 for the
logits, the final norm's rounding being one more) is sqrt(a^2 + s b^2) u: a for the
rounding of the saved output, b per layer. Fitted on the plain Llama configs (GQA, MHA,
MQA, odd sizes, 2 and 8 layers, batch 1-4, contexts 0-4096, pp 1 and 2, bf16 and f16:
60 runs, 252 errors): a = 0.57, b = 0.39; the largest errors 0.86 u after one layer,
1.09 u after two, 1.12 u on a two-layer model's logits, 1.45 u on an eight-layer one's.
The bound takes every term at its worst single rounding, u:

    BOUND(s) = u x sqrt(1 + s)

1.41 u after the first layer, 1.73 u after the second, 2 u on a two-layer model's
logits: every error measured is at most 0.63 of its bound. What it has to tell apart:
a mis-modelled config is off by 5-7 u on the logits at bf16 (Llama 3.1's `rope_scaling`,
its original 8,192, at contexts 1,000-4,000; 43-55 u at f16) up to 0.03-0.4 relative
(biases, a sliding window, GELU for SiLU: 10-100 u at bf16). One thing it cannot tell apart:
GELU's tanh approximation (`gelu_pytorch_tanh`, `gelu_new`) against the exact erf form
(`gelu`) moves these models' logits by 0.35 u at f16 (0.04 u at bf16), well inside the
bound; which GELU the kernel runs needs a test of its own, not this check.

Argmax: a sequence's next token must equal transformers' argmax, or be a token whose
logit in transformers is within the largest logit error of that sequence of the
maximum (a tie within rounding, which the run reports).

Running it. transformers needs torch; use a venv of its own so that kernbench's own
tests never need it (`pip install torch==2.13.0` is a CPU build from the local package
index on these machines; a plain `torch` would fetch a multi-GB CUDA build):

    python3 -m venv .venv-hf
    .venv-hf/bin/pip install torch==2.13.0 transformers .
    .venv-hf/bin/python benchmarks/hf_parity.py [CONFIG.json ...] [--dtype bf16 --dtype f16]
        [--shape 1x0 --shape 2x40 --shape 1x600:2] [--keep DIR]

A shape is BATCHxCONTEXT[:PP]. Exit 0 when every run is within the bound, 1 when one
is not or kernbench refused a config, 2 on bad usage. ``--write-configs DIR`` writes
the test configs (tests/configs/hf/) from transformers' own config classes.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = ROOT / "tests" / "configs" / "hf"
UNIT = {"bf16": 2.0**-8, "f16": 2.0**-11}
SHAPES = ("1x0", "2x40", "1x600:2")


def bound(unit: float, stages: int) -> float:
    """The largest relative L2 error allowed after `stages` stages (layer i: i + 1; the
    logits: layers + 1), as justified above."""
    return unit * math.sqrt(1 + stages)


# ---------------------------------------------------------------------- the test configs

_BASE = {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 8,
         "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1024,
         "rms_norm_eps": 1e-5, "max_position_embeddings": 4096, "dtype": "bfloat16"}
_LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 64}

#: name -> (config class, its arguments, layout, JSON keys set after writing, and why).
#: layout "hub": as the Hub's config.json files are (written by transformers 4:
#: `rope_theta` and `rope_scaling` at the top, `torch_dtype`); "v5": as transformers 5
#: writes it (`rope_parameters` holding `rope_theta` and `rope_type`, `dtype`).
TEST_CONFIGS = {
    "llama": ("LlamaConfig", {"rope_theta": 10000.0}, "hub", {},
              "plain Llama (GQA 8/2)"),
    "llama_v5": ("LlamaConfig", {"rope_theta": 10000.0}, "v5", {},
                 "plain Llama as transformers 5 writes it (rope_parameters)"),
    "llama3_rope": ("LlamaConfig", {"rope_theta": 500000.0, "rope_scaling": _LLAMA3}, "hub",
                    {}, "Llama 3.1's rope_scaling (llama3: factor 8, low 1, high 4), "
                    "original_max_position_embeddings 64 so it matters at small contexts"),
    "llama3_rope_v5": ("LlamaConfig", {"rope_theta": 500000.0, "rope_scaling": _LLAMA3},
                       "v5", {}, "the same in rope_parameters"),
    "llama_linear_rope": ("LlamaConfig", {"rope_theta": 10000.0,
                                          "rope_scaling": {"rope_type": "linear",
                                                           "factor": 4.0}},
                          "hub", {}, "rope_scaling linear, factor 4"),
    "llama_yarn": ("LlamaConfig", {"rope_theta": 10000.0,
                                   "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                    "original_max_position_embeddings": 64}},
                   "hub", {}, "rope_scaling yarn, factor 4 over 64 positions (so it matters "
                   "at small contexts; transformers takes the explicit factor)"),
    "llama_dynamic": ("LlamaConfig", {"rope_theta": 10000.0, "max_position_embeddings": 256,
                                      "rope_scaling": {"rope_type": "dynamic",
                                                       "factor": 2.0}},
                      "hub", {}, "rope_scaling dynamic, factor 2, max_position_embeddings "
                      "256: the 600-token context is past it, where the base grows"),
    "llama_bias": ("LlamaConfig", {"rope_theta": 10000.0, "attention_bias": True,
                                   "mlp_bias": True}, "hub", {},
                   "attention_bias (q, k, v, o) and mlp_bias (gate, up, down)"),
    "llama_gelu": ("LlamaConfig", {"rope_theta": 10000.0, "hidden_act": "gelu"}, "hub", {},
                   "hidden_act gelu (exact, erf)"),
    "llama_gelu_tanh": ("LlamaConfig", {"rope_theta": 10000.0,
                                        "hidden_act": "gelu_pytorch_tanh"}, "hub", {},
                        "hidden_act gelu_pytorch_tanh (tanh approximation)"),
    "llama_head_dim": ("LlamaConfig", {"rope_theta": 10000.0, "head_dim": 64}, "hub", {},
                       "head_dim 64 x 8 heads = 512 != hidden 256"),
    "llama_tied": ("LlamaConfig", {"rope_theta": 10000.0, "tie_word_embeddings": True},
                   "hub", {}, "tie_word_embeddings"),
    "mistral_sliding": ("MistralConfig", {"rope_theta": 10000.0, "sliding_window": 16,
                                          "num_key_value_heads": 4, "rms_norm_eps": 1e-6},
                        "hub", {}, "Mistral, sliding_window 16 on every layer"),
    "qwen2": ("Qwen2Config", {"rope_theta": 1000000.0, "vocab_size": 1000,
                              "rms_norm_eps": 1e-6, "use_sliding_window": False,
                              "max_window_layers": 1},
              "hub", {"sliding_window": 16, "layer_types": None},
              "Qwen2 (q/k/v biases), use_sliding_window false beside a sliding_window of "
              "16 (as Qwen2.5's config.json): no window"),
    "qwen2_sliding": ("Qwen2Config", {"rope_theta": 1000000.0, "vocab_size": 1000,
                                      "rms_norm_eps": 1e-6, "use_sliding_window": True,
                                      "sliding_window": 16, "max_window_layers": 1},
                      "hub", {"layer_types": None},
                      "Qwen2, use_sliding_window: layers >= max_window_layers (1) slide"),
}


def write_configs(out: Path) -> None:
    """Write TEST_CONFIGS as config.json files, from transformers' config classes, and
    check that AutoConfig reads each back to the same configuration."""
    import transformers
    from transformers import AutoConfig

    out.mkdir(parents=True, exist_ok=True)
    for name, (cls_name, args, layout, after, _why) in TEST_CONFIGS.items():
        cls = getattr(transformers, cls_name)
        arch = cls_name.replace("Config", "ForCausalLM")
        made = cls(**{**_BASE, **args, "architectures": [arch]})
        raw = json.loads(made.to_json_string())
        if layout == "hub":
            rope = dict(raw.pop("rope_parameters"))
            raw["rope_theta"] = rope.pop("rope_theta")
            raw["rope_scaling"] = rope if rope.get("rope_type", "default") != "default" \
                else None
            raw["torch_dtype"] = raw.pop("dtype")
        for key, value in after.items():
            if value is None:
                raw.pop(key, None)
            else:
                raw[key] = value
        path = out / f"{name}.json"
        path.write_text(json.dumps(dict(sorted(raw.items())), indent=2) + "\n")
        back = AutoConfig.from_pretrained(str(path)).to_dict()
        want = made.to_dict()
        differ = sorted(k for k in set(back) | set(want) if k not in
                        ("_name_or_path", "transformers_version") and back.get(k) != want.get(k))
        if differ:
            raise SystemExit(f"{path}: AutoConfig reads it back differently: {differ}")
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


# ---------------------------------------------------------------------- kernbench's side


def run_kernbench(config: Path, dtype: str, batch: int, context: int, pp: int,
                  out: Path) -> str | None:
    """Run the decode step with --save; None, or kernbench's message when it refuses."""
    cmd = [sys.executable, "-m", "kernbench_cli", "run", "llama_decode",
           "-p", f"config={config}", "-p", f"dtype={dtype}", "-p", f"batch={batch}",
           "-p", f"context={context}", "-p", f"pp={pp}", "--save", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        lines = [x.strip() for x in (done.stderr or done.stdout).splitlines() if x.strip()]
        return f"exit {done.returncode}: " + " ".join(lines)[:300]
    return None


def load_npz(path: Path, dtype: str) -> dict[str, np.ndarray]:
    """The saved arrays in float64. numpy writes an ml_dtypes bfloat16 array as raw
    2-byte records (|V2): read those back as bfloat16."""
    import ml_dtypes

    arrays = {}
    with np.load(path) as z:
        for name in z.files:
            a = z[name]
            if a.dtype.kind == "V" and a.dtype.itemsize == 2:
                if dtype != "bf16":
                    raise SystemExit(f"{path}: {name} is 2-byte raw records in a {dtype} run")
                a = a.view(ml_dtypes.bfloat16)
            arrays[name] = a.astype(np.float64)
    return arrays


# ---------------------------------------------------------------------- transformers' side

_NOT_WEIGHTS = ("inputs_embeds", "logits", "next_token")


def _is_weight(name: str) -> bool:
    return not (name in _NOT_WEIGHTS or name.startswith("hidden_states.")
                or name.endswith((".past_key", ".past_value")))


def build_model(config_path: Path, arrays: dict[str, np.ndarray]):
    """The transformers model the config names, float64, every weight from `arrays`.
    Raises ValueError naming missing, unexpected and misshapen weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(str(config_path))
    cfg._attn_implementation = "eager"
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float64,
                                             attn_implementation="eager").eval()
    groups: dict[int, list[str]] = {}  # tied parameters are one tensor under several names
    params = dict(model.named_parameters(remove_duplicate=False))
    for name, p in params.items():
        groups.setdefault(id(p), []).append(name)
    buffers = {n for n, _ in model.named_buffers() if n in model.state_dict()}
    weights = {n for n in arrays if _is_weight(n)}
    unexpected = sorted(weights - set(params) - buffers)
    missing, misshapen, unequal = [], [], []
    for names in groups.values():
        given = [n for n in names if n in weights]
        p = params[names[0]]
        if not given:
            if names == ["model.embed_tokens.weight"]:  # untied and unused by the step
                with torch.no_grad():
                    p.fill_(float("nan"))
            else:
                missing.append(" = ".join(names))
            continue
        for n in given:
            if tuple(arrays[n].shape) != tuple(p.shape):
                misshapen.append(f"{n} {tuple(arrays[n].shape)} (model {tuple(p.shape)})")
        if any(not np.array_equal(arrays[n], arrays[given[0]]) for n in given[1:]):
            unequal.append(" = ".join(given))
        if not misshapen:
            with torch.no_grad():
                p.copy_(torch.from_numpy(arrays[given[0]]))
    missing += sorted(b for b in buffers if b not in weights)
    problems = [f"{what}: {', '.join(items)}" for what, items in
                (("missing", missing), ("unexpected", unexpected),
                 ("shape differs", misshapen), ("tied but not equal", unequal)) if items]
    if problems:
        raise ValueError("; ".join(problems))
    return model


def hf_step(model, arrays: dict[str, np.ndarray], context: int):
    """One decode step in transformers: (each layer's output, logits), float64 numpy."""
    import torch
    from transformers import DynamicCache

    layers = model.config.num_hidden_layers
    x = torch.from_numpy(arrays["inputs_embeds"])[:, None, :]
    batch = x.shape[0]
    past = [(torch.from_numpy(arrays[f"model.layers.{i}.past_key"]),
             torch.from_numpy(arrays[f"model.layers.{i}.past_value"])) for i in range(layers)]
    cache = DynamicCache(ddp_cache_data=past if context else None, config=model.config)
    seen = cache.get_seq_length()
    if seen != context:
        raise ValueError(f"the cache holds {seen} tokens, not the context {context}")
    outs: dict[int, torch.Tensor] = {}
    hooks = [layer.register_forward_hook(
        lambda _m, _a, out, i=i: outs.__setitem__(i, out[0] if isinstance(out, tuple) else out))
        for i, layer in enumerate(model.model.layers)]
    # transformers 5 names the cache `cache` (`past_key_values` is its deprecated alias)
    key = "cache" if "cache" in inspect.signature(model.forward).parameters \
        else "past_key_values"
    try:
        with torch.no_grad():
            result = model(inputs_embeds=x,
                           position_ids=torch.full((batch, 1), context, dtype=torch.long),
                           use_cache=True, **{key: cache})
    finally:
        for h in hooks:
            h.remove()
    states = [outs[i][:, 0].numpy() for i in range(layers)]
    return states, result.logits[:, 0].numpy()


# ---------------------------------------------------------------------- the comparison


def rel_l2(kb: np.ndarray, hf: np.ndarray) -> float:
    """The largest over the batch of |kb - hf| / |hf| (L2 over each sequence's row)."""
    num = np.linalg.norm(kb - hf, axis=-1)
    den = np.linalg.norm(hf, axis=-1)
    return float(np.max(num / np.maximum(den, np.finfo(np.float64).tiny)))


def compare(arrays, states, logits, unit: float) -> dict:
    """Errors in units of u against their bounds, and the next tokens."""
    layers = len(states)
    errs = [rel_l2(arrays[f"hidden_states.{i}"], states[i]) / unit for i in range(layers)]
    bounds = [bound(unit, i + 1) / unit for i in range(layers)]
    top = max(range(layers), key=errs.__getitem__)
    logit_err, logit_bound = rel_l2(arrays["logits"], logits) / unit, bound(unit, layers + 1) / unit
    kb_tok = arrays["next_token"].astype(np.int64)
    hf_tok = logits.argmax(axis=1)
    ties = flips = 0
    for j in np.flatnonzero(kb_tok != hf_tok):  # a tie within rounding, or a wrong token
        slack = np.max(np.abs(arrays["logits"][j] - logits[j]))
        if logit_err <= logit_bound and \
                logits[j, hf_tok[j]] - logits[j, kb_tok[j]] <= 2 * slack:
            ties += 1
        else:
            flips += 1
    over = [f"layer {i} {errs[i]:.2f}u > {bounds[i]:.2f}u" for i in range(layers)
            if errs[i] > bounds[i]]
    if logit_err > logit_bound:
        over.append(f"logits {logit_err:.2f}u > {logit_bound:.2f}u")
    if flips and not over:
        over.append(f"{flips} next token(s) wrong")
    return {"ok": not over, "over": over, "layer": top, "layer_u": errs[top],
            "layer_bound_u": bounds[top], "logits_u": logit_err, "logits_bound_u": logit_bound,
            "argmax": (int((kb_tok == hf_tok).sum()), len(kb_tok)), "ties": ties}


def parse_shape(text: str) -> tuple[int, int, int]:
    try:
        bc, _, pp = text.partition(":")
        b, c = bc.split("x")
        shape = int(b), int(c), int(pp or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a shape is BATCHxCONTEXT[:PP], "
                                         "e.g. 2x40 or 1x600:2") from None
    if shape[0] < 1 or shape[1] < 0 or shape[2] < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: batch and pp >= 1, context >= 0")
    return shape


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("configs", nargs="*", type=Path,
                    help=f"config.json files (default: {CONFIG_DIR.relative_to(ROOT)}/*.json)")
    ap.add_argument("--dtype", action="append", choices=sorted(UNIT),
                    help="bf16, f16 (repeat for both; default both)")
    ap.add_argument("--shape", action="append", type=parse_shape,
                    help=f"BATCHxCONTEXT[:PP] (repeat; default {' '.join(SHAPES)})")
    ap.add_argument("--keep", type=Path, help="keep the .npz files in this directory")
    ap.add_argument("--write-configs", type=Path, metavar="DIR",
                    help="write the test configs into DIR and stop")
    args = ap.parse_args(argv)
    if args.write_configs:
        write_configs(args.write_configs)
        return 0
    configs = args.configs or sorted(CONFIG_DIR.glob("*.json"))
    if not configs:
        ap.error(f"no config.json under {CONFIG_DIR}")
    dtypes = args.dtype or ["bf16", "f16"]
    shapes = args.shape or [parse_shape(s) for s in SHAPES]
    import transformers

    print(f"transformers {transformers.__version__}; relative L2 errors in units of u "
          "(2^-8 bf16, 2^-11 f16) / their bound u sqrt(1 + s), s = i + 1 after layer i, "
          "layers + 1 for the logits")
    print(f"{'config':22} {'dtype':5} {'shape':9} {'layers (max)':>18} {'logits':>14} "
          f"{'argmax':>7}  result")
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        for config in configs:
            for dtype in dtypes:
                for b, ctx, pp in shapes:
                    shape = f"{b}x{ctx}" + (f":{pp}" if pp > 1 else "")
                    head = f"{config.stem[:22]:22} {dtype:5} {shape:9}"
                    out = where / f"{config.stem}-{dtype}-{b}x{ctx}-pp{pp}.npz"
                    refused = run_kernbench(config.resolve(), dtype, b, ctx, pp, out)
                    if refused:
                        failed += 1
                        print(f"{head} {'':>18} {'':>14} {'':>7}  REFUSED ({refused})",
                              flush=True)
                        continue
                    arrays = load_npz(out, dtype)
                    try:
                        model = build_model(config, arrays)
                    except ValueError as exc:
                        failed += 1
                        print(f"{head} {'':>18} {'':>14} {'':>7}  FAIL weights: {exc}",
                              flush=True)
                        continue
                    states, logits = hf_step(model, arrays, ctx)
                    r = compare(arrays, states, logits, UNIT[dtype])
                    failed += not r["ok"]
                    agree, n = r["argmax"]
                    verdict = "ok" if r["ok"] else "FAIL: " + "; ".join(r["over"])
                    if r["ties"]:
                        verdict += f" ({r['ties']} argmax tie(s) within rounding)"
                    print(f"{head} {r['layer_u']:6.2f}u L{r['layer']} /{r['layer_bound_u']:4.2f}"
                          f" {r['logits_u']:7.2f}u /{r['logits_bound_u']:4.2f} "
                          f"{agree:>3}/{n:<3}  {verdict}", flush=True)
    print(f"{failed} failed" if failed else "all within the bound")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
