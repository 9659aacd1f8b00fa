"""`kernbench compare`: runs side by side with their change against the first."""

from __future__ import annotations

import json

from .conftest import TESTS

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
    assert code == 0 and "latency_ps" in text and "(-3.9%)" in text


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
