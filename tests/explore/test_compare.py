"""`kernbench compare`: runs side by side with their change against the first."""

from __future__ import annotations

import json

import pytest

import kernbench_cli as kb
from tests.conftest import TESTS

LOAD_DOT = str(TESTS / "kernels" / "load_dot.py")


def _run(cli, path, *args):
    code, out, _ = cli("run", LOAD_DOT, "--json", *args)
    assert code == 0
    path.write_text(out)
    return json.loads(out)


def test_two_runs_side_by_side(cli, tmp_path):
    a = _run(cli, tmp_path / "a.json")
    b = _run(cli, tmp_path / "b.json", "--set", "hbm.bandwidth=204.8GB/s")
    code, out, _ = cli("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json")
    assert code == 0
    got = json.loads(out)
    assert got["runs"] == ["a.json", "b.json"]
    latency = got["metrics"]["latency_ps"]
    assert latency["values"] == [a["latency_ps"], b["latency_ps"]]
    assert latency["delta_pct"] == [0.0, round((b["latency_ps"] - a["latency_ps"])
                                               / a["latency_ps"] * 100, 3)]
    hbm = got["metrics"]["hbm.busy_ps"]["values"]
    assert hbm == [a["engines"]["hbm"]["busy_ps"], b["engines"]["hbm"]["busy_ps"]]
    assert hbm[1] * 2 == hbm[0]  # twice the bandwidth: half the slice's busy time
    assert got["metrics"]["bound"]["values"] == ["gemm", "gemm"]
    assert got["metrics"]["verified"] == {"values": [True, True], "delta_pct": [None, None]}
    code, text, _ = cli("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert code == 0 and "(-3.9%)" in text
    lines = text.splitlines()
    # labelled by what changed (the --set item, resolved), not by the files' names
    assert "a.json" not in text
    assert any(line.split() == ["│", "hbm.bandwidth", "│", "not", "set", "│", "204.8GB/s", "│"]
               for line in lines), text
    latency = next(line for line in lines if "│ latency " in line)
    assert latency.split("│")[2].strip() == f"{a['latency_ps'] / 1e3:.3f}ns"  # 542,858 ps
    assert got["changed"] == [{"hbm.bandwidth": "not set"}, {"hbm.bandwidth": "204.8GB/s"}]


def test_a_long_or_control_setting_is_shown_cut_and_escaped_but_kept_whole_in_json(cli,
                                                                                   tmp_path):
    """A file's params of 15,000 characters took the table over a minute to fit, and an
    escape in its kernel name reached the terminal: the table cuts and escapes them; the
    JSON keeps what the files hold."""
    a = _run(cli, tmp_path / "a.json")
    b = {**a, "kernel": "load\x1b[31mdot", "params": {**a["params"], "n": "9" * 15_000,
                                                      "tag": "[/b]x[bold]"}}
    (tmp_path / "b.json").write_text(json.dumps(b))
    code, text, _ = cli("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert code == 0 and "\x1b" not in text and "load\\x1b[31mdot" in text
    assert "[/b]x[bold]" in text  # text, not Rich markup (a closing tag was an internal error)
    assert "9" * 100 not in text  # cut (how much of it a line shows is the table's say)
    from kernbench_cli.report.compare import _setting

    assert _setting("9" * 15_000) == f"{'9' * 30}…{'9' * 12} (15,000 characters)"
    code, out, _ = cli("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json")
    assert json.loads(out)["changed"][1]["n"] == "9" * 15_000


def test_compare_formats(cli, tmp_path):
    import csv
    import io

    a = _run(cli, tmp_path / "a.json", "--set", "pe.gemm.rows=16")
    b = _run(cli, tmp_path / "b.json", "--set", "pe.gemm.rows=8")
    files = (str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    code, out, _ = cli("compare", *files, "--format", "csv")
    records = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and list(records[0]) == ["run", "pe.gemm.rows", "metric", "value",
                                              "delta_pct"]
    assert [(r["pe.gemm.rows"], r["value"]) for r in records if r["metric"] == "latency_ps"] \
        == [("16", str(a["latency_ps"])), ("8", str(b["latency_ps"]))]
    code, out, _ = cli("compare", *files, "--format", "md")
    lines = out.splitlines()
    assert lines[2:5] == ["|  | run 1 | run 2 |", "|---|---:|---:|",
                          "| pe.gemm.rows | 16 | 8 |"], out
    assert cli("compare", *files, "--format", "json")[1] == cli("compare", *files, "--json")[1]
    assert cli("compare", *files, "--format", "csv", "--json") == (
        2, "", "error: --json and --format csv disagree: give one\n")


def test_many_runs_are_a_row_each_where_columns_do_not_fit(cli, tmp_path, monkeypatch):
    out = tmp_path / "s.jsonl"
    code, _, _ = cli("sweep", LOAD_DOT, "--set", "costs.issue.load=1ns,2ns,3ns,4ns,5ns,6ns",
                     "--out", str(out))
    assert code == 0
    monkeypatch.setenv("COLUMNS", "80")
    code, text, _ = cli("compare", str(out))
    assert code == 0 and "Compare: 6 runs, change against the first" in text
    rows = [line.split("│")[1:4] for line in text.splitlines() if line.startswith("│")]
    assert [[c.strip() for c in row[:2]] for row in rows] == [
        [str(n), f"{n}ns"] for n in range(1, 7)]
    assert "a row per run to fit 80 columns" in text
    monkeypatch.setenv("COLUMNS", "200")
    assert "│ costs.issue.load │" in cli("compare", str(out))[1]  # wide: a column each


def test_a_sweeps_rows_are_runs(cli, tmp_path):
    out = tmp_path / "s.jsonl"
    code, _, _ = cli("sweep", LOAD_DOT, "--set", "costs.issue.load=4ns,10ns", "--out", str(out))
    assert code == 0
    code, text, _ = cli("compare", str(out), "--json")
    assert code == 0
    got = json.loads(text)
    assert got["runs"] == ["s.jsonl#0 costs.issue.load=4ns", "s.jsonl#1 costs.issue.load=10ns"]
    assert got["metrics"]["latency_ps"]["values"][1] - \
        got["metrics"]["latency_ps"]["values"][0] == 6_000  # the load's issue, 6 ns dearer


def test_compare_errors_are_one_line(cli, tmp_path):
    one = tmp_path / "a.json"
    _run(cli, one)
    assert cli("compare", str(one)) == (2, "", "error: compare needs at least two runs; "
                                               "got 1\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"point": 0}\nnot json\n')
    assert cli("compare", str(one), str(bad)) == (
        2, "", f"error: {bad}:1: no run result here (a failed sweep point, or not kernbench "
               "output)\n")
    binary = tmp_path / "run.trace"  # another file's first bytes: refused before it is read
    binary.write_bytes(b"\x1f\x8b\x08" + b"\xff" * 4096)  # (it was read whole, then "not text")
    assert cli("compare", str(one), str(binary)) == (
        2, "", f"error: {binary}:1: not JSON: expected `run --json` output or a sweep's "
               ".jsonl rows\n")


def test_an_edited_config_is_another_run(cli, tmp_path):
    """A result names the config.json that made it by its bytes' digest, not only its path:
    the same path edited between two runs is a setting that differs, in the JSON, the
    summary, `compare` and `Result.from_dict`."""
    import hashlib
    import shutil

    import kernbench_cli as kb

    config = tmp_path / "m.json"
    shutil.copy(TESTS / "configs" / "hf" / "llama.json", config)
    args = ("run", "llama_decode", "-p", f"config={config}", "--timing-only")

    def ran(path):
        code, out, _ = cli(*args, "--json")
        assert code == 0
        path.write_text(out)
        return json.loads(out)

    first = ran(tmp_path / "a.json")
    digest = hashlib.sha256(config.read_bytes()).hexdigest()[:8]
    assert first["file_digests"] == {"config": digest}
    edited = json.loads(config.read_text()) | {"intermediate_size": 2048}
    config.write_text(json.dumps(edited))
    second = ran(tmp_path / "b.json")
    assert second["file_digests"] == {"config": hashlib.sha256(config.read_bytes())
                                      .hexdigest()[:8]} != first["file_digests"]
    assert first["params"] == second["params"]
    code, out, _ = cli(*args)
    assert code == 0 and f" #{second['file_digests']['config']}" in out  # beside its path
    code, out, _ = cli("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json")
    assert code == 0
    assert json.loads(out)["changed"] == [{"config": f"{config} #{digest}"},
                                          {"config": f"{config} "
                                                     f"#{second['file_digests']['config']}"}]
    assert kb.Result.from_dict(first).file_digests == {"config": digest}
    assert kb.Result.from_dict({k: v for k, v in first.items() if k != "file_digests"}
                               ).file_digests == {}
    with pytest.raises(kb.ArgumentError) as err:
        kb.Result.from_dict(first | {"file_digests": {"nosuch": digest}})
    assert str(err.value) == ("Result.from_dict: file_digests names 'nosuch', which is not one "
                              "of the params")


def test_a_sweep_rows_file_axis_shows_its_digest():
    """A sweep point is labelled by its axes as given: a file among them carries its digest
    too, so the same path edited between two sweeps is two settings."""
    from kernbench_cli.report.compare import changed, settings

    rows = [{"kernel": "llama_decode", "file_digests": {"config": digest}}
            for digest in ("0123abcd", "4567ef01")]
    every = [settings(row, {"config": "m.json", "batch": 4}) for row in rows]
    assert changed(["a", "b"], every) == [{"config": "m.json #0123abcd"},
                                          {"config": "m.json #4567ef01"}]


def test_runs_of_an_edited_topology_or_cost_table_of_the_same_name_differ_by_digest(cli,
                                                                                  tmp_path):
    """A topology file of the shipped one's name with another HBM bandwidth, and a cost
    table of the shipped one's name with another issue cost, were shown as the same
    settings: their names agree, so only the digests of what the runs resolved can say."""
    from tests.conftest import ROOT

    shipped = (ROOT / "topologies" / "default.toml").read_text()
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "default.toml").write_text(shipped.replace('"102.4GB/s"', '"25.6GB/s"'))
    a = _run(cli, tmp_path / "a.json")
    b = _run(cli, tmp_path / "b.json", "-t", str(tmp_path / "t" / "default.toml"))
    c = _run(cli, tmp_path / "c.json", "--set", "hbm.bandwidth=25.6GB/s")
    assert (a["topology"], b["topology"]) == ("default", "default")
    assert b["topology_digest"] == c["topology_digest"] != a["topology_digest"]
    files = [str(tmp_path / f"{x}.json") for x in "abc"]
    code, out, _ = cli("compare", *files[:2], "--json")
    assert code == 0 and json.loads(out)["changed"] == [
        {"topology digest": a["topology_digest"]}, {"topology digest": b["topology_digest"]}]
    # where a --set item says why the digests differ, it alone is shown; b and c resolve
    # alike under different settings, so the digest is news again
    code, out, _ = cli("compare", files[0], files[2], "--json")
    assert json.loads(out)["changed"] == [{"hbm.bandwidth": "not set"},
                                          {"hbm.bandwidth": "25.6GB/s"}]
    code, out, _ = cli("compare", *files, "--json")
    assert json.loads(out)["changed"] == [
        {"topology digest": a["topology_digest"], "hbm.bandwidth": "not set"},
        {"topology digest": b["topology_digest"], "hbm.bandwidth": "not set"},
        {"topology digest": c["topology_digest"], "hbm.bandwidth": "25.6GB/s"}]


def test_an_item_explains_only_the_digest_it_can_change():
    """A ``costs.`` item cannot change the topology's digest, nor a topology item the cost
    table's: each once hid the other file's edit (two runs of "default", 10% apart, showed
    only their issue costs). A result that does not know a digest differs from none."""
    from kernbench_cli.report.compare import changed, settings

    run = kb.run("softmax", timing_only=True).to_dict()

    def with_(items: list[str], **digests: str) -> dict[str, str]:
        return settings({**run, "overrides": items,
                         **{f"{k}_digest": v for k, v in digests.items()}})

    costs_items = [with_(["costs.issue.load=5ns"], topology="0bb1094c"),
                   with_(["costs.issue.load=6ns"], topology="04b94d52")]
    assert changed(["a", "b"], costs_items) == [
        {"topology digest": "0bb1094c", "costs.issue.load": "5ns"},
        {"topology digest": "04b94d52", "costs.issue.load": "6ns"}]
    topology_items = [with_(["hbm.bandwidth=1GB/s"], costs="aaaaaaaa"),
                      with_(["hbm.bandwidth=2GB/s"], costs="bbbbbbbb")]
    assert changed(["a", "b"], topology_items) == [
        {"costs digest": "aaaaaaaa", "hbm.bandwidth": "1GB/s"},
        {"costs digest": "bbbbbbbb", "hbm.bandwidth": "2GB/s"}]
    explained = [with_(["costs.issue.load=5ns"], costs="aaaaaaaa"),
                 with_(["costs.issue.load=6ns"], costs="bbbbbbbb")]
    assert changed(["a", "b"], explained) == [{"costs.issue.load": "5ns"},
                                              {"costs.issue.load": "6ns"}]
    # two topologies of one digest naming two cost tables "default": the names do not say
    renamed = [settings({**run, "topology": name, "costs_digest": digest})
               for name, digest in (("default", "aaaaaaaa"), ("default-b", "bbbbbbbb"))]
    assert changed(["a", "b"], renamed) == [{"topology": "default", "costs digest": "aaaaaaaa"},
                                            {"topology": "default-b",
                                             "costs digest": "bbbbbbbb"}]
    before = settings({k: v for k, v in run.items() if k != "kernel_digest"})
    assert changed(["a", "b"], [settings(run), before]) == [{"run": "a"}, {"run": "b"}]


def test_a_kernel_file_of_a_shipped_kernels_name_differs_by_digest(cli, tmp_path):
    """A user's softmax.py (the shipped one, one line added) ran as `softmax` with the same
    parameters and configuration: `compare` found nothing that differed beside a 7.6%
    longer latency. A result keeps its kernel file's digest, and its replay the digest of
    the kernel its run loaded."""
    import hashlib

    from tests.conftest import ROOT

    shipped = (ROOT / "kernels" / "softmax.py").read_text()
    mine = tmp_path / "softmax.py"
    mine.write_text(shipped.replace("    x_ptr, y_ptr = tl.shard(x), tl.shard(y)",
                                    "    tl.cycles(1000)\n    x_ptr, y_ptr = tl.shard(x), "
                                    "tl.shard(y)"))
    assert mine.read_text() != shipped
    digests = [hashlib.sha256(text.encode()).hexdigest()[:8]
               for text in (shipped, mine.read_text())]
    trace = tmp_path / "t.trace"
    for name, kernel in (("a", "softmax"), ("b", str(mine))):
        code, out, _ = cli("run", kernel, "--timing-only", "--json", "--record", str(trace))
        assert code == 0 and json.loads(out)["kernel"] == "softmax"
        (tmp_path / f"{name}.json").write_text(out)
    code, out, _ = cli("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json")
    assert json.loads(out)["changed"] == [{"kernel digest": d} for d in digests]
    code, out, _ = cli("replay", str(trace), "--json")
    assert json.loads(out)["kernel_digest"] == digests[1]


def test_results_of_two_kernbench_versions_say_so():
    """The model is in kernbench's code: the same files under another version may time
    otherwise, so a result keeps the version that made it and `compare` shows it where
    two differ (not where they agree; a result from before it was kept says "not set")."""
    from kernbench_cli import __version__
    from kernbench_cli.report.compare import changed, settings

    run = kb.run("softmax", timing_only=True).to_dict()
    assert run["kernbench_version"] == __version__
    assert kb.bounds("softmax").kernbench_version == __version__
    older = {**run, "kernbench_version": "0.1.0"}
    before = {k: v for k, v in run.items() if k != "kernbench_version"}
    every = [settings(r) for r in (run, older, before)]
    assert changed(["a", "b", "c"], every) == [
        {"kernbench": __version__}, {"kernbench": "0.1.0"}, {"kernbench": "not set"}]
    assert changed(["a", "b"], [settings(run), settings(run)]) == [{"run": "a"}, {"run": "b"}]
