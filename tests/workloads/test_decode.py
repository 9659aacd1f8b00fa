"""The llama_decode workload: one decode step of a Hugging Face decoder, verified against
its float64 reference, its mapping, regions, time and energy per token, representative
layers and their bounds, and the HBM the model needs."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

import kernbench_cli as kb
from kernbench_cli.sim.regions import OUTSIDE
from kernbench_cli.stream import COMPOSITE, LOAD, MATH, SEND, STORE, WAIT

SMALL = "tests/configs/small_llama.json"
NARROW = "tests/configs/narrow_llama.json"  # 8 hidden, 12 MLP, 10 words, 1 KV head
TEN = "tests/configs/tiny_10_layers.json"  # tiny, 10 layers
HF = Path(__file__).parents[1] / "configs" / "hf"
OPERATORS = ["rmsnorm", "qkv", "kv_append", "attention", "o_proj", "attn_all_reduce", "mlp",
             "mlp_all_reduce", "lm_head"]


def _passed(result) -> None:
    assert result.verified, [(c.name, c.max_abs_err) for c in result.checks]
    names = {c.name for c in result.checks}
    assert {"hidden_states.0", "hidden_states.1", "logits", "next_token"} <= names


def test_the_tiny_model_verifies_and_times_each_operator(run):
    result = run("llama_decode", "default")
    _passed(result)
    by = {r.name: r for r in result.regions}
    assert list(by) == [*OPERATORS, OUTSIDE]
    assert sum(r.path_ps for r in result.regions) == result.latency_ps
    m = {k: v for k, (v, _) in result.metrics.items()}
    assert m["tpot_ps"] == result.latency_ps
    assert m["tokens_per_s"] == pytest.approx(1e12 / result.latency_ps)
    assert m["tpot_over_hbm_bound"] == pytest.approx(result.latency_ps / m["hbm_bound_ps"])


@pytest.mark.parametrize("params", [
    (f"config={SMALL}", "batch=2", "context=37"),  # another shape: MHA, uneven shards
    ("context=0",),  # an empty cache: the new token attends to itself alone
    ("pp=2", "batch=2"),  # two pipeline stages of 8 PEs, a layer each
    pytest.param(("batch=3", "context=5", "algo=hier"), marks=pytest.mark.slow),  # shards
])                                                                # mostly empty
def test_other_shapes_verify(run, params):
    result = run("llama_decode", "default", params)
    _passed(result)
    token = next(c for c in result.checks if c.name == "next_token")
    assert token.max_abs_err == 0  # the argmax is the reference's, exactly


def test_empty_shares_of_o_mlp_and_the_vocabulary_are_skipped(run):
    """On 16 PEs a model this narrow leaves PEs no rows of O (8 dims), of the MLP (12) or
    of the vocabulary (10 words): they place nothing, multiply nothing, and their
    (max, index) pair never wins the argmax."""
    result = run("llama_decode", "default", (f"config={NARROW}", "batch=2", "context=5"))
    _passed(result)
    assert next(c for c in result.checks if c.name == "next_token").max_abs_err == 0


def test_save_writes_hugging_face_names_and_layouts(cli, tmp_path):
    out = tmp_path / "step.npz"
    code, _, err = cli("run", "llama_decode", "-p", "batch=2", "-p", "context=9", "--save",
                       str(out))
    assert code == 0, err
    saved = np.load(out)
    shapes = {k: saved[k].shape for k in saved.files}
    want = {  # tiny: hidden 256, 8 heads of 32, 2 KV heads, intermediate 512, vocab 1024
        "model.layers.0.self_attn.q_proj.weight": (256, 256),
        "model.layers.0.self_attn.k_proj.weight": (64, 256),
        "model.layers.1.mlp.down_proj.weight": (256, 512),
        "model.layers.0.input_layernorm.weight": (256,),
        "model.norm.weight": (256,),
        "lm_head.weight": (1024, 256),
        "model.layers.1.past_key": (2, 2, 9, 32),
        "inputs_embeds": (2, 256),
    }
    for name, shape in want.items():
        assert any(k.endswith(name) and shapes[k] == shape for k in shapes), (name, shapes)
    assert any(k.endswith("hidden_states.1") and shapes[k] == (2, 256) for k in shapes)
    assert any(k.endswith("logits") and shapes[k] == (2, 1024) for k in shapes)


def test_a_bad_config_is_one_line(cli, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    code, _, err = cli("run", "llama_decode", "-p", f"config={bad}")
    assert (code, err) == (2, f"error: llama_decode: config {bad}: missing "
                              "intermediate_size\n")


def test_a_model_and_a_config_together_are_refused_and_a_config_alone_names_no_model(cli):
    config = HF / "llama.json"
    code, _, err = cli("run", "llama_decode", "-p", "model=llama3-8b", "-p", f"config={config}")
    assert (code, err) == (2, "error: parameters model and config: alternatives (each names "
                              "what the run is of); give only one\n")
    code, out, err = cli("run", "llama_decode", "--timing-only", "--json", "-p", "layers=1",
                         "-p", f"config={config}")
    assert code == 0, err
    assert (json.loads(out)["params"]["model"], json.loads(out)["params"]["config"]) == \
        ("", str(config))


@pytest.mark.parametrize("name", ["new_tokens=5", "chunk=8"])
def test_a_request_parameter_without_a_prompt_is_refused(cli, name):
    """`new_tokens` and `chunk` mean something only with a prompt (`NEEDS`): given without
    one, the run would report the configuration as if they shaped it."""
    code, _, err = cli("run", "llama_decode", "--timing-only", "-p", name)
    key = name.partition("=")[0]
    assert (code, err) == (2, f"error: parameter {key}: used only with prompt (here 0); "
                              "given without it, it would change nothing\n")
    code, _, err = cli("run", "llama_decode", "--timing-only", "-p", "layers=1", "-p", name,
                       "-p", "prompt=8")
    assert code == 0, err


def test_a_sweep_over_the_prompt_may_give_a_request_parameter_to_every_point(cli):
    """`NEEDS` in a sweep: with `prompt` an axis (a decode-only point beside a request),
    `new_tokens` for the points that have one is no error; with no prompt at any point,
    a `new_tokens` axis still is."""
    code, out, err = cli("sweep", "llama_decode", "--timing-only", "-p", "layers=1", "-p",
                         "prompt=0,8", "-p", "new_tokens=3", "--format", "csv")
    assert code == 0, err
    rows = out.splitlines()[1:]
    assert [row.split(",")[:4] for row in rows] == [["0", "1", "0", "3"], ["1", "1", "8", "3"]]
    code, _, err = cli("sweep", "llama_decode", "--timing-only", "-p", "layers=1", "-p",
                       "new_tokens=2,3")
    assert (code, err) == (2, "error: -p layers=1 new_tokens=2: parameter new_tokens: used "
                              "only with prompt (here 0); given without it, it would change "
                              "nothing\n")


@pytest.mark.parametrize("flag", ["--timing-only", "--bounds-only"])
def test_an_empty_config_is_bad_input(cli, flag):
    """`-p config=` blanks the model (it is the alternative) and names no file: it was a
    KeyError of the kernel's setup (exit 1)."""
    assert cli("run", "llama_decode", flag, "-p", "config=") == (
        2, "", "error: llama_decode: config = '': give the path of a Hugging Face config.json "
               "(or -p model=NAME)\n")


def test_a_replay_states_the_same_time_per_token(cli, tmp_path):
    trace = tmp_path / "step.kbt"
    code, out, err = cli("run", "llama_decode", "--timing-only", "--json", "--record",
                         str(trace))
    assert code == 0, err
    run = json.loads(out)
    code, out, err = cli("replay", str(trace), "--json")
    assert code == 0, err
    replay = json.loads(out)
    assert replay["metrics"] == run["metrics"] and replay["regions"] == run["regions"]
    assert run["metrics"]["energy_per_token_uj"] == pytest.approx(
        run["energy_pj"]["total"] / 1e6)


def test_pipeline_stages_hand_the_hidden_state_on(run):
    """Each PE of the first stage sends its peer one eighth of the hidden state (tiny:
    256 f32 a row, batch 2); the second stage all-gathers the parts, so the state crosses
    between the stages once, not once a PE (the values: `test_other_shapes_verify`)."""
    one = run("llama_decode", "default", ("layers=2",), timing_only=True)
    two = run("llama_decode", "default", ("layers=2", "pp=2", "batch=2"), timing_only=True)
    by = {r.name: r for r in two.regions}
    assert "pp_handoff" in by
    assert "pp_handoff" not in {r.name for r in one.regions}
    program = two.trace.program
    handoff, head = program.regions.index("pp_handoff"), program.regions.index("lm_head")
    crossing = []  # (sender, receiver, bytes) of the first stage's hand-off sends
    for pid, stream in enumerate(program.streams):
        regions = program.region_of(pid)
        if head in regions:  # the last stage: it takes the state, gathering among itself
            continue
        crossing += [(pid, stream.arg[i], stream.size[i]) for i, op in enumerate(stream.op)
                     if op == SEND and regions[i] == handoff]
    assert sorted(size for *_, size in crossing) == [2 * 256 * 4 // 8] * 8
    assert len({dst for _, dst, _ in crossing}) == 8  # to eight peers
    # a stage's all-reduces span 8 PEs instead of 16: each is shorter
    assert by["attn_all_reduce"].path_ps < {r.name: r for r in one.regions}[
        "attn_all_reduce"].path_ps


@pytest.mark.parametrize("config", sorted(p.name for p in HF.glob("*.json")))
def test_every_modelled_family_verifies(run, config):
    """Each config of tests/configs/hf (Llama with RoPE scalings, biases, GELUs, a head_dim
    apart from the hidden size, tied embeddings; Mistral's window; Qwen2's biases and
    windows) against the float64 reference written from transformers (the parity script
    checks that reference's maths against transformers itself); a context past the
    16-position windows."""
    result = run("llama_decode", "default", (f"config={HF / config}", "batch=2",
                                             "context=40"))
    _passed(result)
    assert next(c for c in result.checks if c.name == "next_token").max_abs_err == 0


@pytest.mark.parametrize(("act", "unit"), [("gelu", "erf"), ("gelu_new", "tanh"),
                                           ("gelu_pytorch_tanh", "tanh"), ("silu", "exp")])
def test_each_activation_runs_its_own_function(run, tmp_path, act, unit):
    """Exact GELU and its tanh form differ by far less than a bf16 unit, so verification
    cannot tell them apart: the PE_MATH commands say which the kernel ran."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads((HF / "llama.json").read_text()),
                                "hidden_act": act}))
    result = run("llama_decode", "default", (f"config={path}",), timing_only=True)
    kinds = result.trace.program.math_kinds
    used = {kinds[arg][1] for stream in result.trace.program.streams
            for op, arg in zip(stream.op, stream.arg, strict=True) if op == MATH}
    assert unit in used
    assert ({"erf", "tanh"} - {unit}).isdisjoint(used)


def test_a_sliding_window_reads_only_the_window(run):
    """Mistral's window of 16 at context 40: each layer's cache holds, and its attention
    reads, the 16 latest positions (15 cached and the new one), not 41."""
    config = f"config={HF / 'mistral_sliding.json'}"
    windowed = run("llama_decode", "default", (config, "context=40"), timing_only=True)
    caches = [a for a in windowed.trace.memory if ".k[" in a[2]]
    heads, d = 4, 32  # mistral_sliding: 4 KV heads of 32, 16 PEs: 4 a head group
    assert sum(n for _, n, _ in caches) == 2 * heads * 16 * d * 2  # 2 layers, bf16


@pytest.mark.parametrize("batch", [1, 8, pytest.param(32, marks=pytest.mark.slow)])
def test_a_scaled_step_bounds_the_full_one(run, batch):
    """Ten layers run in full, and four (a first, two middle, a last) scaled to ten: the
    full step's time and energy per token lie within the scaled one's stated bounds."""
    full = run("llama_decode", "default", (f"config={TEN}", f"batch={batch}"),
               timing_only=True)
    part = run("llama_decode", "default", (f"config={TEN}", f"batch={batch}", "layers=4",
                                           "scale_to=10"), timing_only=True)
    f = {k: v for k, (v, _) in full.metrics.items()}
    m = {k: v for k, (v, _) in part.metrics.items()}
    assert abs(m["tpot_ps"] - full.latency_ps) <= m["tpot_bound_ps"]
    assert abs(m["energy_per_token_uj"] - f["energy_per_token_uj"]) <= \
        m["energy_per_token_bound_uj"] + 1e-9 * f["energy_per_token_uj"]
    assert m["hbm_used_bytes"] == f["hbm_used_bytes"]  # the whole model, timed or not
    assert m["macs"] == f["macs"] and m["hbm_bound_ps"] == f["hbm_bound_ps"]
    assert m["tpot_ps"] >= m["hbm_bound_ps"]
    assert "layers timed" in part.metrics["tpot_ps"][1]


def test_energy_per_token_counts_each_layer(run):
    """A scaled step's energy is the run's plus each layer not timed at a middle layer's
    counted (dynamic) energy, plus static power over the time added: not the run's
    energy scaled by time."""
    part = run("llama_decode", "default", (f"config={TEN}", "layers=4", "scale_to=10"),
               timing_only=True)
    by = {r.name: r for r in part.regions}
    layer = by["layer1"].energy_aj
    assert layer == by["layer2"].energy_aj  # identical layers: identical actions
    assert sum(r.energy_aj for r in part.regions if "/" not in r.name) == \
        sum(part.energy.dynamic.values())
    m = {k: v for k, (v, _) in part.metrics.items()}
    static_power = part.energy.static / part.latency_ps
    want = part.energy.total + 6 * layer + static_power * (m["tpot_ps"] - part.latency_ps)
    assert m["energy_per_token_uj"] == pytest.approx(want / 1e12, rel=1e-12)


@pytest.mark.parametrize(("params", "message"), [
    (("layers=3", "scale_to=10"), "scale_to needs two middle layers timed, to measure how "
     "much layers differ: layers = 3 over pp = 1 stages has 1 (a middle layer is neither "
     "the first nor the last of its stage)"),
    (("layers=5", "pp=2", "scale_to=10"), "scale_to needs two middle layers timed, to "
     "measure how much layers differ: layers = 5 over pp = 2 stages has 1 (a middle layer "
     "is neither the first nor the last of its stage)"),
    (("layers=11",), "layers = 11: the model has 10 (num_hidden_layers)"),
    (("layers=4", "scale_to=11"), "scale_to = 11: must be at least layers (4) and at most "
     "the model's 10 (num_hidden_layers)"),
    (("batch=-1",), "batch = -1: must be at least 0"),
])
def test_steps_the_model_cannot_take_are_refused(cli, params, message):
    code, _, err = cli("run", "llama_decode", "-p", f"config={TEN}",
                       *sum((("-p", p) for p in params), ()))
    assert (code, err) == (2, f"error: llama_decode: {message}\n")


def test_more_kv_heads_than_pes_says_the_kv_heads_bound_it(cli, tmp_path):
    """It said the 16 PEs "must split into 1 stages of a multiple of 32 PEs"."""
    config = json.loads(Path(SMALL).read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "hidden_size": 1024, "num_attention_heads": 32,
                                "num_key_value_heads": 32}))
    for flag in ("--timing-only", "--bounds-only"):
        assert cli("run", "llama_decode", "-p", f"config={path}", flag) == (
            2, "", "error: llama_decode: the model's 32 KV heads (num_key_value_heads) need a "
                   "PE each at least, and topology 'default' has 16\n")


def test_layers_of_different_windows_are_not_scaled(cli, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads((HF / "qwen2.json").read_text()),
                                "num_hidden_layers": 8, "use_sliding_window": True,
                                "max_window_layers": 4}))
    code, _, err = cli("run", "llama_decode", "-p", f"config={path}", "-p", "layers=4",
                       "-p", "scale_to=8")
    assert (code, err) == (2, "error: llama_decode: scale_to needs layers all alike; this "
                              "model's differ in their attention window (None, 16): run them "
                              "all\n")


def test_a_model_larger_than_the_machine_is_refused_before_it_runs(cli):
    """llama3-70b's bf16 weights alone are 141 GB; sip has 128 GiB of HBM."""
    code, _, err = cli("run", "llama_decode", "-t", "sip", "-p", "model=llama3-70b",
                       "-p", "context=8191", "-p", "layers=4", "-p", "scale_to=80",
                       "--timing-only")
    assert code == 2
    assert err == ("error: llama_decode: llama3-70b does not fit topology 'sip': its 80 "
                   "layers' weights, the LM head and embedding table and the KV cache of "
                   "batch 1 at context 8191 take 133.914GiB (143,789,129,728 B); the system "
                   "has 128GiB of HBM (128 PEs x 1GiB)\n")


@pytest.mark.parametrize("flag", ["--timing-only", "--bounds-only"])
def test_a_pe_that_overflows_is_named_with_what_it_holds(cli, flag):
    """The tiny model's weights, tables and cache (3.16 MiB) fit 16 slices of 216 KiB
    (3.375 MiB), but not once each PE's buffers and page-aligned pieces are counted.
    `--bounds-only` stated bounds for it (exit 0), a step no run would make."""
    code, _, err = cli("run", "llama_decode", flag, "--set", "hbm.slice_size=216KiB")
    assert (code, err) == (2, (
        "error: llama_decode: tiny does not fit topology 'default' at batch 1, context 64: "
        "PE (rack=0 sip=0 cube=0 pe=0) needs 221KiB (weights 174KiB, kv cache 4KiB, "
        "embedding 32KiB, buffers 11KiB) for its share of 2 layers, its HBM slice has "
        "216KiB (5,120 B short); 16 of 16 PEs overflow, 3.453MiB in all of 3.375MiB\n"))


def test_the_whole_model_is_checked_not_the_layers_timed(run):
    """llama3-8b at context 8191 fits sip; its scaled step reports the HBM the whole
    model takes."""
    from kernbench_cli.address import load_address_map
    from kernbench_cli.models.decoder import Layout, run_of
    from kernbench_cli.sim.kernels import load_kernel

    module = load_kernel("llama_decode").module
    topo = load_address_map("sip").topology
    p = {**module.PARAMS, "model": "llama3-8b", "context": 8191, "layers": 4,
         "scale_to": 32}
    lay = Layout(topo, run_of(topo, p))
    used = sum(sum(lay.need(pid).values()) for pid in range(topo.num_pes))
    assert 16e9 < used < 20e9  # 16 GB of bf16 weights and 1 GB of KV cache, and buffers
    lay.check([f"PE {pid}" for pid in range(topo.num_pes)])  # fits: no error


def test_each_pe_holds_its_part_of_the_prompt_not_all_of_it():
    """A 2k prompt at batch 8 of llama3-8b on sip: a PE holds its part of each pass's
    rows (1/128 of them, the part it gathers), not the whole prompt (128 MiB a PE in
    bf16), so the prompt takes a 1/128 share of the HBM beside the cache."""
    from kernbench_cli.address import load_address_map
    from kernbench_cli.models.decoder import Layout, run_of
    from kernbench_cli.sim.kernels import load_kernel

    module = load_kernel("llama_decode").module
    topo = load_address_map("sip").topology
    p = {**module.PARAMS, "model": "llama3-8b", "context": 0, "prompt": 2048, "chunk": 16,
         "batch": 8, "layers": 4, "scale_to": 32}
    lay = Layout(topo, run_of(topo, p))
    passes, rows, hidden = 2048 // 16, 8 * 16, 4096
    assert lay.prompt_slot == rows * hidden // 128  # a pass's rows split evenly
    parts = sorted(lay.gathered(0)[rows].values())  # (offset, elements) of each PE's
    assert parts == [(e0, 4096) for e0 in range(0, rows * hidden, 4096)]  # together: all
    prompt = next(piece for piece in lay.shared if piece.key == "prompt")
    assert prompt.nbytes == passes * lay.prompt_slot * 2 == 8 * 2048 * hidden * 2 // 128


def test_every_layer_issues_the_same_commands_up_to_relocation(run):
    """Each PE's pieces start at DRAM pages, its layers one after another: every middle
    layer's commands are the same kinds, sizes and shapes, at the same offsets within
    their DRAM pages, so they open the same pages (a layer whose pieces sat at other
    offsets opened one page more, every other layer, on some PEs)."""
    result = run("llama_decode", "default", (f"config={TEN}", "batch=2", "layers=5",
                                             "scale_to=10"), timing_only=True)
    program, page = result.trace.program, 1024  # default.toml's hbm.page_size
    names = program.regions
    for pid, stream in enumerate(program.streams):
        leaf = program.region_of(pid)
        layers = {}
        for i, r in enumerate(leaf):
            if names[r].startswith("layer"):
                layers.setdefault(names[r].split("/")[0], []).append(i)
        rows = {name: [(stream.op[i], stream.size[i], stream.rows[i],
                        *_in_page(program, stream, i, page)) for i in cmds]
                for name, cmds in layers.items()}
        assert rows["layer1"] == rows["layer2"] == rows["layer3"], pid


def _in_page(program, stream, i: int, page: int) -> tuple:
    """Command `i`'s HBM end as offsets within DRAM pages (a composite: its shape too)."""
    op = stream.op[i]
    if op == LOAD:
        return (stream.src[i] % page,)
    if op == STORE:
        return (stream.dst[i] % page,)
    if op == COMPOSITE:
        c = program.composites[stream.arg[i]]
        return (c.m, c.k, c.n, c.b_addr % page, c.out_addr % page)
    return (stream.arg[i],)


def test_the_largest_batch_runs_and_one_more_is_refused(cli):
    """With 256 KiB slices the tiny model at context 64 holds 8 sequences: `max_batch`
    says so, computed by placing the model; batch 8 runs, batch 9 is refused before it
    runs, and batch 0 runs the largest batch that fits."""
    small = ("--set", "hbm.slice_size=256KiB", "--timing-only", "--json")
    code, out, err = cli("run", "llama_decode", *small)
    assert code == 0, err
    metrics = json.loads(out)["metrics"]
    assert (metrics["max_batch"], metrics["max_context"]) == (8, 1151)
    code, out, err = cli("run", "llama_decode", "-p", "batch=8", *small)
    assert code == 0, err
    assert json.loads(out)["metrics"]["hbm_free_bytes"] >= 0
    code, _, err = cli("run", "llama_decode", "-p", "batch=9", *small)
    assert code == 2 and err.startswith("error: llama_decode: tiny does not fit topology "
                                        "'default' at batch 9, context 64: PE ")
    code, out, err = cli("run", "llama_decode", "-p", "batch=0", *small)
    assert code == 0, err
    run = json.loads(out)
    assert run["metrics"]["tokens_per_s"] == pytest.approx(8e12 / run["latency_ps"])
    code, _, err = cli("run", "llama_decode", "-p", "context=1152", *small)
    assert code == 2 and "does not fit" in err


@pytest.mark.parametrize(("given", "name", "most"), [
    # a micro-batch's rows size a PE's buffers: split in two, 10 sequences fit, not 8
    ({"batch": 2, "microbatches": 2}, "batch", 10),
    ({"batch": 2, "pp": 2, "microbatches": 2}, "batch", 10),
    # the prompt's buffers and positions count: 309, not 575 (575 was refused), and the
    # request's 3 decode steps' (311 holds the first step, not the last); the check's copy
    # of the prompt's last token after each layer is spread over the stage (245 while
    # every PE held all of it)
    ({"batch": 2, "prompt": 8, "chunk": 4, "new_tokens": 4}, "context", 309),
])
def test_capacity_is_of_the_run_as_given(cli, given, name, most):
    """`max_batch` in the run's micro-batches and `max_context` with its prompt: the largest
    runs and one step more is refused (a batch is a whole number of micro-batches)."""
    small = ("--set", "hbm.slice_size=256KiB", "--timing-only")

    def run(**change):
        args = [a for k, v in {**given, **change}.items() for a in ("-p", f"{k}={v}")]
        code, out, err = cli("run", "llama_decode", *args, *small, "--json")
        return code, json.loads(out) if code == 0 else err

    code, out = run()
    assert code == 0, out
    assert out["metrics"][f"max_{name}"] == most
    code, text, _ = cli("run", "llama_decode", *(a for k, v in given.items()
                                                 for a in ("-p", f"{k}={v}")), *small)
    said = " ".join(text.split())  # the table wraps its lines
    assert ("in 2 micro-batches:" in said) == ("microbatches" in given)
    assert ("(at batch 2 and a prompt of 8, through the request's 4 new tokens)" in said) \
        == ("prompt" in given)
    assert run(**{name: most})[0] == 0
    assert run(**{name: most + given.get("microbatches", 1)})[0] == 2
    if name == "batch":
        code, out = run(batch=0)
        assert code == 0 and out["metrics"]["tokens_per_s"] == pytest.approx(
            most * 1e12 / out["metrics"]["tpot_ps"])


def test_the_largest_batch_holds_the_whole_request(cli):
    """With a prompt, the request's `new_tokens` - 1 decode steps grow each sequence's cache
    to context + prompt + new_tokens - 1 positions: `max_batch` and `batch = 0` are of what
    fits then (9 at 900 new tokens, 13 when the cache grows by one position), and a batch
    that fits the first step but not the last is refused naming `new_tokens`."""
    given = ("-p", "context=1000", "-p", "prompt=16", "-p", "chunk=16", "--set",
             "hbm.slice_size=1MiB", "--timing-only")

    def run(*more):
        code, out, err = cli("run", "llama_decode", *given, *more, "--json")
        return (code, json.loads(out)["metrics"]) if code == 0 else (code, err)

    assert run("-p", "new_tokens=2")[1]["max_batch"] == 13
    code, m = run("-p", "new_tokens=900")
    assert code == 0 and m["max_batch"] == 9
    code, m = run("-p", "new_tokens=900", "-p", "batch=0")
    assert code == 0 and m["request_tokens_per_s"] == pytest.approx(
        9 * 900 * 1e12 / m["request_ps"])
    assert run("-p", "new_tokens=900", "-p", "batch=9")[0] == 0
    code, err = run("-p", "new_tokens=900", "-p", "batch=10")
    assert code == 2 and err.startswith(
        "error: llama_decode: new_tokens = 900: tiny does not fit topology 'default' at "
        "batch 10, context 1000, a prompt of 16, at the request's last decode step (1,915 "
        "positions a sequence): PE ")


def test_a_batch_0_that_tcm_refuses_says_batch_0_chose_it(cli):
    """With the default 1 GiB slices HBM holds 424,360 sequences of the tiny model, far
    more rows than TCM: the refusal names `batch = 0` and the batch it chose, not a
    batch the user never gave."""
    code, _, err = cli("run", "llama_decode", "-p", "batch=0", "--timing-only")
    assert (code, err) == (2, (
        "error: llama_decode: batch = 0, the largest batch HBM holds (424,360): a "
        "micro-batch of 424360 rows holds three [424360, 256] f32 tensors at a layer's "
        "residual add (1,303,633,920 B), more than a PE's 2,097,152 B of TCM: give a batch, "
        "or split the batch into micro-batches of at most 682 rows (-p microbatches; other "
        "tensors share TCM, so it may take fewer)\n"))
    # one sequence more than HBM holds is refused for HBM, not told to split for TCM
    code, _, err = cli("run", "llama_decode", "-p", "batch=424361", "--timing-only")
    assert code == 2 and err.startswith("error: llama_decode: tiny does not fit topology "
                                        "'default' at batch 424361, context 64: PE ")


def test_max_context_of_a_sliding_window_model_is_its_positions(run):
    """Every layer of mistral_sliding.json keeps a 16-position window, so its KV cache stops
    growing past 16 positions and no HBM bounds its context: `max_context` is its
    max_position_embeddings less one (4096 - 1), found at once, and says why."""
    result = run("llama_decode", "default", (f"config={HF / 'mistral_sliding.json'}",),
                 timing_only=True)
    value, note = result.metrics["max_context"]
    assert value == 4095
    assert note == "(at batch 1: the model's max_position_embeddings, not its HBM, bounds it)"


def test_quality_beside_time_and_energy(run):
    """A run with values also says how far its logits are from the exact model (float64,
    no rounding): about one bf16 unit (2^-8) of relative error, the same next tokens."""
    result = run("llama_decode", "default", ("batch=4",))
    m = {k: v for k, (v, _) in result.metrics.items()}
    assert 0 < m["logits_rel_l2"] < 2 ** -8 * 2
    assert m["top1_agreement"] == 1.0
    assert m["logits_max_abs_err"] > 0
    timing = run("llama_decode", "default", ("batch=4",), timing_only=True)
    assert "logits_rel_l2" not in timing.metrics  # nothing to measure without values


def test_a_scaled_runs_quality_says_it_is_of_the_layers_run(run):
    """With `scale_to`, TPOT and energy are of the scaled step but the logits follow the
    last layer run: the quality figures are of that truncated model (the exact model over
    the same layers: equal to a run of those layers alone), and their label says so."""
    scaled = run("llama_decode", "default", (f"config={TEN}", "context=20", "layers=4",
                                             "scale_to=10"))
    alone = run("llama_decode", "default", (f"config={TEN}", "context=20", "layers=4"))
    assert scaled.metrics["logits_rel_l2"][0] == alone.metrics["logits_rel_l2"][0]
    assert scaled.metrics["logits_rel_l2"][1] == (
        "(against the exact model in float64; of the 4 layers run, not the 10 the step is "
        "scaled to: the error grows with depth)")
    assert alone.metrics["logits_rel_l2"][1] == "(against the exact model in float64)"


def test_a_deeper_model_verifies_at_a_tolerance_grown_with_depth(run):
    """10 layers at batch 8 failed (exit 1) at layer 6 on: elements near zero 0.047-0.0625
    from the reference, past bf16's 0.03 + 0.03 x |ref|, in a run whose tokens all agree
    with float64. Layer i's atol is bf16's x sqrt(1 + i), the logits' x sqrt(1 + 10)."""
    result = run("llama_decode", "default", (f"config={TEN}", "context=20", "batch=8"))
    _passed(result)
    checks = {c.name: c for c in result.checks}
    assert [checks[f"hidden_states.{i}"].atol for i in (0, 9)] == [0.03, 0.03 * 10 ** 0.5]
    assert checks["logits"].atol == 0.03 * 11 ** 0.5 and checks["logits"].declared
    assert checks["hidden_states.9"].max_abs_err > 0.03  # past the dtype's own
    assert result.metrics["top1_agreement"][0] == 1.0


def test_a_near_tie_verifies_and_agreement_counts_the_tokens_chosen(run):
    """Seed 3 at batch 32: sequence 22's two best reference logits are 0.007 apart (bf16's
    tolerance is 0.03 + 0.03 x |ref|), they round to one bf16, and the kernel picks the
    other: verification failed on the index ("next_token max |err| 764"). It now checks
    the chosen token's reference logit against the largest (here equal). Seed 1 with fp8
    weights: two logits of sequence 25 round to the same bf16, whose argmax (the lower
    index) agrees with the exact model where the kernel's token (349) does not:
    top1_agreement said 29 of 32, the kernel's tokens agree on 28."""
    result = run("llama_decode", "default", ("batch=32",), seed=3)
    _passed(result)
    token = next(c for c in result.checks if c.name == "next_token")
    grown = 0.03 * 3 ** 0.5  # the logits after 2 layers: bf16's atol x sqrt(1 + 2)
    assert (token.dtype, token.atol, token.rtol, token.scores) == ("bf16", 2 * grown, 0.06,
                                                                   "logits")
    result = run("llama_decode", "default", ("batch=32", "weights=fp8"), seed=1)
    _passed(result)
    chosen, logits = result.outputs["next_token"], result.outputs["logits"].astype(np.float32)
    assert np.flatnonzero(logits.argmax(axis=-1) != chosen).tolist() == [25]
    assert result.metrics["top1_agreement"][0] == 28 / 32


@pytest.mark.parametrize("params", [
    ("prompt=20", "chunk=8", "context=5", "batch=2"),  # passes of 8, 8 and 4, after 5 cached
    ("prompt=12", "chunk=5", "context=3", "batch=2", "pp=2"),  # stages take passes in turn
    ("prompt=9", "chunk=16", "context=0"),  # one pass, an empty cache before it
])
def test_a_prefill_verifies_and_the_decode_step_reads_its_cache(run, params):
    """The prompt goes through the model pass by pass (causal attention over the cache
    and the pass's earlier tokens), writing its K and V, which the float64 reference
    checks position by position; its last token's logits give the first token; the
    decode step that follows reads that cache, and verifies too."""
    result = run("llama_decode", "default", params)
    _passed(result)
    names = {c.name for c in result.checks}
    assert {"prefill.logits", "prefill.next_token", "prefill.layers.0.key",
            "prefill.layers.1.value", "prefill.hidden_states.1"} <= names
    tokens = [c for c in result.checks if c.name.endswith("next_token")]
    assert all(c.max_abs_err == 0 for c in tokens)


def test_a_prefill_pass_holds_no_output_of_the_pass_before(run):
    """Only the last pass's output feeds the LM head: the one before leaves TCM before the
    next pass runs. Held across it (400 KiB a pass here, at 400 rows of tiny's 256
    columns in f32) it overflowed the 2 MiB TCM in the next pass's attention."""
    result = run("llama_decode", "default", ("context=0", "prompt=800", "chunk=400",
                                             "layers=1"), timing_only=True)
    peak, tcm = max(b for b, _, _ in result.tcm_high_water), 2 << 20
    assert 3 * 400 * 256 * 4 < peak < tcm - 400 * 256 * 4  # no fourth [400, 256] f32


def test_a_request_is_its_prefill_and_its_decode_steps(run):
    """TTFT is the prefill's end (its first token), TPOT the decode step after it; a
    request of n tokens takes TTFT + (n - 1) TPOT, and the rates follow."""
    result = run("llama_decode", "default", ("prompt=16", "chunk=8", "context=0", "batch=2",
                                             "new_tokens=10"), timing_only=True)
    m = {k: v for k, (v, _) in result.metrics.items()}
    prefill_end = max(end for _, name, _, end in result.region_spans
                      if name.startswith("prefill"))
    assert m["ttft_ps"] == prefill_end < result.latency_ps  # the first token is out then
    assert m["tpot_ps"] == result.latency_ps - prefill_end
    assert m["request_ps"] == m["ttft_ps"] + 9 * m["tpot_ps"]
    assert m["prefill_tokens_per_s"] == pytest.approx(2 * 16 * 1e12 / m["ttft_ps"])
    assert m["request_tokens_per_s"] == pytest.approx(2 * 10 * 1e12 / m["request_ps"])
    by = {r.name: r for r in result.regions}
    assert "prefill" in by and by["prefill"].energy_aj > 0


def test_a_micro_batched_request_follows_its_first_step_by_steady_tpot(run):
    """With micro-batches through stages, the request's first decode step fills the
    pipeline (TPOT) and each later one follows by the same run's steady TPOT: a request
    of n tokens takes TTFT + TPOT + (n - 2) steady TPOT, as its label says."""
    result = run("llama_decode", "default", ("prompt=16", "chunk=8", "batch=4", "pp=2",
                                             "microbatches=2", "new_tokens=8"),
                 timing_only=True)
    m = {k: v for k, (v, _) in result.metrics.items()}
    assert m["steady_tpot_ps"] < m["tpot_ps"]  # the stages overlap: steady is shorter
    assert m["request_ps"] == m["ttft_ps"] + m["tpot_ps"] + 6 * m["steady_tpot_ps"]
    assert result.metrics["request_ps"][1].startswith(
        "(TTFT + TPOT + 6 x steady TPOT: 8 new tokens; the first decode step fills the 2 "
        "micro-batches' pipeline, each later one follows it by steady TPOT")
    assert m["request_tokens_per_s"] == pytest.approx(4 * 8 * 1e12 / m["request_ps"])


def test_with_stages_the_step_after_the_prompt_waits_for_the_prompts_token(run):
    """With pp=2 the decode step's input is the token the last stage's LM head chose from
    the prompt: no PE starts the step before a PE of the last stage has that token (each
    sends it to its peer in the first stage). Before, the first stage started the step as
    soon as its own part of the prefill was done, under the last stage's drain, and the
    step after the prompt was reported 43% short of a step at that context."""
    result = run("llama_decode", "default", ("prompt=8", "chunk=4", "context=0", "batch=4",
                                             "pp=2"), timing_only=True)
    last = {pid for pid, name, _, _ in result.region_spans if name == "prefill/lm_head"}
    token = min(end for pid, name, _, end in result.region_spans
                if pid in last and name == "prefill")
    step = [start for _, name, start, _ in result.region_spans
            if name.split("/")[0] not in ("prefill", "pp_handoff")]
    assert 0 < len(last) < 16 and min(step) >= token
    m = {k: v for k, (v, _) in result.metrics.items()}
    alone = run("llama_decode", "default", ("context=8", "batch=4", "pp=2"), timing_only=True)
    assert m["tpot_ps"] == pytest.approx(alone.latency_ps, rel=0.01)


@pytest.mark.slow  # llama3-8b on sip, one layer at 32 rows a micro-batch (20 to 40 s)
@pytest.mark.parametrize("batch", [32, 64])
def test_a_micro_batch_of_32_rows_of_llama3_8b_fits_a_2_mib_tcm(run, batch):
    """Three [32, 4096] f32 tensors (512 KiB each) at a residual add, beside the small
    ones, in a 2 MiB TCM: they fit as the large ones keep to the top and each is dropped
    after its last use (before, 28 rows ran: the free TCM was in pieces). A batch of 64
    runs on one stage as two micro-batches of 32."""
    result = run("llama_decode", "sip", ("model=llama3-8b", "layers=1", f"batch={batch}",
                                         f"microbatches={batch // 32}"), timing_only=True)
    assert result.metrics["tokens_per_s"][0] == batch * 1e12 / result.metrics["tpot_ps"][0]
    assert max(result.trace.program.tcm_peak) <= 2 << 20


@pytest.mark.slow  # a full 4-layer prefill beside its scaled one (13 s)
def test_a_scaled_prefill_bounds_the_full_one(run):
    """Ten layers' prefill in full, and four scaled to ten: TTFT within its bound."""
    base = (f"config={TEN}", "prompt=24", "chunk=8", "context=0", "batch=2")
    full = run("llama_decode", "default", base, timing_only=True)
    part = run("llama_decode", "default", (*base, "layers=4", "scale_to=10"),
               timing_only=True)
    f = {k: v for k, (v, _) in full.metrics.items()}
    m = {k: v for k, (v, _) in part.metrics.items()}
    assert abs(m["ttft_ps"] - f["ttft_ps"]) <= m["ttft_bound_ps"]
    assert abs(m["tpot_ps"] - f["tpot_ps"]) <= m["tpot_bound_ps"]
    assert abs(m["prefill_energy_per_token_uj"] - f["prefill_energy_per_token_uj"]) <= \
        m["prefill_energy_per_token_bound_uj"] + 1e-9 * f["prefill_energy_per_token_uj"]


@pytest.mark.parametrize(("params", "message"), [
    ((f"config={HF / 'mistral_sliding.json'}", "prompt=8"), "prompt: a prefill of "
     "sliding-window layers is not modelled (its attention would need a window per "
     "query); run the decode step, or a model without sliding_window"),
    ((f"config={TEN}", "prompt=8", "layers=6", "scale_to=10", "pp=2"), "scale_to with a "
     "prompt and pp > 1: the stages take the prefill's passes in a pipeline, so a layer's "
     "time there is no share of the TTFT; run all layers, or one stage"),
    (("prompt=8", "chunk=0"), "chunk = 0: must be at least 1"),
])
def test_prefills_not_modelled_are_refused(cli, params, message):
    code, _, err = cli("run", "llama_decode", *sum((("-p", p) for p in params), ()))
    assert (code, err) == (2, f"error: llama_decode: {message}\n")


PIPE = "tests/configs/tiny_4_layers_64_words.json"  # 4 layers, 64 words: a light LM head


@pytest.mark.parametrize("m", [2, 4, 8])
def test_micro_batches_overlap_the_stages(run, m):
    """Batch 8 in m micro-batches through 4 stages of a layer each: the micro-batches leave
    the last stage one stage time apart, and the step takes (N + m - 1) stage times (the
    first stages are lighter by the LM head the last one runs: less, by at most N - 1
    times it); in steady state a micro-batch's next token comes max(m, N) stage times
    later (a round trip, with fewer micro-batches than stages)."""
    one = run("llama_decode", "default", (f"config={PIPE}", "batch=8", "pp=4"),
              timing_only=True)
    result = run("llama_decode", "default", (f"config={PIPE}", "batch=8", "pp=4",
                                             f"microbatches={m}"), timing_only=True)
    from kernbench_cli.sim.run import _timed

    passes = _timed(result).region_passes["lm_head"]
    ends = [end for _, end in passes]
    gaps = [b - a for a, b in itertools.pairwise(ends)]
    assert len(passes) == m and max(gaps) - min(gaps) < 0.01 * max(gaps)  # steady
    met = {k: v for k, (v, _) in result.metrics.items()}
    stage, lm_head = met["stage_ps"], max(e - s for s, e in passes)
    assert 0 <= (4 + m - 1) * stage - result.latency_ps <= 3 * lm_head
    # steady state: the slowest stage's m micro-batches, or a micro-batch's round trip
    # through the 4 stages (the first's: the step less the m - 1 stage times after it),
    # whichever is longer: the trip, with fewer micro-batches than stages
    trip = result.latency_ps - (m - 1) * stage
    assert met["steady_tpot_ps"] == max(m * stage, trip)
    assert (met["steady_tpot_ps"] == trip) == (m < 4)
    assert met["steady_tokens_per_s"] == pytest.approx(8e12 / met["steady_tpot_ps"])
    # one step of the whole batch: no sooner than without micro-batches (each micro-batch
    # reads the weights again); in steady state, with no more micro-batches than stages,
    # more tokens a second than the stages taking the whole batch in turn
    assert result.latency_ps > one.latency_ps
    unpipelined = 8e12 / one.latency_ps
    assert (met["steady_tokens_per_s"] > unpipelined) == (m <= 4)


@pytest.mark.parametrize("pp", [1, 2])
def test_micro_batches_verify(run, pp):
    result = run("llama_decode", "default", ("batch=4", f"pp={pp}", "microbatches=2"))
    _passed(result)
    assert next(c for c in result.checks if c.name == "next_token").max_abs_err == 0


def test_micro_batches_on_one_stage_run_one_after_another(run):
    """On one stage, batch 8 in 4 micro-batches of 2 rows: each reads the weights again,
    one after another, so the step is 4 micro-batches' time (`stage_ps` apart, nothing
    overlapped: no bubble to speak of), slower than the batch at once, and the steady
    figures are the step's."""
    one = run("llama_decode", "default", ("batch=8",), timing_only=True)
    result = run("llama_decode", "default", ("batch=8", "microbatches=4"), timing_only=True)
    from kernbench_cli.sim.run import _timed

    ends = [end for _, end in _timed(result).region_passes["lm_head"]]
    met = {k: v for k, (v, _) in result.metrics.items()}
    assert len(ends) == 4 and met["stage_ps"] == (ends[-1] - ends[0]) / 3
    assert met["steady_tpot_ps"] == max(4 * met["stage_ps"], met["tpot_ps"] - 3 * met[
        "stage_ps"]) == pytest.approx(met["tpot_ps"], rel=0.02)
    assert abs(met["pipeline_bubble"]) < 0.02
    assert met["tpot_ps"] == result.latency_ps > one.latency_ps


@pytest.mark.parametrize(("params", "message"), [
    ((f"config={TEN}", "batch=4", "microbatches=2", "layers=4", "scale_to=10"),
     "microbatches = 2: each layer runs once per micro-batch (with stages, overlapped), so "
     "no scale_to"),
    (("batch=3", "pp=2", "microbatches=2"), "microbatches = 2: batch 3 does not split into "
     "2 equal micro-batches"),
])
def test_micro_batches_that_cannot_be_are_refused(cli, params, message):
    code, _, err = cli("run", "llama_decode", *sum((("-p", p) for p in params), ()))
    assert (code, err) == (2, f"error: llama_decode: {message}\n")


@pytest.mark.parametrize(("params", "message"), [
    (("batch=64",), "batch = 64: a micro-batch of 64 rows holds three [64, 4096] f32 "
     "tensors at a layer's residual add (3,145,728 B), more than a PE's 2,097,152 B of TCM: "
     "split the batch into micro-batches of at most 42 rows (-p microbatches; other tensors "
     "share TCM, so it may take fewer)"),
    (("batch=128", "microbatches=2"), "batch = 128: microbatches = 2, a micro-batch of 64 "
     "rows holds three [64, 4096] f32 tensors at a layer's residual add (3,145,728 B), more "
     "than a PE's 2,097,152 B of TCM: split the batch into micro-batches of at most 42 rows "
     "(-p microbatches; other tensors share TCM, so it may take fewer)"),
    (("batch=2", "prompt=64", "context=0"), "chunk = 64: a prefill pass of batch x chunk = "
     "128 rows holds three [128, 4096] f32 tensors at a layer's residual add (6,291,456 B), "
     "more than a PE's 2,097,152 B of TCM: lower -p chunk to at most 21 (other tensors share "
     "TCM, so it may take fewer)"),
    (("batch=43", "prompt=8", "context=0", "microbatches=43"), "batch = 43: a prefill pass "
     "of one token a sequence (43 rows) holds three [43, 4096] f32 tensors at a layer's "
     "residual add, more than a PE's 2,097,152 B of TCM"),
])
def test_a_pass_whose_rows_cannot_fit_tcm_is_refused_before_it_runs(cli, params, message):
    """Three [rows, hidden] f32 tensors are in TCM at once at a residual add (the input,
    the sum, the result): a decode micro-batch or prefill pass with more rows than that
    allows is refused at once, naming the key and what to change (llama3-8b on sip: 16 KiB
    a row, 42 rows in 2 MiB)."""
    code, _, err = cli("run", "llama_decode", "-t", "sip", "-p", "model=llama3-8b", "-p",
                       "layers=1", "--timing-only", *sum((("-p", p) for p in params), ()))
    assert (code, err) == (2, f"error: llama_decode: {message}\n")


@pytest.mark.parametrize(("params", "message"), [
    (("batch=18",), "batch = 18: a micro-batch of 18 rows holds, at the LM head's argmax, the "
     "input [18, 4096] in f32 and in bf16, the [18, 8016] f32 logits of a PE's share of the "
     "vocabulary (128,256 over 16 PEs) and two temporaries of their shape (2,205,888 B), "
     "more than a PE's 2,097,152 B of TCM: split the batch into micro-batches of at most 17 "
     "rows (-p microbatches; other tensors share TCM, so it may take fewer)"),
    (("batch=43",), "batch = 43: a micro-batch of 43 rows holds three [43, 4096] f32 "
     "tensors at a layer's residual add (2,113,536 B), more than a PE's 2,097,152 B of TCM: "
     "split the batch into micro-batches of at most 17 rows (-p microbatches; other tensors "
     "share TCM, so it may take fewer)"),
    (("batch=18", "prompt=1", "chunk=1", "microbatches=2"), "batch = 18: the prefill's last "
     "tokens (18 rows) hold, at the LM head's argmax, the input [18, 4096] in f32 and in "
     "bf16, the [18, 8016] f32 logits of a PE's share of the vocabulary (128,256 over 16 "
     "PEs) and two temporaries of their shape (2,205,888 B), more than a PE's 2,097,152 B "
     "of TCM: give a batch of at most 17 (-p batch; other tensors share TCM, so it may take "
     "fewer)"),
])
def test_rows_the_lm_head_cannot_hold_are_refused_before_they_run(cli, params, message):
    """On 16 PEs llama3-8b's LM head takes 8,016 of the vocabulary a PE: its [rows, 8016]
    f32 logits and two temporaries of their shape at the argmax, with its input in f32
    and bf16, bind before the residual add's 42 rows (16 rows run; 17 to 40 ran out of
    TCM mid-run, and 17 still does: the bound is necessary, not sufficient). More than 17
    are refused at once, in a bounds-only run too, and a split is advised by the smaller
    bound; `max_batch` states the 17."""
    args = ("run", "llama_decode", "-p", "model=llama3-8b", "-p", "layers=2", "-p",
            "context=16", *sum((("-p", p) for p in params), ()))
    assert cli(*args, "--bounds-only")[::2] == (2, f"error: llama_decode: {message}\n")
    code, out, _ = cli("run", "llama_decode", "-p", "model=llama3-8b", "-p", "layers=1",
                       "-p", "context=16", "--timing-only")
    assert code == 0 and "TCM bounds a micro-batch apart: more than 17 rows cannot fit, " \
        "fewer may not" in " ".join(out.split())  # the table wraps its lines


@pytest.mark.parametrize(("base", "passes"), [
    (("prompt=64", "chunk=8", "context=0", "batch=2"), 5),
    # a pass starts on some PEs before the one before has ended on all: counted at its
    # span, each pass not timed added that overlap again, past the bound (by 0.7%)
    (("prompt=28", "chunk=4", "batch=2", "new_tokens=5"), 5),
    (("prompt=32", "chunk=4", "batch=1", "new_tokens=5"), 5),
    (("prompt=48", "chunk=4", "batch=1", "new_tokens=5"), 6),
])
def test_representative_passes_bound_the_full_prefill(run, base, passes):
    """A prompt of 7 to 12 passes, 5 or 6 of them timed (the first, the last, some between):
    each pass not timed on the line between its timed neighbours (attention grows with
    the position), within the bound of how far a timed pass lies off its neighbours'
    line."""
    full = run("llama_decode", "default", base, timing_only=True)
    part = run("llama_decode", "default", (*base, f"passes={passes}"), timing_only=True)
    f = {k: v for k, (v, _) in full.metrics.items()}
    m = {k: v for k, (v, _) in part.metrics.items()}
    assert 0 < abs(m["ttft_ps"] - f["ttft_ps"]) <= m["ttft_bound_ps"]
    assert abs(m["prefill_energy_per_token_uj"] - f["prefill_energy_per_token_uj"]) <= \
        m["prefill_energy_per_token_bound_uj"]
    assert f"{passes} of " in part.metrics["ttft_ps"][1]
    assert m["tpot_ps"] == f["tpot_ps"]  # the decode step after it is the same step


@pytest.mark.slow  # the full prefills: 7 and 14 s
@pytest.mark.parametrize("batch", [1, 4])
def test_representative_passes_bound_a_prefill_whose_passes_vary_with_position(run, batch):
    """The ten-layer model, context 0, a prompt of 128 in passes of 16, 4 layers timed: a
    pass's time moves with its position (up to 1.4% off its neighbours' line), and with
    3 of the 8 passes timed the full TTFT lay 1.27x (batch 1) and 2.59x (batch 4) the
    bound away, the timed passes lying near one line. 3 are refused now; 5 hold."""
    base = (f"config={TEN}", "context=0", f"batch={batch}",
            "prompt=128", "chunk=16")
    full = run("llama_decode", "default", base, timing_only=True)
    part = run("llama_decode", "default", (*base, "layers=4", "scale_to=10", "passes=5"),
               timing_only=True)
    f = {k: v for k, (v, _) in full.metrics.items()}
    m = {k: v for k, (v, _) in part.metrics.items()}
    assert abs(m["ttft_ps"] - f["ttft_ps"]) <= m["ttft_bound_ps"]
    assert abs(m["prefill_energy_per_token_uj"] - f["prefill_energy_per_token_uj"]) <= \
        m["prefill_energy_per_token_bound_uj"]


def test_passes_not_timed_are_never_bound_closer_than_their_drift():
    """Five timed passes of seven that took alike (on one flat line: no pass off it, no
    slope) stated a TTFT bound of 0 for the two between, as if their times were known:
    each pass not timed is bound by at least `PASS_DRIFT` of its time."""
    from types import SimpleNamespace

    from kernbench_cli.sim.kernels import load_kernel

    module = load_kernel("llama_decode").module
    chunks = [(16 * n, 16) for n in range(7)]
    timed = [0, 2, 3, 4, 6]  # the first, the last and three between
    step = SimpleNamespace(chunks=chunks, timed_chunks=[chunks[n] for n in timed], layers=2,
                           timed=2, scaled=False)
    pass_ps, pass_aj = 1_000_000, 5_000
    bounds = {f"prefill/pass{n}": (k * pass_ps, (k + 1) * pass_ps)
              for k, n in enumerate(timed)}
    run = SimpleNamespace(region_bounds=bounds,
                          region_energy_aj={name: pass_aj for name in bounds})
    ttft, energy, t_bound, e_bound, how = module._passes(step, run, 5 * pass_ps, 5 * pass_aj)
    assert (ttft, energy) == (7 * pass_ps, 7 * pass_aj)  # the two between at the line
    assert t_bound == pytest.approx(2 * module.PASS_DRIFT * pass_ps)
    assert e_bound == 0  # a pass's counted energy does not drift with the PEs' phase
    assert how.startswith("5 of 7 passes timed")


def test_representative_passes_need_timing_only(cli):
    code, _, err = cli("run", "llama_decode", "-p", "prompt=64", "-p", "chunk=8", "-p",
                       "passes=5")
    assert (code, err) == (2, "error: llama_decode: passes = 5: representative passes need "
                              "--timing-only (the passes not run would leave their rows out "
                              "of the cache the values are checked against)\n")
    code, _, err = cli("run", "llama_decode", "-p", "prompt=64", "-p", "chunk=8", "-p",
                       "passes=4", "--timing-only")
    assert (code, err) == (2, "error: llama_decode: passes = 4: representative prefill passes "
                              "are 5 or more (the first, the last and three between: the "
                              "bound on the passes not timed is from how far those three lie "
                              "off their neighbours' line; one or two between missed the full "
                              "prefill by up to 2.6x that bound)\n")
    # as many as the prompt's passes time every one: nothing to bound, so fewer than 5 do
    every, all_four = (kb.run("llama_decode", timing_only=True,
                              params={"prompt": 32, "chunk": 8, "passes": k})
                       for k in (0, 4))
    assert all_four.metrics["ttft_ps"] == every.metrics["ttft_ps"]
    code, _, err = cli("run", "llama_decode", "-p", "prompt=32", "-p", "chunk=8", "-p",
                       "passes=3", "--timing-only")
    assert code == 2 and err.startswith("error: llama_decode: passes = 3: representative "
                                        "prefill passes are 5 or more, or all 4 of this "
                                        "prompt's (the first, the last")
    for items, message in ((("prompt=32", "chunk=8", "pp=2"), "pp = 2: representative "
                            "prefill passes (passes = 5) run on one pipeline stage"),
                           ((), "passes = 5: representative prefill passes need a prompt to "
                            "pass over (-p prompt)")):
        code, _, err = cli("run", "llama_decode", "--timing-only", "-p", "passes=5",
                           *(x for item in items for x in ("-p", item)))
        assert (code, err) == (2, f"error: llama_decode: {message}\n")


def test_a_parameter_given_twice_is_refused(cli):
    code, _, err = cli("run", "llama_decode", "--timing-only", "-p", "layers=1", "-p",
                       "layers=2")
    assert (code, err) == (2, "error: parameter layers is given twice; give it once\n")


# ---------------------------------------------------------------- quantised weights and KV

#: Elements of the projections' weights of tiny's two layers: q, k, v (256 x 384), o
#: (256 x 256), gate, up and down (3 x 256 x 512), per layer.
PROJECTED = 2 * (256 * 384 + 256 * 256 + 3 * 256 * 512)


def test_quantised_weights_verify_and_cost_accuracy(run):
    """Weights stored narrow: the kernel's values match the float64 model run on the same
    quantised weights (dequantised to bf16, as the array takes them), and the quality
    figures, against the exact model on the weights before quantising, order the formats
    by their precision: bf16's rounding alone below fp8's (3 mantissa bits) below
    fp8e5m2's (2); int8 below int4; mxfp8 below mxfp4."""
    error = {}
    for fmt in ("bf16", "fp8", "fp8e5m2", "int8", "int4", "mxfp8", "mxfp4"):
        result = run("llama_decode", "default", (f"weights={fmt}", "batch=2"))
        _passed(result)
        error[fmt] = result.metrics["logits_rel_l2"][0]
    assert error["bf16"] < error["fp8"] < error["fp8e5m2"]
    assert error["int8"] < error["int4"]
    assert error["mxfp8"] < error["mxfp4"]
    assert all(error["bf16"] < value for fmt, value in error.items() if fmt != "bf16")


@pytest.mark.parametrize(("fmt", "per_32"), [("fp8", 32), ("int8", 34), ("int4", 18),
                                             ("mxfp8", 33), ("mxfp4", 17)])
def test_quantised_weights_move_their_packed_bytes(run, fmt, per_32):
    """Decode moves each weight byte once: a narrow step moves exactly the projections'
    bytes fewer than bf16's (2 bytes an element against `per_32` bytes per 32: fp8 half),
    everything else alike; the HBM bound falls by the same bytes."""
    plain = run("llama_decode", "default", ("batch=2",), timing_only=True)
    narrow = run("llama_decode", "default", (f"weights={fmt}", "batch=2"), timing_only=True)
    saved = PROJECTED * 2 - PROJECTED * per_32 // 32
    assert plain.hbm_bytes - narrow.hbm_bytes == saved


def test_a_narrow_kv_cache_verifies_and_holds_more_sequences(run, cli):
    """An fp8 cache (each new row quantised by a cast as it is stored) verifies against the
    model whose cache holds the same values; with a prompt it runs timing only (its
    quantised rows cannot be verified within bf16's tolerance); with 256 KiB slices, fp8
    weights and cache hold more sequences than bf16's 5."""
    _passed(run("llama_decode", "default", ("kv=fp8", "batch=2", "context=40")))
    run("llama_decode", "default", ("kv=fp8", "batch=2", "prompt=8", "chunk=4"),
        timing_only=True)
    code, _, err = cli("run", "llama_decode", "-p", "kv=fp8", "-p", "prompt=8")
    assert (code, err) == (2, "error: llama_decode: kv = fp8 with a prompt needs "
                              "--timing-only: the prompt's cached rows, quantised, can land a "
                              "step of the narrow format away from the reference's (one bf16 "
                              "unit apart before), and what reads them then differs by more "
                              "than bf16's tolerance\n")
    small = ("--set", "hbm.slice_size=256KiB", "--timing-only", "--json")
    code, out, err = cli("run", "llama_decode", "-p", "weights=fp8", "-p", "kv=fp8", *small)
    assert code == 0, err
    assert json.loads(out)["metrics"]["max_batch"] > 5


def test_scaled_kv_and_weights_of_a_wider_head(run):
    """mxfp4 weights and an int4 cache (scales per 32 elements of a row: a head of 64 is two
    blocks, RoPE's halves one each), over two pipeline stages; int4 is coarse enough that
    a reference cache left unquantised fails verification."""
    _passed(run("llama_decode", "default", (f"config={HF / 'llama_head_dim.json'}",
                                            "weights=mxfp4", "kv=int4", "batch=2",
                                            "context=40", "pp=2")))


@pytest.mark.parametrize(("params", "message"), [
    (("weights=f32",), "weights = f32: one of bf16 (the dtype) or a narrow format: fp8, "
                       "fp8e5m2, int8, int4, mxfp8, mxfp4"),
    (("kv=mxfp4",), "kv = mxfp4: its scales cover blocks of 32 elements along a cached row, "
                    "read in RoPE's halves, and half of head_dim 32 is not whole blocks"),
])
def test_formats_the_model_cannot_take_are_refused(cli, params, message):
    code, _, err = cli("run", "llama_decode", *sum((("-p", p) for p in params), ()))
    assert (code, err) == (2, f"error: llama_decode: {message}\n")


# ---------------------------------------------------------------- several decode steps

def test_several_steps_verify_every_token_and_average_the_tpot(run):
    """`-p steps=3`: three decode steps one after another, each step's input given
    (teacher-forced), verified against the exact model's causal pass of the three inputs:
    each step's logits and token ([steps, batch, ...]), the layers' outputs after the last;
    TPOT is the decode time over the steps, quality counts each sequence's step."""
    result = run("llama_decode", "default", ("steps=3", "batch=2"))
    _passed(result)
    assert result.outputs["logits"].shape == (3, 2, 1024)
    assert result.outputs["next_token"].shape == (3, 2)
    value, note = result.metrics["tpot_ps"]
    assert value == result.latency_ps / 3
    assert note.endswith("the mean of 3 steps)")
    assert result.metrics["top1_agreement"][1] == ("(of 2 sequences x 3 steps, the exact "
                                                   "model's next token)")
    with_prompt = run("llama_decode", "default", ("steps=2", "batch=2", "prompt=6", "chunk=3"))
    _passed(with_prompt)


def test_each_figure_says_the_configuration_it_is_of(run):
    """A step's MACs grow by one cached position a step, so `macs` of three steps at
    context 37 (positions 38 to 40) is their mean, the middle step's: one step at context
    38's. `max_batch` names the context, prompt and steps it was found for; a run of
    fewer layers than the model's says its HBM figures are of those; a prompt shorter
    than a pass says the pass it made; one new token is one."""
    def figures(*params):
        result = run("llama_decode", "default", ("batch=2", *params), timing_only=True)
        return {k: v for k, (v, _) in result.metrics.items()}, dict(result.metrics)

    (three, how), (middle, _) = figures("context=37", "steps=3"), figures("context=38")
    assert three["macs"] == middle["macs"] and how["macs"][1] == "(a step's, the mean of 3)"
    assert how["max_batch"][1].startswith("(at context 37, 3 steps: the largest batch whose "
                                          "weights (the whole model), KV cache")
    _, how = figures("context=5", "prompt=4", "chunk=64", "new_tokens=1")
    assert how["max_batch"][1].startswith("(at context 5, a prompt of 4: ")
    assert how["ttft_ps"][1].startswith("(the prompt of 4 tokens, 4 a pass, ")
    assert how["request_ps"][1] == "(TTFT + 0 x TPOT: 1 new token)"
    _, how = figures("layers=1")
    assert how["hbm_used_bytes"][1].startswith("(1 of the model's 2 layers over 16 PEs; ")
    assert "weights (1 of the model's 2 layers)" in how["max_batch"][1]


def test_each_step_waits_for_the_token_before_it(run):
    """A step's input is the token the step before chose, so every PE stores that token and
    fences (PE_CPU waits until the store, which waits for the token, has landed) before
    it issues the next step's first command; three steps take about three times one (the
    later ones read a row or two more of the cache)."""
    one = run("llama_decode", "default", ("batch=2",), timing_only=True)
    three = run("llama_decode", "default", ("batch=2", "steps=3"), timing_only=True)
    for plain, stepped in zip(one.trace.program.streams, three.trace.program.streams,
                              strict=True):
        waits = [sum(op == WAIT for op in stream.op) for stream in (plain, stepped)]
        assert waits[1] == 3 * waits[0] + 2
    assert 2.85 * one.latency_ps < three.latency_ps < 3.15 * one.latency_ps


def test_every_run_keeps_its_last_token_within_the_model_positions(cli):
    """A config's max_position_embeddings m holds positions 0 to m - 1; the last token a
    run computes sits at context + prompt + steps - 1, so one step on the tiny model (m =
    2,048) runs at context 2,047, its own `max_context`, and is refused at 2,048 with the
    largest that runs; a prompt that alone reaches past m is named as the cause, and a
    request's new tokens past it too."""
    code, out, _ = cli("run", "llama_decode", "-p", "context=2047", "--timing-only", "--json")
    assert code == 0
    assert json.loads(out)["metrics"]["max_context"] == 2047
    code, _, err = cli("run", "llama_decode", "-p", "context=2048", "--timing-only")
    assert (code, err) == (2, "error: llama_decode: context = 2048: the last token's "
                              "position, 2,048, is past the model's positions "
                              "(max_position_embeddings 2,048); the largest context here "
                              "is 2,047\n")
    # with a prompt, the largest context is the one whose request fits too: the last of
    # new_tokens=128 feeds position 873 + 1048 + 126 = 2,047 (999 was named, then refused)
    code, _, err = cli("run", "llama_decode", "-p", "context=1000", "-p", "prompt=1048",
                       "--timing-only")
    assert (code, err) == (2, "error: llama_decode: context = 1000: the last token's "
                              "position, 2,048, is past the model's positions "
                              "(max_position_embeddings 2,048); the largest context here "
                              "is 873\n")
    assert cli("run", "llama_decode", "-p", "context=873", "-p", "prompt=1048",
               "--timing-only")[0] == 0
    assert cli("run", "llama_decode", "-p", "context=874", "-p", "prompt=1048",
               "--timing-only")[0] == 2
    code, _, err = cli("run", "llama_decode", "-p", "context=0", "-p", "prompt=2049",
                       "--timing-only")
    assert (code, err) == (2, "error: llama_decode: prompt = 2049: the last token's "
                              "position, 2,049, is past the model's positions "
                              "(max_position_embeddings 2,048)\n")
    # the request figure's tokens after the prompt: the last of 149 feeds position 2,047
    code, _, err = cli("run", "llama_decode", "-p", "context=1800", "-p", "prompt=100",
                       "-p", "new_tokens=150", "--timing-only")
    assert (code, err) == (2, "error: llama_decode: new_tokens = 150: the request's last "
                              "token sits at position 2,048, past the model's positions "
                              "(max_position_embeddings 2,048); at most 149 new tokens "
                              "here\n")
    code, out, _ = cli("run", "llama_decode", "-p", "context=1800", "-p", "prompt=100",
                       "-p", "new_tokens=149", "--timing-only", "--json")
    assert code == 0 and "request_ps" in json.loads(out)["metrics"]


def test_dynamic_rope_runs_past_max_position_embeddings(cli, tmp_path):
    """`dynamic` (NTK) RoPE is made to scale past `max_position_embeddings` (transformers
    recomputes its base as the sequence grows), so such a model is not refused there: at
    context 40 with m = 32 the step runs, verified against the float64 reference that
    scales the base, and its `max_context` is bounded by HBM, not by m."""
    from tests.conftest import TESTS

    base = json.loads((TESTS / "configs" / "hf" / "llama_linear_rope.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**base, "max_position_embeddings": 32,
                                "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}))
    code, out, err = cli("run", "llama_decode", "-p", f"config={path}", "-p", "context=40",
                         "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["verified"] is True
    assert result["metrics"]["max_context"] > 1000
    code, _, err = cli("run", "llama_decode", "-p", f"config={path}", "-p", "context=40",
                       "-p", "steps=2", "--timing-only")
    assert code == 0, err


def test_a_dynamic_rope_prompt_past_the_positions_is_refused(cli, tmp_path):
    """transformers rotates a prefill pass at one base, its last position's (scaled for
    every token of the pass past m), where kernbench rotates each token at its own: 10%
    off on the prefill's logits against transformers' prefill (probe 6). A prompt must end
    within the positions; `max_context` with a prompt says so; decode steps past m run."""
    from tests.conftest import TESTS

    base = json.loads((TESTS / "configs" / "hf" / "llama_linear_rope.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**base, "max_position_embeddings": 32,
                                "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}))
    where = ("with dynamic RoPE, a prompt past the model's positions (max_position_embeddings "
             "32) is rotated by transformers at one scaled base a forward pass, which "
             "kernbench does not model (it rotates each token at its own, as decode steps "
             "are, which match transformers); the prompt must end by position 31: ")
    for given, most in ((("context=8", "prompt=40"), "at most 32 tokens"),
                        (("context=9", "prompt=24"), "context at most 8 here")):
        assert cli("run", "llama_decode", "-p", f"config={path}", *[
            a for g in given for a in ("-p", g)], "--timing-only") == (
            2, "", f"error: llama_decode: {given[1].replace('=', ' = ')}: {where}{most}\n")
    code, out, err = cli("run", "llama_decode", "-p", f"config={path}", "-p", "context=8",
                         "-p", "prompt=24", "--timing-only", "--json")
    assert code == 0, err
    assert json.loads(out)["metrics"]["max_context"] == 8


def test_max_context_says_what_bounds_it(run, tmp_path):
    """The model's positions (with a prompt too: the context was searched without it, so
    neither its positions nor its buffers counted), or, with dynamic RoPE and a window on
    every layer, nothing below where the search ends (that was said to be
    max_position_embeddings, 4,096, at 16,777,215)."""
    result = run("llama_decode", "default", ("prompt=100", "context=10"), timing_only=True)
    assert result.metrics["max_context"] == (  # the request's last token: 1821 + 100 + 126
        1821.0, "(at batch 1 and a prompt of 100, through the request's 128 new tokens: the "
        "model's max_position_embeddings, not its HBM, bounds it)")
    config = json.loads((HF / "mistral_sliding.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "rope_scaling": {"rope_type": "dynamic",
                                                           "factor": 2.0}}))
    result = run("llama_decode", "default", (f"config={path}",), timing_only=True)
    assert result.metrics["max_context"] == (
        16777215.0, "(at batch 1: no bound below 16,777,216 positions, where the search "
        "ends: dynamic RoPE scales past max_position_embeddings, and sliding windows keep "
        "the KV cache from growing)")


def test_steps_need_one_stage_without_micro_batches(cli):
    code, _, err = cli("run", "llama_decode", "-p", "steps=2", "-p", "pp=2")
    assert (code, err) == (2, "error: llama_decode: steps = 2: several decode steps run on one "
                              "pipeline stage, without micro-batches, scale_to or sliding "
                              "windows (each step waits for the token the one before chose)\n")
    code, _, err = cli("run", "llama_decode", "-p", "steps=100000", "--timing-only")
    assert (code, err) == (2, "error: llama_decode: steps = 100000: the last token's position, "
                              "100,063, is past the model's positions (max_position_embeddings "
                              "2,048)\n")


def test_the_stages_that_leave_no_room_for_one_row_are_named(cli, tmp_path):
    """A vocabulary of 1,500,000 over 16 PEs takes 93,750 a PE, whose one row's logits and
    temporaries fit TCM; over a stage of 8 (pp = 2) they do not, and `pp` is named."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads((HF / "llama.json").read_text()),
                                "vocab_size": 1500000}))
    args = ("run", "llama_decode", "-p", f"config={path}", "--bounds-only")
    assert cli(*args)[0] == 0
    assert cli(*args, "-p", "pp=2")[::2] == (2, (
        "error: llama_decode: pp = 2: the LM head's argmax holds 3,001,536 B for one row: the "
        "[1, 187500] f32 logits of a PE's share of the vocabulary (1,500,000 over 8 PEs) and "
        "more, more than a PE's 2,097,152 B of TCM: fewer stages spread the vocabulary over "
        "more PEs\n"))


@pytest.mark.parametrize(("change", "message"), [
    ({"num_key_value_heads": 3, "num_attention_heads": 12, "hidden_size": 384},
     "its 3 KV heads (num_key_value_heads) need a head group of PEs each, all alike, and "
     "topology 'default' has 16 PEs, which do not split so: a topology whose PE count is "
     "a multiple of 3 runs it"),
    ({"hidden_size": 1048576, "head_dim": 32},
     "one row does not fit a PE's 2,097,152 B of TCM: hidden_size 1,048,576 makes a "
     "layer's residual add hold three [1, 1048576] f32 tensors (12,582,912 B)"),
    ({"vocab_size": 16777216},
     "one row does not fit a PE's 2,097,152 B of TCM: the LM head's argmax holds "
     "16,778,752 B for one row: the [1, 1048576] f32 logits of a PE's share of the "
     "vocabulary (16,777,216 over 16 PEs) and more"),
])
def test_a_config_no_batch_or_pp_runs_is_refused_for_its_own_key(cli, tmp_path, change,
                                                                  message):
    """KV heads that do not divide the PEs, or a row too wide for TCM, are the config's:
    the refusal names the config and its key, not `pp` or `batch` (which no value of
    would help)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads((HF / "llama.json").read_text()), **change}))
    code, _, err = cli("run", "llama_decode", "-p", f"config={path}", "--bounds-only")
    assert (code, err) == (2, f"error: llama_decode: the model of {path}: {message}\n")


def test_macs_say_where_they_are_more_than_the_models(run, tmp_path):
    """One KV head: a head group's (G + 2) x head_dim = 320 QKV columns split evenly over
    `default`'s 16 PEs, and `macs` is the model's, B x [L x (H hd (2 Hq + 2 Hkv) + 3 H I
    + 2 Hq hd positions) + V H]; over `sip`'s 128 they do not (2.5 columns a PE), the
    column two PEs share is computed on both, and the label says the MACs are performed."""
    path = tmp_path / "mqa.json"
    path.write_text(json.dumps({**json.loads((HF / "llama.json").read_text()),
                                "num_key_value_heads": 1}))
    b, layers, hidden, hq, hkv, hd, inter, vocab = 2, 2, 256, 8, 1, 32, 512, 1024
    model = b * (layers * (hidden * hd * (2 * hq + 2 * hkv) + 3 * hidden * inter
                           + 2 * hq * hd * 6) + vocab * hidden)
    even = run("llama_decode", "default", (f"config={path}", "context=5", "batch=2"),
               timing_only=True).metrics["macs"]
    assert even == (model, "")
    uneven = run("llama_decode", "sip", (f"config={path}", "context=5", "batch=2"),
                 timing_only=True).metrics["macs"]
    assert uneven[0] > model and uneven[1] == (
        "(performed: a QKV column two PEs of a head group share is computed on both)")


def test_a_tied_table_has_a_copy_on_the_first_of_several_stages(run):
    """Tied embeddings are one table, the LM head's, on one stage; with stages the LM head
    is the last stage's and the first embeds each token, so it keeps a copy: the HBM
    taken is then the untied model's; on one stage it is one table (1,024 x 256 bf16)
    less."""
    def used(name, pp):
        return run("llama_decode", "default", (f"config={HF / name}", f"pp={pp}", "context=5"),
                   timing_only=True).metrics["hbm_used_bytes"][0]

    assert used("llama_tied.json", 2) == used("llama.json", 2)
    assert used("llama.json", 1) - used("llama_tied.json", 1) == 1024 * 256 * 2


def test_yarn_runs_past_max_position_embeddings_to_what_it_extends(run, cli, tmp_path):
    """yarn, factor 4 over 128 positions, max_position_embeddings 128: the model holds
    512 positions; context 300 runs and verifies against the float64 reference (and, in
    the parity script, against transformers), 512 is refused naming what bounds it."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads((HF / "llama.json").read_text()),
                                "max_position_embeddings": 128, "rope_scaling": {
                                    "type": "yarn", "factor": 4.0,
                                    "original_max_position_embeddings": 128}}))
    result = run("llama_decode", "default", (f"config={path}", "context=300"))
    _passed(result)
    assert result.metrics["max_context"][0] == 511
    code, _, err = cli("run", "llama_decode", "-p", f"config={path}", "-p", "context=512",
                       "--timing-only")
    assert (code, err) == (2, "error: llama_decode: context = 512: the last token's "
                              "position, 512, is past the model's positions (yarn's factor x "
                              "original_max_position_embeddings, 512); the largest context "
                              "here is 511\n")


def test_macs_of_a_step_after_a_prompt_are_the_steps(run, tmp_path):
    """A PE holds the QKV columns of every pass (the prompt's passes split the group's
    columns otherwise than the decode step): the step's MACs are of the columns it
    multiplies, the same after a prompt as at the same position without one."""
    path = tmp_path / "hd20.json"
    path.write_text(json.dumps({**json.loads((HF / "llama.json").read_text()),
                                "num_key_value_heads": 1, "head_dim": 20}))
    alone = run("llama_decode", "default", (f"config={path}", "context=8"),
                timing_only=True).metrics["macs"]
    after = run("llama_decode", "default", (f"config={path}", "context=0", "prompt=8",
                                            "chunk=2"), timing_only=True).metrics["macs"]
    assert after == alone == (1238656.0, "")
    # head_dim 2: the group's 10 QKV columns over 8 PEs leave some a share of none, which
    # multiply nothing: the model's MACs, B x [L x (H hd (2 Hq + 2 Hkv) + 3 H I + 2 Hq hd
    # positions) + V H] at context 64
    path.write_text(json.dumps({**json.loads((HF / "llama.json").read_text()),
                                "head_dim": 2}))
    assert run("llama_decode", "default", (f"config={path}",), timing_only=True).metrics[
        "macs"] == (2 * (256 * 2 * 20 + 3 * 256 * 512 + 2 * 8 * 2 * 65) + 1024 * 256, "")
