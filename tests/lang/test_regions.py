"""Named regions (`tl.region`): time per region on the critical path, spans, JSON, replay."""

from __future__ import annotations

import json

import pytest

from kernbench_cli.sim.regions import OUTSIDE
from tests.conftest import test_topology


def test_regions_tile_the_critical_path(run):
    result = run("regions", "default")
    by = {r.name: r for r in result.regions}
    assert list(by) == ["outer", "outer/a", "outer/b", "tail", OUTSIDE]
    # top-level regions and the time outside them sum to the latency, as the path tiles it
    assert by["outer"].path_ps + by["tail"].path_ps + by[OUTSIDE].path_ps == result.latency_ps
    # nothing is issued in "outer" itself: its time is its two children's
    assert by["outer"].path_ps == by["outer/a"].path_ps + by["outer/b"].path_ps
    for r in result.regions:
        assert sum(r.by_engine.values()) == r.path_ps
    # 16 PEs: a load and an add in a, three multiplies in b, a store in tail, a load before
    assert [by[n].commands for n in ("outer/a", "outer/b", "tail", OUTSIDE)] == [
        32, 48, 16, 16]
    assert by["outer/b"].by_engine == {"math": by["outer/b"].path_ps}


def test_spans_nest_per_pe_and_cover_their_commands(run):
    result = run("regions", "default")
    spans = {(pid, name): (start, end) for pid, name, start, end in result.region_spans}
    assert {name for _, name in spans} == {"outer", "outer/a", "outer/b", "tail"}
    for pid in range(16):
        outer = spans[(pid, "outer")]
        for child in ("outer/a", "outer/b"):
            start, end = spans[(pid, child)]
            assert outer[0] <= start <= end <= outer[1]
        assert spans[(pid, "tail")][1] <= result.latency_ps


def test_json_replay_and_compare_carry_regions(cli, tmp_path):
    trace = tmp_path / "r.kbt"
    code, out, _ = cli("run", "tests/kernels/regions.py", "--json", "--record", str(trace))
    assert code == 0
    run = json.loads(out)
    assert [r["name"] for r in run["regions"]] == ["outer", "outer/a", "outer/b", "tail",
                                                   OUTSIDE]
    code, out, _ = cli("replay", str(trace), "--json")
    assert json.loads(out)["regions"] == run["regions"]
    first, second = tmp_path / "1.json", tmp_path / "2.json"
    first.write_text(json.dumps(run))
    code, out, _ = cli("run", "tests/kernels/regions.py", "--json", "--set",
                       "hbm.bandwidth=x2")
    second.write_text(out)
    code, out, _ = cli("compare", str(first), str(second), "--format", "json")
    assert code == 0
    table = json.loads(out)
    text = json.dumps(table)
    assert "region outer/a path_ps" in text


def test_a_kernel_without_regions_reports_none(cli):
    code, out, _ = cli("run", "softmax", "--json", "--timing-only")
    assert code == 0 and "regions" not in json.loads(out)


@pytest.mark.parametrize(("name", "says"), [
    ("'a/b'", "a name is a non-empty printable string without '/', got 'a/b'"),
    ("'(outside)'", "names in parentheses, such as (outside), are the report's own rows, got "
                    "'(outside)'"),
    ("'r' * 300", "a name of 300 characters; at most 255, got 'rrrrrrrrrrrrrrrrrrr…rrrrrrr' "
                  "(300 characters)")])
def test_a_bad_region_name_is_a_kernel_error(cli, tmp_path, name, says):
    """A name the report cannot show as its own row: a path separator, the report's own
    `(outside)` form (it would make two such rows), a name too long for a row."""
    kernel = tmp_path / "bad.py"
    kernel.write_text(f'''
PARAMS = {{}}
def setup(host, p):
    return {{}}
def kernel(tl):
    with tl.region({name}):
        pass
def reference(host, p):
    return {{}}
def outputs(host, args, p):
    return {{}}
''')
    code, _, err = cli("run", str(kernel))
    assert code == 1
    assert err == (f"error: {kernel}:6: PE (rack=0 sip=0 cube=0 pe=0) at t=0ns: tl.region: "
                   f"{says}\n")


def test_a_region_of_cpu_cycles_spans_them(cli, tmp_path):
    """A region whose commands are PE_CPU's own (`tl.cycles`, no result) took its end as 0:
    a span of minus its start. It spans the cycles: 1 ns at 1 GHz, after the 2 ns before."""
    path = tmp_path / "cycles.py"
    path.write_text("PARAMS = {}\n\ndef setup(host, p):\n    return {}\n\n"
                    "def kernel(tl):\n    tl.cycles(2)\n    with tl.region('r'):\n"
                    "        tl.cycles(1)\n\ndef reference(host, p):\n    return {}\n\n"
                    "def outputs(host, args, p):\n    return {}\n")
    code, out, err = cli("run", str(path), "-t", test_topology("pair"), "--json")
    assert code == 0, err
    assert [(r["name"], r["span_ps"], r["path_ps"]) for r in json.loads(out)["regions"]] == [
        ("r", 1000, 1000), (OUTSIDE, 0, 2000)]


def test_regions_around_a_name_are_its_paths(tmp_path, cli):
    """Each region a command in a name belongs to: itself and each named path before a `/`
    (found by lookup: against every other name, 20,000 names took minutes). The table
    shows the first 100 regions and the time outside them, and says how many more."""
    from kernbench_cli.sim.regions import _around

    names = ["", "a", "a/b", "ab", "a/b/c", "x/y", "a//c", "a/"]
    assert _around(names) == [[], [1], [1, 2], [3], [1, 2, 4], [5], [1, 6, 7], [1, 7]]
    path = tmp_path / "many.py"
    path.write_text("PARAMS = {}\n\ndef setup(host, p):\n    return {}\n\n"
                    "def kernel(tl):\n    for i in range(150):\n"
                    "        with tl.region(f'step{i}'):\n            tl.cycles(1)\n\n"
                    "def reference(host, p):\n    return {}\n\n"
                    "def outputs(host, args, p):\n    return {}\n")
    code, out, err = cli("run", str(path), "-t", test_topology("pair"))
    assert code == 0, err
    rows = [line.split("│")[1].strip() for line in out.splitlines()
            if line.startswith("│ step") or line.startswith(f"│ {OUTSIDE}")]
    assert rows == [f"step{i}" for i in range(100)] + [OUTSIDE]
    assert "and 50 more regions, after the first 100 (--json has every one)" in out
