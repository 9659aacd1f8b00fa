"""Roofline bounds for every run: each resource class's work at its peak,
against a formula, and never above the latency."""

from __future__ import annotations

import json

import pytest

from tests.conftest import test_topology


def _run(tmp_path, setup: str, body: str, topology: str = "one"):
    from kernbench_cli.address import load_address_map
    from kernbench_cli.sim.kernels import load_kernel, parse_params
    from kernbench_cli.sim.run import run_kernel

    path = tmp_path / "k.py"
    path.write_text("import numpy as np\nPARAMS = {}\n\ndef setup(host, p):\n" + setup
                    + "\n\ndef kernel(tl, **a):\n" + body
                    + "\n\ndef reference(host, p):\n    return {}\n\n"
                    "def outputs(host, args, p):\n    return {}\n")
    module = load_kernel(str(path))
    amap = load_address_map(test_topology(topology), None, ())
    return run_kernel(module, amap, parse_params(module, []), timing_only=True), amap.topology


def test_a_load_is_bounded_by_its_bytes_at_the_stream_rate(tmp_path):
    """16 KiB from the PE's own slice: no kernel `bounds()`, still an HBM roof."""
    result, topo = _run(tmp_path, "    return {'x': host.replicate('x', np.zeros(4096, "
                        "np.float32))}", "    tl.load(tl.shard(a['x']), (4096,), 'f32')")
    hbm = topo.hbm
    rate = hbm.bandwidth * (hbm.refresh_interval - hbm.refresh_time) // hbm.refresh_interval
    (roof,) = result.roofline
    assert (roof.name, roof.ps) == ("hbm", -(-16384 * 10**12 // rate))
    assert roof.how == "16,384 B at 47.787GB/s" and result.bounds == {}


def test_a_dot_is_bounded_by_its_mac_passes_over_the_array(tmp_path):
    """A 64x128 @ 128x32 f32 dot: 262,144 MACs x 3 passes over 16x16 MACs a cycle at 1 GHz."""
    result, _ = _run(tmp_path, "    return {'a': host.replicate('a', np.zeros((64, 128), "
                     "'float32')), 'b': host.replicate('b', np.zeros((128, 32), 'float32'))}",
                     "    x = tl.load(tl.shard(a['a']), (64, 128), 'f32')\n"
                     "    y = tl.load(tl.shard(a['b']), (128, 32), 'f32')\n    tl.dot(x, y)")
    gemm = next(r for r in result.roofline if r.name == "gemm")
    assert gemm.ps == 64 * 128 * 32 * 3 // 256 * 1000
    assert gemm.how == "786,432 MAC passes / 16x16 MACs a cycle"


def test_math_is_bounded_by_its_elements_at_each_class_cycles(tmp_path):
    """exp of 4,096 elements (4 cycles each) over 32 lanes: 512 cycles."""
    result, _ = _run(tmp_path, "    return {'x': host.replicate('x', np.zeros(4096, "
                     "np.float32))}", "    tl.exp(tl.load(tl.shard(a['x']), (4096,), 'f32'))")
    math = next(r for r in result.roofline if r.name == "math")
    assert math.ps == 4096 * 4 // 32 * 1000


@pytest.mark.parametrize(("kernel", "params"), [
    ("sharded_gemm", ()), ("sharded_gemm", ("-p", "mode=primitive")), ("softmax", ()),
    ("rmsnorm", ()), ("gqa_attention", ()), ("gqa_attention", ("-t", "sip"))])
def test_every_shipped_kernel_gets_a_roofline_the_latency_respects(cli, kernel, params):
    code, out, _ = cli("run", kernel, *params, "--timing-only", "--json")
    assert code == 0
    run = json.loads(out)
    roofs = run["roofline"]
    assert roofs and {"hbm"} <= {r["resource"] for r in roofs}
    assert all(0 < r["ps"] <= run["latency_ps"] for r in roofs)
    assert [r["ps"] for r in roofs] == sorted((r["ps"] for r in roofs), reverse=True)
    assert all(r["latency_over_bound"] == round(run["latency_ps"] / r["ps"], 6) for r in roofs)


def test_the_summary_says_how_many_looser_resources_it_leaves_to_json(cli, monkeypatch):
    """Five resources used, four shown: the line said nothing of the fifth."""
    monkeypatch.setenv("COLUMNS", "200")
    given = ("run", "gqa_attention", "-p", "seq_len=256", "-p", "heads_q=8", "-p", "heads_kv=1",
             "-p", "head_dim=32", "-p", "chunk=128", "-p", "dtype=bf16", "--set",
             "noc.bandwidth=x0.5", "--set", "pe.dma.setup=5ns", "--timing-only")
    roofs = json.loads(cli(*given, "--json")[1])["roofline"]
    line = next(x for x in cli(*given)[1].splitlines() if x.startswith("roofline"))
    assert len(roofs) == 5 and [r["resource"] for r in roofs[:4]] == [
        part.split()[0] for part in line.split(None, 1)[1].split(", ")[:4]]
    assert ", 1 looser in --json: each resource's work" in line


def test_topology_show_prints_the_peaks(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = cli("topology", "show")
    assert code == 0
    line = next(line for line in out.splitlines() if "peaks:" in line)
    assert "0.512 TFLOP/s per PE (f16/bf16; f32 / 3), 8.192 TFLOP/s in all" in line
    assert "ridge 5.36 flop/B" in line  # 512 GFLOP/s over 95.573 GB/s
