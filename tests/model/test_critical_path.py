"""The critical path: a chain of steps from t=0 to the latency, each naming its PE, engine,
kernel line and cause, through messages and credits back to where the time went; its
totals by engine and cause, the what-if bounds, and the JSON and file that carry it."""

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


def test_a_composites_first_streamed_tiles_start_from_its_dispatch(run, amap):
    """The composite waits for its TCM operand (the load, landing after its HBM latency),
    but its first weight tiles load from its dispatch: their start was put down to the
    load (44 ns of `dma` on the path, PE_CPU's issue of the composite), so the what-if of
    a faster PE_CPU fell short of what halving the issue costs saves."""
    costs = amap.topology.cost_table.issue
    _, path = _path(run, "load_composite")
    assert [(s.engine, s.kind, s.line, s.start_ps, s.end_ps) for s in path.steps[:3]] == [
        ("cpu", "issue load", 16, 0, costs.load),
        ("cpu", "issue composite", 17, costs.load, costs.load + costs.composite),
        ("dma", "transfer_tile", 17, costs.load + costs.composite, path.steps[2].end_ps)]
    assert not any(s.kind == "load" for s in path.steps)  # the load lands off the path
    assert path.by_engine["cpu"] == costs.load + costs.composite


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
    credit to that copy, not to the end of the receive it belongs to (which would leave
    the rest of the run unexplained)."""
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
    assert path["what_if_2x_faster_saves_ps"]["gemm"] == gemm // 2
    steps = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert len(steps) == path["steps"]
    assert steps[0]["start_ps"] == 0 and steps[-1]["end_ps"] == result["latency_ps"]
    assert {"pid", "pe", "command", "line", "kind", "engine", "cause", "start_ps",
            "end_ps"} <= set(steps[0])
    code, text, _ = cli("run", "sharded_gemm")
    assert "critical path gemm 96.1% (PE 0), dma 3.8% (PE 0), cpu 0.1% (PE 0); by cause: " \
           "execute 96.1%, transfer 3.8%, CPU issue 0.1%" in " ".join(text.split())
    assert "gemm 2x faster: about 17.344us sooner" in " ".join(text.split())
