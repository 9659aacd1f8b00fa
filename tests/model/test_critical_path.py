"""Insight: the critical path, what-if bounds, timelines, races, TCM high water."""

from __future__ import annotations

import json

from kernbench_cli.hw.network import hbm_stream_bandwidth, transfer_ps


def _path(run, kernel, topology="default", params=()):
    result = run(kernel, topology, params, timing_only=True)
    path = result.critical_path
    assert sum(path.by_engine.values()) == sum(path.by_cause.values()) == result.latency_ps
    assert path.steps[0].start_ps == 0 and path.steps[-1].end_ps == result.latency_ps
    for before, after in zip(path.steps, path.steps[1:], strict=False):
        assert before.end_ps == after.start_ps  # the steps tile the run
    return result, path


def test_a_load_feeding_a_dot(run, amap):
    """CPU issue (4 ns), then the 4 KiB load (setup + stream + HBM latency), then the GEMM:
    2 x 2 folds of 64 + 30 cycles."""
    topo = amap.topology
    result, path = _path(run, "load_dot")
    load = topo.pe.dma.setup + transfer_ps(4096, hbm_stream_bandwidth(topo.hbm)) \
        + topo.hbm.latency
    assert path.by_engine == {"gemm": 4 * 94_000, "dma": load, "cpu": 4_000}
    assert [(s.engine, s.kind, s.line) for s in path.steps] == [
        ("cpu", "issue load", 13), ("dma", "load", 13), ("gemm", "dot", 14)]
    assert result.latency_ps == 4_000 + load + 376_000


def test_a_chain_of_messages_over_four_pes(run):
    """The path runs back through each PE's send to the PE before it, to PE 0's load."""
    _, path = _path(run, "relay")
    sends = [s.pid for s in path.steps if s.kind == "send"]
    assert sends == [0, 1, 2]
    assert path.steps[0].pid == 0 and path.steps[0].kind == "issue load"
    assert next(iter(path.by_engine)) == "dma"  # the messages' transfers
    assert path.by_cause["transfer"] > 0.9 * sum(path.by_cause.values())


def test_a_credit_freed_by_a_copy_set_aside_leads_back_to_that_copy(run):
    """PE 2's third send waits for a credit of PE 0's two-slot ring. PE 0's receive from
    the far PE, issued after 1000 cycles (1 us) and 4 ns of issue, copies PE 2's two waiting
    chunks aside (the first: 20 ns setup + 256 B at the NoC's 64 GB/s), then waits for
    its own message until long after. The first copy's credit is back at PE 2 12 ns later
    (UCIe and a NoC hop); PE 2 then computes 5000 cycles. The path runs back through the
    credit to that copy, not to the end of the receive it belongs to (once it led to
    nothing, and the rest of the run was 'unexplained')."""
    result = run("stashed_credit", "two_sips", sets=("pe.ipcq.slots=2",))
    path = result.critical_path
    assert [(s.pid, s.kind, s.start_ps, s.end_ps) for s in path.steps] == [
        (0, "cycles", 0, 1_000_000), (0, "issue recv", 1_000_000, 1_004_000),
        (0, "recv copy", 1_004_000, 1_028_000), (2, "IPCQ credit", 1_028_000, 1_040_000),
        (2, "cycles", 1_040_000, 6_040_000)]
    assert result.latency_ps == 6_040_000


def test_a_cpu_bound_loop_of_tiny_primitives(run):
    result, path = _path(run, "tiny_ops", "one")
    assert path.by_cause["CPU issue"] > 0.85 * result.latency_ps
    # the first MATH waits for the load's data; from then on PE_CPU issuing sets the pace
    assert [s.kind for s in path.steps][:4] == ["issue load", "load", "issue math",
                                                "issue math"]


def test_a_kernel_bound_by_a_shared_resource(run, amap):
    """Three PEs load 64 KiB each from PE 0's slice at once; all three cross the NoC link
    pe0->pe1 and share its 64 GB/s, so each ends after three loads' time: the path names the
    link, and the time beyond the load's own (two loads' worth) as waiting for it."""
    topo = amap.topology
    _, path = _path(run, "shared_slice")
    stream = transfer_ps(65536, topo.noc.bandwidth)
    assert path.resource_waits() == {"noc rack=0 sip=0 cube=0 pe0->pe1": 2 * stream}
    assert path.by_cause["resource wait"] == 2 * stream
    wait = next(s for s in path.steps if s.cause == "resource wait")
    assert (wait.kind, wait.line, wait.engine) == ("load", 13, "noc")


def test_the_summary_json_and_file_carry_the_path(cli, tmp_path):
    out_file = tmp_path / "path.jsonl"
    code, out, _ = cli("run", "sharded_gemm", "--json", "--critical-path", str(out_file))
    assert code == 0
    result = json.loads(out)
    path = result["critical_path"]
    assert sum(path["by_engine"].values()) == sum(path["by_cause"].values()) \
        == result["latency_ps"]
    assert result["bound"]["engine"] == max(path["by_engine"], key=path["by_engine"].get) \
        == "gemm"
    gemm = path["by_engine"]["gemm"]
    assert path["what_if_2x_faster_saves_at_most_ps"]["gemm"] == gemm // 2
    steps = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert len(steps) == path["steps"]
    assert steps[0]["start_ps"] == 0 and steps[-1]["end_ps"] == result["latency_ps"]
    assert {"pid", "pe", "command", "line", "kind", "engine", "cause", "start_ps",
            "end_ps"} <= set(steps[0])
    code, text, _ = cli("run", "sharded_gemm")
    assert "critical path gemm 96.1% (PE 0), dma 3.9% (PE 0), cpu 0.0% (PE 0); by cause: " \
           "execute 96.1%, transfer 3.9%, CPU issue 0.0%" in " ".join(text.split())
    assert "gemm 2x faster: at most 17.344us sooner" in " ".join(text.split())


def test_a_full_tcm_names_what_holds_it(cli):
    from pathlib import Path

    path = Path(__file__).parents[1] / "kernels" / "tcm_holders.py"
    code, _, err = cli("run", str(path))
    assert code == 1
    assert err == (f"error: {path}:19: PE (rack=0 sip=0 cube=0 pe=0) at t=16ns: tensors overflow "
                   "TCM: TCM of PE (rack=0 sip=0 cube=0 pe=0) is full: tl.load needs 256KiB "
                   "(262144 B); 0 B of 2MiB free, the largest free block is 0 B; held by: 1MiB "
                   "tl.load (line 16), 512KiB tl.load (line 17), 512KiB multiply (PE_MATH) "
                   "(line 18)\n")


def test_the_tcm_high_water_says_how_much_when_and_where(cli):
    """tcm_pressure: the composite's 512 KiB of tile buffers, then (after it ends) the
    1.75 MiB tensor of line 23 alone: that is the most the TCM held."""
    from pathlib import Path

    path = Path(__file__).parents[1] / "kernels" / "tcm_pressure.py"
    code, out, _ = cli("run", str(path), "--json", "--per-pe")
    assert code == 0
    result = json.loads(out)
    high = result["tcm_high_water"]
    assert (high["pe"], high["bytes"], high["line"], high["tcm_bytes"]) == (
        "rack=0 sip=0 cube=0 pe=0", 1_835_008, 23, 2_097_152)
    pe0 = result["per_pe"][0]
    assert (pe0["tcm_high_water_bytes"], pe0["tcm_high_water_ps"]) == (
        high["bytes"], high["time_ps"])
    assert result["per_pe"][1]["tcm_high_water_bytes"] == 0  # PE 1 did nothing
    code, out, _ = cli("run", str(path))
    assert "TCM            1,835,008 B (87.5%) of 2MiB at most (tensors and tile buffers; PE" \
           "\n               0 at t=268.885us, kernel line 23)" in out


def test_progress_names_the_pass_and_how_far_it_got():
    from types import SimpleNamespace

    from kernbench_cli.sim.watch import Watch

    watch = Watch()
    assert watch.text() == "setting up"
    watch.begin("functional pass", SimpleNamespace(commands=12_345))
    assert watch.text().startswith("functional pass: 12,345 commands, ")
    procs = [SimpleNamespace(done=True), SimpleNamespace(done=False)]
    watch.begin("timing pass", SimpleNamespace(procs=procs, env=SimpleNamespace(now=2_500_000)))
    assert watch.text().startswith("timing pass: t=2.5us simulated, 1 of 2 PEs done, ")


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
