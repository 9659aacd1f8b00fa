"""Issue costs on PE_CPU, per kind of command: what PE_CPU is busy for, what a transfer's
time leaves out, and when issuing, not the engines, bounds a kernel."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kernbench_cli.hw.network import hbm_stream_bandwidth, transfer_ps

COSTS = Path(__file__).parents[1] / "costs"

# Small enough to be quick: 2 PEs' worth of columns per PE on the default topology.
GEMM = ("M=32", "K=128", "N=512")


def _kinds(result, pid=0):
    return Counter(r[3] for r in result.oplog if r[1] == pid)


@pytest.mark.parametrize("costs", [None, COSTS / "odd.toml"])
def test_composite_is_charged_once_and_primitives_per_op(run, costs):
    """PE_CPU's busy time is the sum of the issue costs of the commands it issued: a
    composite is charged once, primitives one by one."""
    comp = run("sharded_gemm", "default", (*GEMM, "mode=composite"), costs=costs)
    prim = run("sharded_gemm", "default", (*GEMM, "mode=primitive"), costs=costs)
    table = _cost_table(costs)
    n = 512 // 16  # columns per PE
    tiles, k_steps = (32 // 16) * (n // 16), 128 // 64
    kinds = _kinds(prim)
    assert kinds["load"] == 2 * tiles * k_steps and kinds["dot"] == tiles * k_steps
    assert kinds["add"] == tiles * (k_steps - 1) and kinds["cast"] == tiles
    assert kinds["store"] == tiles
    assert comp.engines["cpu"].busy_ps[0] == table.load + table.composite + table.wait
    assert prim.engines["cpu"].busy_ps[0] == (
        kinds["load"] * table.load + kinds["dot"] * table.dot
        + (kinds["add"] + kinds["cast"]) * table.math + kinds["store"] * table.store)
    # the composite replaced every one of the primitive kernel's GEMM-side commands
    assert sum(kinds.values()) == 36 and sum(_kinds(comp).values()) - _kinds(comp)[
        "gemm_tile"] - _kinds(comp)["load_tile"] - _kinds(comp)["store_tile"] == 3


def _cost_table(path):
    from kernbench_cli.config import load_costs
    from kernbench_cli.shipped import data_dir

    return load_costs(path or data_dir("topologies") / "costs" / "default.toml").issue


def test_dma_time_does_not_include_issue_cost(run, amap):
    """A transfer streams bytes / bandwidth and lands a latency later, whatever
    the costs; its setup comes before (overlapping the transfer before it)."""
    timings = []
    for costs in (None, COSTS / "odd.toml", COSTS / "slow_issue.toml"):
        result = run("sharded_gemm", "default", (*GEMM, "mode=primitive"), costs=costs)
        log = result.oplog
        timings.append(sorted(
            (log.streams[2 * seq + 1] - log.streams[2 * seq], r[6] - log.streams[2 * seq + 1])
            for seq, r in enumerate(log) if r[2] == "dma"))
        setups = {log.streams[2 * seq] - r[5] for seq, r in enumerate(log) if r[2] == "dma"}
        assert min(setups) == amap.topology.pe.dma.setup  # never less than the setup
    assert timings[0] == timings[1] == timings[2]
    # and each is the formula: the PE's own slice, so no link; 2 KiB loads, 512 B stores,
    # at the slice's stream rate (its peak less refresh)
    topo = amap.topology
    rate = hbm_stream_bandwidth(topo.hbm)
    assert rate == 102_400_000_000 * 3_640 // 3_900
    assert set(timings[0]) == {(transfer_ps(2048, rate), topo.hbm.latency),
                               (transfer_ps(512, rate), topo.hbm.latency)}


def test_primitive_issue_leaves_gemm_idle_while_composite_keeps_it_busy(run):
    """With dear primitives, a small-tile primitive GEMM is bound by PE_CPU issuing, while
    the composite keeps PE_GEMM busy."""
    params = ("M=64", "K=128", "N=256", "tile_k=16")  # one PE: all 256 columns
    prim = run("sharded_gemm", "one", (*params, "mode=primitive"),
               costs=COSTS / "slow_issue.toml")
    comp = run("sharded_gemm", "one", (*params, "mode=composite"),
               costs=COSTS / "slow_issue.toml")
    # Per 16 x 16 output tile: 8 k-steps of a 16x16x16 dot = 8 x (16 + 30) = 368 cycles of
    # GEMM (368 ns), against 8 x (2 loads + dot) + 7 adds + cast + store = 33 commands x 20 ns
    # = 660 ns of issue. The CPU cannot feed the array: it is the bottleneck.
    tiles = (64 // 16) * (256 // 16)
    assert prim.engines["gemm"].busy_ps[0] == tiles * 8 * 46_000
    assert prim.engines["cpu"].busy_ps[0] == tiles * 33 * 20_000
    p_gemm = max(prim.engines["gemm"].busy_ps) / prim.latency_ps
    p_cpu = max(prim.engines["cpu"].busy_ps) / prim.latency_ps
    c_gemm = max(comp.engines["gemm"].busy_ps) / comp.latency_ps
    assert p_cpu > 0.9 and p_gemm < 0.55, (p_cpu, p_gemm)
    assert c_gemm > 0.8, c_gemm
    from kernbench_cli.report.run import busiest

    assert busiest(prim)[0] == "cpu"  # saturation is observable: PE_CPU is the busiest unit
    assert busiest(comp)[0] == "gemm"


def test_a_kernel_of_tiny_primitives_is_cpu_bound_at_the_shipped_costs(run):
    """At the shipped costs (topologies/costs/default.toml: 4 ns a command), a kernel of
    tiny primitives is bound by PE_CPU issuing them."""
    from kernbench_cli.report.run import bound, busiest

    result = run("tiny_ops", "one", timing_only=True)
    assert result.costs == "default"
    engine, share = bound(result)  # the critical path: issuing, then the final store
    assert engine == "cpu" and share > 0.85
    assert busiest(result)[0] == "cpu"
    assert max(result.engines["math"].busy_ps) < result.latency_ps / 3
