"""The Chrome trace: tracks Perfetto draws right, their times against the model's."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from kernbench_cli.address import load_address_map
from kernbench_cli.hw.network import hbm_stream_bandwidth, transfer_ps
from kernbench_cli.report.chrome_trace import chrome_trace, dumps
from tests.conftest import test_topology

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


PLANNING = Path(__file__).parents[1] / "costs" / "planning.toml"


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


# --------------------------------------------------------- what a big run's timeline keeps

def _drawn(trace):
    """{(track, name, start ns, end ns, pe)} of the X slices; pe: the PE a slice is of (its
    process, or a shared resource's transfer's ``pe``)."""
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
               if e["name"] == "thread_name"}
    out = set()
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            start = round(e["ts"] * 1000)
            pe = e["args"]["pe"] if names[e["pid"]] == "shared resources" else e["pid"]
            out.add(((names[e["pid"]], threads[e["pid"], e["tid"]]), e["name"], start,
                     start + round(e["dur"] * 1000), pe))
    return out


def test_a_filtered_timeline_keeps_what_its_pes_did_in_its_window(run):
    """Of the full timeline, the slices of PEs 1 and 3 (their tracks, and their transfers on
    shared resources) that overlap [2us, 4us], drawn whole, and nothing else; counters
    start at 2us with the value they had then; a clean trace that says what it shows."""
    from kernbench_cli.report.trace_filter import TraceFilter

    result = run("gqa_attention", "default", timing_only=True)
    amap = load_address_map(test_topology("default"))
    full = chrome_trace(result, amap)
    keep = TraceFilter(frozenset({1, 3}), 2_000_000, 4_000_000)
    part = chrome_trace(result, amap, keep)
    assert problems(json.loads(dumps(part))) == []
    expected = {s for s in _drawn(full) if s[4] in (1, 3) and s[3] >= 2000 and s[2] <= 4000}
    assert _drawn(part) == expected and len(expected) > 20
    assert any(s[2] < 2000 for s in expected)  # a slice across the window's start, whole
    assert {e["args"]["name"] for e in part["traceEvents"] if e["name"] == "process_name"} \
        == {"PE 1 (rack=0 sip=0 cube=0 pe=1)", "PE 3 (rack=0 sip=0 cube=0 pe=3)",
            "shared resources"}
    assert part["otherData"]["trace_pes"] == [1, 3]
    assert part["otherData"]["trace_window_ps"] == [2_000_000, 4_000_000]

    def queue(trace, pid):
        return [(round(e["ts"] * 1000), e["args"]["commands"]) for e in trace["traceEvents"]
                if e["ph"] == "C" and e["pid"] == pid]

    whole = queue(full, 1)
    then = [value for ns, value in whole if ns <= 2000][-1]
    assert queue(part, 1) == [(2000, then)] + [
        (ns, value) for ns, value in whole if 2000 < ns <= 4000]


def test_rings_are_kept_with_the_pe_they_deliver_to(run):
    result = run("relay", "default", timing_only=True)
    amap = load_address_map(test_topology("default"))
    from kernbench_cli.report.trace_filter import TraceFilter

    label = result.pe_labels[1]
    part = chrome_trace(result, amap, TraceFilter(frozenset({1})))
    rings = {e["name"] for e in part["traceEvents"] if e["ph"] == "C"
             and e["name"].endswith(" ring")}
    assert rings == {name for name in result.oplog.rings if name.startswith(f"PE ({label}) ")}
    assert rings and len(rings) < len(result.oplog.rings)


@pytest.mark.parametrize(("args", "message"), [
    (("--trace-pes", "0-3,x"), "--trace-pes '0-3,x': 'x' is not a PE index or a range of "
                               "them (give e.g. 0-3,8)"),
    (("--trace-pes", ""), "--trace-pes '': '' is not a PE index or a range of them (give "
                          "e.g. 0-3,8)"),
    (("--trace-pes", "5-2"), "--trace-pes '5-2': the range 5-2 runs backwards"),
    (("--trace-pes", "0,16"), "--trace-pes '0,16': PE 16 does not exist: the topology has 16 "
                              "PEs (0-15)"),
    (("--trace-window", "10us"), "--trace-window '10us': give START,END, two times such as "
                                 "10us,25us"),
    (("--trace-window", "1,2us"), "--trace-window '1,2us': expected a time such as '30ns' "
                                  "(units: ps, ns, us, µs, ms, s), got '1'"),
    (("--trace-window", "2us,1us"), "--trace-window '2us,1us': the end 1us is not after the "
                                    "start 2us"),
    (("--trace-window", "1ms,2ms"), "--trace-window starts at 1ms, after the run ended "
                                    "(t=7.844us): nothing to draw"),
])
def test_bad_trace_filters_are_one_line_errors_and_write_nothing(cli, tmp_path, args, message):
    out = tmp_path / "t.json"
    code, _, err = cli("run", "gqa_attention", "--timing-only", "--chrome-trace", str(out),
                       "--critical-path", str(tmp_path / "c.jsonl"), "--record",
                       str(tmp_path / "r.trace"), *args)
    assert (code, err) == (2, f"error: {message}\n")
    assert list(tmp_path.iterdir()) == []


def test_a_window_after_the_run_writes_no_output_at_all(cli, tmp_path):
    """Not the values and the trace, then the error (they were written before the window
    was checked)."""
    code, _, err = cli("run", "softmax", "-p", "rows=16", "--save", str(tmp_path / "x.npz"),
                       "--record", str(tmp_path / "r.trace"), "--chrome-trace",
                       str(tmp_path / "t.json"), "--trace-window", "1s,2s")
    assert (code, err[:40]) == (2, "error: --trace-window starts at 1s, afte")
    assert list(tmp_path.iterdir()) == []


def test_a_trace_filter_needs_a_timeline(cli):
    code, _, err = cli("run", "gqa_attention", "--timing-only", "--trace-window", "1us,2us")
    assert (code, err) == (2, "error: --trace-window filters the timeline: it goes with "
                              "--chrome-trace\n")


def test_a_trace_named_gz_is_the_same_trace_gzip_compressed(cli, tmp_path):
    """Byte for byte the plain file, gzip'd with no name or time in the header (equal runs,
    equal files); the op log too; replay's as run's."""
    import gzip

    run = ("run", "gqa_attention", "--timing-only", "--trace-pes", "0-3")
    for name in ("t.json", "t.json.gz", "again.json.gz"):
        oplog = tmp_path / name.replace("json", "jsonl")
        assert cli(*run, "--chrome-trace", str(tmp_path / name), "--oplog", str(oplog))[0] == 0
    packed = (tmp_path / "t.json.gz").read_bytes()
    assert packed[:2] == b"\x1f\x8b" and packed[3:8] == b"\0\0\0\0\0"  # no name, mtime 0
    assert gzip.decompress(packed) == (tmp_path / "t.json").read_bytes()
    assert packed == (tmp_path / "again.json.gz").read_bytes()
    assert gzip.decompress((tmp_path / "t.jsonl.gz").read_bytes()) == \
        (tmp_path / "t.jsonl").read_bytes()
    assert len(packed) < len((tmp_path / "t.json").read_bytes()) / 5


def test_a_gz_output_that_fails_leaves_no_file(tmp_path):
    import errno

    from kernbench_cli.errors import OutputError
    from kernbench_cli.fileio import atomic_write, gzipped_if_named

    path = tmp_path / "t.json.gz"
    path.write_bytes(b"before")

    def write(out):
        out.write(b"x" * 100_000)
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OutputError, match="No space left on device"):
        atomic_write(path, gzipped_if_named(path, write), "--chrome-trace")
    assert [p.name for p in tmp_path.iterdir()] == ["t.json.gz"]
    assert path.read_bytes() == b"before"


def test_gemm_slices_carry_their_shape(run):
    """A DOT's slice carries its M, K, N (load_dot: 32 x 64 by 64 x 32); a composite's tiles
    theirs: each tile's 2·m·k·n is its flops, and a composite's tiles cover its whole
    M x K x N (sharded_gemm with 64 KiB of TCM splits each composite into tiles)."""
    trace = _trace(run("load_dot", "default", timing_only=True), "default")
    (dot,) = [e for e in trace["traceEvents"] if e.get("cat") == "gemm"]
    assert (dot["name"], dot["args"]["m"], dot["args"]["k"], dot["args"]["n"]) == (
        "dot", 32, 64, 32)
    result = run("sharded_gemm", "default", ("M=32", "K=128", "N=512"), timing_only=True,
                 sets=("pe.tcm.size=64KiB",))
    trace = _trace(result, "default")
    tiles = [e for e in trace["traceEvents"] if e.get("cat") == "gemm"]
    assert tiles and all(e["name"] == "gemm_tile" for e in tiles)
    assert all(2 * e["args"]["m"] * e["args"]["k"] * e["args"]["n"] == e["args"]["flops"]
               for e in tiles)
    shapes = {(e["args"]["m"], e["args"]["k"], e["args"]["n"]) for e in tiles}
    assert (32, 128, 32) not in shapes  # each PE's composite is 32 x 128 by 128 x 32: tiled
    per_pe = defaultdict(int)
    for e in tiles:
        per_pe[e["pid"]] += e["args"]["m"] * e["args"]["k"] * e["args"]["n"]
    composites = result.trace.program.composites
    whole = sum(c.m * c.k * c.n for c in composites) // len(composites)
    assert set(per_pe.values()) == {whole}


def test_chrome_trace_has_a_slice_per_engine_record(cli, run, tmp_path):
    small = ("-p", "M=32", "-p", "K=128", "-p", "N=512")
    path = tmp_path / "trace.json"
    code, _, _ = cli("run", "sharded_gemm", *small, "--chrome-trace", str(path))
    assert code == 0
    data = json.loads(path.read_text())
    result = run("sharded_gemm", "default", ("M=32", "K=128", "N=512"))
    processes = {e["pid"]: e["args"]["name"] for e in data["traceEvents"]
                 if e["name"] == "process_name"}
    events = [e for e in data["traceEvents"] if e["ph"] == "X" and e["pid"] < result.num_pes
              and e["cat"] in ("dma", "gemm", "math")]  # an engine slice per engine record
    assert len(events) == sum(1 for r in result.oplog if r[2] in ("dma", "gemm", "math"))
    assert sum(1 for e in data["traceEvents"] if e["ph"] == "b" and e["name"] == "composite") \
        == sum(1 for r in result.oplog if r[3] == "composite")
    assert sorted(set(processes.values()) - {f"PE {p} ({label})" for p, label in
                                              enumerate(result.pe_labels)}) == [
        "shared resources"]
    assert processes[0] == "PE 0 (rack=0 sip=0 cube=0 pe=0)"
    first = min(events, key=lambda e: (e["ts"], e["pid"]))
    assert first["name"] == "load" and first["cat"] == "dma"
    assert first["args"]["src"].startswith("HBM rack=0 sip=0 cube=0 pe=0 ")
    assert first["args"]["dst"] == "TCM rack=0 sip=0 cube=0 pe=0 offset=0x0"
    assert data["otherData"]["latency_ps"] == result.latency_ps
    again = tmp_path / "again.json"
    cli("run", "sharded_gemm", *small, "--chrome-trace", str(again))
    assert again.read_bytes() == path.read_bytes()
