"""Races between PEs (`--races`): accesses to one address no message orders, reads still
in flight when an ordered write lands, and `tl.fence`, which orders a store before the
message after it."""

from __future__ import annotations

import json


def _races(cli, name, topology="default"):
    from pathlib import Path

    from tests.conftest import test_topology

    path = Path(__file__).parents[1] / "kernels" / f"{name}.py"
    code, out, err = cli("run", str(path), "-t", test_topology(topology), "--races", "--json")
    return code, json.loads(out), [line.replace(str(path), name) for line in err.splitlines()]


def test_a_race_across_pes_is_found(cli):
    code, result, err = _races(cli, "race")
    assert code == 1
    (race,) = result["races"]
    assert race["why"] == "unordered" and race["bytes"] == 1024
    writer, reader = race["accesses"]
    assert (writer["pe"], writer["line"], writer["write"]) == ("rack=0 sip=0 cube=0 pe=0", 14,
                                                               True)
    assert (reader["pe"], reader["line"], reader["write"]) == ("rack=0 sip=0 cube=0 pe=1", 16,
                                                               False)
    assert len(err) == 1 and err[0].startswith(
        "error: race (unordered): PE 0 at race:14 writes 1024 B at HBM rack=0 sip=0 cube=0 "
        "pe=0 offset=")
    assert "PE 1 at race:16 reads them during [" in err[0]
    assert err[0].endswith(": no message orders them (a store is ordered before a message "
                           "only by a tl.fence between them)")


def test_a_store_then_a_send_without_a_fence_races(cli):
    """A message after PE 0's store does not order it (nothing waited for it to land):
    PE 1's load after the receive races with it, as the timing shows too."""
    code, result, err = _races(cli, "race_in_flight")
    assert code == 1
    (race,) = result["races"]
    writer, reader = race["accesses"]
    assert race["why"] == "unordered" and (writer["line"], reader["line"]) == (15, 19)
    assert reader["start_ps"] < writer["end_ps"]
    assert err[0].endswith(": no message orders them (a store is ordered before a message "
                           "only by a tl.fence between them)")


def test_a_read_still_in_flight_when_an_ordered_write_lands_races(cli):
    """A message orders PE 1's load before PE 0's store, but the send did not wait for the
    load, and the store lands while it is still reading."""
    code, result, err = _races(cli, "race_read_in_flight")
    assert code == 1
    (race,) = result["races"]
    writer, reader = race["accesses"]
    assert race["why"] == "in flight" and (writer["line"], reader["line"]) == (19, 15)
    assert reader["start_ps"] < writer["end_ps"] and writer["start_ps"] < reader["end_ps"]
    assert err[0].endswith(": the read was still in flight")


def test_the_shipped_kernels_have_no_races(run):
    for kernel, topology, params in (("sharded_gemm", "default", ("mode=primitive",)),
                                     ("sharded_gemm", "sip", ()),
                                     ("gqa_attention", "default", ()),
                                     ("gqa_attention", "two_sips", ("seq_len=1024",))):
        from kernbench_cli.address import load_address_map
        from kernbench_cli.sim.kernels import load_kernel, parse_params
        from kernbench_cli.sim.run import run_kernel
        from tests.conftest import test_topology

        module = load_kernel(kernel)
        result = run_kernel(module, load_address_map(test_topology(topology)),
                            parse_params(module, list(params)), timing_only=True, races=True)
        assert result.races == [], (kernel, topology)


def test_a_fence_orders_a_store_before_the_message_that_follows(cli):
    """tl.fence() makes the send wait for the store to land: no race, and the receiver's load
    starts after the store's end (race_in_flight is the same kernel without the fence)."""
    code, result, err = _races(cli, "race_fenced")
    assert (code, result["races"], err) == (0, [], [])
    code, fenceless, _ = _races(cli, "race_in_flight")
    assert code == 1 and fenceless["races"][0]["why"] == "unordered"
    writer_end = fenceless["races"][0]["accesses"][0]["end_ps"]
    assert result["latency_ps"] > fenceless["latency_ps"]  # the send waited for the store
    assert result["latency_ps"] - fenceless["latency_ps"] <= writer_end


def test_a_fence_is_timed_as_a_wait_for_the_latest_store(run):
    """A store, then a fence: PE_CPU is free again when the store lands, and the send after
    it is issued then (op log records: seq, pid, engine, kind, issue, start, end, …)."""
    result = run("race_fenced", "default", oplog=True)
    (wait,) = [r for r in result.oplog if r[3] == "wait"]
    (store,) = [r for r in result.oplog if r[3] == "store" and r[1] == 0]
    (send,) = [r for r in result.oplog if r[3] == "send" and r[1] == 0]
    assert wait[1] == 0 and wait[6] == store[6]  # the fence ends when the store lands
    assert send[4] == wait[6] + 4_000  # then the send's 4 ns issue
