"""`run --record` and `replay`: the same accounting without kernel code or values."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kernbench_cli.address import load_address_map
from kernbench_cli.sim.run import replay_trace
from kernbench_cli.sim.trace_file import read_trace, write_trace

from .conftest import test_topology

COSTS = Path(__file__).parent / "costs"
CASES = [
    ("sharded_gemm", "default", ("mode=primitive", "M=32", "K=128", "N=512")),
    ("sharded_gemm", "default", ("mode=composite",)),
    ("gqa_attention", "default", ("seq_len=2048", "chunk=64")),
    ("gqa_attention", "two_sips", ("seq_len=1024",)),
    ("ops", "one", ("op=max_keep", "dtype=bf16")),
    ("ping_pong", "pair", ()),
]


@pytest.mark.parametrize(("kernel", "topology", "params"), CASES)
def test_replay_gives_the_runs_accounting_exactly(run, kernel, topology, params):
    """ADR-0064 test 5: the greenlet run and the replay charge the same costs."""
    original = run(kernel, topology, params, timing_only=False)
    recorded = _record(run, kernel, topology, params)
    assert recorded.oplog == original.oplog  # recording changes nothing
    replayed = replay_trace(recorded.trace, load_address_map(test_topology(topology)), "t")
    assert replayed.latency_ps == original.latency_ps
    assert replayed.oplog == original.oplog
    assert replayed.commands == original.commands
    for name, stats in original.engines.items():
        assert replayed.engines[name].busy_ps == stats.busy_ps, name
        assert replayed.engines[name].ops == stats.ops, name
    assert replayed.timing_only and replayed.verified is None


def _record(run, kernel, topology, params, costs=None):
    from kernbench_cli.sim.kernels import load_kernel, parse_params
    from kernbench_cli.sim.run import run_kernel

    path = Path(__file__).parent / "kernels" / f"{kernel}.py"
    module = load_kernel(str(path) if path.is_file() else kernel)
    amap = load_address_map(test_topology(topology), costs)
    return run_kernel(module, amap, parse_params(module, list(params)), record=True)


@pytest.mark.parametrize("costs", ["odd.toml", "slow_issue.toml"])
def test_replay_under_other_costs_equals_a_run_with_them(run, costs):
    params = ("mode=primitive", "M=32", "K=128", "N=512")
    recorded = _record(run, "sharded_gemm", "default", params)
    direct = run("sharded_gemm", "default", params, costs=COSTS / costs)
    replayed = replay_trace(recorded.trace, load_address_map("default", COSTS / costs), "t")
    assert replayed.latency_ps == direct.latency_ps != recorded.latency_ps
    assert replayed.oplog == direct.oplog


def test_cli_record_then_replay(cli, tmp_path):
    trace = tmp_path / "gemm.trace"
    args = ("-p", "M=32", "-p", "K=128", "-p", "N=512", "-p", "mode=primitive")
    code, out, _ = cli("run", "sharded_gemm", *args, "--record", str(trace), "--json")
    assert code == 0
    ran = json.loads(out)
    code, out, _ = cli("replay", str(trace), "--json")
    assert code == 0
    replayed = json.loads(out)
    assert replayed["kernel"] == "sharded_gemm (replay)"
    assert replayed["latency_ps"] == ran["latency_ps"]
    assert replayed["engines"] == ran["engines"]
    assert replayed["verified"] is None
    code, out, _ = cli("replay", str(trace), "--costs", str(COSTS / "slow_issue.toml"))
    assert code == 0 and "costs slow_issue" in out


def test_the_trace_file_is_versioned_gzip_json(tmp_path, run):
    recorded = _record(run, "ping_pong", "pair", ())
    path = tmp_path / "t.trace"
    write_trace(path, recorded.trace)
    data = json.loads(gzip.decompress(path.read_bytes()))
    assert (data["format"], data["version"], data["kernel"]) == ("kernbench-trace", 1, "ping_pong")
    assert read_trace(path)["pes"] == json.loads(json.dumps(recorded.trace["pes"]))
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


@pytest.mark.parametrize(("content", "message"), [
    (b"plain text", "not a kernbench trace (Not a gzipped file (b'pl'))"),
    (gzip.compress(b'{"format": "other"}'), "not a kernbench trace (no format 'kernbench-trace')"),
    (gzip.compress(b'{"format": "kernbench-trace", "version": 9}'),
     "trace version 9 is not one this kernbench reads (1)"),
])
def test_bad_trace_files(cli, tmp_path, content, message):
    path = tmp_path / "bad.trace"
    path.write_bytes(content)
    code, _, err = cli("replay", str(path))
    assert (code, err) == (2, f"error: {path}: {message}\n")
