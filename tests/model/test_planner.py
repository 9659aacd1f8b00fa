"""The tile planner against the model: its estimate within 5% of the time the model then
gives, prefetch as deep as the latency asks, streamed operands loaded before the resident
one is ready."""

from __future__ import annotations

import dataclasses

import pytest

from kernbench_cli.hw import tiles as tiles_module
from kernbench_cli.hw.composite import plan_gemm


@pytest.fixture
def plans(monkeypatch):
    """Every plan the timing pass takes, with (PE process, command) to read its times."""
    taken = []
    dispatch = tiles_module.CompositeRuns.dispatch

    def spy(*args, **kwargs):
        plan = plan_gemm(*args, **kwargs)
        spy.last = plan
        return plan

    def recorded(self, proc, pe, comps, i):
        yield from dispatch(self, proc, pe, comps, i)
        taken.append((proc, i, spy.last))

    monkeypatch.setattr(tiles_module, "plan_gemm", spy)
    monkeypatch.setattr(tiles_module.CompositeRuns, "dispatch", recorded)
    return taken


def _error(plans) -> list[float]:
    """Each composite's estimate against its time from ready to end, relative."""
    return [(plan.estimate * 1000 - (proc.end[i] - proc.start[i])) / (proc.end[i] - proc.start[i])
            for proc, i, plan in plans]


SHAPES = [  # (M, K, N, dtype, --set): GEMM-bound, DMA-bound, latency-bound, in between
    (64, 64, 512, "f16", ()),
    (128, 128, 128, "f16", ()),
    (4, 4096, 128, "f32", ()),
    (1024, 1024, 16, "f16", ()),
    (256, 256, 256, "f16", ("pe.gemm.rows=64", "pe.gemm.cols=64")),
    (16, 512, 512, "f16", ("pe.gemm.rows=64", "pe.gemm.cols=64")),
    (128, 128, 128, "f16", ("hbm.latency=1us",)),
    (64, 64, 512, "f32", ("hbm.latency=1us",)),
    (256, 256, 256, "f16", ("hbm.bandwidth=12.8GB/s",)),
    (16, 512, 512, "f32", ("hbm.bandwidth=12.8GB/s",)),
    (512, 64, 512, "f16", ("hbm.bandwidth=12.8GB/s",)),
    (32, 1024, 64, "f32", ("hbm.bandwidth=12.8GB/s",)),
]


@pytest.mark.parametrize(("m", "k", "n", "dtype", "sets"), SHAPES)
def test_the_estimate_is_within_5_percent_of_the_model(run, plans, m, k, n, dtype, sets):
    run("one_gemm", "default", (f"M={m}", f"K={k}", f"N={n}", f"dtype={dtype}"),
        timing_only=True, sets=sets)
    (error,) = _error(plans)
    assert abs(error) <= 0.05, f"estimate {error:+.1%} off the model"


@pytest.mark.parametrize("params", [
    ("M=4", "K=64", "N=1024", "trans_b=1"),  # gqa_attention's scores, as shipped: Q @ K^T
    ("M=4", "K=1024", "N=64"),  # and its P @ V
    ("M=4", "K=128", "N=1024", "trans_b=1"),  # the same for llama3-8b (head_dim 128)
    ("M=4", "K=1024", "N=128"),
], ids=["scores", "pv", "scores-llama3-8b", "pv-llama3-8b"])
def test_the_estimate_is_within_5_percent_on_the_attention_gemms(run, plans, params):
    """gqa_attention's composites, each alone on a PE (in the kernel they share the engines
    with each other and the softmax, which a per-composite estimate does not see)."""
    run("one_gemm", "default", (*params, "resident=1", "in_tcm=1"), timing_only=True)
    (error,) = _error(plans)
    assert abs(error) <= 0.05, f"estimate {error:+.1%} off the model"


@pytest.mark.parametrize("topology", ["default", "sip"])
def test_the_estimate_is_within_5_percent_on_the_shipped_gemm(run, plans, topology):
    run("sharded_gemm", topology, ("mode=composite",), timing_only=True)
    errors = _error(plans)
    assert errors and max(abs(e) for e in errors) <= 0.05


def test_prefetch_runs_as_deep_as_the_latency_asks(run, plans, monkeypatch):
    """At 1 us of HBM latency, a tile's loads take about 1.1 us to land against 158 ns of
    GEMM: two buffers per operand would leave the array waiting; the planner takes more
    (the bandwidth-delay product), and that runs faster than the same tiles at depth 2."""
    params = ("M=128", "K=128", "N=128")
    deep = run("one_gemm", "default", params, timing_only=True, sets=("hbm.latency=1us",))
    (_, _, plan), = plans
    assert plan.depth > 2
    plans.clear()
    planned = tiles_module.plan_gemm

    def two_deep(*args, **kwargs):
        return dataclasses.replace(planned(*args, **kwargs), depth=2)

    monkeypatch.setattr(tiles_module, "plan_gemm", two_deep)
    shallow = run("one_gemm", "default", params, timing_only=True, sets=("hbm.latency=1us",))
    assert shallow.latency_ps > 1.3 * deep.latency_ps


def test_a_streamed_operand_loads_before_the_resident_one_is_ready(run):
    """B's first tiles load from the composite's dispatch, while A's 64 KiB load into TCM
    is still streaming; the first GEMM tile waits for A."""
    result = run("early_stream", "default", timing_only=True)
    a_load = next(r for r in result.oplog if r[3] == "load")
    tiles = [r for r in result.oplog if r[3] == "load_tile"]
    first_gemm = next(r for r in result.oplog if r[3] == "gemm_tile")
    assert tiles[0][4] < a_load[6]  # issued before A is in TCM
    assert first_gemm[5] >= a_load[6]


def test_a_scaled_operand_along_k_gets_whole_block_k_tiles():
    """An mxfp4 B (its scales' blocks of 32 along K, `trans_b`) with K = 320 and 24 KiB of
    TCM: K tiles must be whole blocks, and 320's halvings (160, 80, ...) mostly are not;
    the planner also offers them rounded up and 32 x powers of two, so a plan exists
    (K tiles of 64: 15,968 B) as one does for bf16 (K tiles of 80)."""
    from kernbench_cli.formats import F16, MXFP4
    from kernbench_cli.hw.composite import PlanCosts

    costs = PlanCosts(64.0, 10.0, 100.0)
    args = (40, 320, 96, F16, MXFP4, 4, False, False, 16, 16, "os", 24576, costs, 320, 320,
            True)
    tiling = plan_gemm(*args)
    assert tiling is not None and tiling.kt % 32 == 0
    assert (tiling.mt, tiling.kt, tiling.nt, tiling.tcm_bytes) == (16, 64, 16, 15968)
