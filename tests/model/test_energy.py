"""Energy: each part of a run's energy against a hand computation from the
`[energy]` table's defaults, the static part against the latency, and the energy invariant
against counts that are off by one."""

from __future__ import annotations

import pytest

from tests.conftest import test_topology

# the defaults (docs/configuration.md), in attojoules: 1 pJ = 10^6 aJ
PJ = 10**6
HBM_BIT = (0.44 + 1.01 + 1.23 + 0.5)  # cell, column, bank group, TSV (pJ per bit)
ACTIVATE_PAGE = 8 * 1024 * 0.11  # one 1 KiB page opened (pJ)
TCM, IPCQ, NOC, UCIE, MAC = 0.31, 0.62, 0.15, 0.3, 2.1
CPU, SCHED = 100, 20
PE_STATIC_UW, CUBE_STATIC_UW = 20_000, 1_000_000


def _aj(pj: float) -> int:
    return round(pj * PJ)


def _kernel(tmp_path, setup: str, body: str) -> str:
    path = tmp_path / "k.py"
    path.write_text("import numpy as np\nPARAMS = {}\n\ndef setup(host, p):\n" + setup
                    + "\n\ndef kernel(tl, **a):\n" + body
                    + "\n\ndef reference(host, p):\n    return {}\n\n"
                    "def outputs(host, args, p):\n    return {}\n")
    return str(path)


def _run(kernel: str, topology: str = "one", sets: tuple[str, ...] = ()):
    from kernbench_cli.address import load_address_map
    from kernbench_cli.sim.kernels import load_kernel, parse_params
    from kernbench_cli.sim.run import run_kernel

    module = load_kernel(kernel)
    amap = load_address_map(test_topology(topology), None, sets)
    return run_kernel(module, amap, parse_params(module, []), timing_only=True)


def _static(result, pes: int, cubes: int) -> int:
    return (pes * PE_STATIC_UW + cubes * CUBE_STATIC_UW) * result.latency_ps


def test_a_load_from_the_pes_own_slice(tmp_path):
    """16 KiB from its own slice, page-aligned: 16 pages, 16 KiB through HBM and into TCM."""
    kernel = _kernel(tmp_path, "    return {'x': host.replicate('x', np.zeros(4096, "
                     "np.float32))}", "    tl.load(tl.shard(a['x']), (4096,), 'f32')")
    result = _run(kernel)
    bits = 16384 * 8
    parts = result.energy.dynamic
    assert parts["hbm"] == _aj(bits * HBM_BIT + 16 * ACTIVATE_PAGE)
    assert parts["dma"] == _aj(bits * TCM)
    assert (parts["cpu"], parts["scheduler"]) == (_aj(CPU), _aj(SCHED))
    assert {k for k, v in parts.items() if v} == {"hbm", "dma", "cpu", "scheduler"}
    assert result.energy.static == _static(result, 1, 1)
    assert result.energy.total == sum(parts.values()) + result.energy.static


def test_a_load_from_another_cube_adds_its_ucie_link(tmp_path):
    """PE 1 (cube 1) loads 4 KiB from PE 0's slice (cube 0): one UCIe link crossed."""
    kernel = _kernel(tmp_path, "    return {'x': host.place('x', np.zeros(1024, np.float32), "
                     "0)}", "    if tl.pid == 1:\n        tl.load(a['x'], (1024,), 'f32')")
    result = _run(kernel, "two_cubes")
    bits = 4096 * 8
    parts = result.energy.dynamic
    assert parts["hbm"] == _aj(bits * HBM_BIT + 4 * ACTIVATE_PAGE)
    assert parts["ucie"] == _aj(bits * UCIE)
    assert parts["noc"] == 0
    assert result.energy.counts.link_bytes["ucie"] == 4096
    assert result.energy.static == _static(result, 2, 2)


@pytest.mark.parametrize(("dtype", "passes"), [("f16", 1), ("f32", 3)])
def test_a_dot_pays_its_macs_times_the_array_passes(tmp_path, dtype, passes):
    """A 32x64 @ 64x16 dot: 32,768 MACs; f32 runs the array three times (bf16x3)."""
    kernel = _kernel(tmp_path, f"    return {{'a': host.replicate('a', np.zeros((32, 64), "
                     f"'{'float16' if dtype == 'f16' else 'float32'}')), 'b': host.replicate("
                     f"'b', np.zeros((64, 16), '{'float16' if dtype == 'f16' else 'float32'}'"
                     "))}",
                     f"    x = tl.load(tl.shard(a['a']), (32, 64), '{dtype}')\n"
                     f"    y = tl.load(tl.shard(a['b']), (64, 16), '{dtype}')\n"
                     "    tl.dot(x, y)")
    result = _run(kernel)
    assert result.energy.counts.mac_passes == 32 * 64 * 16 * passes
    assert result.energy.dynamic["gemm"] == _aj(32 * 64 * 16 * passes * MAC)


def test_an_ipcq_message_over_k_hops(tmp_path):
    """PE 0 sends 2 KiB to PE 3 of a 4x1 mesh: 3 NoC hops, through a ring slot; PE_DMA moves
    it out of TCM at the sender and into TCM at the receiver."""
    topo = tmp_path / "row.toml"
    topo.write_text("[system]\nracks = 1\nsips_per_rack = 1\ncubes_per_sip = 1\n"
                    "cube_mesh = [1, 1]\npes_per_cube = 4\npe_mesh = [4, 1]\n")
    kernel = _kernel(tmp_path, "    return {'x': host.replicate('x', np.zeros(512, "
                     "np.float32))}",
                     "    if tl.pid == 0:\n        tl.send(tl.load(tl.shard(a['x']), "
                     "(512,), 'f32'), 3)\n    if tl.pid == 3:\n        tl.recv(0, (512,), 'f32')")
    result = _run(kernel, str(topo))
    bits = 2048 * 8
    parts = result.energy.dynamic
    assert parts["ipcq"] == _aj(bits * IPCQ)
    assert parts["noc"] == _aj(3 * bits * NOC)
    assert result.energy.counts.dma_bytes == 3 * 2048  # load in, send out, receive in
    assert parts["dma"] == _aj(3 * bits * TCM)


def test_static_energy_is_power_times_the_latency(tmp_path):
    runs = []
    for cycles in (1000, 3000):
        kernel = _kernel(tmp_path, "    return {}", f"    tl.cycles({cycles})")
        runs.append(_run(kernel))
    short, long = runs
    assert long.latency_ps == 3 * short.latency_ps > 0
    assert long.energy.static == 3 * short.energy.static == 3 * _static(short, 1, 1)


def test_the_invariant_catches_a_count_off_by_one(monkeypatch, tmp_path):
    from kernbench_cli.errors import KernbenchError
    from kernbench_cli.sim import energy

    kernel = _kernel(tmp_path, "    return {'x': host.replicate('x', np.zeros(64, "
                     "np.float32))}", "    tl.load(tl.shard(a['x']), (64,), 'f32')")
    real = energy.count

    def off_by_one(system, timing):
        counts = real(system, timing)
        return energy.Counts(**{**counts.__dict__, "hbm_bytes": counts.hbm_bytes + 1})

    monkeypatch.setattr(energy, "count", off_by_one)  # 256 B: 2,048 bits x 3.18 pJ + a page
    with pytest.raises(KernbenchError) as err:
        _run(kernel)
    assert str(err.value) == (
        "model invariant violated (energy): hbm: 7,439,200,000 aJ reported, 7,413,760,000 aJ "
        "recomputed from its units; this is a bug in kernbench, please report it")


def test_the_invariant_catches_a_mac_the_engines_did_not_do(monkeypatch, tmp_path):
    from kernbench_cli.errors import KernbenchError
    from kernbench_cli.sim import energy

    kernel = _kernel(tmp_path, "    return {'a': host.replicate('a', np.zeros((16, 16), "
                     "'float16'))}", "    x = tl.load(tl.shard(a['a']), (16, 16), 'f16')\n"
                     "    tl.dot(x, x)")
    monkeypatch.setattr(energy, "asked_gemm_work", lambda system, timing: (16**3 + 1, {}))
    with pytest.raises(KernbenchError, match=r"\(energy\): the engines did 4,096 MAC passes"):
        _run(kernel)


def test_an_energy_sweep_replays_one_recording(cli, tmp_path):
    """`--set energy.…` changes no stream: the sweep records once and replays each point;
    the GEMM part scales with the entry, the latency does not move."""
    import json

    code, out, err = cli("sweep", "sharded_gemm", "--timing-only", "--set",
                         "energy.gemm_mac=1pJ,2pJ", "--json")
    assert code == 0, err
    rows = json.loads(out)
    a, b = (r["result"] for r in rows)
    assert a["latency_ps"] == b["latency_ps"] and a["kernel"].endswith("(replay)")
    assert b["energy_pj"]["parts"]["gemm"] == 2 * a["energy_pj"]["parts"]["gemm"]
    assert b["energy_pj"]["total"] - a["energy_pj"]["total"] == pytest.approx(
        a["energy_pj"]["parts"]["gemm"])


def test_energy_in_json_and_text(cli):
    import json

    _, out, _ = cli("run", "softmax", "-t", test_topology("one"), "--timing-only", "--json")
    energy = json.loads(out)["energy_pj"]
    assert energy["total"] == pytest.approx(energy["dynamic"] + energy["static"])
    assert energy["dynamic"] == pytest.approx(sum(energy["parts"].values()))
    _, out, _ = cli("run", "softmax", "-t", test_topology("one"), "--timing-only")
    assert "Energy: " in out and "each count x its [energy] entry" in out


@pytest.mark.parametrize("columns", [80, 120])
def test_the_engine_table_shows_energy_where_it_fits(cli, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    _, out, _ = cli("run", "softmax", "-t", test_topology("one"), "--timing-only")
    header = next(line for line in out.splitlines() if "engine" in line and "ops" in line)
    assert ("energy" in header) == (columns == 120)
    assert ("energy by engine: the Energy table (no room in 80 columns)" in out) == \
        (columns == 80)
    assert max(len(line) for line in out.splitlines()) <= columns


def test_a_sweep_table_leaves_columns_out_rather_than_split_them():
    import io

    from rich.console import Console

    from kernbench_cli.report.sweep import sweep_table

    result = {"latency_ps": 49_314_000, "verified": None, "gemm_mac_utilization": 0.166,
              "bound": {"by": "gemm", "engine": "gemm"}, "average_power_w": 113.9,
              "energy_pj": {"total": 5.62e9}}
    rows = [{"point": i, "axes": {"hbm.bandwidth": f"{b}GB/s", "pe.gemm.rows": r,
                                  "pe.gemm.cols": c}, "result": result, "error": None}
            for i, (b, r, c) in enumerate([(102.4, 16, 16), (204.8, 4, 64)])]
    for width, kept, caption in [(120, ("GEMM", "power", "energy"), None),
                                 (80, ("energy",), "GEMM MAC and power left out to fit 80 "
                                                   "columns (--json has every field)")]:
        table = sweep_table(rows, width)
        console = Console(width=width, record=True, file=io.StringIO())
        console.print(table)
        text = console.export_text()
        assert table.caption == caption
        assert all(name in text for name in kept) and "5.62mJ" in text
        assert max(len(line.rstrip()) for line in text.splitlines()) <= width


def test_counts_read_the_streams_a_run_of_streams_at_a_time(monkeypatch):
    """The energy counts read the columns a run of streams at a time (`energy.CHUNK`
    commands at most): a chunk of one stream or of all of them gives the same counts, and
    the regions' counts add up to the run's."""
    import kernbench_cli as kb
    from kernbench_cli.hw.timing import Timing
    from kernbench_cli.sim import energy

    timed, run = [], Timing.run
    monkeypatch.setattr(Timing, "run", lambda self: (run(self), timed.append(self)))
    kb.run("llama_decode", topology="default", timing_only=True,
           params={"model": "tiny", "layers": 2})
    timing = timed[0]
    system = timing.system
    whole = energy.count(system, timing), energy.by_region(system, timing)
    monkeypatch.setattr(energy, "CHUNK", 1)  # one stream a chunk
    assert len(list(energy._chunks(timing))) == len(timing.program.streams) > 1
    assert (energy.count(system, timing), energy.by_region(system, timing)) == whole
    counts, regions = whole
    assert len(regions) > 1
    assert sum(r.commands for r in regions) == counts.commands
    assert sum(sum(r.elements.values()) for r in regions) == sum(counts.elements.values())
    assert sum(r.mac_passes for r in regions) == counts.mac_passes > 0
