"""Values the configuration accepts (below 2^62 of their unit) whose times the model cannot
hold: a one-line error and exit 2, never an internal error."""

from __future__ import annotations

import pytest

BIG = 2**62 - 1
MESSAGE = ("the simulated time passed 2^63 ps (about 107 days): a configured time, size or "
           "count is too large for the model")


@pytest.mark.parametrize(("kernel", "setting"), [
    ("softmax", f"hbm.latency={BIG}ps"), ("sharded_gemm", f"pe.gemm.rows={BIG}"),
    ("softmax", f"costs.issue.math={BIG}ps"), ("gqa_attention", f"noc.latency={BIG}ps")])
def test_a_huge_accepted_value_is_a_clean_error(cli, kernel, setting):
    code, _, err = cli("run", kernel, "--timing-only", "--set", setting)
    assert code == 2
    assert err.startswith(f"error: kernels/{kernel}.py: PE (") and err.endswith(MESSAGE + "\n")
    assert err.count("\n") == 1


def test_summed_cycles_past_the_range_are_a_clean_error(cli, tmp_path):
    kernel = tmp_path / "big.py"
    kernel.write_text("PARAMS = {}\n\ndef setup(host, p):\n    return {}\n\n"
                      "def kernel(tl):\n    for _ in range(3):\n"
                      f"        tl.cycles({BIG})\n\n"
                      "def reference(host, p):\n    return {}\n\n"
                      "def outputs(host, args, p):\n    return {}\n")
    code, _, err = cli("run", str(kernel), "--timing-only")
    assert (code, err) == (2, f"error: {kernel}: PE (rack=0 sip=0 cube=0 pe=0) at t=0ns: "
                              f"{MESSAGE}\n")


def test_a_replay_under_a_huge_value_is_a_clean_error(cli, tmp_path):
    trace = tmp_path / "t.trace"
    assert cli("run", "softmax", "--timing-only", "--record", str(trace))[0] == 0
    code, _, err = cli("replay", str(trace), "--set", f"hbm.latency={BIG}ps")
    assert code == 2 and err.endswith(MESSAGE + "\n")
    assert err.startswith(f"error: replay of {trace}: PE (")


@pytest.mark.parametrize("value", ["1e-9", "0.0009"])
def test_a_kernel_timeout_below_the_tick_is_bad_input(cli, value):
    """The watchdog ticks at most every millisecond: a shorter limit cannot mean what it
    says, so it is refused (0 turns the watch off)."""
    code, out, err = cli("run", "softmax", "--timing-only", "--kernel-timeout", value)
    assert (code, out) == (2, "")
    assert err == (f"error: --kernel-timeout {float(value):g}: needs 0 (no limit) or at least "
                   "0.001 s (the watch looks every millisecond)\n")
    assert cli("run", "softmax", "--timing-only", "--kernel-timeout", "0")[0] == 0


def test_sweep_options_are_checked_before_any_point(cli):
    assert cli("sweep", "softmax", "--timing-only", "--jobs", "999999999999", "--set",
               "pe.gemm.rows=4,8") == (2, "", "error: --jobs 999999999999: needs 1 to 1024 "
                                              "workers\n")
    code, _, err = cli("sweep", "nope", "--set", "pe.gemm.rows=4,8")
    assert (code, err.splitlines()[0]) == (2, "error: unknown kernel 'nope' (shipped: "
                                              "all_reduce, gqa_attention, llama_decode, "
                                              "rmsnorm, "
                                              "sharded_gemm, softmax; "
                                              "or give a path to a .py file)")
    assert cli("sweep", "softmax", "--timing-only", "--set", "pe.gemm.rows=4,8", "--set",
               "pe.gemm.rows=16") == (2, "", "error: --set pe.gemm.rows is given twice; give "
                                             "it once, with all its values (KEY=V1,V2,…)\n")


UNHELD = ("is not a number kernbench reads (finite, integers within 64 bits; JSON has no NaN "
          "or Infinity)")


@pytest.mark.parametrize(("value", "message"), [
    ("NaN", f"latency_ps: NaN {UNHELD}"),
    ("Infinity", f"latency_ps: Infinity {UNHELD}"),
    ("1e400", f"latency_ps: 1e400 {UNHELD}"),
    (str(2**64), f"latency_ps: {2**64} {UNHELD}"),
    (str(2**63), "not a `run --json` object: latency_ps is not a time"),
    ("9" * 5000, f"latency_ps: 99999999…9999 (5,000 digits) {UNHELD}"),
])
def test_compare_refuses_numbers_json_cannot_hold(cli, tmp_path, value, message):
    import json

    code, out, _ = cli("run", "softmax", "--timing-only", "--json")
    assert code == 0
    good = tmp_path / "a.json"
    good.write_text(out)
    run = json.loads(out)
    bad = tmp_path / "b.json"
    bad.write_text(out.replace(f'"latency_ps": {run["latency_ps"]}', f'"latency_ps": {value}'))
    assert bad.read_text() != out
    assert cli("compare", str(good), str(bad), "--json") == (2, "", f"error: {bad}: "
                                                                  f"{message}\n")


def test_compare_refuses_a_run_of_another_schema(cli, tmp_path):
    """A `run --json` object of another schema_version (a later kernbench's, or one edited)
    is not read as this one's, as a golden of another schema is not."""
    import json

    code, out, _ = cli("run", "softmax", "--timing-only", "--json")
    assert code == 0
    good, other = tmp_path / "a.json", tmp_path / "b.json"
    good.write_text(out)
    other.write_text(json.dumps({**json.loads(out), "schema_version": 5}))
    assert cli("compare", str(good), str(other)) == (
        2, "", f"error: {other}: not a `run --json` object: schema_version 5 is not the one "
               "this kernbench reads (1)\n")


def test_compare_says_a_json_file_of_no_run_is_not_a_run(cli, tmp_path):
    """`run --bounds-only --json` output is JSON (it was called "not JSON"): not a run."""
    code, out, _ = cli("run", "softmax", "--timing-only", "--json")
    assert code == 0
    good, bounds = tmp_path / "a.json", tmp_path / "b.json"
    good.write_text(out)
    code, out, _ = cli("run", "softmax", "--bounds-only", "--json")
    assert code == 0
    bounds.write_text(out)
    assert cli("compare", str(good), str(bounds)) == (
        2, "", f"error: {bounds}: JSON, but not a run: expected `run --json` output or a "
               "sweep's .jsonl rows (`--bounds-only` and `compare` output are no runs)\n")
