"""The two passes: what each one finds, and what the split promises."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import test_topology

KERNELS_DIR = Path(__file__).parents[1] / "kernels"


def _error(cli, name, topology="default"):
    path = KERNELS_DIR / f"{name}.py"
    code, out, err = cli("run", str(path), "-t", test_topology(topology))
    assert code == 1 and out == ""
    return err.removeprefix("error: ").rstrip("\n").replace(str(path), name)


def test_the_error_reported_is_the_earliest_in_simulated_time(cli):
    """PE 1 fails after 1 us, PE 3 after 4 ns: PE 3's is reported, though the functional
    pass met PE 1's first."""
    assert _error(cli, "two_errors") == (
        "two_errors:12: PE (rack=0 sip=0 cube=0 pe=3) at t=4ns: ValueError: early")


def test_a_message_of_the_wrong_size_names_both_sizes(cli):
    """Reported when the message is in the receiver's ring (the time the receive ends: its
    arrival at 155.358 ns, then PE_DMA's copy of its 256 B, 20 ns setup + 4 ns)."""
    assert _error(cli, "wrong_size", "pair") == (
        "wrong_size:8: PE (rack=0 sip=0 cube=0 pe=1) at t=179.358ns: tl.recv expects 128 B from PE "
        "(rack=0 sip=0 cube=0 pe=0) but its message is 256 B")


def test_a_cycle_of_credits_is_a_deadlock_found_in_time(cli):
    assert _error(cli, "credit_deadlock", "pair") == (
        "deadlock: 2 of 2 PEs still wait and nothing is left to run: PE (rack=0 sip=0 cube=0 "
        "pe=0) at credit_deadlock:15 waits: send to PE (rack=0 sip=0 cube=0 pe=1): its W ring "
        "is full (since t=12ns); PE (rack=0 sip=0 cube=0 pe=1) at credit_deadlock:15 waits: "
        "send to PE (rack=0 sip=0 cube=0 pe=0): its E ring is full (since t=12ns)")


def test_kernels_switch_greenlets_only_to_wait_for_a_message(run):
    """The functional pass enters each PE's greenlet once; only a recv whose message is not
    sent yet leaves it (and comes back once it is)."""
    assert run("sharded_gemm", "default", ("mode=primitive", "M=32", "K=128", "N=512"),
               timing_only=True).switches == 16
    # PE 0 sends, then waits in its recv until PE 1 has answered: one more round trip
    assert run("ping_pong", "pair", timing_only=True).switches == 2 + 2


def test_private_bookings_take_no_simulation_events(run):
    """Every DMA of sharded_gemm stays in its PE's own HBM slice: no PE ever waits for global
    time (one event each, its start), with or without an op log; with dedup, only the PEs
    timed (one per class: fewer) take one."""
    params = ("mode=primitive", "M=32", "K=128", "N=512")
    plain = run("sharded_gemm", "default", params, oplog=False, dedup=False)
    logged = run("sharded_gemm", "default", params, oplog=True, dedup=False)
    assert plain.events == logged.events == 16
    assert plain.latency_ps == logged.latency_ps
    classed = run("sharded_gemm", "default", params, oplog=False, dedup=True)
    assert classed.events < 16 and classed.latency_ps == plain.latency_ps
