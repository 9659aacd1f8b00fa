"""The model's physical invariants: every run lists them and passes them, and each one
catches the kind of model bug it is there for (the test puts the bug in: a composite that
drops tiles, a link held too briefly, a plan that reserves too little TCM, a ring's busy
time counted per slot)."""

from __future__ import annotations

import pytest

from kernbench_cli.hw import tiles as tiles_module
from kernbench_cli.hw.composite import tile_ops
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
    """Half of each composite's output columns never computed: the GEMM work check fails."""

    def half(t0, origin, tiling, a, b, n, *rest, **options):
        return tile_ops(t0, origin, tiling, a, b, n // 2, *rest, **options)

    monkeypatch.setattr(tiles_module, "tile_ops", half)
    with pytest.raises(InvariantError, match=r"^model invariant violated \(gemm work\): the "
                                             r"engines did 2,097,152 flops, the commands asked "
                                             r"for 4,194,304; this is a bug in kernbench"):
        run("sharded_gemm", "default", GEMM)


def test_a_link_held_shorter_than_its_bytes_flow_is_caught(run, monkeypatch):
    """A fluid approximation (each resource held for bytes / its own bandwidth): PE 1
    loading from PE 0's slice leaves the faster link reserved too briefly, and the
    bandwidth check fails."""
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
