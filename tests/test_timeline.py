"""The Chrome trace: tracks Perfetto draws right, their times against the model's."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from kernbench_cli.address import load_address_map
from kernbench_cli.hw.network import hbm_stream_bandwidth, transfer_ps
from kernbench_cli.report.chrome_trace import chrome_trace, dumps

from .conftest import test_topology
from .trace_events import problems


def _trace(result, topology):
    trace = chrome_trace(result, load_address_map(test_topology(topology)))
    assert problems(json.loads(dumps(trace))) == []
    return trace


def _tracks(trace):
    """{(process name, track name): [(name, start ns, end ns), …]} of the X slices."""
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["name"] == "thread_name"}
    out = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            start = round(e["ts"] * 1000)
            out[processes[e["pid"]], threads[e["pid"], e["tid"]]].append(
                (e["name"], start, start + round(e["dur"] * 1000)))
    return out


def test_a_load_feeding_a_dot_drawn_to_the_nanosecond(run, amap):
    """PE_CPU issues the load (4 ns) and the dot; the load holds PE_DMA for setup and
    streaming and the HBM slice for the streaming, then flies for the HBM latency; the dot
    waits queued until the load lands, then holds PE_GEMM; arrows follow the critical path
    CPU -> DMA -> GEMM."""
    topo, issue = amap.topology, amap.topology.cost_table.issue
    result = run("load_dot", "default", timing_only=True)
    trace = _trace(result, "default")
    streamed = topo.pe.dma.setup + transfer_ps(4096, hbm_stream_bandwidth(topo.hbm))
    landed = issue.load + streamed + topo.hbm.latency
    pe = "PE 0 (rack=0 sip=0 cube=0 pe=0)"
    tracks = _tracks(trace)
    ns = lambda ps: ps // 1000  # noqa: E731
    assert tracks[pe, "cpu"] == [("issue load", 0, 4), ("issue dot", 4, ns(4000 + issue.dot))]
    assert tracks[pe, "dma"] == [("load", 4, ns(issue.load + streamed))]
    assert tracks["shared resources", "hbm rack=0 sip=0 cube=0 pe=0"] == [
        ("load", ns(issue.load + topo.pe.dma.setup), ns(issue.load + streamed))]
    assert tracks[pe, "gemm"] == [("dot", ns(landed), ns(landed + 376_000))]
    assert (pe, "scheduler") not in tracks  # no composite: the scheduler never plans
    spans = {(e["name"], e["ph"]): round(e["ts"] * 1000) for e in trace["traceEvents"]
             if e["ph"] in "be"}
    assert spans == {("in flight", "b"): ns(issue.load + streamed), ("in flight", "e"): ns(landed),
                     ("queued", "b"): ns(issue.load + issue.dot), ("queued", "e"): ns(landed)}
    queue = [(round(e["ts"] * 1000), e["args"]["commands"]) for e in trace["traceEvents"]
             if e["ph"] == "C"]
    assert queue == [(0, 0), (ns(issue.load + issue.dot), 1), (ns(landed), 0)]
    flows = [(e["ph"], e["tid"]) for e in trace["traceEvents"] if e["ph"] in "sf"]
    assert flows == [("s", 0), ("f", 2), ("s", 2), ("f", 3)]  # CPU -> DMA -> GEMM


PLANNING = Path(__file__).parent / "costs" / "planning.toml"


@pytest.mark.parametrize(("kernel", "topology", "costs"), [
    ("gqa_attention", "default", None), ("relay", "default", None),
    ("tcm_pressure", "one", None), ("two_composites", "one", PLANNING),
    ("sharded_gemm", "default", PLANNING)])
def test_the_timeline_accounts_for_every_engine_picosecond(run, kernel, topology, costs):
    """Per PE the CPU track's issue slices add up to PE_CPU's busy time and its waits to its
    stalls, PE_DMA's slices to its busy plus wait time, each resource's track to its busy
    time, the scheduler's plans to its busy time; the queue and ring counters stay within
    their sizes and end empty."""
    result = run(kernel, topology, costs=costs, timing_only=True)
    log = result.oplog
    _trace(result, topology)
    cpu_busy, cpu_wait, dma_held = defaultdict(int), defaultdict(int), defaultdict(int)
    for s in log.cpu:
        issuing = s.name.startswith("issue ") or s.name == "cycles"
        (cpu_busy if issuing else cpu_wait)[s.pid] += s.end_ps - s.start_ps
    plans = defaultdict(int)
    for s in log.scheduler:
        if s.name == "plan":
            plans[s.pid] += s.end_ps - s.start_ps
    resources = defaultdict(int)
    queue = defaultdict(list)
    dma_free = defaultdict(int)
    for seq, pid, engine, *_ in log:
        start, held = log.times[3 * seq + 1], log.streams[2 * seq + 1]
        if engine == "dma":  # a setup under the transfer before counts once
            dma_held[pid] += held - max(start, dma_free[pid])
            dma_free[pid] = held
        if log.via[seq] >= 0:
            for name in log.paths[log.via[seq]]:
                resources[name] += held - log.streams[2 * seq]
        if log.queued[seq]:
            queue[pid] += [(log.times[3 * seq], 1), (start, -1)]
    engines = result.engines
    topo = load_address_map(test_topology(topology)).topology
    depth, slots = topo.pe.scheduler.queue_depth, topo.pe.ipcq.slots
    for pid in range(result.num_pes):
        assert cpu_busy[pid] == engines["cpu"].busy_ps[pid]
        assert cpu_wait[pid] == result.cpu_stall_ps[pid]
        assert dma_held[pid] == engines["dma"].busy_ps[pid] + engines["dma"].wait_ps[pid]
        assert plans[pid] == engines["scheduler"].busy_ps[pid]
        assert all(0 <= held <= depth for held in _levels(queue[pid]))
        assert _levels(queue[pid])[-1:] in ([], [0])
    for level in ("hbm", "sram", "noc", "ucie", "sip_link", "rack_link"):
        if level in engines:
            for name, busy in zip(engines[level].labels, engines[level].busy_ps, strict=True):
                assert resources[f"{level} {name}"] == busy
    for name, changes in log.rings.items():
        assert all(0 <= used <= slots for used in _levels(changes)), name
        assert _levels(changes)[-1] == 0, name


def _levels(changes):
    """A counter's value after each instant it changes at, from (time, +n/-n) changes."""
    levels, value, last = [], 0, None
    for t, delta in sorted(changes):
        value += delta
        if t == last:
            levels[-1] = value
        else:
            levels.append(value)
        last = t
    return levels


def test_the_scheduler_track_shows_planning_and_holding_not_composites(run):
    """With a 250 ns plan, the scheduler plans each composite for 250 ns after its issue; the
    second's tiles do not fit beside the first's, so it is held until the first ends. The
    composites' lives are async spans, not scheduler time; PE_CPU does not wait for TCM
    (no command of it takes any)."""
    result = run("two_composites", "one", costs=PLANNING, timing_only=True)
    tracks = _tracks(_trace(result, "one"))
    pe = "PE 0 (rack=0 sip=0 cube=0 pe=0)"
    first_end = next(r for r in result.oplog if r[3] == "composite")[6] // 1000
    assert tracks[pe, "scheduler"] == [("plan", 44, 294), ("plan", 294, 544),
                                       ("wait for TCM", 544, first_end)]
    assert [name for name, *_ in tracks[pe, "cpu"]] == [
        "issue load", "issue composite", "issue composite", "issue wait", "wait",
        "issue wait", "wait"]
    assert result.engines["scheduler"].busy_ps == (500_000,)


def test_ring_occupancy_and_its_track(run):
    """Every message of the relay passes a ring: its counter rises and falls back to 0."""
    result = run("relay", "default", timing_only=True)
    trace = _trace(result, "default")
    events = trace["traceEvents"]
    rings = {e["pid"] for e in events if e["name"] == "process_name"
             and e["args"]["name"] == "IPCQ rings"}
    counters = defaultdict(list)
    for e in events:
        if e["ph"] == "C" and e["pid"] in rings:
            counters[e["name"]].append(e["args"]["slots"])
    assert sorted(counters) == sorted(result.oplog.rings)
    assert all(max(values) >= 1 and values[-1] == 0 for values in counters.values())


def test_the_checker_catches_what_perfetto_misdraws():
    meta = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "p"}},
            {"ph": "M", "name": "thread_name", "pid": 0, "tid": 0, "args": {"name": "t"}}]
    bad = [
        *meta,
        {"ph": "X", "name": "a", "pid": 0, "tid": 0, "ts": 0.0, "dur": 0.01},
        {"ph": "X", "name": "b", "pid": 0, "tid": 0, "ts": 0.005, "dur": 0.01},
        {"ph": "X", "name": "c", "pid": 0, "tid": 0, "ts": 1.0, "dur": -0.001},
        {"ph": "b", "name": "q", "cat": "q", "id": 1, "pid": 0, "tid": 0, "ts": 2.0},
        {"ph": "s", "name": "f", "cat": "f", "id": 7, "pid": 0, "tid": 0, "ts": 0.001},
        {"ph": "s", "name": "f", "cat": "f", "id": 8, "pid": 0, "tid": 0, "ts": 0.001},
        {"ph": "f", "name": "f", "cat": "f", "id": 8, "bp": "e", "pid": 0, "tid": 0,
         "ts": 5.0},
        {"ph": "X", "name": "d", "pid": 1, "tid": 0, "ts": 0.0, "dur": 0.0},
    ]
    assert problems({"traceEvents": bad}) == [
        "event 4 (X 'c'): bad dur -0.001",
        "event 5 (b 'q'): async slice never ends",
        "track 0/0: 'b' [5, 15] ns partly overlaps 'a' [0, 10] ns",
        "pid 1 has slices but no process_name",
        "track 1/0 has slices but no thread_name",
        "flow ('f', 7): ends ['s'] (needs one 's' and one 'f')",
        "event 8 (f 'f'): no slice on track 0/0 at 5000 ns",
    ]
    nested = [*meta, {"ph": "X", "name": "a", "pid": 0, "tid": 0, "ts": 0.0, "dur": 0.01},
                     {"ph": "X", "name": "b", "pid": 0, "tid": 0, "ts": 0.002, "dur": 0.003},
                     {"ph": "X", "name": "c", "pid": 0, "tid": 0, "ts": 0.01, "dur": 0.01}]
    assert problems({"traceEvents": nested}) == []
