"""A Llama decode step's bytes and MACs per operator against GenZ's published accounting.

GenZ (github.com/abhibambhaniya/GenZ-LLM-Analyzer, read at commit 091bdd0) models a
decode step as a table of operators, each a GEMM, Logit or Attend with three tensors
(input a, input w, output) and a MAC count. Its formulas are written out below from
its source, not from kernbench's; kernbench's side is counted from a run of
`llama_decode` on a llama2-7b-class config (`tests/configs/llama2_7b.json`: GenZ's
`meta-llama/Llama-2-7B`), record by record of the op log: every byte a DMA moved to or
from HBM, by the region (`tl.region`) of its command and the host allocation it
touched, and every GEMM MAC, by the weight (or cache) its composite streamed. The
section "A decode step's bytes and MACs, against GenZ" of docs/workloads.md is the
table this test checks, with each difference explained.
"""

from __future__ import annotations

import bisect
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from kernbench_cli.stream import COMPOSITE
from tests.conftest import TESTS, test_topology

CONFIG = TESTS / "configs" / "llama2_7b.json"
BATCH, CONTEXT = 2, 4095  # GenZ's L = CONTEXT + 1: the new token attends to itself too
ITEM = 2  # bf16: GenZ's System(bits="bf16").mem_multiplier, kernbench's dtype
DOC = Path(__file__).resolve().parents[2] / "docs" / "workloads.md"


def genz_decode(cfg: dict, b: int, seq: int) -> dict[str, tuple[int, int, int, int]]:
    """GenZ's decode operators of one layer and the LM head, tensor parallelism 1: name ->
    (input a, input w, output) in elements and MACs. Sources (GenZ-LLM-Analyzer):

    - GenZ/Models/attention.py, `mha_flash_attention_decode`: QKV = GEMM (M = H*Dq +
      2*Hkv*Dq, N = 1, K = D); Logit Pre and Attend Pre over `input_sequence_length`
      positions (Logit(H, M=1, N=L, D=Dq, Hkv)); Logit Suf and Attend Suf over
      `output_gen_tokens` (0 here: none); Out Proj = GEMM (M = D, N = 1, K = H*Dq).
    - GenZ/Models/ffn.py, `ffn_decode` (dense): up+gate = GEMM (M = Df*num_ffi, 1, D),
      down = GEMM (M = D, 1, K = Df); num_ffi = 2 for Llama (Models/Model_sets/meta.py).
    - GenZ/Models/embedding.py, `output_embedding`: classifier = GEMM (M = V, N = 1, K = D);
      `create_full_decode_model` (Models/get_language_model.py) has no input embedding.
    - GenZ/operators.py: GEMM(B, M, N, K) has a (B, N, K), w (M, K), out (B, N, M) and
      B*M*N*K ops; Logit(B, H, M, N, D, Hkv): a (B, H, M, D), w (B, Hkv, N, D) (the K
      cache), out (B, H, M, N); Attend: a (B, H, M, N), w (B, Hkv, N, D) (V), out
      (B, H, M, D); both B*H*M*N*D ops. GenZ/analyse_model.py `get_model_df` puts the
      batch in as B. Ops are MACs (`get_roofline` doubles them for FLOPs).
    """
    d, h, hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    dq, df, v = d // h, cfg["intermediate_size"], cfg["vocab_size"]

    def gemm(m, n, k):
        return b * n * k, m * k, b * n * m, b * m * n * k

    return {
        "QKV": gemm(h * dq + 2 * hkv * dq, 1, d),
        "Logit": (b * h * dq, b * hkv * seq * dq, b * h * seq, b * h * seq * dq),
        "Attend": (b * h * seq, b * hkv * seq * dq, b * h * dq, b * h * seq * dq),
        "Out Proj": gemm(d, 1, h * dq),
        "up+gate": gemm(df * 2, 1, d),
        "down": gemm(d, 1, df),
        "classifier": gemm(v, 1, d),
    }


#: GenZ operator -> (kernbench region, the allocations holding its input w)
KERNBENCH = {"QKV": ("qkv", ("qkv",)), "Logit": ("attention", ("k",)),
             "Attend": ("attention", ("v",)), "Out Proj": ("o_proj", ("o",)),
             "up+gate": ("mlp", ("gate", "up")), "down": ("mlp", ("down",)),
             "classifier": ("lm_head", ("lm",))}


def counted(result) -> tuple[Counter, Counter]:
    """From a run's op log and trace: HBM bytes by (region, "read" or "write", allocation)
    and GEMM MACs by (region, allocation of the composite's streamed operand). An
    allocation is named as the host named it, less its layer and PE ("L0.qkv[5]" ->
    "qkv")."""
    from kernbench_cli.address import load_address_map

    amap = load_address_map(test_topology("racks"))
    program, log = result.trace.program, result.oplog
    allocs = sorted(result.trace.memory)
    bases = [a for a, _, _ in allocs]

    def owner(addr: int) -> str:
        base, size, name = allocs[bisect.bisect_right(bases, addr) - 1]
        assert base <= addr < base + size, hex(addr)
        return re.sub(r"^L\d+\.|\[\d+\]$", "", name)

    region_of = [program.region_of(pid) for pid in range(len(program.streams))]
    nbytes, macs = Counter(), Counter()
    for seq, pid, engine, _kind, *_, size, flops, src, dst in log:
        command = log.command[seq]
        region = program.regions[region_of[pid][command]]
        if engine == "dma":
            for way, addr in (("read", src), ("write", dst)):
                if addr is not None and amap.locate(addr)[1] == "hbm":
                    nbytes[(region, way, owner(addr))] += size
        elif engine == "gemm":
            stream = program.streams[pid]
            assert stream.op[command] == COMPOSITE  # the decode's GEMMs are composites
            desc = program.composites[stream.arg[command]]
            macs[(region, owner(desc.b_addr))] += flops // 2
    return nbytes, macs


@pytest.fixture(scope="module")
def step():
    """One layer and the LM head of llama2-7b, batch 2, context 4095, on the 32 PEs of
    tests/topologies/racks.toml (a head group per PE), timing only: (config, result,
    bytes, MACs, GenZ's table)."""
    from kernbench_cli.address import load_address_map
    from kernbench_cli.sim.kernels import load_kernel, parse_params
    from kernbench_cli.sim.run import run_kernel

    module = load_kernel("llama_decode")
    params = parse_params(module, [f"config={CONFIG}", "layers=1", f"batch={BATCH}",
                                   f"context={CONTEXT}"])
    result = run_kernel(module, load_address_map(test_topology("racks")), params,
                        timing_only=True, oplog=True)
    cfg = json.loads(CONFIG.read_text())
    return (cfg, result, *counted(result), genz_decode(cfg, BATCH, CONTEXT + 1))


def test_each_genz_operator_moves_the_same_weight_or_cache_bytes_with_the_same_macs(step):
    """GenZ keeps a decode operator's activations on chip (ResidencyInfo.AC_onchip) and
    reads its input w (the weight, or the K or V cache) from memory: kernbench's region
    reads exactly those bytes, once, and does exactly GenZ's MACs on them."""
    _, _, nbytes, macs, genz = step
    for op, (region, names) in KERNBENCH.items():
        _, w, _, ops = genz[op]
        assert sum(nbytes[(region, "read", n)] for n in names) == w * ITEM, op
        assert sum(macs[(region, n)] for n in names) == ops, op
    assert set(macs) == {(r, n) for r, names in KERNBENCH.values() for n in names}


def test_what_kernbench_moves_beside_genz_is_the_explained_difference(step):
    """Every other HBM byte of the run, by what it is (docs/workloads.md): the KV append
    GenZ does not count, activations staged through HBM between PEs (GenZ's on-chip
    tensors, at GenZ's sizes), the per-PE copies of norms and inputs, the collectives'
    buffers, the LM head's f32 logits and argmax; together, the run's HBM bytes."""
    cfg, result, nbytes, _, genz = step
    pes, d = result.num_pes, cfg["hidden_size"]
    hkv, dq = cfg["num_key_value_heads"], d // cfg["num_attention_heads"]
    v = cfg["vocab_size"]
    assert nbytes[("kv_append", "write", "k")] == nbytes[("kv_append", "write", "v")] \
        == BATCH * hkv * dq * ITEM  # the new token's row, not in GenZ's table
    qkv_out, attend_out, o_in = genz["QKV"][2], genz["Attend"][2], genz["Out Proj"][0]
    assert nbytes[("qkv", "write", "qkvbuf")] == qkv_out * ITEM  # the all-gather's buffer
    assert nbytes[("qkv", "read", "qkvbuf")] == qkv_out * ITEM  # 1 PE per head group here
    assert nbytes[("attention", "write", "obuf")] == attend_out * ITEM
    assert nbytes[("o_proj", "read", "obuf")] == o_in * ITEM
    assert nbytes[("lm_head", "write", "logits")] == BATCH * v * 4  # f32: GenZ's out x 2
    assert nbytes[("lm_head", "read", "iota")] == v * 4  # the argmax's vocabulary indices
    per_pe = {("rmsnorm", "read", "norm_in"): d * 4, ("rmsnorm", "read", "norm_post"): d * 4,
              ("lm_head", "read", "norm_final"): d * 4, ("qkv", "read", "rope"): dq * 4,
              ("", "read", "inputs_embeds"): BATCH * d * ITEM}
    for key, size in per_pe.items():  # each PE its own copy
        assert nbytes[key] == pes * size, key
    explained = {(r, "read", n) for r, names in KERNBENCH.values() for n in names}
    explained |= set(per_pe) | {("kv_append", "write", "k"), ("kv_append", "write", "v"),
                                ("qkv", "write", "qkvbuf"), ("qkv", "read", "qkvbuf"),
                                ("attention", "write", "obuf"), ("o_proj", "read", "obuf"),
                                ("lm_head", "write", "logits"), ("lm_head", "read", "iota")}
    rest = {k for k in nbytes if k not in explained}
    assert {n for _, _, n in rest} == {"ybuf", "argbuf", "token", "hidden_out"}
    assert {r for r, _, n in rest if n == "ybuf"} == {"attn_all_reduce", "mlp_all_reduce"}
    assert sum(nbytes.values()) == result.hbm_bytes  # every byte the HBM slices carried


def test_the_step_bounds_count_genz_weights_kv_and_macs(step):
    """`llama_decode`'s HBM bound and MAC count (its metrics) are GenZ's totals: every
    weight and the KV cache read once, GenZ's MACs; the run's GEMM did those MACs. The
    bound also reads what GenZ leaves out: each PE's f32 copies of the norms (two a layer
    and the final one) and the argmax's vocabulary indices (f32)."""
    cfg, result, _, macs, genz = step
    bound_bytes = int(re.search(r"([\d,]+) B", result.metrics["hbm_bound_ps"][1]).group(1)
                      .replace(",", ""))
    extra = result.num_pes * 3 * cfg["hidden_size"] * 4 + cfg["vocab_size"] * 4
    assert bound_bytes == sum(w for _, w, _, _ in genz.values()) * ITEM + extra
    assert result.metrics["macs"][0] == sum(ops for *_, ops in genz.values())
    assert result.flops == 2 * sum(macs.values())


def test_the_page_shows_these_figures(step):
    """docs/workloads.md's GenZ table is this run's: each operator's row gives GenZ's bytes
    (input w, and a + w + out) and MACs and kernbench's; its step totals are GenZ's over
    llama2-7b's 32 layers and the LM head, and the run's HBM bytes are the run's."""
    _, result, nbytes, macs, genz = step
    rows = {cells[0]: cells[1:] for line in DOC.read_text().splitlines()
            if line.startswith("| ") and len(cells := [c.strip(" `") for c in
                                                       line.strip("|").split("|")]) > 6}
    for op, (region, names) in KERNBENCH.items():
        a, w, out, ops = genz[op]
        ours = sum(nbytes[(region, "read", n)] for n in names)
        mine = sum(macs[(region, n)] for n in names)
        want = [f"{w * ITEM:,}", f"{(a + w + out) * ITEM:,}", f"{ours:,}", f"{ops:,}",
                f"{mine:,}"]
        assert rows[op][:5] == want, op
    text = DOC.read_text()
    layer = {op: genz[op] for op in genz if op != "classifier"}
    weights = 32 * sum(w for _, w, _, _ in layer.values()) + genz["classifier"][1]
    work = 32 * sum(ops for *_, ops in layer.values()) + genz["classifier"][3]
    assert f"{weights * ITEM:,} B" in text and f"its MACs to {work:,}" in text
    assert f"HBM bytes ({result.hbm_bytes:,})" in text
