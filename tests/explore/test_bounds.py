"""Analytic lower bounds: each shipped kernel's `bounds()` against a formula stated here and
against the latency of runs (no run is below one); `run --bounds-only` and `kb.bounds`
(nothing simulated; the setup made shapes only); the gap every run shows; a sweep's
`--bounds-only` and `--prune-above`."""

from __future__ import annotations

import json
import math

import pytest

import kernbench_cli as kb
from tests.conftest import TESTS, test_topology

BOUNDED = str(TESTS / "kernels" / "bounded.py")
#: default: one HBM slice a PE at 102.4 GB/s less refresh (tRFC 260ns of tREFI 3.9us)
STREAM = 102_400_000_000 * (3_900_000 - 260_000) // 3_900_000


def ceil_ps(nbytes: int, bandwidth: int) -> int:
    return -(-nbytes * 10**12 // bandwidth)


def os_cycles(m: int, k: int, n: int, rows: int = 16, cols: int = 16) -> int:
    """SCALE-Sim's output-stationary cycle count (plus one): ceil(M/R) ceil(N/C) folds of
    K + R + C - 2 cycles."""
    return math.ceil(m / rows) * math.ceil(n / cols) * (k + rows + cols - 2)


# ------------------------------------------------------------------ the formulas


@pytest.mark.parametrize(("params", "m", "k", "n", "item", "passes"), [
    ({}, 64, 512, 256, 2, 1),
    ({"M": 1, "K": 4096, "N": 8192}, 1, 4096, 512, 2, 1),  # a GEMV: one row of the array
    ({"dtype": "f32", "M": 16}, 16, 512, 256, 4, 3),  # f32: three bf16 passes
])
def test_sharded_gemm_composite_bounds_are_the_stated_formulas(params, m, k, n, item, passes):
    """gemm: one untiled GEMM's folds on the 16x16 array at 1 GHz; memory: A, a PE's B and C
    columns once each at the stream rate."""
    found = kb.bounds("sharded_gemm", params=params)
    assert found.bounds_ps["gemm"] == os_cycles(m, k, n) * passes * 1000
    assert found.bounds_ps["memory"] == ceil_ps((m * k + k * n + m * n) * item, STREAM)
    assert "ceil(M/R)*ceil(N/C)*(K+R+C-2)" in found.bounds_how["gemm"]


def test_sharded_gemm_primitive_bounds_count_every_tile():
    """Primitive: every tile's dot folds on its own; A is loaded once per column tile, B once
    per row tile."""
    found = kb.bounds("sharded_gemm", params={"mode": "primitive"})
    m, k, n, tm, tn, tk = 64, 512, 256, 16, 16, 64
    tiles = (m // tm) * (n // tn) * (k // tk)
    assert found.bounds_ps["gemm"] == tiles * os_cycles(tm, tk, tn) * 1000
    nbytes = (m * k * (n // tn) + k * n * (m // tm) + m * n) * 2
    assert found.bounds_ps["memory"] == ceil_ps(nbytes, STREAM)


def test_a_narrower_array_folds_more():
    """The array shape the model uses: 8 rows fold M = 64 eight times, not four."""
    found = kb.bounds("sharded_gemm", set={"pe.gemm.rows": 8})
    assert found.bounds_ps["gemm"] == os_cycles(64, 512, 256, rows=8) * 1000


def test_gqa_attention_bounds_are_the_stated_formulas():
    """gemm: per (batch, KV head) Q.K^T [g x d] x [d x shard] and P.V [g x shard] x
    [shard x d]; memory: PE 0's query groups, KV shard and output; merge: at least the
    GEMMs, the tree's hops and PE 0's last store with two HBM latencies."""
    found = kb.bounds("gqa_attention", params={"batch": 2, "seq_len": 2048})
    parts, g, d, shard = 2 * 2, 4, 64, 2048 // 16
    cycles = parts * (os_cycles(g, d, shard) + os_cycles(g, shard, d))
    assert found.bounds_ps["gemm"] == cycles * 1000
    pe0 = (2 * parts * shard * d + 2 * parts * g * d) * 2
    assert found.bounds_ps["memory"] == ceil_ps(pe0, STREAM)
    store = ceil_ps(g * d * 2, STREAM) + 100_000  # the last part's output, then HBM latency
    assert found.bounds_ps["merge"] > found.bounds_ps["gemm"] + store
    assert found.lower_bound == "merge"


def _pass_cycles(params: dict, rows: int) -> list[list[int]]:
    """Per pipeline stage, each PE's projection GEMMs in a pass of `rows` rows (default:
    a 16x16 os array), from the shares of the work the layout gives it."""
    from kernbench_cli.address import load_address_map
    from kernbench_cli.models.decoder import Layout, run_of
    from kernbench_cli.sim.kernels import load_kernel, parse_params

    topology = load_address_map("default").topology
    p = parse_params(load_kernel("llama_decode"), [f"{k}={v}" for k, v in params.items()],
                     topology.num_pes)
    lay = Layout(topology, run_of(topology, p))
    hidden = lay.run.cfg.hidden

    def of(plan) -> int:
        _, n, c0, c1 = plan["qkv"][rows]
        (_, o), (_, f) = plan["o"], plan["mlp"]
        layer = (os_cycles(rows, hidden, c1 - c0) if n else 0) + \
            (os_cycles(rows, o, hidden) if o else 0) + \
            (2 * os_cycles(rows, hidden, f) + os_cycles(rows, f, hidden) if f else 0)
        return layer * len(plan["layers"])

    return [[of(lay.plans[pid]) for pid in stage] for stage in lay.stages]


@pytest.mark.parametrize(("pp", "microbatches"), [(1, 1), (2, 1), (4, 1), (2, 2), (4, 2)])
def test_llama_decode_gemm_bound_adds_up_along_the_pipeline(pp, microbatches):
    """A pass's GEMMs on a stage need the stage before's output: the gemm bound of `m`
    equal micro-batches through `pp` stages is a flow shop's, the sum of each stage's
    busiest PE for one pass plus m - 1 more on the busiest stage. Before, it was the
    busiest PE's alone, a stage's share of a step whose stages run one after another."""
    params = {"config": str(TESTS / "configs" / "tiny_10_layers.json"), "layers": 4,
              "batch": 2, "pp": pp, "microbatches": microbatches}
    stages = [max(pes) for pes in _pass_cycles(params, 2 // microbatches)]
    cycles = sum(stages) + (microbatches - 1) * max(stages)
    found = kb.bounds("llama_decode", params=params)
    assert found.bounds_ps["gemm"] == cycles * 1000
    assert (pp == 1) == found.bounds_how["gemm"].startswith("PE ")
    result = kb.run("llama_decode", params=params, timing_only=True)
    assert result.latency_ps >= found.bounds_ps["gemm"]


def test_ring_all_reduce_bounds_are_alpha_beta_on_a_pes_dma():
    """memory: the buffer read and written (2N) at the stream rate; collective: one DMA
    setup, then 2N at the stream rate, and the ring's 2N - 2 parts out at a NoC link's rate
    (the PE whose ring hop stays in its cube: 64 GB/s) and in at the copy rate (64 GB/s)."""
    nbytes = 1 << 18
    found = kb.bounds("all_reduce", params={"bytes": nbytes})
    part = nbytes // 16
    moved = 2 * nbytes - 2 * part
    assert found.bounds_ps["memory"] == ceil_ps(2 * nbytes, STREAM)
    assert found.bounds_ps["collective"] == (20_000 + ceil_ps(2 * nbytes, STREAM)
                                             + 2 * ceil_ps(moved, 64 * 10**9))
    # a setup a transfer when setups do not overlap: the moved bytes out and in, each in
    # 4 KiB slots (240 transfers), and the text says how many (it said "setup a transfer")
    found = kb.bounds("all_reduce", params={"bytes": nbytes},
                      set=["pe.dma.setup_overlap=false", "pe.dma.setup=300ns"])
    transfers = 2 * -(-moved // 4096)
    assert transfers == 240
    assert found.bounds_ps["collective"] == (transfers * 300_000 + ceil_ps(2 * nbytes, STREAM)
                                             + 2 * ceil_ps(moved, 64 * 10**9))
    assert found.bounds_how["collective"].startswith(
        "alpha-beta on PE 0's DMA (ring all_reduce): 240 transfers x 300ns setup + ")
    one = kb.bounds("all_reduce", params={"bytes": 4, "collective": "broadcast",
                                          "algo": "direct"}, set=["pe.dma.setup_overlap=false"])
    assert ": 1 transfer x 20ns setup + " in one.bounds_how["collective"]


def test_any_algorithm_moves_the_buffer_out_and_in_once():
    """A tree all_reduce: the bound holds for any algorithm, N out at the fastest link level
    a group spanning two cubes has (UCIe, 256 GB/s), N in at the copy rate."""
    nbytes = 1 << 16
    found = kb.bounds("all_reduce", params={"bytes": nbytes, "algo": "tree"})
    assert found.bounds_ps["collective"] == (20_000 + ceil_ps(2 * nbytes, STREAM)
                                             + ceil_ps(nbytes, 256 * 10**9)
                                             + ceil_ps(nbytes, 64 * 10**9))


def test_a_group_of_one_states_no_bound(cli):
    """group=cube on a topology of one PE per cube: nothing moves, no bound."""
    found = kb.bounds("all_reduce", test_topology("one"), params={"group": "cube"})
    assert found.lower_bound is None and dict(found.bounds_ps) == {}
    code, out, _ = cli("run", "all_reduce", "-t", test_topology("one"), "-p", "group=cube",
                       "--bounds-only")
    assert code == 0 and "lower bound  none: the kernel's bounds() states no bound" in out
    # nor a bandwidth: 4096 B in 0 ns was stated as algbw 0 GB/s "(4096 B / latency)"
    result = kb.run("all_reduce", topology=test_topology("one"), timing_only=True,
                    params={"group": "cube", "bytes": 4096})
    assert result.latency_ps == 0 and dict(result.metrics) == {}


# ------------------------------------------------------------------ no run is below one

COLLECTIVES = [(c, a) for c, algos in (
    ("all_reduce", ("ring", "direct", "tree", "rhd", "hier")),
    ("reduce_scatter", ("ring", "direct", "rhd", "hier")),
    ("all_gather", ("ring", "direct", "rhd", "hier")),
    ("broadcast", ("tree", "ring", "direct")),
    ("reduce", ("tree", "ring", "direct"))) for a in algos]


@pytest.mark.parametrize(("collective", "algo"), COLLECTIVES)
def test_no_collective_runs_below_its_bounds(collective, algo):
    result = kb.run("all_reduce", params={"collective": collective, "algo": algo,
                                          "bytes": 16384, "root": 3}, timing_only=True)
    assert result.bounds_ps and all(result.latency_ps >= ps for ps in result.bounds_ps.values())


@pytest.mark.parametrize(("kernel", "topology", "params", "sets"), [
    ("sharded_gemm", "default", {"mode": "primitive"}, {}),
    ("sharded_gemm", "default", {"M": 1, "K": 2048}, {"pe.gemm.cols": 8}),
    ("sharded_gemm", "sip", {"dtype": "f32", "M": 16}, {}),
    ("sharded_gemm", "default", {}, {"pe.tcm.size": "80KiB"}),  # the plan tiles K: more folds
    ("sharded_gemm", "default", {}, {"pe.gemm.dataflow": "ws"}),
    ("gqa_attention", "default", {}, {"pe.gemm.dataflow": "is", "pe.gemm.rows": 8}),
    ("gqa_attention", "default", {"batch": 2, "dtype": "f32", "seq_len": 2048}, {}),
    ("gqa_attention", "sip", {"model": "llama3-8b", "seq_len": 4096}, {}),
    ("gqa_attention", "default", {}, {"pe.dma.setup_overlap": False, "noc.latency": "50ns"}),
    ("all_reduce", "sip", {"group": "cube", "bytes": 65536}, {}),
    ("all_reduce", "sip", {"algo": "hier", "bytes": 65536}, {}),
    ("all_reduce", "default", {"bytes": 65536}, {"pe.dma.setup_overlap": False}),
])
def test_no_run_is_below_its_bounds(kernel, topology, params, sets):
    """Every run checks it (a KernelError otherwise); here the figures are compared too."""
    result = kb.run(kernel, topology, params=params, set=sets, timing_only=True)
    assert result.latency_ps >= result.lower_bound_ps > 0
    assert result.bound_gap == round(result.latency_ps / result.lower_bound_ps, 6)


# ------------------------------------------------------------------ the gap every run shows


def test_a_run_shows_its_gap_to_the_largest_bound(cli):
    code, out, _ = cli("run", BOUNDED, "--json")
    data = json.loads(out)
    assert code == 0
    assert (data["lower_bound"], data["lower_bound_ps"]) == ("floor", 1000)
    assert data["bound_gap"] == round(data["latency_ps"] / 1000, 6)
    assert data["bounds_ps"] == {"floor": 1000, "zero": 0}  # unchanged: every bound
    code, out, _ = cli("run", BOUNDED)
    gap = f"{data['latency_ps'] / 1000:.2f}x"
    assert " ".join(out.split()).count(
        f"lower bound 1ns, the floor bound: the largest the kernel states (analytic); the "
        f"latency is {gap} that") == 1


def test_a_run_of_a_kernel_without_bounds_has_no_gap(cli):
    code, out, _ = cli("run", str(TESTS / "kernels" / "load_dot.py"), "--json")
    data = json.loads(out)
    assert code == 0
    assert (data["lower_bound"], data["lower_bound_ps"], data["bound_gap"]) == (None,) * 3
    _, out, _ = cli("run", str(TESTS / "kernels" / "load_dot.py"))
    assert "lower bound" not in out


def test_a_bound_above_the_latency_is_an_error(cli):
    """The check every run makes: a bound the run beats is not a lower bound."""
    code, _, err = cli("run", BOUNDED, "-p", "floor_ps=1000000000")
    assert code == 1 and err.count("\n") == 1
    assert "is below the floor bound bounds() states, 1,000,000,000 ps (as given)" in err


# ------------------------------------------------------------------ --bounds-only


def test_bounds_only_labels_the_lower_bound(cli):
    code, out, err = cli("run", BOUNDED, "--bounds-only")
    assert code == 0, err
    text = " ".join(out.split())
    assert "floor bound 1ns = as given" in text and "zero bound 0ns = nothing" in text
    assert ("lower bound 1ns, the floor bound: a lower bound on the latency (analytic, from "
            "the kernel's bounds(); nothing was simulated)") in text
    assert not any(line.startswith("latency") for line in out.splitlines())


def test_bounds_only_json_is_kb_bounds(cli):
    code, out, _ = cli("run", "gqa_attention", "-t", "sip", "-p", "seq_len=8192", "--set",
                       "pe.gemm.rows=8", "--bounds-only", "--json")
    data = json.loads(out)
    found = kb.bounds("gqa_attention", "sip", params={"seq_len": 8192},
                      set={"pe.gemm.rows": 8})
    assert code == 0 and data == found.to_dict()
    assert data["analytic"] is True and "latency_ps" not in data
    assert data["lower_bound_ps"] == max(data["bounds_ps"].values())
    assert set(data["bounds_how"]) == set(data["bounds_ps"]) == {"gemm", "memory", "merge"}
    assert found.overrides == ("pe.gemm.rows=8",) and found.pes == 128


def test_bounds_name_the_config_they_read_as_a_run_does(cli, tmp_path):
    """Bounds of a model given by its config.json carry the file's digest, as the run's
    result does (`file_digests`), in the JSON, `kb.bounds`, a bounds-only sweep's rows and
    the summary beside the path."""
    import hashlib
    import shutil

    config = tmp_path / "m.json"
    shutil.copy(TESTS / "configs" / "hf" / "llama.json", config)
    digest = hashlib.sha256(config.read_bytes()).hexdigest()[:8]
    args = ("llama_decode", "-p", f"config={config}")
    code, out, _ = cli("run", *args, "--bounds-only", "--json")
    assert code == 0 and json.loads(out)["file_digests"] == {"config": digest}
    found = kb.bounds("llama_decode", params={"config": str(config)})
    assert found.file_digests == {"config": digest}
    code, out, _ = cli("run", *args, "--timing-only", "--json")
    assert code == 0 and json.loads(out)["file_digests"] == {"config": digest}
    code, out, _ = cli("run", *args, "--bounds-only")
    assert code == 0 and f" #{digest}" in out
    (point,) = kb.sweep("llama_decode", params={"config": [str(config)]},
                        bounds_only=True).points
    assert point.bounds.file_digests == {"config": digest}


def test_bounds_only_is_the_bound_the_run_shows(cli):
    found = kb.bounds("sharded_gemm")
    result = kb.run("sharded_gemm", timing_only=True)
    assert dict(found.bounds_ps) == dict(result.bounds_ps)
    assert (found.lower_bound, found.lower_bound_ps) == (result.lower_bound,
                                                         result.lower_bound_ps)


@pytest.mark.parametrize(("args", "message"), [
    ([str(TESTS / "kernels" / "load_dot.py")],
     "load_dot declares no bounds(): it states no lower bound to show (docs/kernels.md says "
     "how a kernel states one)"),
    ([BOUNDED, "-p", "floor_ps=-1"], "bounded: floor_ps must not be negative, got -1"),
    (["gqa_attention", "-p", "seq_len=1000"],
     "gqa_attention: seq_len = 1000 does not divide over the 16 PEs of the grid (1000 % 16 = "
     "8)"),
    (["sharded_gemm", "--record", "x.trace"],
     "--bounds-only simulates nothing: --record asks for a run's output (drop one of them)"),
    (["sharded_gemm", "--save", "x.npz"],
     "--bounds-only simulates nothing: --save asks for a run's output (drop one of them)"),
    (["sharded_gemm", "--chrome-trace", "t.json"],
     "--bounds-only simulates nothing: --chrome-trace asks for a run's output (drop one of "
     "them)"),
    (["sharded_gemm", "--sensitivity"],
     "--bounds-only simulates nothing: --sensitivity asks for a run's output (drop one of "
     "them)"),
])
def test_bounds_only_errors_are_one_line(cli, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("run", *args, "--bounds-only")
    assert (code, out, err) == (2, "", f"error: {message}\n")
    assert not list(tmp_path.iterdir())  # nothing written


def test_bounds_only_takes_the_options_that_only_say_how_to_run(cli):
    """--timing-only, --seed, --no-dedup, …: nothing runs, so they change nothing."""
    code, out, _ = cli("run", BOUNDED, "--bounds-only", "--json", "--timing-only", "--seed",
                       "3", "--no-dedup", "--max-commands", "10")
    assert code == 0 and json.loads(out)["lower_bound_ps"] == 1000


def test_kb_bounds_refuses_set_on_a_loaded_topology():
    topo = kb.load_topology("default")
    assert kb.bounds("sharded_gemm", topo).pes == 16
    with pytest.raises(kb.KernbenchError, match="costs= and set= go to load_topology"):
        kb.bounds("sharded_gemm", topo, set={"pe.gemm.rows": 8})


# ------------------------------------------------------------------ sweeps


def test_a_bounds_only_sweep_runs_nothing(cli):
    code, out, _ = cli("sweep", "gqa_attention", "--set", "pe.gemm.cols=8,16,32,64",
                       "--bounds-only", "--json")
    rows = json.loads(out)
    assert code == 0 and [r["result"] for r in rows] == [None] * 4
    lower = [r["bounds"]["lower_bound_ps"] for r in rows]
    assert lower == sorted(lower, reverse=True)  # a wider array, a lower bound
    assert rows[1]["bounds"] == kb.bounds("gqa_attention", set={"pe.gemm.cols": 16}).to_dict()
    code, out, _ = cli("sweep", "gqa_attention", "--set", "pe.gemm.cols=8,16", "--bounds-only",
                       "--format", "csv")
    assert out.splitlines()[0] == ("point,pe.gemm.cols,lower_bound,lower_bound_ps,"
                                   "bounds_ps.gemm,bounds_ps.memory,bounds_ps.merge,error")


def test_a_sweep_prunes_the_points_whose_bound_is_above_the_limit(cli, tmp_path):
    """Pruned points are rows with their bound and no result; the others ran, and --resume
    decides the pruning again."""
    out = tmp_path / "pruned.jsonl"
    args = ("sweep", "gqa_attention", "--timing-only", "--set", "pe.gemm.cols=8,16,32",
            "--jobs", "1", "--out", str(out))
    code, table, err = cli(*args, "--prune-above", "6us")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert code == 0, err
    assert "Sweep: 3 points, 1 pruned (lower bound above 6us)" in table
    assert ">=10.213us" in table and "│ pruned " in table  # never a latency it did not have
    assert [bool(r.get("pruned")) for r in rows] == [True, False, False]
    assert rows[0]["result"] is None and rows[0]["error"] is None
    assert rows[0]["pruned"] == {"limit_ps": 6_000_000}
    assert rows[0]["bounds"]["lower_bound_ps"] > 6_000_000
    assert all(r["result"]["latency_ps"] >= r["result"]["lower_bound_ps"] for r in rows[1:])
    code, _, _ = cli(*args, "--resume")  # no limit now: the pruned point runs
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert code == 0 and all(r["result"] is not None for r in rows)


def test_a_factor_prunes_against_the_best_points_bound():
    result = kb.sweep("gqa_attention", set={"pe.gemm.cols": [8, 16, 32, 64]},
                      timing_only=True, jobs=1, prune_above="x2")
    best = kb.bounds("gqa_attention", set={"pe.gemm.cols": 64}).lower_bound_ps
    kept = [p for p in result.points if not p.pruned]
    assert [p.pruned for p in result.points] == [True, True, False, False]
    assert all(p.bounds.lower_bound_ps > 2 * best and p.result is None
               for p in result.points if p.pruned)
    assert all(p.result.latency_ps >= p.result.lower_bound_ps for p in kept)
    table = result.table()
    assert [r["pruned"] for r in table] == [True, True, False, False]
    assert table[0]["lower_bound_ps"] == result.points[0].bounds.lower_bound_ps
    assert table[0]["latency_ps"] is None and table[2]["bound_gap"] > 1
    result.check()  # pruned is not failed


@pytest.mark.parametrize(("args", "message"), [
    (["--prune-above", "soon"], "--prune-above 'soon': expected a latency (50us) or a factor "
                                "of the best point's lower bound, at least 1 (x1.5)"),
    (["--prune-above", "x0.5"], "--prune-above 'x0.5': expected a latency (50us) or a factor "
                                "of the best point's lower bound, at least 1 (x1.5)"),
    (["--bounds-only", "--out", "r.jsonl"],
     "--bounds-only runs nothing to keep: it cannot go with --out or --resume (--format csv "
     "or --json prints its rows)"),
    (["--bounds-only", "--prune-above", "5us"],
     "--bounds-only runs nothing: --prune-above needs runs (drop one of them)"),
])
def test_sweep_bounds_errors_are_one_line(cli, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("sweep", "gqa_attention", "--set", "pe.gemm.cols=8,16", *args)
    assert (code, out, err) == (2, "", f"error: {message}\n")
    assert not list(tmp_path.iterdir())


def test_a_bounds_only_sweep_refuses_a_recording(cli, tmp_path):
    """`sweep --bounds-only --replay T` printed the kernel's bounds at its default
    parameters, the recording silently ignored."""
    trace = tmp_path / "t.kbtrace"
    assert cli("run", "softmax", "--timing-only", "--record", str(trace))[0] == 0
    code, out, err = cli("sweep", "softmax", "--replay", str(trace), "--bounds-only",
                         "--set", "hbm.bandwidth=1GB/s,2GB/s")
    assert (code, out, err) == (2, "", "error: --bounds-only reads the kernel's bounds() at "
                                "each point; --replay times a recording instead (give one "
                                "of them)\n")


def test_pruning_needs_a_kernel_that_declares_bounds(cli):
    code, _, err = cli("sweep", str(TESTS / "kernels" / "load_dot.py"), "--set",
                       "pe.gemm.cols=8,16", "--prune-above", "x2")
    assert code == 2 and err == ("error: load_dot declares no bounds(): --prune-above needs "
                                 "the lower bound it states at each point\n")


# ------------------------------------------------------------------ replay


def test_a_replay_states_the_bounds_on_the_grid_it_was_recorded_on():
    result = kb.run("sharded_gemm", timing_only=True)
    again = kb.replay(result, set={"hbm.bandwidth": "x2"})
    assert again.lower_bound == "gemm" and again.latency_ps >= again.lower_bound_ps
    other = kb.replay(result, "sip")  # 128 PEs, the streams of 16: not its bounds
    assert other.lower_bound is None and dict(other.bounds_ps) == {}


@pytest.mark.parametrize(("kernel", "w"), [("softmax", 0), ("rmsnorm", 1)])
def test_row_kernels_memory_bound_is_a_pes_rows_at_its_stream_rate(kernel, w):
    """1024 x 512 f16 over default's 16 PEs: a PE reads its 64 rows of X (and rmsnorm's
    one row of w) and writes its 64 of Y through its slice at the stream rate. It was
    every PE's bytes at the HBM peak: 1.28 us, below the roofline's own HBM line."""
    found = kb.bounds(kernel, params={"rows": 1024, "cols": 512})
    nbytes = (2 * 64 + w) * 512 * 2
    assert found.bounds_ps["memory"] == ceil_ps(nbytes, STREAM)
    result = kb.run(kernel, params={"rows": 1024, "cols": 512}, timing_only=True)
    assert result.latency_ps >= found.bounds_ps["memory"] > 1_280_000


@pytest.mark.parametrize("kernel", ["softmax", "rmsnorm"])
@pytest.mark.parametrize(("rows", "message"), [
    (0, "rows must be positive, got 0"), (-8, "rows must be positive, got -8"),
    (24, "rows = 24 does not divide over the 16 PEs (try -p rows=16)")])
def test_bounds_refuse_what_a_run_refuses(cli, kernel, rows, message):
    """A bound of parameters no run takes is no bound: `--bounds-only` said 0 ns for 0 rows
    and blamed the kernel (exit 1) for -8; both are the run's bad input (exit 2)."""
    for flag in ("--bounds-only", "--timing-only"):
        assert cli("run", kernel, flag, "-p", f"rows={rows}") == (
            2, "", f"error: {kernel}: {message}\n")


@pytest.mark.parametrize(("kernel", "params", "message"), [
    ("rmsnorm", ["rows=100000000"], "error: input 'x' [100000000, 1024] f16 is 191GiB "
     "(204,800,000,000 B), more than the 32GiB of HBM in the system\n"),
    ("gqa_attention", ["seq_len=102400000"], "error: inputs overflow an HBM slice: hbm of PE "
     "(rack=0 sip=0 cube=0 pe=0) is full: v needs 1600000KiB (1638400000 B) at offset "
     "0x61a80400, 509082624 B of 2GiB left\n"),
    ("llama_decode", ["batch=2", "prompt=8", "chunk=4", "context=575"],
     "error: llama_decode: tiny does not fit topology 'default' at batch 2, context 575, a "
     "prompt of 8: PE (rack=0 sip=0 cube=0 pe=0) needs 277KiB (weights 174KiB, kv cache "
     "40KiB, embedding 32KiB, buffers 31KiB) for its share of 2 layers, its HBM slice has "
     "256KiB (21,504 B short); 16 of 16 PEs overflow, 4.328MiB in all of 4MiB\n")])
def test_bounds_refuse_what_the_setup_refuses(cli, kernel, params, message):
    """A configuration whose inputs do not fit HBM was given bounds (exit 0) that no run
    has: the setup, made shapes only, refuses it as the run does."""
    sets = ["--set", "hbm.slice_size=256KiB"] if kernel == "llama_decode" else []
    items = [a for item in params for a in ("-p", item)]
    for flag in ("--bounds-only", "--timing-only"):
        assert cli("run", kernel, flag, *sets, *items) == (2, "", message), flag
    with pytest.raises(kb.ParamError if kernel == "llama_decode" else kb.KernbenchError,
                       match="^" + message.removeprefix("error: ").rstrip("\n")
                       .replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        kb.bounds(kernel, set=sets[1:], params=dict(p.split("=") for p in params))


def test_bounds_only_refuses_what_the_placements_refuse_and_makes_none(monkeypatch):
    """`llama_decode`'s setup stops before it places each PE's layers when nothing will run
    (`Host.bounds_only`): the first answer of llama3-70b on `rack` took 15 s at `pp=2`,
    most of it 2,965,504 placements. Around the edge of what fits, it refuses exactly
    the configurations a run's setup (every placement made) refuses."""
    from kernbench_cli.address import load_address_map
    from kernbench_cli.hw.system import System
    from kernbench_cli.lang.memory import Memory
    from kernbench_cli.sim import hooks
    from kernbench_cli.sim.host import Host
    from kernbench_cli.sim.kernels import load_kernel, parse_params

    kernel, sets = load_kernel("llama_decode"), ["hbm.slice_size=256KiB"]
    amap = load_address_map("default", None, sets)

    def run_refuses(items: list[str]) -> bool:
        host = Host(System(amap), Memory(backed=False), 0, True)
        try:
            hooks.setup(kernel, host, parse_params(kernel, items, amap.topology.num_pes))
        except kb.ParamError:
            return True
        assert host.placements > 0
        return False

    placed = []
    seen = set()
    for batch, prompt, context in [(b, p, c) for b in (1, 2, 3) for p in (0, 8)
                                   for c in range(400, 1200, 50)]:
        items = [f"batch={batch}", f"prompt={prompt}", "chunk=4", f"context={context}"]
        refused = run_refuses(items)
        monkeypatch.setattr(Host, "reserve", lambda self, *a, **k: placed.append(a))
        try:
            kb.bounds("llama_decode", set=sets, params=dict(i.split("=") for i in items))
        except kb.ParamError:
            seen.add(refused)
            assert refused, items
        else:
            seen.add(refused)
            assert not refused, items
        monkeypatch.undo()
    assert seen == {True, False} and placed == []


def test_a_bounds_only_sweep_point_the_setup_refuses_says_so(cli):
    code, out, err = cli("sweep", "rmsnorm", "-p", "rows=16,100000000", "--bounds-only",
                         "--json")
    assert (code, err.splitlines()[-1]) == (1, "error: 1 of 2 points failed (their rows say "
                                               "why)")
    rows = json.loads(out)
    assert [r["error"] for r in rows] == [None, "input 'x' [100000000, 1024] f16 is 191GiB "
                                          "(204,800,000,000 B), more than the 32GiB of HBM "
                                          "in the system"]
    assert rows[0]["bounds"]["lower_bound_ps"] > 0
