"""Model fidelity: physical invariants, composites sharing the machine, ADR-0022's axes,
ADR-0064 requirement 3 at the shipped costs."""

from __future__ import annotations

import pytest

from kernbench_cli.hw import tiles as tiles_module
from kernbench_cli.hw.composite import tile_ops
from kernbench_cli.hw.network import hbm_stream_bandwidth, transfer_ps
from kernbench_cli.sim.invariants import InvariantError

GEMM = ("mode=composite", "M=32", "K=128", "N=512")


def test_every_run_lists_its_invariants(cli):
    import json

    code, out, _ = cli("run", "sharded_gemm", *sum((("-p", p) for p in GEMM), ()), "--json")
    assert code == 0
    checks = json.loads(out)["checks"]
    invariants = {c["name"]: c for c in checks if c["kind"] == "invariant"}
    assert set(invariants) == {"gemm work", "math work", "dma bytes", "bounds", "bandwidth",
                               "tcm", "energy", "critical path"}
    assert all(c["passed"] for c in invariants.values())
    assert invariants["gemm work"]["detail"] == (
        "the engines did 4,194,304 flops, the commands asked for 4,194,304")  # 2 x 32x128x512


def test_a_composite_that_drops_tiles_is_caught(run, monkeypatch):
    """The review's mutation: half of each composite's output columns never computed."""

    def half(t0, origin, tiling, a, b, n, *rest, **options):
        return tile_ops(t0, origin, tiling, a, b, n // 2, *rest, **options)

    monkeypatch.setattr(tiles_module, "tile_ops", half)
    with pytest.raises(InvariantError, match=r"^model invariant violated \(gemm work\): the "
                                             r"engines did 2,097,152 flops, the commands asked "
                                             r"for 4,194,304; this is a bug in kernbench"):
        run("sharded_gemm", "default", GEMM)


def test_a_link_held_shorter_than_its_bytes_flow_is_caught(run, monkeypatch):
    """0.1's fluid approximation (each resource held for bytes / its own bandwidth), put
    back: PE 1 loading from PE 0's slice leaves the faster link reserved too briefly."""
    from kernbench_cli.hw import dma

    def fluid(resources, duration, t):
        bottleneck = min(c.bandwidth for c in resources)
        for cal in resources:
            cal.reserve(t, duration * bottleneck // cal.bandwidth)
        return t, None

    monkeypatch.setattr(dma, "book", fluid)
    with pytest.raises(InvariantError, match=r"^model invariant violated \(bandwidth\): noc "
                                             r"rack=0 sip=0 cube=0 pe0->pe1 carried 1,024 B in "
                                             r"21,429 ps from t=24,000 ps, above its "
                                             r"64,000,000,000 B/s or outside its reservations"):
        run("remote_load", "pair")  # the slice (47.8 GB/s streaming) is the bottleneck


def test_a_load_after_a_long_composite_starts_within_a_tile(run):
    """The DMA serves the composite's tiles and the kernel's commands in issue order: a load
    issued while the tiles stream waits at most for one tile's operands in progress (0.1
    booked the whole tile stream at issue, and the load waited for all of it)."""
    result = run("late_load", "default")
    records = [r for r in result.oplog if r[1] == 0]
    (load,) = [r for r in records if r[3] == "load"]
    tiles = [r for r in records if r[3] == "load_tile"]
    one_tile = 2 * max(r[6] - r[5] for r in tiles)  # an A tile and a B tile
    composite = next(r for r in records if r[3] == "composite")
    assert composite[5] < load[4] and composite[6] - load[4] > 10 * one_tile  # mid-stream
    assert load[5] - load[4] <= one_tile


def test_tile_buffers_take_tcm_while_the_composite_runs(run):
    """Tensors and a composite's tile buffers share the TCM: the 1 MiB load issued while the
    composite runs waits until its buffers are free, and the TCM never holds more than it
    has (0.1 ignored the buffers: 2,158,656 B of a 2 MiB TCM in use)."""
    result = run("tcm_pressure", "default")
    records = [r for r in result.oplog if r[1] == 0]
    composite = next(r for r in records if r[3] == "composite")
    big = next(r for r in records if r[3] == "load")
    assert big[4] >= composite[6]  # issued once the composite ended
    assert result.cpu_stall_ps[0] > 0
    tcm = next(i for i in result.invariants if i.name == "tcm")
    assert tcm.passed
    assert tcm.detail == "at most 1,835,008 B of TCM in use (PE (rack=0 sip=0 cube=0 pe=0)), " \
                         "of 2,097,152 B"


def test_each_adr0022_axis_on_a_topology_where_they_differ(run):
    """program_id / num_programs per axis: PE in cube, cube in SIP, SIP (4, 3 and 2 here)."""
    result = run("axes", "axes")
    assert result.verified, result.checks
    assert result.num_pes == 24


def test_a_kernel_of_tiny_primitives_is_cpu_bound_at_the_shipped_costs(run):
    """ADR-0064 requirement 3, with topologies/costs/default.toml (4 ns a command)."""
    from kernbench_cli.report.run import bound, busiest

    result = run("tiny_ops", "one", timing_only=True)
    assert result.costs == "default"
    engine, share = bound(result)  # the critical path: issuing, then the final store
    assert engine == "cpu" and share > 0.85
    assert busiest(result)[0] == "cpu"
    assert max(result.engines["math"].busy_ps) < result.latency_ps / 3


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


def test_the_cube_sram_is_a_shared_resource(run):
    """The host places a table in cube 0's SRAM; its 8 PEs load 32 KiB of it each, at once,
    through the SRAM's port (PE 0's router). Six of them (PEs 1-3 and 5-7: X first on the
    4x2 mesh) leave the port over the NoC link pe0->pe1 and share its 64 GB/s: the port is
    busy until that link has carried 6 x 32 KiB (3,072 ns); PE 4's and PE 0's own loads end
    inside that time. Circuit-style, the port is held one load at a time: 7 x 512 ns at the
    NoC's rate and PE 0's at the port's 256 GB/s."""
    result = run("sram_share", "default")
    assert result.verified, result.checks
    sram = result.engines["sram"]
    assert (sram.instances, sram.ops) == (1, (8,))
    assert sram.busy_ps == (6 * 512_000,)
    circuit = run("sram_share", "default", sets=("network.sharing=circuit",))
    assert circuit.engines["sram"].busy_ps == (7 * 512_000 + 128_000,)
    assert result.latency_ps >= sram.busy_ps[0]


def test_a_plan_that_reserves_less_tcm_than_its_tiles_need_is_caught(run, monkeypatch):
    """A planner bug: the plan's byte count forgets the accumulators. The check recomputes
    the buffers from the tiles that ran (the plan's prefetch depth of each streamed
    operand's largest tile, two f32 output tiles)."""
    import dataclasses

    from kernbench_cli.hw.composite import plan_gemm

    plans = []

    def forgetful(*args, **kwargs):
        plan = plan_gemm(*args, **kwargs)
        plans.append(plan)
        return dataclasses.replace(plan, tcm_bytes=plan.tcm_bytes - 2 * 4 * plan.mt * plan.nt)

    monkeypatch.setattr(tiles_module, "plan_gemm", forgetful)
    with pytest.raises(InvariantError) as caught:
        run("sharded_gemm", "default", GEMM)
    mt, kt, nt, depth = plans[0].mt, plans[0].kt, plans[0].nt, plans[0].depth
    assert (mt, kt, nt) == (16, 128, 16)  # one f16 operand streamed (16 x 128 tiles)
    need = depth * mt * kt * 2 + 2 * 4 * mt * nt
    assert str(caught.value) == (
        "model invariant violated (tcm): PE (rack=0 sip=0 cube=0 pe=0)'s composite (command "
        f"1) ran tiles needing {need:,} B of buffers; its plan reserved {need - 8 * mt * nt:,} "
        "B; this is a bug in kernbench, please report it")


def test_a_ring_busy_longer_than_the_run_is_caught(run, monkeypatch):
    """A ring's busy time is its slot-time over its slots: summed over 4 slots instead, a
    ring of the default all-reduce was busy 3.55x the run."""
    from kernbench_cli.hw.ipcq import Ring

    monkeypatch.setattr(Ring, "busy_ps", property(lambda ring: ring.slot_ps))
    with pytest.raises(InvariantError, match=r"^model invariant violated \(bounds\): the "
                                             r"latency is 30,225,760 ps; PE \(rack=0 sip=0 cube=0 "
                                             r"pe=7\)'s IPCQ ring N was busy 107,308,740 ps; "):
        run("all_reduce", "default")
