"""`tl.repeat`: a loop body emitted once, its repetitions copied, in timing-only runs.

The oracle is the same run with shortcuts off: the program (every stream column, the
composites, the regions and their marks, the TCM peaks), the hub's switches and the
JSON report must be equal, whatever was copied."""

from __future__ import annotations

import json

import pytest

from kernbench_cli.errors import DeadlockError, KernelError
from kernbench_cli.golden.cases import CASES
from tests.conftest import TESTS

SMALL_LLAMA = str(TESTS / "configs" / "tiny_10_layers.json")


def _program(result) -> tuple:
    program = result.trace.program
    return ([[column.tobytes() for column in stream.columns()] for stream in program.streams],
            program.composites, program.regions, program.region_marks, program.tcm_peak,
            program.gemm_shapes, result.switches)


@pytest.fixture
def passes(monkeypatch) -> list[bool]:
    """Whether each functional pass made while it is in use took shortcuts."""
    from kernbench_cli.sim import run as sim_run

    made, flags = sim_run._set_up_and_run, []
    monkeypatch.setattr(sim_run, "_set_up_and_run", lambda *a: flags.append(a[-1]) or made(*a))
    return flags


def _both(run, kernel, topology, params):
    """The timing-only run with shortcuts and without."""
    return [run(kernel, topology, params, timing_only=True, oplog=False, shortcuts=on)
            for on in (True, False)]


def test_copied_repetitions_are_what_running_them_gives(run):
    """Each PE's six layers alternate between two TCM states (the state tensor ping-pongs
    between two blocks), and the first starts from a third: three recorded (first of a
    key), two proven alike (the second of a key), one copied, per PE."""
    copied, oracle = _both(run, "repeated", "default", ())
    assert _program(copied) == _program(oracle)
    assert copied.latency_ps == oracle.latency_ps
    assert copied.repeats == {"recorded": 48, "proven": 32, "copied": 16, "run": 0}
    assert oracle.repeats == {"recorded": 0, "proven": 0, "copied": 0, "run": 0}


def test_runs_with_values_run_every_repetition(run):
    result = run("repeated", "default", ())
    assert all(check.passed for check in result.checks)
    assert result.repeats == {"recorded": 0, "proven": 0, "copied": 0, "run": 0}


@pytest.mark.parametrize("mode, counts", [
    # cycles counted in a global: the second of a key differs, so none is copied
    ("hidden", {"recorded": 48, "proven": 0, "copied": 0, "run": 48}),
    # -0.0 in the last two layers: keyed apart from 0.0 (equal by value), so recorded
    ("signed", {"recorded": 80, "proven": 16, "copied": 0, "run": 0}),
    # a tensor the body was not given, a dict of tensors given, a tensor given left in
    # the state (a copy would make a second holder of its TCM), a dict given changed (a
    # copy would not change it), a list holding itself: never recorded
    ("outside", {"recorded": 0, "proven": 0, "copied": 0, "run": 96}),
    ("held", {"recorded": 0, "proven": 0, "copied": 0, "run": 96}),
    ("keep", {"recorded": 0, "proven": 0, "copied": 0, "run": 96}),
    ("mutate", {"recorded": 0, "proven": 0, "copied": 0, "run": 96}),
    ("loop", {"recorded": 0, "proven": 0, "copied": 0, "run": 96}),
    # the same tensor given in a list, item by item: keyed by it, copied as "alike" is
    ("given", {"recorded": 48, "proven": 32, "copied": 16, "run": 0}),
    # layers 0 1 2 1 2 3: the two keys proven with their first two sharing addresses (a
    # shift of 0) hold for 0 only; layer 3, one shift away, runs and is compared: its
    # load of layer 1's weights at a fixed address does not move, so it is unlike
    ("fixed", {"recorded": 48, "proven": 32, "copied": 0, "run": 16}),
])
def test_what_cannot_be_proven_alike_runs_and_what_can_is_copied(run, mode, counts):
    copied, oracle = _both(run, "repeated", "default", (f"mode={mode}",))
    assert _program(copied) == _program(oracle)
    assert copied.repeats == counts


@pytest.mark.parametrize("mode", ["alike", "catch"])
def test_a_run_stopping_inside_a_copy_is_made_again_without_shortcuts(amap, passes, mode):
    """The command limit reached inside the last layers (copies): the functional pass is
    made again without shortcuts, and stops where it stops without them; a kernel taking
    every Exception tl.repeat raises (`catch`) does not take that (without shortcuts it
    takes the limit's error, which is its PE's failure still: the same error)."""
    from kernbench_cli.sim import run as sim_run
    from kernbench_cli.sim.kernels import load_kernel, parse_params

    kernel = load_kernel(str(TESTS / "kernels" / "repeated.py"))
    params = parse_params(kernel, [f"mode={mode}"])
    full = sim_run.run_kernel(kernel, amap, params, timing_only=True)
    passes.clear()
    errors = []
    for on in (True, False):
        with pytest.raises(KernelError) as info:
            sim_run.run_kernel(kernel, amap, params, timing_only=True,
                               max_commands=full.commands - 3, shortcuts=on)
        errors.append(str(info.value))
    assert passes == [True, False, False]  # with shortcuts: missed, made again without
    assert errors[0] == errors[1]
    assert errors[0].endswith(
        f"the kernel issued more than {full.commands - 3} commands; an endless loop? "
        "(--max-commands raises the limit)")


def _same_error_either_way(run, passes, mode, error):
    """The error a timing-only run of `mode` stops with, the same with shortcuts (a copy
    missed, its pass made again without) as without."""
    errors = []
    for on in (True, False):
        with pytest.raises(error) as info:
            run("repeated", "default", (f"mode={mode}",), timing_only=True, shortcuts=on)
        errors.append(str(info.value))
    assert passes == [True, False, False]
    assert errors[0] == errors[1]
    return errors[0]


def test_a_deadlock_inside_a_copy_is_the_deadlock_without_shortcuts(run, passes):
    """PE 0 leaves before the last layer, a copy on every other PE: the receive from it
    waits for good. Made again without shortcuts, each stream ends where it waits."""
    error = _same_error_either_way(run, passes, "quit", DeadlockError)
    assert error.startswith("deadlock: 1 of 16 PEs still wait and nothing is left to run: "
                                "PE (rack=0 sip=0 cube=0 pe=1) at ")


def test_a_short_message_taken_inside_a_copy_is_the_error_without_shortcuts(run, passes):
    """PE 0 sends PE 1 a 4 B message before the last layer, a copy on PE 1: its receive
    takes it. Made again without shortcuts, the error is the receive's, at its line."""
    error = _same_error_either_way(run, passes, "short", KernelError)
    assert error == (f"{TESTS / 'kernels' / 'repeated.py'}:59: PE (rack=0 sip=0 cube=0 "
                         "pe=1) at t=4.545us: tl.recv expects 256 B from PE (rack=0 sip=0 "
                         "cube=0 pe=0) but its message is 4 B")


@pytest.mark.parametrize("mode, message", [
    ("misuse", "repeated.py:92: PE (rack=0 sip=0 cube=0 pe=0) at t=8ns: "
               "tl.repeat(body, moves, state, ...): moves is a dict and state a list"),
    ("stray", "repeated.py:97: PE (rack=0 sip=0 cube=0 pe=0) at t=8ns: "
              "tl.repeat: moves['w'] at 0x3039: no allocation holds this address"),
])
@pytest.mark.parametrize("timing_only", [True, False])
def test_misuse_is_the_kernels_error_in_every_run(run, mode, message, timing_only):
    with pytest.raises(KernelError) as info:
        run("repeated", "default", (f"mode={mode}",), timing_only=timing_only)
    assert str(info.value) == f"{TESTS / 'kernels' / message}"


@pytest.mark.parametrize("params", [
    ("batch=2", "context=37"),
    ("batch=4", "context=20", "pp=2", "microbatches=2"),
    ("batch=2", "context=5", "prompt=12", "chunk=5"),
    ("batch=2", "context=9", "layers=6", "scale_to=10", "weights=fp8", "kv=fp8"),
])
def test_llama_decode_layers_copied_are_the_layers_run(run, params):
    copied, oracle = _both(run, "llama_decode", "default", (f"config={SMALL_LLAMA}", *params))
    assert _program(copied) == _program(oracle)
    assert copied.repeats["copied"] > 0
    assert copied.repeats["run"] == 0


def test_cli_json_is_the_same_with_and_without_shortcuts(cli):
    outs = []
    for flag in ("--shortcuts", "--no-shortcuts"):
        code, out, _ = cli("run", "llama_decode", "-p", f"config={SMALL_LLAMA}", "-p",
                           "context=30", "--timing-only", "--json", flag)
        assert code == 0
        outs.append(json.loads(out))
    assert outs[0] == outs[1]


def test_the_summary_says_how_many_repetitions_were_copied(cli):
    """Copies of a body whose commands differ later in a way its key cannot see would be
    wrong, and only --no-shortcuts shows it: the summary says how many repetitions were
    copied (16 PEs x 6 layers: on each PE three recorded, two proven alike, the last
    copied), and says nothing where none were."""
    base = ("run", str(TESTS / "kernels" / "repeated.py"))
    code, out, err = cli(*base, "--timing-only")
    assert code == 0, err
    line = " ".join(out.split("shortcuts", 1)[1].split()).split(" Engines")[0]
    assert line == ("16 of 96 repetitions of a tl.repeat body copied, not run (each alike "
                    "to two before it; --no-shortcuts runs every one)")
    for flags in (("--timing-only", "--no-shortcuts"), ()):
        code, out, err = cli(*base, *flags)
        assert code == 0 and "\nshortcuts" not in out, err


def test_api_takes_shortcuts_as_a_bool():
    import kernbench_cli as kb

    with pytest.raises(kb.KernbenchError, match="shortcuts"):
        kb.run("llama_decode", "default", timing_only=True, shortcuts="no")


@pytest.mark.slow
def test_llama3_8b_on_sip_copied_layers_time_as_run_layers(run):
    """Six layers of llama3-8b on `sip` at batch 4, timing only, with the op log: on each
    PE the first layers run and the last three are copies; the program, the golden
    record (its op-log digest covers every record) and the op log are the same."""
    from kernbench_cli.golden import record as rec

    params = ("model=llama3-8b", "layers=6", "batch=4", "context=1024")
    copied, oracle = (run("llama_decode", "sip", params, timing_only=True, oplog=True,
                          shortcuts=on) for on in (True, False))
    assert copied.repeats["copied"] >= 3 * 128
    assert _program(copied) == _program(oracle)
    assert rec.dumps(rec.make_record("case", copied)) == \
        rec.dumps(rec.make_record("case", oracle))
    assert list(copied.oplog) == list(oracle.oplog)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_golden_case_timing_only_is_the_same_without_shortcuts(case):
    """Every golden case run timing-only (where `tl.repeat` copies), with the op log: its
    golden record (the op-log digest covers every record) with shortcuts and without."""
    from kernbench_cli.address import load_address_map
    from kernbench_cli.golden import record as rec
    from kernbench_cli.sim.kernels import load_kernel, parse_params
    from kernbench_cli.sim.run import run_kernel

    kernel = load_kernel(case.kernel)
    amap = load_address_map(case.topology)
    params = parse_params(kernel, list(case.params), amap.topology.num_pes)
    copied, oracle = (run_kernel(kernel, amap, params, seed=case.seed, timing_only=True,
                                 oplog=True, shortcuts=on) for on in (True, False))
    if case.kernel == "llama_decode":  # what engages: each case runs 2 layers or more
        assert copied.repeats["recorded"] > 0
    assert _program(copied) == _program(oracle)
    assert rec.dumps(rec.make_record(case.name, copied)) == \
        rec.dumps(rec.make_record(case.name, oracle))
