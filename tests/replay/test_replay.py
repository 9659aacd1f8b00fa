"""`run --record` and `replay`: the timing pass alone gives the run's accounting exactly."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kernbench_cli.address import load_address_map
from kernbench_cli.sim.run import replay_trace
from kernbench_cli.sim.trace_file import MAGIC, read_trace, write_trace
from tests.conftest import ROOT, TESTS, test_topology

COSTS = Path(__file__).parents[1] / "costs"
CASES = [
    ("sharded_gemm", "default", ("mode=primitive", "M=32", "K=128", "N=512")),
    ("sharded_gemm", "default", ("mode=composite",)),
    ("gqa_attention", "default", ("seq_len=2048", "chunk=64")),
    ("gqa_attention", "two_sips", ("seq_len=1024",)),
    ("ops", "one", ("op=max_keep", "dtype=bf16")),
    ("ping_pong", "pair", ()),
]


def _same_accounting(a, b) -> None:
    assert b.latency_ps == a.latency_ps
    assert b.commands == a.commands
    assert b.cpu_stall_ps == a.cpu_stall_ps
    for name, stats in a.engines.items():
        assert b.engines[name].busy_ps == stats.busy_ps, name
        assert b.engines[name].ops == stats.ops, name


@pytest.mark.parametrize(("kernel", "topology", "params"), CASES)
def test_replay_gives_the_runs_accounting_exactly(run, kernel, topology, params):
    """The run and the replay of its trace charge the same costs: latency, commands,
    stalls and every engine's busy time and ops."""
    original = run(kernel, topology, params)
    replayed = replay_trace(original.trace, load_address_map(test_topology(topology)), "t",
                            oplog=True)
    _same_accounting(original, replayed)
    assert replayed.oplog == original.oplog
    assert replayed.timing_only and replayed.verified is None


@pytest.mark.parametrize(("kernel", "topology", "params"), CASES)
def test_the_op_log_order_does_not_move_any_time(run, kernel, topology, params):
    """A PE synchronises only at shared calendars unless an op log is asked for (then at
    every DMA): the times are the same either way."""
    _same_accounting(run(kernel, topology, params, oplog=True),
                     run(kernel, topology, params, oplog=False))


@pytest.mark.parametrize("costs", ["odd.toml", "slow_issue.toml"])
def test_replay_under_other_costs_equals_a_run_with_them(run, costs):
    params = ("mode=primitive", "M=32", "K=128", "N=512")
    recorded = run("sharded_gemm", "default", params)
    direct = run("sharded_gemm", "default", params, costs=COSTS / costs)
    replayed = replay_trace(recorded.trace, load_address_map("default", COSTS / costs), "t",
                            oplog=True)
    assert replayed.latency_ps == direct.latency_ps != recorded.latency_ps
    assert replayed.oplog == direct.oplog


def test_a_trace_replays_exactly_in_another_process(tmp_path, kernbench):
    """Written by one process, replayed by another: the same numbers and op log."""
    trace, ran_log, replay_log = (tmp_path / n for n in ("t.trace", "run.jsonl", "re.jsonl"))
    args = ("-p", "seq_len=2048", "-p", "chunk=128")
    ran = kernbench.run("run", "gqa_attention", *args, "--record", str(trace), "--json",
                        "--oplog", str(ran_log))
    assert ran.returncode == 0, ran.stderr
    replayed = kernbench.run("replay", str(trace), "--json", "--oplog", str(replay_log))
    assert replayed.returncode == 0, replayed.stderr
    a, b = json.loads(ran.stdout), json.loads(replayed.stdout)
    assert b["kernel"] == "gqa_attention (replay)"
    for key in ("latency_ps", "engines", "commands", "bound", "hbm_gbps"):
        assert b[key] == a[key], key
    assert replay_log.read_bytes() == ran_log.read_bytes()


def test_cli_record_then_replay_under_other_costs(cli, tmp_path):
    trace = tmp_path / "gemm.trace"
    args = ("-p", "M=32", "-p", "K=128", "-p", "N=512", "-p", "mode=primitive")
    code, out, _ = cli("run", "sharded_gemm", *args, "--record", str(trace), "--json")
    assert code == 0
    ran = json.loads(out)
    code, out, _ = cli("replay", str(trace), "--json")
    assert code == 0
    replayed = json.loads(out)
    assert replayed["latency_ps"] == ran["latency_ps"]
    assert replayed["engines"] == ran["engines"]
    assert replayed["verified"] is None
    code, out, _ = cli("replay", str(trace), "--costs", str(COSTS / "slow_issue.toml"))
    assert code == 0 and "costs slow_issue" in out


def test_the_trace_file_is_versioned_and_deterministic(tmp_path, run):
    recorded = run("ping_pong", "pair", ())
    path = tmp_path / "t.trace"
    write_trace(path, recorded.trace)
    data = gzip.decompress(path.read_bytes())
    assert data.startswith(MAGIC)
    size = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "little")
    header = json.loads(data[len(MAGIC) + 8:len(MAGIC) + 8 + size])
    assert (header["format"], header["version"], header["kernel"]) == (
        "kernbench-trace", 6, "ping_pong")
    assert len(header["pe_stream"]) == len(recorded.trace.program.streams)
    back = read_trace(path)
    for got, want in zip(back.program.streams, recorded.trace.program.streams, strict=True):
        assert got.columns() == want.columns()
    write_trace(tmp_path / "again.trace", recorded.trace)
    assert (tmp_path / "again.trace").read_bytes() == path.read_bytes()  # deterministic bytes


def test_a_trace_needs_as_many_pes(cli, tmp_path):
    trace = tmp_path / "t.trace"
    cli("run", "sharded_gemm", "-p", "N=512", "-p", "K=64", "--record", str(trace))
    code, _, err = cli("replay", str(trace), "-t", test_topology("pair"))
    assert (code, err) == (2, f"error: {trace}: the trace has 16 PEs; topology 'pair' has 2\n")


def test_a_trace_whose_addresses_do_not_exist_is_refused(cli, tmp_path):
    trace = tmp_path / "t.trace"
    cli("run", "sharded_gemm", "-p", "N=512", "-p", "K=64", "--record", str(trace))
    # 16 PEs as well, but all in one cube: the default topology's cube 1 is not there
    code, _, err = cli("replay", str(trace), "-t", test_topology("tall"))
    assert code == 2
    assert err.startswith(f"error: {trace}: allocation 'b' at ")
    assert err.endswith("does not exist in topology 'tall': cube = 1 does not exist in topology "
                        "'tall' (system.cubes_per_sip = 1: 0..0)\n")


def _default_with_tcm(tmp_path, size: str) -> Path:
    """The shipped default topology with another TCM size, as 't.toml'."""
    from tests.conftest import shipped

    text = shipped("default").read_text().replace('size = "2MiB"', f'size = "{size}"')
    path = tmp_path / "t.toml"
    path.write_text(text.replace('costs = "costs/default.toml"\n', ""))
    return path


def test_a_trace_needing_more_tcm_than_the_topology_has_is_refused(cli, tmp_path):
    trace = tmp_path / "t.trace"
    cli("run", "sharded_gemm", "-p", "N=512", "-p", "K=64", "--record", str(trace))
    small = _default_with_tcm(tmp_path, "4KiB")
    code, _, err = cli("replay", str(trace), "-t", str(small))
    assert code == 2
    assert err == (f"error: {trace}: PE (rack=0 sip=0 cube=0 pe=0) uses 8192 B of TCM; "
                   "topology 'default' has 4096 B\n")


def test_a_trace_cut_for_other_ipcq_rings_is_refused_and_its_sensitivity_skips_them(
        cli, tmp_path):
    """The collectives cut messages by `tl.ring_capacity`: on rings of another slot size a
    run makes another program (here the replay deadlocked, or timed the old cut), so the
    replay is refused; sensitivity leaves the rings' keys out. A kernel that reads no
    capacity (softmax) replays on any rings."""
    import kernbench_cli as kb

    trace = tmp_path / "t.trace"
    assert cli("run", "all_reduce", "--timing-only", "--record", str(trace))[0] == 0
    assert read_trace(trace).program.ring_capacity == (4, 4096)
    code, _, err = cli("replay", str(trace), "--set", "pe.ipcq.slot_size=16B")
    assert (code, err) == (2, f"error: {trace}: the kernel cut its messages for IPCQ rings "
                              "of 4 slots of 4096 B (tl.ring_capacity); topology 'default' "
                              "has 4 of 16 B, where a run would make another program: run "
                              "it there instead\n")
    keys = {c.key for c in kb.sensitivity(kb.run("all_reduce", timing_only=True)).changes}
    assert "hbm.bandwidth" in keys and not {"pe.ipcq.slots", "pe.ipcq.slot_size"} & keys
    other = tmp_path / "s.trace"
    assert cli("run", "softmax", "--timing-only", "--record", str(other))[0] == 0
    assert read_trace(other).program.ring_capacity is None
    assert cli("replay", str(other), "--set", "pe.ipcq.slot_size=16B")[0] == 0


def test_a_composite_replayed_with_other_tcm_plans_as_a_run_there(run, tmp_path):
    """The trace keeps the TCM free at each composite as (hole, top), not as bytes: with
    another TCM size the replay tiles exactly as a run on that topology does."""
    small = _default_with_tcm(tmp_path, "320KiB")  # too little for the 2 MiB plan's tiles
    params = ("mode=composite", "M=128", "K=1024", "N=2048")
    recorded = run("sharded_gemm", "default", params)
    direct = run("sharded_gemm", str(small), params)
    replayed = replay_trace(recorded.trace, load_address_map(str(small)), "t", oplog=True)
    assert direct.latency_ps != recorded.latency_ps
    _same_accounting(direct, replayed)
    assert replayed.oplog == direct.oplog


def test_a_large_tensor_replayed_with_other_tcm_stays_at_the_top_as_a_run_there_places_it(
        run, tmp_path):
    """A tensor of 128 KiB or more is placed from the top of TCM, and the stream keeps its
    place from the top: replayed on a TCM half the size, its address is where a run there
    puts it (the A operand, [512, 256] bf16 = 256 KiB, just under the top), not the
    recording's."""
    from kernbench_cli.hw.oplog import OP_FIELDS

    small = _default_with_tcm(tmp_path, "1MiB")
    params = ("mode=composite", "M=512", "K=256", "N=2048")
    recorded = run("sharded_gemm", "default", params)
    direct = run("sharded_gemm", str(small), params)
    write_trace(tmp_path / "t.trace", recorded.trace)  # negative offsets kept on disk
    replayed = replay_trace(read_trace(tmp_path / "t.trace"), load_address_map(str(small)),
                            "t", oplog=True)
    assert replayed.oplog == direct.oplog
    pid, kind, dst = (OP_FIELDS.index(name) for name in ("pid", "kind", "dst"))
    for result, top in ((recorded, 2 << 20), (replayed, 1 << 20)):
        tcm = load_address_map(test_topology("default")).pe_tcm_addr(0, 0, 0, 0, 0)
        load = next(r for r in result.oplog if r[pid] == 0 and r[kind] == "load")
        assert load[dst] == tcm + top - 512 * 256 * 2
    assert recorded.trace.program.tcm_peak[0] == 512 * 256 * 2


def _trace_bytes(header: dict, columns: bytes = b"") -> bytes:
    head = json.dumps(header).encode()
    return gzip.compress(MAGIC + len(head).to_bytes(8, "little") + head + columns, mtime=0)


def _damaged(tmp_path, run, edit) -> Path:
    """A real trace of ping_pong, with `edit(header, streams)` applied."""
    recorded = run("ping_pong", "pair", ())
    good = tmp_path / "good.trace"
    write_trace(good, recorded.trace)
    trace = read_trace(good)
    edit(trace)
    path = tmp_path / "bad.trace"
    write_trace(path, trace)
    return path


@pytest.mark.parametrize(("content", "message"), [
    (b"plain text", "not a kernbench trace (Not a gzipped file (b'pl'))"),
    (gzip.compress(b'{"format": "other"}', mtime=0),
     "not a kernbench trace (no format 'kernbench-trace')"),
    (gzip.compress(b'{"format": "kernbench-trace", "version": 1}', mtime=0),
     "trace version 1 is not one this kernbench reads (4, 5, 6); record the run again"),
    (_trace_bytes({"format": "kernbench-trace", "version": 9}),
     "trace version 9 is not one this kernbench reads (4, 5, 6); record the run again"),
    (_trace_bytes({"format": "kernbench-trace", "version": 5}), "damaged trace: no 'lengths'"),
    (_trace_bytes({"format": "kernbench-trace", "version": 5, "lengths": [3]}),
     "damaged trace: column 'op' is cut short"),
])
def test_bad_trace_files(cli, tmp_path, content, message):
    path = tmp_path / "bad.trace"
    path.write_bytes(content)
    code, _, err = cli("replay", str(path))
    assert (code, err) == (2, f"error: {path}: {message}\n")


def _set(column: str, pid: int, index: int, value: int):
    def edit(trace) -> None:
        getattr(trace.program.streams[pid], column)[index] = value
    return edit


@pytest.mark.parametrize(("edit", "message"), [
    (_set("op", 0, 0, 99), "PE 0 command 0 has a command of unknown kind"),
    (_set("a", 0, 1, 5), "PE 0 command 1 has a producer that is not an earlier command"),
    (_set("arg", 0, 1, 0), "PE 0 command 1 has a message to or from a PE that is not another PE"),
    (_set("src", 0, 0, 0x10), "PE 0 reaches 0x10, which no host allocation holds"),
    # a load's bytes past its span, or TCM past the PE's peak: once timed as an 11 s load,
    # or reported as a model invariant broken (a bug in kernbench)
    (_set("size", 0, 0, 1 << 39), "PE 0 command 0 has a load or store whose span is less "
                                  "than its bytes"),
    (_set("tcm", 0, 0, 1 << 30), "PE 0 command 0 has more TCM in use than the PE's recorded "
                                 "peak"),
])
def test_a_damaged_trace_is_an_error_not_a_crash(cli, tmp_path, run, edit, message):
    path = _damaged(tmp_path, run, edit)
    code, _, err = cli("replay", str(path))
    assert (code, err) == (2, f"error: {path}: damaged trace: {message}\n")


def test_a_load_past_its_allocation_is_a_damaged_trace(cli, tmp_path, run):
    """A load whose span (and bytes) reach past the host allocation it starts in."""
    def edit(trace) -> None:
        stream = trace.program.streams[0]
        stream.size[0] = stream.arg[0] = 1 << 39
        edit.at = stream.src[0]

    path = _damaged(tmp_path, run, edit)
    code, _, err = cli("replay", str(path))
    assert (code, err) == (2, f"error: {path}: damaged trace: PE 0 moves 549,755,813,888 B "
                              f"from {edit.at:#x}, past the end of the host allocation "
                              "holding it\n")


def test_replaying_needs_no_kernel_file(tmp_path, kernbench):
    """The trace is the whole program: a replay never imports the kernel."""
    trace = tmp_path / "t.trace"
    ran = kernbench.run("run", str(TESTS / "kernels" / "ping_pong.py"), "-t",
                        test_topology("pair"), "--record", str(trace))
    assert ran.returncode == 0, ran.stderr
    probe = ("import sys, runpy; sys.argv = ['kernbench', 'replay', sys.argv[1], '--json'];"
             "import kernbench_cli.cli.app as app\n"
             "try:\n    app.main()\nexcept SystemExit:\n    pass\n"
             "print(any(m.startswith('kernbench_kernel_') for m in sys.modules), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", probe, str(trace)], capture_output=True,
                         text=True, check=True)
    assert out.stderr.strip().endswith("False")
    assert json.loads(out.stdout)["kernel"] == "ping_pong (replay)"


def test_replay_keeps_the_runs_set_items_and_cost_table(cli, tmp_path):
    """A run under `--set` and `--costs` replays under both, and says so; yours apply after
    them; `--no-recorded-sets` drops them; a cost table that is gone is an error."""
    trace = tmp_path / "gemm.trace"
    costs = tmp_path / "costs.toml"
    costs.write_text((COSTS / "slow_issue.toml").read_text())
    args = ("--timing-only", "--set", "pe.gemm.rows=4", "--costs", str(costs))
    code, out, _ = cli("run", "sharded_gemm", *args, "--record", str(trace), "--json")
    assert code == 0
    ran = json.loads(out)
    code, out, _ = cli("replay", str(trace), "--json")
    replayed = json.loads(out)
    assert code == 0 and replayed["latency_ps"] == ran["latency_ps"]
    assert replayed["overrides"] == ["pe.gemm.rows=4"]
    assert replayed["costs"] == ran["costs"]
    _, out, _ = cli("run", "sharded_gemm", "--timing-only", "--set", "pe.gemm.rows=8",
                    "--costs", str(costs), "--json")
    code, again, _ = cli("replay", str(trace), "--set", "pe.gemm.rows=8", "--json")
    assert code == 0 and json.loads(again)["latency_ps"] == json.loads(out)["latency_ps"]
    _, out, _ = cli("run", "sharded_gemm", "--timing-only", "--costs", str(costs), "--json")
    code, bare, _ = cli("replay", str(trace), "--no-recorded-sets", "--json")
    assert code == 0 and json.loads(bare)["latency_ps"] == json.loads(out)["latency_ps"]
    costs.unlink()
    code, _, err = cli("replay", str(trace))
    assert code == 2
    assert err == (f"error: {trace}: the run used the cost table {costs.resolve()}, which is "
                   "not there; give --costs\n")


def test_a_replay_on_the_recorded_topology_or_costs_refuses_them_changed(cli, tmp_path):
    """A trace keeps the digests of the topology and cost table its run resolved: replayed
    on its own, an edited topology file, a shipped topology of its name standing in for
    its file gone, or an edited cost table was timed silently under the run's names. Each
    is refused, naming both digests; `--topology` or `--costs` replays on it as it is."""

    shipped = (ROOT / "topologies" / "default.toml").read_text()
    topology, costs = tmp_path / "mine.toml", tmp_path / "costs.toml"
    topology.write_text(shipped)
    costs.write_text((COSTS / "slow_issue.toml").read_text())
    trace = tmp_path / "t.trace"
    code, out, _ = cli("run", "softmax", "-t", str(topology), "--costs", str(costs),
                       "--timing-only", "--record", str(trace), "--json")
    assert code == 0
    ran = json.loads(out)
    assert read_trace(trace).digests == {"topology": ran["topology_digest"],
                                         "costs": ran["costs_digest"],
                                         "kernel": ran["kernel_digest"]}
    topology.write_text(shipped.replace('"102.4GB/s"', '"25.6GB/s"'))
    _, out, _ = cli("run", "softmax", "-t", str(topology), "--costs", str(costs),
                    "--timing-only", "--json")
    now = json.loads(out)["topology_digest"]
    code, _, err = cli("replay", str(trace))
    refusal = (f"error: {trace}: the run's topology {topology.resolve()} is not the one it "
               f"was recorded on (#{ran['topology_digest']} then, #{now} now: edited since, "
               "or another of its name); give --topology to replay on it as it is\n")
    assert (code, err) == (2, refusal)
    code, out, _ = cli("replay", str(trace), "-t", str(topology), "--json")
    assert code == 0 and json.loads(out)["topology_digest"] == now
    topology.write_text(shipped)  # recorded with an item, replayed without it, edited
    itemised = tmp_path / "itemised.trace"
    cli("run", "softmax", "-t", str(topology), "--costs", str(costs), "--timing-only",
        "--set", "pe.clock=2GHz", "--record", str(itemised))
    topology.write_text(shipped.replace('"102.4GB/s"', '"25.6GB/s"'))
    for items in ([], ["--set", "pe.clock=2GHz"]):  # checked with the run's own items
        code, _, err = cli("replay", str(itemised), "--no-recorded-sets", *items)
        assert code == 2 and err.startswith(f"error: {itemised}: the run's topology "
                                            f"{topology.resolve()} is not the one it was")
    topology.unlink()  # the shipped default stands in: it is what the run used
    code, out, _ = cli("replay", str(trace), "--json")
    assert code == 0 and json.loads(out)["latency_ps"] == ran["latency_ps"]
    costs.write_text((COSTS / "slow_issue.toml").read_text().replace("=", "= ", 1))
    assert cli("replay", str(trace))[0] == 0  # the same values: the same digest
    costs.write_text(costs.read_text().replace('"40ns"', '"41ns"'))
    code, _, err = cli("replay", str(trace))
    assert code == 2 and err.startswith(
        f"error: {trace}: the run's cost table {costs.resolve()} is not the one it was "
        f"recorded on (#{ran['costs_digest']} then, #")


def test_a_replay_on_another_topology_says_where_its_streams_were_made(cli, tmp_path):
    """softmax recorded on `default` (16 PEs) and replayed on `sip` re-times the 16 PEs'
    program, not the one softmax makes for 128 PEs (1.919 us), yet read as "softmax
    rows=1024 on sip": the result now keeps where its streams were recorded, and the
    summary and `compare` say so."""
    trace = tmp_path / "t.trace"
    code, out, _ = cli("run", "softmax", "--timing-only", "--record", str(trace), "--json")
    ran = json.loads(out)
    code, out, _ = cli("replay", str(trace), "--json")
    assert code == 0 and json.loads(out)["recorded_on"] == {
        "topology": "default", "topology_digest": ran["topology_digest"], "pes": 16}
    code, text, _ = cli("replay", str(trace))
    assert code == 0 and "recorded on" not in text  # where it was made: nothing to say
    code, out, _ = cli("replay", str(trace), "-t", "sip", "--json")
    (tmp_path / "replay.json").write_text(out)
    assert json.loads(out)["recorded_on"]["pes"] == 16 and json.loads(out)["pes"] == 128
    code, text, _ = cli("replay", str(trace), "-t", "sip")
    line = f"default #{ran['topology_digest']}, 16 PEs"
    assert code == 0 and f"recorded on    {line}: the streams the kernel made" in text
    code, out, _ = cli("run", "softmax", "-t", "sip", "--timing-only", "--json")
    (tmp_path / "run.json").write_text(out)
    code, out, _ = cli("compare", str(tmp_path / "replay.json"), str(tmp_path / "run.json"),
                       "--json")
    assert json.loads(out)["changed"] == [
        {"kernel": "softmax (replay)", "recorded on": line},
        {"kernel": "softmax", "recorded on": "not set"}]


def _field(name: str, value):
    def edit(trace) -> None:
        setattr(trace, name, value)
    return edit


@pytest.mark.parametrize(("edit", "message"), [
    (_field("kernel", "k" * 1_000_000), "damaged trace: a string of 1,000,000 characters "
                                        "('kkkkkkkkkkkkkkkkkkkk'…); at most 4,096"),
    (_field("kernel", "k" * 300), "damaged trace: kernel is a name of 300 characters "
                                  "('kkkkkkkkkkkkkkkkkkkk'…); at most 255"),
    (_field("sets", ("nonsense",)), "damaged trace: sets holds 'nonsense', not a KEY=VALUE "
                                    "item"),
])
def test_a_trace_names_what_a_report_can_show_or_is_refused_at_once(cli, tmp_path, run, edit,
                                                                   message):
    """A megabyte-long kernel name would take the report minutes to lay out: refused by
    the trace reader itself, before anything is replayed or reported."""
    from kernbench_cli.sim.trace_file import TraceError

    path = _damaged(tmp_path, run, edit)
    with pytest.raises(TraceError) as refused:
        read_trace(path)
    assert str(refused.value) == f"{path}: {message}"
    code, _, err = cli("replay", str(path))
    assert (code, err) == (2, f"error: {path}: {message}\n")


def test_what_a_trace_gave_is_said_to_come_from_it(cli, tmp_path, run):
    """A bad recorded --set is the trace's (not a --set you gave), and so is a topology file
    the trace names, or a topology name it falls back to."""
    path = _damaged(tmp_path, run, _field("sets", ("pe.gemm.rows=-5",)))
    code, _, err = cli("replay", str(path))
    assert (code, err) == (2, f"error: {path}: the run's recorded --set pe.gemm.rows=-5: "
                              "pe.gemm.rows: expected a positive integer, got -5 "
                              "(--no-recorded-sets leaves them out)\n")
    # left out, they cannot tell whether the files are the ones recorded on, which the
    # digests are of with the items applied: given, they replay
    code, _, err = cli("replay", str(path), "--no-recorded-sets")
    assert (code, err) == (2, f"error: {path}: the run's --set items no longer load on the "
                              "topology and cost table it was recorded on (--set "
                              "pe.gemm.rows=-5: pe.gemm.rows: "
                              "expected a positive integer, got -5), so they cannot be "
                              "checked against it (edited since?); give --topology and "
                              "--costs to replay on them as they are\n")
    assert cli("replay", str(path), "--no-recorded-sets", "-t", test_topology("pair"),
               "--costs", str(ROOT / "topologies" / "costs" / "default.toml"))[0] == 0
    junk = tmp_path / "junk.toml"
    junk.write_text("this is not TOML")
    path = _damaged(tmp_path, run, _field("topology_file", str(junk)))
    code, _, err = cli("replay", str(path))
    assert code == 2
    assert err.startswith(f"error: {junk}: invalid TOML: ")
    assert err.endswith(f" (read because {path} names it; --topology or --costs gives "
                        "another)\n")
    assert cli("replay", str(path), "-t", test_topology("pair"))[0] == 0
    path = _damaged(tmp_path, run, lambda t: (_field("topology_file", "/gone/pair.toml")(t),
                                              _field("topology", "/etc/passwd")(t)))
    code, _, err = cli("replay", str(path))
    assert (code, err) == (2, f"error: {path}: the run's topology '/etc/passwd': its file "
                              "/gone/pair.toml is not there, and no shipped topology has "
                              "that name; give --topology\n")


def test_a_replay_that_cannot_plan_a_composite_says_where(cli, tmp_path):
    """On a TCM just large enough for the kernel's tensors, no tile buffer fits."""
    trace = tmp_path / "t.trace"
    cli("run", "sharded_gemm", "-p", "N=512", "-p", "K=64", "--record", str(trace))
    tight = _default_with_tcm(tmp_path, "8KiB")  # A, 64 x 64 f16, fills it
    code, _, err = cli("replay", str(trace), "-t", str(tight))
    assert code == 1
    assert err == (f"error: replay of {trace}: PE (rack=0 sip=0 cube=0 pe=0) at t=44ns: "
                   "tl.composite: no tile plan for a 64x64x32 GEMM fits the 0 B of free TCM\n")


def test_a_trace_replays_with_its_kernel_file_gone(tmp_path):
    """A trace replays with the kernel file gone (no kernel code in a replay)."""
    kernel = tmp_path / "k.py"
    kernel.write_text((TESTS / "kernels" / "ping_pong.py").read_text())
    from kernbench_cli.sim.kernels import load_kernel, parse_params
    from kernbench_cli.sim.run import run_kernel

    module = load_kernel(str(kernel))
    amap = load_address_map(test_topology("pair"))
    result = run_kernel(module, amap, parse_params(module, []), oplog=True)
    path = tmp_path / "t.trace"
    write_trace(path, result.trace)
    kernel.unlink()
    replayed = replay_trace(read_trace(path), amap, "t", oplog=True)
    assert replayed.oplog == result.oplog


def test_a_replay_needs_the_config_the_run_read(cli, tmp_path):
    """A trace keeps the digest of each file its run's parameters named (a model's
    config.json): its replay reads the config again for its bounds and metrics, so the file
    edited or gone is refused, naming it and both digests; restored, it replays."""
    import hashlib
    import shutil

    config, trace = tmp_path / "m.json", tmp_path / "t.trace"
    shutil.copy(TESTS / "configs" / "hf" / "llama.json", config)
    digest = hashlib.sha256(config.read_bytes()).hexdigest()[:8]
    code, out, _ = cli("run", "llama_decode", "-p", f"config={config}", "--timing-only",
                       "--record", str(trace), "--json")
    assert code == 0
    ran = json.loads(out)
    code, out, _ = cli("replay", str(trace), "--json")
    assert code == 0
    assert json.loads(out)["file_digests"] == {"config": digest}
    assert json.loads(out)["latency_ps"] == ran["latency_ps"]
    original = config.read_bytes()
    config.write_text(json.dumps(json.loads(original) | {"intermediate_size": 2048}))
    now = hashlib.sha256(config.read_bytes()).hexdigest()[:8]
    code, _, err = cli("replay", str(trace))
    assert code == 2
    assert err.strip() == (f"error: {trace}: -p config={config} is not the file the recorded "
                           f"run read (#{digest} then, #{now} now): restore it, or run again")
    config.unlink()
    code, _, err = cli("replay", str(trace))
    assert code == 2 and "(#" + digest + " then, no regular file there now)" in err
    config.write_bytes(original)
    assert cli("replay", str(trace))[0] == 0


def test_a_config_changed_during_a_replay_gives_no_result(cli, tmp_path, monkeypatch):
    """The replay reads the config again (its metrics, its bounds): one edited while it runs
    is refused as a run's is, not reported under the digest it had."""
    import shutil

    import kernbench_cli.sim.run as sim_run

    config, trace = tmp_path / "m.json", tmp_path / "t.trace"
    shutil.copy(TESTS / "configs" / "hf" / "llama.json", config)
    code, _, _ = cli("run", "llama_decode", "-p", f"config={config}", "--timing-only",
                     "--record", str(trace))
    assert code == 0
    replay = sim_run._replay

    def editing(*args):
        result = replay(*args)
        config.write_text(json.dumps(json.loads(config.read_text()) | {"vocab_size": 512}))
        return result

    monkeypatch.setattr(sim_run, "_replay", editing)
    code, out, err = cli("replay", str(trace), "--json")
    assert (code, out) == (2, "")
    assert err.strip() == (f"error: {trace}: -p config={config}: the file changed during the "
                           "replay, so its result is not reported: replay again")


def test_a_largest_batch_replayed_on_more_hbm_states_the_batch_it_re_times(cli, tmp_path):
    """`batch = 0` runs the largest batch that fits (23 sequences in 1 MiB slices); the
    trace keeps 23 (`llama_decode.resolved`), so a replay with 2 MiB slices, where 53
    would fit, states the 23 sequences' step: its tokens/s are 23 over its TPOT, and its
    energy per token its energy over 23."""
    trace = tmp_path / "b0.trace"
    common = ("-p", "context=1000", "--timing-only")
    code, out, err = cli("run", "llama_decode", "--set", "hbm.slice_size=1MiB",
                         "-p", "batch=0", *common, "--record", str(trace), "--json")
    assert code == 0, err
    ran = json.loads(out)
    # the result names the batch it ran (it said 0, the sentinel), as the trace keeps it
    assert ran["params"]["batch"] == 23 and read_trace(trace).params["batch"] == 23
    code, out, _ = cli("run", "llama_decode", "--set", "hbm.slice_size=1MiB", "-p", "batch=0",
                       *common, "--bounds-only", "--json")
    assert json.loads(out)["params"]["batch"] == 23
    code, out, err = cli("replay", str(trace), "--set", "hbm.slice_size=2MiB", "--json")
    assert code == 0, err
    replayed = json.loads(out)
    metrics = replayed["metrics"]
    assert replayed["params"]["batch"] == 23 and metrics["max_batch"] == 53
    assert metrics["tokens_per_s"] == pytest.approx(23e12 / metrics["tpot_ps"], rel=1e-12)
    # no prompt, one step: the step is the whole run, static power over all of it
    energy_pj = replayed["energy_pj"]["total"]
    assert metrics["energy_per_token_uj"] == pytest.approx(energy_pj / 1e6 / 23, rel=1e-9)
    code, out, err = cli("run", "llama_decode", "--set", "hbm.slice_size=2MiB",
                         "-p", "batch=23", *common, "--json")
    assert json.loads(out)["metrics"]["hbm_bound_ps"] == metrics["hbm_bound_ps"]
