"""PE_MATH's timing: each op class's cycles per pass over the lanes, and a result ready
its latency later, so a chain of dependent ops waits for each one."""

from __future__ import annotations

import pytest

from kernbench_cli.hw.network import hbm_stream_bandwidth, transfer_ps


def test_a_chain_of_dependent_math_waits_for_each_result(run, amap):
    """PE_MATH is pipelined: 500 chained adds of 32 elements each take 1 cycle of issue and
    4 of latency before the next may start (5 ns each at 1 GHz), while 500 independent adds
    (tiny_ops) overlap their latencies and are issued at PE_CPU's 4 ns apiece."""
    from kernbench_cli.report.run import bound

    chain = run("tiny_chain", "one", timing_only=True)
    topo = amap.topology
    setup, hbm = topo.pe.dma.setup, topo.hbm.latency
    # 128 B in one DRAM page: opening it (tFAW / 4 activates = 3.75 ns) outlasts the bytes
    move = max(transfer_ps(128, hbm_stream_bandwidth(topo.hbm)), 15_000 // 4)
    assert move == 3_750
    loaded = 4_000 + setup + move + hbm  # issue, setup, streaming, latency
    added = loaded + 500 * (1_000 + 4_000)
    assert chain.latency_ps == added + setup + move + hbm
    assert bound(chain)[0] == "math"
    independent = run("tiny_ops", "one", timing_only=True)
    # adds 1-8 fill the queue (depth 8) waiting for the load; the 9th is issued when the
    # first starts, as the load lands; the other 491 follow at 4 ns apiece
    issued = loaded + 491 * 4_000  # the last add: it starts at once, 1 ns + 4 of latency
    assert independent.latency_ps == issued + 1_000 + 4_000 + setup + move + hbm


@pytest.mark.parametrize(("op", "passes"), [
    ("rsqrt", [("maximum", "cmp"), ("rsqrt", "sqrt")]),
    ("reciprocal", [("maximum", "cmp"), ("reciprocal", "div")]),
    ("abs", [("subtract", "add"), ("abs", "add")]),
    ("tanh", [("multiply", "mul"), ("subtract", "add"), ("tanh", "exp")]),
    ("where", [("subtract", "add"), ("maximum", "cmp"), ("where", "cmp"), ("where", "cmp")]),
    ("where_scalar", [("subtract", "add"), ("maximum", "cmp"), ("where", "cmp")]),
])
def test_each_math_op_costs_its_op_class(run, op, passes):
    """Each PE_MATH command holds the unit ceil(elements / lanes) x op_cycles[class] cycles at
    1 GHz (default cost table: 32 lanes; add, mul, cmp 1 cycle; div, exp, sqrt 4), and its
    result is ready latency[class] cycles later; a `where` of two tensors is two passes of the
    comparator."""
    from kernbench_cli.config.schema import MathLatency, MathOpCycles

    cycles, latency = MathOpCycles(), MathLatency()
    result = run("ops", params=(f"op={op}", "dtype=f32"))
    maths = [r for r in result.oplog if r[2] == "math"]
    assert [r[3] for r in maths] == [name for name, _ in passes]
    elements = 24 * 40
    for record, (_, cls) in zip(maths, passes, strict=True):
        assert record[6] - record[5] == (-(-elements // 32) * getattr(cycles, cls)
                                         + getattr(latency, cls)) * 1000
