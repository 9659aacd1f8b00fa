"""`kernbench golden regen` / `check`: the only writer, and a check that fails on drift."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernbench_cli.golden.cases import CASES
from kernbench_cli.golden.record import oplog_digest
from kernbench_cli.shipped import data_dir

QUICK = "sharded_gemm.*.default"  # two cases that run in about a second


@pytest.fixture
def goldens(tmp_path) -> Path:
    """A copy of the shipped goldens to work on."""
    folder = tmp_path / "goldens"
    shutil.copytree(data_dir("goldens"), folder)
    return folder


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_every_case_has_a_golden_and_every_golden_a_case():
    files = {p.stem for p in data_dir("goldens").glob("*.json")}
    assert files == {c.name for c in CASES}


def test_check_passes_on_the_shipped_goldens(cli, goldens):
    code, out, _ = cli("golden", "check", "--only", QUICK, "--dir", str(goldens))
    assert (code, out.strip()) == (0, "2 golden cases match")


def test_one_changed_cost_fails_the_check_with_a_diff_table(cli, goldens, tmp_path):
    costs = tmp_path / "costs.toml"
    text = (data_dir("topologies") / "costs" / "default.toml").read_text()
    costs.write_text(text.replace('composite = "40ns"', 'composite = "41ns"'))
    before = _snapshot(goldens)
    code, out, err = cli("golden", "check", "--only", QUICK, "--dir", str(goldens),
                         "--costs", str(costs))
    assert code == 1
    assert "Golden differences (4)" in out
    # One more ns of composite issue per PE: CPU busy grows by exactly that (16 PEs) and its
    # wait for the composite shrinks by as much, the op log changes, and the latency does not,
    # since each composite waits for its load of A anyway.
    flat = " ".join(out.replace("│", " ").split())
    for field, old, new in (("engines.cpu.busy_ps_max", 48000, 49000),
                            ("engines.cpu.busy_ps_total", 768000, 784000),
                            ("engines.cpu.wait_ps_total", 577035440, 577019440)):
        assert f"{old} {new} {(new - old) / old * 100:+.2f}%" in flat, field
    assert "oplog_digest" in out and "latency_ps" not in out
    assert err.splitlines()[-1].startswith("error: ")
    assert "differences in 1 of 2 golden cases" in err  # primitive mode has no composite
    assert _snapshot(goldens) == before  # check writes nothing


def test_regen_check_is_the_same_check(cli, goldens, tmp_path):
    costs = tmp_path / "costs.toml"
    costs.write_text('name = "default"\n[issue]\nload = "5ns"\n')
    before = _snapshot(goldens)
    code, _, _ = cli("golden", "regen", "--check", "--only", QUICK, "--dir", str(goldens),
                     "--costs", str(costs))
    assert code == 1
    assert _snapshot(goldens) == before


def test_regen_rewrites_only_what_changed_and_then_check_passes(cli, goldens, tmp_path):
    costs = tmp_path / "costs.toml"
    costs.write_text('name = "default"\n[issue]\nload = "5ns"\n')
    untouched = _snapshot(goldens)["gqa_attention.default.json"]
    code, out, _ = cli("golden", "regen", "--only", QUICK, "--dir", str(goldens), "--costs",
                       str(costs))
    assert code == 0 and "goldens written" in out
    assert _snapshot(goldens)["gqa_attention.default.json"] == untouched
    assert cli("golden", "check", "--only", QUICK, "--dir", str(goldens), "--costs",
               str(costs))[0] == 0


def test_an_interrupted_regen_writes_no_golden(cli, goldens, tmp_path, monkeypatch):
    """Ctrl-C at the second case: the first's new golden was written, the folder then part
    one cost table's and part another's, and nothing said which. Goldens are written once
    every case has run."""
    from kernbench_cli.golden import run as golden_run

    costs = tmp_path / "costs.toml"
    costs.write_text('name = "default"\n[issue]\nload = "5ns"\n')
    before, ran = _snapshot(goldens), []
    run_case = golden_run.run_case

    def second_interrupted(case, *args):
        ran.append(case.name)
        if len(ran) == 2:
            raise KeyboardInterrupt
        return run_case(case, *args)

    monkeypatch.setattr(golden_run, "run_case", second_interrupted)
    code, _, err = cli("golden", "regen", "--only", QUICK, "--dir", str(goldens), "--costs",
                       str(costs))
    assert (code, err.splitlines()[-1:], len(ran)) == (130, ["interrupted"], 2)
    assert _snapshot(goldens) == before


def test_missing_and_extra_goldens_are_differences(cli, goldens):
    (goldens / "sharded_gemm.primitive.default.json").unlink()
    shutil.copy(goldens / "sharded_gemm.composite.default.json",
                goldens / "sharded_gemm.retired.default.json")
    code, out, _ = cli("golden", "check", "--only", QUICK, "--dir", str(goldens))
    assert code == 1
    assert "sharded_gemm.primitive.default" in out and "new" in out
    assert "sharded_gemm.retired.default" in out and "no such case" in out
    code, _, _ = cli("golden", "regen", "--only", QUICK, "--dir", str(goldens))
    assert code == 0
    assert (goldens / "sharded_gemm.primitive.default.json").is_file()
    assert not (goldens / "sharded_gemm.retired.default.json").exists()


def test_regen_leaves_json_files_that_are_not_goldens(cli, goldens):
    other = goldens / "sharded_gemm.notes.json"
    other.write_text('{"mine": true}\n')
    assert cli("golden", "check", "--only", QUICK, "--dir", str(goldens))[0] == 0
    assert cli("golden", "regen", "--only", QUICK, "--dir", str(goldens))[0] == 0
    assert other.read_text() == '{"mine": true}\n'


def test_a_boolean_schema_version_is_not_a_golden(cli, goldens):
    import json

    path = goldens / "sharded_gemm.composite.default.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "schema_version": True}))
    code, _, err = cli("golden", "check", "--only", QUICK, "--dir", str(goldens))
    assert (code, err) == (2, f"error: {path}: schema_version True is not one this kernbench "
                              f"reads ({data['schema_version']})\n")


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "not valid JSON: Expecting property name enclosed in double quotes: line 1 "
                  "column 2 (char 1)"),
    ('{"schema_version": 99}', "schema_version 99 is not one this kernbench reads (1)"),
    ("[]", "not a golden (no schema_version)"),
])
def test_a_broken_golden_is_a_clear_error(cli, goldens, text, message):
    path = goldens / "sharded_gemm.composite.default.json"
    path.write_text(text)
    code, _, err = cli("golden", "check", "--only", QUICK, "--dir", str(goldens))
    assert (code, err) == (2, f"error: {path}: {message}\n")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("latency_ps", "abc", 'latency_ps is "abc", not a count'),
    ("commands", -3, "commands is -3, not a count"),
    ("verified", 1, "verified is 1, not true, false or null"),
    ("engines", [1, 2], "engines is [1, 2], not an object"),
    ("energy_aj", {"total": 1.5}, "energy_aj.total is 1.5, not a count"),
    ("kernel", {"name": "x" * 50}, 'kernel is {"name": "' + "x" * 27 + "..., "
                                   "not a string"),
])
def test_a_golden_with_a_damaged_field_is_an_error_not_drift(cli, goldens, field, value,
                                                              message):
    """A field holding what no run writes is a damaged golden (exit 2), not a result
    that moved (exit 1)."""
    import json

    path = goldens / "sharded_gemm.composite.default.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), field: value}))
    code, out, err = cli("golden", "check", "--only", QUICK, "--dir", str(goldens))
    assert (code, err) == (2, f"error: {path}: {message}\n")
    assert "running" not in out


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_golden_that_is_no_file_is_an_error_before_any_case_runs(cli, goldens, kind):
    """Not a golden gone (which `check` reports as new, and `regen` writes): something
    else there, refused at once; `regen` checks where every golden goes before it runs
    one case (it ran them all, wrote some, then refused the FIFO)."""
    import os

    path = goldens / "sharded_gemm.primitive.default.json"
    path.unlink()
    if kind == "folder":
        path.mkdir()
    else:
        os.mkfifo(path)
    before = {p.name: p.read_bytes() for p in goldens.iterdir() if p.is_file()}
    said = "is a directory" if kind == "folder" else "is not a regular file"
    for command in ("check", "regen"):
        code, out, err = cli("golden", command, "--only", QUICK, "--dir", str(goldens))
        assert (code, err) == (2, f"error: {path}: {said}, expected a golden\n")
        assert "running" not in out
    assert {p.name: p.read_bytes() for p in goldens.iterdir() if p.is_file()} == before
    if kind == "fifo":
        assert cli("golden", "check", "--dir", str(path))[2] == (
            f"error: goldens folder {str(path)!r} is not a folder\n")


def test_no_case_matches(cli):
    code, _, err = cli("golden", "check", "--only", "nothing*")
    assert (code, err) == (2, "error: no golden case matches 'nothing*'\n")


def test_a_bad_cost_table_is_said_once_before_any_case_runs(cli, goldens, tmp_path):
    costs = tmp_path / "bad.toml"
    costs.write_text("x = \n")
    assert cli("golden", "check", "--dir", str(goldens), "--costs", str(costs)) == (
        2, "", f"error: {costs}: invalid TOML: Invalid value (at line 1, column 5)\n")


def test_oplog_digest_is_of_every_field():
    a = [(0, 1, "dma", "load", 0, 5, 9, 64, 0, 10, None)]
    b = [(0, 1, "dma", "load", 0, 5, 9, 64, 0, 11, None)]
    assert oplog_digest(a) != oplog_digest(b)
    assert oplog_digest(a) == oplog_digest(list(a))


@pytest.mark.parametrize(("old", "new", "differs"), [
    (0.0156, 0.0312, False),  # one f16 rounding on another CPU's BLAS
    (0.0156, 0.0156, False),
    (0.0156, 0.0625, True),
    (0.0, 0.0156, True),
    (None, 0.0156, True),
])
def test_max_abs_err_may_move_within_a_factor_of_two(old, new, differs):
    from kernbench_cli.golden.record import diff

    base = {"latency_ps": 5, "verified": True}
    assert bool(diff({**base, "max_abs_err": old}, {**base, "max_abs_err": new})) == differs
    assert diff({**base, "max_abs_err": old}, {**base, "latency_ps": 6, "max_abs_err": old}) \
        == [("latency_ps", 5, 6)]
