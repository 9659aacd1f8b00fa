"""GQA fused attention (ADR-0060): values, the merge, the tree, and the bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

SMALL = ("seq_len=1024", "heads_q=8", "heads_kv=2", "head_dim=32")


@pytest.mark.parametrize("topology", ["default", "sip"])
def test_verifies_with_the_defaults(run, topology):
    result = run("gqa_attention", topology)
    assert result.verified, result.checks


def test_verifies_for_llama3_8b_at_32k_on_a_sip(run):
    result = run("gqa_attention", "sip", ("model=llama3-8b", "seq_len=32768"))
    assert result.verified, result.checks
    assert result.params["heads_q"] == 32 and result.params["head_dim"] == 128


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_other_dtypes(run, dtype):
    assert run("gqa_attention", "default", (*SMALL, f"dtype={dtype}")).verified


@pytest.mark.parametrize("params", [
    ("batch=3", "seq_len=2048"),  # partials of several (batch, head) pairs through one tree
    ("seq_len=8192", "chunk=128"),  # four chunks per shard: the online softmax rescales o
])
def test_batches_and_chunked_shards_verify(run, params):
    result = run("gqa_attention", "default", params)
    assert result.verified, result.checks
    chunks = 8192 // 16 // 128 if "chunk=128" in params else 1
    composites = sum(1 for r in result.oplog if r[1] == 5 and r[3] == "composite")
    pairs = 3 * 2 if "batch=3" in params else 2
    assert composites == 2 * pairs * chunks


def test_one_dominant_key_makes_every_other_shard_underflow(run):
    """Uneven partials: PE 3 holds the only key that matters; the other shards' probabilities
    underflow to exactly zero in the merge, and the answer is that key's value."""
    result = run("gqa_attention", "default", (*SMALL, "skew=300"))
    assert result.verified, result.checks
    shard = 1024 // 16
    where = shard // 2 + 3 * shard
    v = result.inputs["v"].astype(np.float32)
    out = result.outputs["out"].astype(np.float32).reshape(1, 2, 4, 32)
    for h in range(2):
        np.testing.assert_allclose(out[0, h], np.broadcast_to(v[0, h, where], (4, 32)),
                                   atol=2e-3)


@pytest.mark.parametrize("other", ["tall", "sip"])
def test_the_result_does_not_depend_on_the_shape_of_the_tree(run, other):
    """Same inputs (same seed and shapes) merged over different trees agree."""
    base = run("gqa_attention", "default", SMALL, seed=7)
    alt = run("gqa_attention", other, SMALL, seed=7)
    np.testing.assert_array_equal(base.inputs["k"], alt.inputs["k"])
    np.testing.assert_allclose(base.outputs["out"].astype(np.float32),
                               alt.outputs["out"].astype(np.float32), atol=2e-3)


@pytest.mark.parametrize(("topology", "depth"), [
    ("default", math.ceil(math.log2(8)) + math.ceil(math.log2(2))),
    ("sip", math.ceil(math.log2(16)) + math.ceil(math.log2(8))),
    ("tall", math.ceil(math.log2(16))),
    ("two_sips", 1 + 1 + 1),
])
def test_reduction_steps_in_the_op_log_equal_the_tree_depth(run, topology, depth):
    result = run("gqa_attention", topology, SMALL)
    pairs = 1 * 2  # batch x heads_kv partials, three messages (m, l, o) each
    root_recvs = sum(1 for r in result.oplog if r[1] == 0 and r[3] == "recv")
    assert root_recvs == 3 * pairs * depth
    senders = {r[1] for r in result.oplog if r[3] == "send"}
    assert senders == set(range(1, result.num_pes))  # every other PE sends exactly once-round


def test_the_tree_crosses_ucie_and_sip_links(run):
    result = run("gqa_attention", "two_sips", SMALL)
    assert result.verified
    assert {"noc", "ucie", "sip_link"} <= set(result.engines)


def test_one_slot_rings_make_senders_wait(run):
    roomy = run("gqa_attention", "default", SMALL)
    tight = run("gqa_attention", "default_1slot", SMALL)
    assert tight.verified
    senders = range(1, 16)
    assert sum(tight.cpu_stall_ps[i] for i in senders) > sum(roomy.cpu_stall_ps[i] for i in senders)
    assert tight.latency_ps >= roomy.latency_ps


@pytest.mark.parametrize("params", [
    (), SMALL, ("seq_len=16384", "chunk=256"), ("model=llama3-70b", "seq_len=2048"),
    ("batch=2", "seq_len=2048", "dtype=f32"),
])
def test_latency_is_never_below_the_memory_bound(run, params):
    """The memory bound is PE 0's bytes (query groups, KV shard, output) at the HBM slice's
    stream rate (102.4 GB/s less refresh on `default`)."""
    result = run("gqa_attention", "default", params, timing_only=True)
    bound_ps, how = result.bounds["memory"]
    p = result.params
    item = 4 if p["dtype"] == "f32" else 2
    parts, g = p["batch"] * p["heads_kv"], p["heads_q"] // p["heads_kv"]
    pe0 = (2 * parts * (p["seq_len"] // 16) * p["head_dim"] + 2 * parts * g * p["head_dim"]) \
        * item
    stream = 102_400_000_000 * (3_900_000 - 260_000) // 3_900_000  # tREFI 3.9us, tRFC 260ns
    assert bound_ps == math.ceil(pe0 * 10**12 / stream)
    assert how.startswith(f"PE 0's query groups, KV shard and output, {pe0:,} B")
    assert result.latency_ps >= bound_ps


def test_report_shows_the_bound_and_hbm_bandwidth(cli):
    code, out, _ = cli("run", "gqa_attention", *sum((("-p", x) for x in SMALL), ()))
    assert code == 0
    assert "memory bound" in out and "PE 0's query groups, KV shard and output, 17,408 B," in out
    assert "GB/s of 1638.4 GB/s peak" in out
    assert "│ ipcq" in out and "│ noc" in out and "│ ucie" in out


@pytest.mark.parametrize(("params", "message"), [
    (["heads_q=10", "heads_kv=4"], "gqa_attention: heads_q = 10 is not a multiple of "
                                   "heads_kv = 4"),
    (["seq_len=1000"], "gqa_attention: seq_len = 1000 does not divide over the 16 PEs of the "
                       "grid (1000 % 16 = 8)"),
    (["model=llama3-405b"], "parameter model: unknown preset 'llama3-405b' (presets: custom, "
                            "llama3-8b, llama3-70b)"),
    (["seq_len=1048576", "chunk=65536", "heads_q=32"],
     "gqa_attention: a chunk of 65536 positions needs 10496000 B of TCM for 16 query heads "
     "(scores, probabilities, output): more than half of the 2097152 B TCM (the other half "
     "streams K and V); lower -p chunk"),
])
def test_bad_parameters(cli, params, message):
    code, _, err = cli("run", "gqa_attention", *sum((("-p", x) for x in params), ()))
    assert code == 2
    assert err == f"error: {message}\n"


def test_a_miswired_reduction_is_a_deadlock_not_a_hang(cli):
    from pathlib import Path

    path = Path(__file__).parents[1] / "kernels" / "miswired.py"
    code, _, err = cli("run", str(path))
    assert code == 1
    assert err.startswith("error: deadlock: 15 of 16 PEs still wait and nothing is left to run: "
                          "PE (rack=0 sip=0 cube=0 pe=0) at ")
    assert "miswired.py:9 waits: recv from PE (rack=0 sip=0 cube=0 pe=1)" in err
    assert err.rstrip().endswith("; and 7 more")
