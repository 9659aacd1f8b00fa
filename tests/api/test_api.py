"""The Python API (`import kernbench_cli as kb`) is the CLI's own: the same JSON, the same
errors, typed sweep axes, pandas only when asked for, and an import that stays light."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import kernbench_cli as kb
from kernbench_cli import errors
from kernbench_cli.sim.kernels import shipped_kernels
from tests.conftest import TESTS, memory_low_after, test_topology

ONE, PAIR = test_topology("one"), test_topology("pair")
#: Small problems for the shipped kernels (as the CLI tests run them); a kernel not named
#: here runs its defaults on the default topology.
SMALL = {
    "sharded_gemm": ("default", {"M": 16, "K": 64, "N": 512}),
    "gqa_attention": ("default", {"seq_len": 1024}),
    "softmax": ("default", {"rows": 64, "cols": 128}),
    "rmsnorm": ("default", {"rows": 64, "cols": 256}),
}


def cli_json(cli, *args: str) -> dict:
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def cli_error(cli, *args: str) -> tuple[int, list[str]]:
    """The exit code and the messages after ``error: `` of a failing command."""
    code, _, err = cli(*args)
    assert code != 0
    return code, [line.removeprefix("error: ") for line in err.splitlines()
                  if line.startswith("error: ")]


# ------------------------------------------------------------------ run = run --json

@pytest.mark.parametrize("kernel", shipped_kernels())
def test_run_to_dict_is_run_json(cli, kernel):
    """Every shipped kernel, with values and verification. `run --json` carries no
    wall-clock field (equal inputs give equal JSON), so the whole object is compared."""
    topology, params = SMALL.get(kernel, ("default", {}))
    result = kb.run(kernel, topology=topology, params=params)
    items = [a for name, value in params.items() for a in ("-p", f"{name}={value}")]
    assert result.to_dict() == cli_json(cli, "run", kernel, "-t", topology, *items)
    assert result.verified is True and result.latency_ps == result.to_dict()["latency_ps"]


def test_set_and_params_mappings_are_the_cli_items(cli):
    """``set=`` values as numbers or unit strings, ``params=`` typed: the same run, the same
    overrides and digests, as the CLI's --set and -p strings; per-PE rows and races too."""
    sets = {"pe.gemm.rows": 8, "hbm.bandwidth": "204.8GB/s", "pe.dma.setup_overlap": False,
            "costs.issue.composite": "80ns"}
    result = kb.run("sharded_gemm", topology=ONE, params={"M": 16, "K": 64, "N": 64},
                    set=sets, timing_only=True, per_pe=True, races=True)
    expected = cli_json(cli, "run", "sharded_gemm", "-t", ONE, "-p", "M=16", "-p", "K=64",
                        "-p", "N=64", "--set", "pe.gemm.rows=8", "--set",
                        "hbm.bandwidth=204.8GB/s", "--set", "pe.dma.setup_overlap=false",
                        "--set", "costs.issue.composite=80ns", "--timing-only", "--per-pe",
                        "--races")
    assert result.to_dict() == expected
    assert result.overrides == ("pe.gemm.rows=8", "hbm.bandwidth=204.8GB/s",
                                "pe.dma.setup_overlap=false", "costs.issue.composite=80ns")
    assert result.per_pe[0]["pe"] == expected["per_pe"][0]["pe"] and result.races == ()


def test_result_fields_are_typed_and_frozen():
    result = kb.run("gqa_attention", params={"seq_len": 1024}, timing_only=True)
    data = result.to_dict()
    gemm = result.engines["gemm"]
    assert isinstance(gemm, kb.Engine) and gemm.busy_ps == data["engines"]["gemm"]["busy_ps"]
    assert gemm.busy_ns == data["engines"]["gemm"]["busy_ns"]
    assert result.latency_ns == data["latency_ns"] and result.verified is None
    assert result.bound.engine == data["bound"]["engine"]
    assert dict(result.critical_path.by_engine) == data["critical_path"]["by_engine"]
    assert sum(result.critical_path.by_cause.values()) == result.latency_ps
    assert [c.name for c in result.checks if c.kind == "invariant"] == [
        c["name"] for c in data["checks"]]
    assert dict(result.bounds_ps) == data["bounds_ps"] and "memory" in result.bounds_ps
    assert result.tcm_high_water.bytes == data["tcm_high_water"]["bytes"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.latency_ps = 0
    with pytest.raises(TypeError):
        result.engines["gemm"] = gemm
    data["latency_ps"] = 0  # a copy: the result keeps its own
    assert result.to_dict()["latency_ps"] == result.latency_ps != 0
    assert kb.Result.from_dict(result.to_dict()) == result


def test_a_result_changed_by_dataclasses_replace_is_refused():
    """A copy with other fields would report them while its `to_dict()`, `kb.compare` and
    the sweep's rows kept the old values (latency 1 ps in the field, 498,858 in the JSON;
    a failed verification whose dict said verified): refused, naming how one is made. A
    copy of an unchanged result is the same result."""
    import copy

    result = kb.run("softmax", ONE, params={"rows": 8, "cols": 64, "block": 8})
    sweep = kb.SweepResult.from_rows("softmax", (), ())
    comparison = kb.compare(result, result)
    for made, maker, changes in (
            (result, "Result.from_dict(data)", {"latency_ps": 1}),
            (result, "Result.from_dict(data)", {"verified": False}),
            (sweep, "SweepResult.from_rows(kernel, axes, rows) or kb.load_sweep",
             {"points": ()}),
            (comparison, "kb.compare", {"runs": ("a", "b")}),
            (kb.bounds("all_reduce"), "Bounds.from_dict(data)", {"lower_bound_ps": 1})):
        with pytest.raises(errors.ArgumentError) as info:
            dataclasses.replace(made, **changes)
        assert str(info.value) == (
            f"a {type(made).__name__} is read-only and made by {maker}: a copy with other "
            "fields (dataclasses.replace) would disagree with its to_dict(); change the dict "
            "and make it again")
    same = copy.copy(result)
    assert same == result and same.to_dict() == result.to_dict()
    assert kb.Result.from_dict({**result.to_dict(), "latency_ps": 1}).latency_ps == 1
    with pytest.raises(errors.ArgumentError, match=r"^Result.from_dict: latency_ps -5 is not "
                                                   r"a time$"):
        kb.Result.from_dict({**result.to_dict(), "latency_ps": -5})


def test_a_result_dict_holds_what_a_run_json_file_can():
    """`Result.from_dict` and `kb.compare` of a dict take what a `run --json` file could
    hold, as `kernbench compare` reads one: no NaN or Infinity (named by key), and a
    `verified` that agrees with its checks (a false one with no failing check made
    `check()` raise "verification failed: " with no reason)."""
    result = kb.run("softmax", ONE, params={"rows": 8, "cols": 64, "block": 8})
    nan = {**result.to_dict(), "metrics": {"x": float("nan")}}
    refused = ("metrics.x: NaN is not a number kernbench reads (finite, integers within 64 "
               "bits; JSON has no NaN or Infinity)")
    with pytest.raises(errors.ArgumentError) as info:
        kb.Result.from_dict(nan)
    assert str(info.value) == f"Result.from_dict: {refused}"
    with pytest.raises(errors.ArgumentError) as info:
        kb.compare(result, {**result.to_dict(), "hbm_gbps": float("inf")})
    assert str(info.value) == ("run 1: hbm_gbps: Infinity is not a number kernbench reads "
                               "(finite, integers within 64 bits; JSON has no NaN or Infinity)")
    with pytest.raises(errors.ArgumentError) as info:
        kb.Result.from_dict({**result.to_dict(), "verified": False})
    assert str(info.value) == ("Result.from_dict: verified is false, but no verification "
                               "check failed")
    checks = [{**c, "passed": False} if c["kind"] == "verification" else c
              for c in result.to_dict()["checks"]]
    with pytest.raises(errors.ArgumentError) as info:
        kb.Result.from_dict({**result.to_dict(), "checks": checks})
    assert str(info.value) == ("Result.from_dict: verified is true, but the verification of "
                               f"{checks[0]['name']} failed")


@pytest.mark.parametrize(("changes", "problem"), [
    ({"schema_version": 5}, "schema_version 5 is not the one this kernbench reads (1)"),
    ({"pes": -1}, "pes -1 is not a count"),
    ({"commands": -1}, "commands -1 is not a count"),
    ({"critical_path": None}, "critical_path is null: a `run --json` object leaves it out "
                              "when a run has none"),
    ({"regions": None}, "regions is null: a `run --json` object leaves it out when a run "
                        "has none"),
    *(({"recorded_on": was}, "recorded_on is not a replay's recorded topology (topology: a "
                             "name, pes: a count, topology_digest: 8 hex digits)")
      for was in ({"pes": "x"}, {"topology": [1], "pes": {}}, {"topology": "t", "pes": 0},
                  {"topology": "t", "pes": 4, "other": 1}, {"topology": "", "pes": 4},
                  {"topology": "t", "pes": True},
                  {"topology": "t", "pes": 4, "topology_digest": "not a digest"})),
])
def test_result_from_dict_refuses_what_no_run_json_says(changes, problem):
    """Another schema, a negative count, or null for a key a run leaves out: an
    ArgumentError naming it (critical_path null was an AttributeError; regions null broke
    `kb.compare` later). A changed latency_ps carries latency_ns with it: the field and
    `to_dict()` agree."""
    result = kb.run("softmax", ONE, params={"rows": 8, "cols": 64, "block": 8})
    with pytest.raises(errors.ArgumentError) as info:
        kb.Result.from_dict({**result.to_dict(), **changes})
    assert str(info.value) == f"Result.from_dict: {problem}"
    for lines in (5, "ab", ["ok", 3]):  # was a TypeError; a str was split into lines
        with pytest.raises(errors.ArgumentError) as info:
            kb.Result.from_dict(result.to_dict(), race_lines=lines)
        assert str(info.value).endswith(": expected a tuple of lines (str)")
    changed = kb.Result.from_dict({**result.to_dict(), "latency_ps": 1000, "latency_ns": 5})
    assert (changed.latency_ns, changed.to_dict()["latency_ns"]) == (1.0, 1.0)


def test_a_result_of_0_2_0_reads_its_what_if_under_the_figures_new_name():
    """`what_if_2x_faster_saves_at_most_ps` (0.2.0) is `what_if_2x_faster_saves_ps` now
    (an estimate, not a bound): a result written by 0.2.0 reads as one of now."""
    result = kb.run("softmax", ONE, params={"rows": 8, "cols": 64, "block": 8})
    old = result.to_dict()
    path = old["critical_path"]
    path["what_if_2x_faster_saves_at_most_ps"] = path.pop("what_if_2x_faster_saves_ps")
    read = kb.Result.from_dict(old)
    assert read.critical_path == result.critical_path and read.to_dict() == result.to_dict()
    path = read.critical_path  # the attribute's old name reads too (deprecated)
    assert path.what_if_2x_faster_saves_at_most_ps == path.what_if_2x_faster_saves_ps


def test_bounds_from_dict_refuses_what_no_bounds_json_says():
    """`kb.Bounds.from_dict` took anything: a string raised AttributeError, a key missing a
    TypeError listing constructor arguments, a key of another type was kept as given. Each
    is an ArgumentError naming it, as `Result.from_dict`'s."""
    stated = kb.bounds("softmax", ONE, params={"rows": 8, "cols": 64, "block": 8}).to_dict()
    where = "Bounds.from_dict"
    for data, message in (
            ("nope", f"{where}: data='nope': expected a `run --bounds-only --json` object (a "
                     "dict), got str"),
            ({}, f"{where}: no key kernel: not a `run --bounds-only --json` object"),
            ({**stated, "pes": True}, f"{where}: pes: expected int, got True"),
            ({**stated, "bounds_ps": {"memory": "1us"}},
             f"{where}: bounds_ps['memory']: expected int, got '1us'"),
            ({**stated, "lower_bound_ps": float("nan")},
             f"{where}: lower_bound_ps: NaN is not a number kernbench reads (finite, "
             "integers within 64 bits; JSON has no NaN or Infinity)")):
        with pytest.raises(errors.ArgumentError) as info:
            kb.Bounds.from_dict(data)
        assert str(info.value) == message
    assert kb.Bounds.from_dict(stated).to_dict() == stated
    older = {k: v for k, v in stated.items() if k != "kernbench_version"}
    assert kb.Bounds.from_dict(older).kernbench_version == ""


def test_a_kernel_with_a_bool_parameter_runs_and_compares(tmp_path, cli):
    """A bool among a result's parameters (a `Mapping[str, Any]`) was refused as "expected
    Any, got False": `kb.run` of a kernel with a bool parameter raised, and `compare` of its
    results said it had no runs."""
    kernel = tmp_path / "flagged.py"
    kernel.write_text((TESTS / "kernels" / "metered.py").read_text().replace(
        'PARAMS = {"items": 4, "extra": 0}', 'PARAMS = {"items": 4, "extra": 0, "flag": False}'))
    result = kb.run(str(kernel), timing_only=True, params={"flag": True})
    assert result.params["flag"] is True
    assert kb.Result.from_dict(result.to_dict()).params == result.params
    for name, flag in (("a", "false"), ("b", "true")):
        code, out, _ = cli("run", str(kernel), "--timing-only", "-p", f"flag={flag}", "--json")
        (tmp_path / f"{name}.json").write_text(out)
    code, out, _ = cli("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json")
    assert code == 0 and json.loads(out)["changed"] == [{"flag": "False"}, {"flag": "True"}]


@pytest.mark.parametrize("bounds_only", [False, True])
def test_what_on_row_does_to_its_row_stays_with_it(bounds_only):
    """`on_row` was handed the sweep's own row: a callback that tidied it rewrote the
    returned result (every point's latency, axes and error)."""
    def tidy(row):
        row["axes"]["rows"] = "12345"
        row["error"] = "annotated"
        if row.get("result"):
            row["result"]["latency_ps"] = 1

    sweep = kb.sweep("softmax", ONE, params={"rows": [8, 16], "cols": 64, "block": 8},
                     timing_only=True, jobs=1, bounds_only=bounds_only, on_row=tidy)
    plain = kb.sweep("softmax", ONE, params={"rows": [8, 16], "cols": 64, "block": 8},
                     timing_only=True, jobs=1, bounds_only=bounds_only)
    assert sweep.to_dicts() == plain.to_dicts()
    assert [p.axes["rows"] for p in sweep.points] == [8, 16]


def test_a_name_too_long_for_the_file_system_is_an_unknown_one():
    """A kernel or topology name past 255 characters raised the file system's OSError
    (ENAMETOOLONG; the CLI printed "internal error"); the name shows clipped, and a kernel
    file's says why it cannot be read."""
    name = "a" * 300
    for call, error, start in (
            (lambda: kb.load_kernel(name), errors.ParamError, "unknown kernel 'aaa"),
            (lambda: kb.load_kernel(name + ".py"), errors.ParamError, "kernel file 'aaa"),
            (lambda: kb.load_topology(name), errors.ConfigError, "no topology named 'aaa"),
            (lambda: kb.run("softmax", name), errors.ConfigError, "no topology named 'aaa")):
        with pytest.raises(error) as info:
            call()
        assert str(info.value).startswith(start) and " characters)" in str(info.value)
    with pytest.raises(errors.ParamError) as info:
        kb.load_kernel(name + ".py")
    assert str(info.value).endswith(" characters): cannot read: File name too long")


def test_an_output_path_with_a_nul_is_refused(tmp_path):
    """An output path with a NUL character raised os's bare ValueError ("embedded null
    byte"); input paths were refused already."""
    sweep = kb.sweep("softmax", ONE, params={"rows": [8], "cols": 64, "block": 8},
                     timing_only=True, jobs=1)
    for call, what in ((lambda: sweep.plot(str(tmp_path / "p\0.svg")), "path"),
                       (lambda: kb.sweep("softmax", ONE, params={"rows": [8]}, jobs=1,
                                         out=str(tmp_path / "o\0.jsonl")), "--out")):
        with pytest.raises(errors.KernbenchError) as info:
            call()
        assert str(info.value).startswith(f"{what} '") and str(info.value).endswith(
            ": a file name has no NUL character")
    assert list(tmp_path.iterdir()) == []


def test_sweep_result_from_rows_refuses_what_is_not_a_sweeps_rows(tmp_path):
    """Each argument, row and key not of a sweep's shape is an ArgumentError naming it
    (they were raw ValueError, TypeError, KeyError and AttributeError from inside, and a
    point number given twice was taken, which `kb.load_sweep` refuses)."""
    rows = kb.sweep("softmax", ONE, params={"rows": [8, 16], "cols": 64, "block": 8},
                    timing_only=True).to_dicts()
    where = "SweepResult.from_rows"
    for args, message in (
            ((5, ["rows"], rows), f"{where}: kernel=5: expected a str"),
            (("softmax", "rows", rows), f"{where}: axes='rows': expected a list of axis names"),
            (("softmax", ["rows"], None), f"{where}: rows=None: expected a list of sweep rows"),
            (("softmax", ["rows"], [None]), f"{where}: rows[0]: expected a sweep row (a dict), "
                                            "got None"),
            (("softmax", ["rows"], [rows[0], rows[0]]), f"{where}: rows[1]: point 0: expected "
                                                        "a point number of its own (an int)"),
            (("softmax", ["rows"], [{**rows[0], "axes": {"rows": None}}]),
             f"{where}: rows[0]: axes={{'rows': None}}: expected a dict of axis: value text"),
            (("softmax", ["rows"], [{**rows[0], "error": 5}]),
             f"{where}: rows[0]: error: expected a str or None, got 5"),
            (("softmax", ["rows"], [rows[0], {**rows[1], "axes": {"rows": "16"}}]),
             f"{where}: rows[1]: axes ['rows']: expected those of every row, ['block', "
             "'cols', 'rows'], with the axes ['rows'] among them"),
            (("softmax", ["rows", "x"], rows), f"{where}: rows[0]: axes ['block', 'cols', "
                                               "'rows']: expected those of every row, "
                                               "['block', 'cols', 'rows'], with the axes "
                                               "['rows', 'x'] among them"),
            (("softmax", ["rows"], [{**rows[0], "result": {}}]),
             f"{where}: rows[0]: result: no latency_ps (an int): not a run's result"),
            (("softmax", ["rows"], [{**rows[0], "result": {**rows[0]["result"],
                                                           "roofline": 7}}]),
             f"{where}: rows[0]: result: roofline=7: expected a list of {{resource, ps}} "
             "objects"),
            (("softmax", ["rows"], [{**rows[0], "bounds": {"x": 1}}]),
             "point 0: Bounds.from_dict: no key kernel: not a `run --bounds-only --json` "
             "object")):
        with pytest.raises(errors.ArgumentError) as info:
            kb.SweepResult.from_rows(*args)
        assert str(info.value) == message
    fine = kb.SweepResult.from_rows("softmax", ["rows"], [{**rows[0], "axis_numbers": None}])
    assert fine.points[0].numbers == {"rows": 8, "cols": 64, "block": 8}


def test_results_pickle_and_deep_copy_as_their_json():
    """A `Result`, `SweepResult` or `Comparison` crosses a process boundary (pickle) and
    deep-copies as the JSON it reports: the copy equals it and says the same `to_dict()`;
    a result's live `raw` stays behind (a deep copy of a simulator is not one), its race
    lines go along; `copy.copy` is the object itself (it is read-only)."""
    import copy
    import pickle

    result = kb.run("softmax", ONE, params={"rows": 8, "cols": 64, "block": 8})
    sweep = kb.sweep("softmax", ONE, params={"rows": [8, 16], "cols": 64, "block": 8},
                     timing_only=True)
    comparison = kb.compare(result, sweep)
    for made in (result, sweep, comparison):
        for again in (pickle.loads(pickle.dumps(made)), copy.deepcopy(made)):
            assert type(again) is type(made) and again is not made and again == made
            dicts = (again.to_dicts(), made.to_dicts()) if made is sweep else \
                (again.to_dict(), made.to_dict())
            assert dicts[0] == dicts[1]
        assert copy.copy(made) is made
    again = pickle.loads(pickle.dumps(result))
    assert result.raw is not None and (again.raw, again.address_map) == (None, None)
    assert again.race_lines == result.race_lines and again.outputs == {}
    # what they hand out too: read-only mappings, parts, points and bounds
    bounds = kb.bounds("softmax", ONE, params={"rows": 8, "cols": 64, "block": 8})
    for part in (result.params, result.engines, result.metrics, result.critical_path,
                 result.energy_pj, sweep.points[0], comparison.metrics, bounds):
        for again in (pickle.loads(pickle.dumps(part)), copy.deepcopy(part)):
            assert again == part
    outputs = pickle.loads(pickle.dumps(result.outputs))
    assert outputs.keys() == result.outputs.keys() and all(
        np.array_equal(outputs[k], result.outputs[k]) for k in outputs)
    with pytest.raises(TypeError):  # read-only, as a mapping proxy
        result.params["rows"] = 16
    # and, as a mapping proxy, a changed copy is a dict: for the next run's parameters
    params = dict(result.params)
    assert result.params | {"rows": 16} == {**params, "rows": 16}
    assert {"rows": 16, "extra": 1} | result.params == {**params, "extra": 1}
    assert result.params.copy() == params and type(result.params.copy()) is dict
    assert kb.run("softmax", ONE, params=result.params | {"rows": 16}).params["rows"] == 16


def test_a_loaded_kernel_and_topology_run_as_names_do():
    module, topology = kb.load_kernel("softmax"), kb.load_topology(ONE, set={"pe.math.lanes": 8})
    by_name = kb.run("softmax", topology=ONE, set={"pe.math.lanes": 8}, params={"rows": 8})
    assert kb.run(module, topology, params={"rows": 8}).to_dict() == by_name.to_dict()
    assert topology.num_pes == 1 and topology.pe.math.lanes == 8
    with pytest.raises(errors.KernbenchError, match="go to load_topology"):
        kb.run(module, topology, set={"pe.math.lanes": 16})


# ------------------------------------------------------------------ replay, compare

def test_a_replay_short_of_memory_is_an_error_naming_it(cli, tmp_path, monkeypatch):
    """The timing pass keeps the machine's memory floor in a replay as in a run: with
    the memory left reading 10 GiB of 24 at first, then 900 MiB (under the floor of 4%),
    `kb.replay` stops with a KernelError naming the replay, not a bare MemoryError."""
    trace = tmp_path / "run.trace"
    assert cli("run", "all_reduce", "-p", "bytes=4194304", "--timing-only", "--record",
               str(trace))[0] == 0  # a timing pass of a second or so: the watch ticks
    memory_low_after(monkeypatch, 2)
    with pytest.raises(errors.KernelError) as info:
        kb.replay(str(trace))
    assert str(info.value) == (f"replay of {trace}: this machine ran out of memory timing "
                               "54,784 commands on 16 PEs")


def test_replay_is_replay_json(cli, tmp_path):
    trace = tmp_path / "run.trace"
    assert cli("run", "softmax", "--timing-only", "--record", str(trace), "-p", "rows=64")[0] == 0
    expected = cli_json(cli, "replay", str(trace), "--set", "hbm.bandwidth=204.8GB/s")
    replayed = kb.replay(trace, set={"hbm.bandwidth": "204.8GB/s"})
    assert replayed.to_dict() == expected and replayed.kernel == "softmax (replay)"
    ran = kb.run("softmax", params={"rows": 64}, timing_only=True)
    in_memory = kb.replay(ran, set={"hbm.bandwidth": "204.8GB/s"})  # no file needed
    assert in_memory.to_dict() == expected
    assert kb.replay(ran).latency_ps == ran.latency_ps  # a replay gives the run's time
    with pytest.raises(errors.KernbenchError, match="holds no recording"):
        kb.replay(in_memory)


def test_compare_is_compare_json(cli, tmp_path):
    runs = []
    for n, bandwidth in enumerate(("409.6GB/s", "102.4GB/s")):
        result = kb.run("softmax", params={"rows": 64}, set={"hbm.bandwidth": bandwidth},
                        timing_only=True)
        (tmp_path / f"{n}.json").write_text(json.dumps(result.to_dict()))
        runs.append(result)
    expected = cli_json(cli, "compare", str(tmp_path / "0.json"), str(tmp_path / "1.json"))
    assert kb.compare(*runs, labels=["0.json", "1.json"]).to_dict() == expected
    assert kb.compare(tmp_path / "0.json", runs[1].to_dict()).to_dict()["metrics"] == \
        expected["metrics"]
    comparison = kb.compare(*runs)
    assert comparison.runs == ("#0 hbm.bandwidth=409.6GB/s", "#1 hbm.bandwidth=102.4GB/s")
    assert comparison.delta_pct["latency_ps"][0] == 0.0
    rows = comparison.table()
    assert {"metric": "latency_ps", "run": comparison.runs[1],
            "value": runs[1].latency_ps,
            "delta_pct": comparison.delta_pct["latency_ps"][1]} in rows


# ------------------------------------------------------------------ sweeps

SWEEP_SETS = {"pe.gemm.cols": [16, 32], "pe.dma.setup_overlap": [True, False],
              "hbm.bandwidth": ["409.6GB/s", "204.8GB/s"]}
SWEEP_CLI = ("--set", "pe.gemm.cols=16,32", "--set", "pe.dma.setup_overlap=true,false",
             "--set", "hbm.bandwidth=409.6GB/s,204.8GB/s", "-p", "eps=1e-06,1e-05",
             "-p", "rows=8", "-p", "cols=64")


def test_sweep_axes_keep_their_toml_types(cli):
    swept = kb.sweep("rmsnorm", topology=ONE, set=SWEEP_SETS,
                     params={"eps": [1e-6, 1e-5], "rows": 8, "cols": 64}, zip=True, jobs=2)
    assert [dict(p.axes) for p in swept.points] == [
        {"pe.gemm.cols": 16, "pe.dma.setup_overlap": True, "hbm.bandwidth": "409.6GB/s",
         "eps": 1e-6, "rows": 8, "cols": 64},
        {"pe.gemm.cols": 32, "pe.dma.setup_overlap": False, "hbm.bandwidth": "204.8GB/s",
         "eps": 1e-5, "rows": 8, "cols": 64}]
    assert type(swept.points[0].axes["pe.gemm.cols"]) is int
    assert type(swept.points[0].axes["eps"]) is float
    assert swept.to_dicts() == json.loads(cli("sweep", "rmsnorm", "-t", ONE, "--zip",
                                              "--jobs", "2", *SWEEP_CLI, "--json")[1])
    point = swept.points[1]
    assert point.error is None and point.result.params["eps"] == 1e-5
    assert point.result.overrides == ("pe.gemm.cols=32", "pe.dma.setup_overlap=false",
                                      "hbm.bandwidth=204.8GB/s")
    row = swept.table()[1]
    assert row["pe.gemm.cols"] == 32 and row["latency_ps"] == point.result.latency_ps
    assert row["verified"] is True and row["error"] is None
    swept.check()  # nothing failed


def test_sweep_axis_over_a_str_parameter_keeps_the_text_the_kernel_got(tmp_path):
    kernel = tmp_path / "named.py"
    kernel.write_text((TESTS / "kernels" / "load_dot.py").read_text().replace(
        'PARAMS = {"n": 1}', 'PARAMS = {"n": 1, "s": "hello"}'))
    out = tmp_path / "rows.jsonl"
    swept = kb.sweep(kernel, topology=ONE, params={"s": ["12", "true", "nan", " pad "]},
                     timing_only=True, jobs=2, out=out)
    ran = [p.result.params["s"] for p in swept.points]
    assert ran == ["12", "true", "nan", "pad"]
    assert [p.axes["s"] for p in swept.points] == ran
    assert [row["s"] for row in swept.table()] == ran
    assert [p.axes["s"] for p in kb.load_sweep(out).points] == ran
    bounded = kb.SweepResult.from_rows("named", ["s"], [
        {**row, "result": None} for row in swept.to_dicts()])  # no point states its params
    assert [p.axes["s"] for p in bounded.points][:2] == [12, True]


def test_numpy_scalars_are_taken_as_their_values(tmp_path):
    kernel = tmp_path / "numpy_scalars.py"
    kernel.write_text((TESTS / "kernels" / "bounded.py").read_text().replace(
        'return {"floor": (p["floor_ps"], "as given"), "zero": (0, "nothing")}',
        'return {"floor": (np.int64(p["floor_ps"]), "as given")}') + (
        "\nimport numpy as np\n\n\ndef metrics(topology, p, run):\n"
        "    return {'count': (np.int64(7), 'n'), 'share': (np.float32(0.5), 'x')}\n"))
    result = kb.run(kernel, ONE, params={"floor_ps": np.int64(1000)}, timing_only=True)
    assert result.params["floor_ps"] == 1000
    assert [(v, type(v)) for v in result.metrics.values()] == [(7, int), (0.5, float)]
    assert (result.lower_bound, result.lower_bound_ps) == ("floor", 1000)
    bounds = kb.bounds(kernel, ONE, params={"floor_ps": np.int64(20)})
    assert dict(bounds.bounds_ps) == {"floor": 20}


def test_a_path_names_a_file_parameter_as_its_text():
    config = TESTS / "configs" / "hf" / "llama.json"
    by_path = kb.bounds("llama_decode", params={"config": config, "context": 5})
    assert by_path.params["config"] == str(config)
    assert by_path == kb.bounds("llama_decode", params={"config": str(config), "context": 5})


def test_sweep_from_cli_items_types_the_same(tmp_path):
    out = tmp_path / "rows.csv"
    swept = kb.sweep(TESTS / "kernels" / "load_dot.py", topology=ONE,
                     set=["costs.issue.load=4ns,10ns", "pe.gemm.rows=8"], timing_only=True,
                     jobs=1, out=out)
    assert [p.axes["pe.gemm.rows"] for p in swept.points] == [8, 8]
    assert [p.replayed for p in swept.points] == [True, True]  # cost-only: recorded once
    again = kb.sweep(TESTS / "kernels" / "load_dot.py", topology=ONE,
                     set={"costs.issue.load": ["4ns", "10ns"], "pe.gemm.rows": 8},
                     timing_only=True, out=out, resume=True)
    assert again.points[0].result is None  # a .csv keeps the summary columns only
    assert [r["latency_ps"] for r in again.table()] == [r["latency_ps"] for r in swept.table()]
    assert [dict(p.axes) for p in again.points] == [dict(p.axes) for p in swept.points]


def test_a_failed_point_is_a_point_and_check_raises_the_clis_error(cli):
    swept = kb.sweep("softmax", topology=ONE, set={"pe.gemm.rows": [8, -1]},
                     params={"rows": 8}, timing_only=True, jobs=2)
    assert swept.points[0].error is None and swept.points[1].result is None
    assert "pe.gemm.rows" in swept.points[1].error
    code, lines = cli_error(cli, "sweep", "softmax", "-t", ONE, "--set", "pe.gemm.rows=8,-1",
                            "-p", "rows=8", "--timing-only", "--jobs", "2")
    with pytest.raises(errors.SweepError) as raised:
        swept.check()
    assert (raised.value.exit_code, raised.value.lines()) == (code, lines)


# ------------------------------------------------------------------ errors

KERNEL_FAILS = """\
import numpy as np
PARAMS = {}
def setup(host, p):
    return {}
def kernel(tl):
    tl.cycles(1)
def reference(host, p):
    return {"out": np.ones(4, np.float32)}
def outputs(host, args, p):
    return {"out": np.zeros(4, np.float32)}
"""


def _api_call(case: str, tmp_path: Path):
    wrong = tmp_path / "wrong.py"
    wrong.write_text(KERNEL_FAILS)
    return {
        "unknown kernel": (lambda: kb.run("nope"), ("run", "nope")),
        "unknown parameter": (lambda: kb.run("softmax", params={"colz": 4}),
                              ("run", "softmax", "-p", "colz=4")),
        "bad parameter": (lambda: kb.run("softmax", params={"rows": "many"}),
                          ("run", "softmax", "-p", "rows=many")),
        "bad --set key": (lambda: kb.run("softmax", set={"hbm.bandwith": "204.8GB/s"}),
                          ("run", "softmax", "--set", "hbm.bandwith=204.8GB/s")),
        "bad --set value": (lambda: kb.run("softmax", set={"pe.gemm.rows": "many"}),
                            ("run", "softmax", "--set", "pe.gemm.rows=many")),
        "unknown topology": (lambda: kb.run("softmax", topology="nope"),
                             ("run", "softmax", "-t", "nope")),
        "kernel raises": (lambda: kb.run(TESTS / "kernels" / "raises.py", topology=PAIR),
                          ("run", str(TESTS / "kernels" / "raises.py"), "-t", PAIR)),
        "verification": (lambda: kb.run(wrong, topology=ONE), ("run", str(wrong), "-t", ONE)),
        "no trace": (lambda: kb.replay(tmp_path / "none.trace"),
                     ("replay", str(tmp_path / "none.trace"))),
        "sweep axes": (lambda: kb.sweep("softmax", set=["pe.gemm.rows=4,,8"]),
                       ("sweep", "softmax", "--set", "pe.gemm.rows=4,,8")),
        "one run": (lambda: kb.compare(tmp_path / "none.json"),
                    ("compare", str(tmp_path / "none.json"))),
    }[case]


@pytest.mark.parametrize("case", ["unknown kernel", "unknown parameter", "bad parameter",
                                  "bad --set key", "bad --set value", "unknown topology",
                                  "kernel raises", "verification", "no trace", "sweep axes",
                                  "one run"])
def test_errors_are_the_clis(cli, tmp_path, case):
    """The exception class the CLI turns into its message and exit code, with the very
    lines it prints after ``error: ``."""
    call, args = _api_call(case, tmp_path)
    code, lines = cli_error(cli, *args)
    with pytest.raises(errors.KernbenchError) as raised:
        call()
    assert raised.value.lines() == lines
    assert raised.value.exit_code == code
    expected = {"unknown kernel": errors.ParamError, "bad --set key": errors.ConfigError,
                "kernel raises": errors.KernelError,
                "verification": errors.VerificationError}.get(case)
    if expected is not None:
        assert type(raised.value) is expected


def test_a_failed_verification_keeps_its_result(tmp_path):
    wrong = tmp_path / "wrong.py"
    wrong.write_text(KERNEL_FAILS)
    with pytest.raises(errors.VerificationError) as raised:
        kb.run(wrong, topology=ONE)
    assert raised.value.result.verified is False
    assert str(raised.value) == ("wrong: verification failed: out max |err| 1 exceeds atol 1e-05 "
                                 "+ rtol 1e-05")
    unchecked = kb.run(wrong, topology=ONE, check=False)
    assert unchecked.checks[0].max_abs_err == 1.0 and not unchecked.checks[0].passed


def test_api_only_arguments_are_checked():
    with pytest.raises(errors.ParamError, match="seed=-1"):
        kb.run("softmax", seed=-1)
    # a result holds its seed, read back as JSON (64 bits): refused before the run, not
    # after it as a result that cannot be read
    for call in (lambda: kb.run("softmax", seed=2**64),
                 lambda: kb.sweep("softmax", params={"rows": [8, 16]}, seed=2**64)):
        with pytest.raises(errors.ParamError) as raised:
            call()
        assert str(raised.value) == "seed=18446744073709551616: needs an integer from 0 to " \
                                    "2^64 - 1"
    with pytest.raises(errors.ParamError, match="parameter rows"):
        kb.run("softmax", params={"rows": [1, 2]})
    with pytest.raises(errors.ConfigError, match="not a TOML value"):
        kb.run("softmax", set={"pe.gemm.rows": object()})
    with pytest.raises(errors.KernbenchError, match=r"--kernel-timeout 0\.0001"):
        kb.run("softmax", kernel_timeout=0.0001)


WRONG_TYPES = [  # (call, exception, message): every public function checks its arguments
    (lambda r: kb.run(None), errors.ArgumentError,
     "kernel=None: expected a kernel name or .py path, got NoneType"),
    (lambda r: kb.run("softmax", 5), errors.ArgumentError,
     "topology=5: expected a topology name, a TOML path or a kb.load_topology Topology, got int"),
    (lambda r: kb.run("softmax", costs=5), errors.ArgumentError,
     "costs=5: expected a path (a str or pathlib.Path), got int"),
    (lambda r: kb.run("softmax", costs=[1]), errors.ArgumentError,
     "costs=[1]: expected a path (a str or pathlib.Path), got list"),
    (lambda r: kb.run("softmax", timing_only="yes"), errors.ArgumentError,
     "timing_only='yes': expected True or False, got str"),
    (lambda r: kb.run("softmax", kernel_timeout="1"), errors.ArgumentError,
     "kernel_timeout='1': expected a number, got str"),
    (lambda r: kb.run("softmax", watch=5), errors.ArgumentError,
     "watch=5: expected a kernbench_cli.sim.watch.Watch (or None), got int"),
    (lambda r: kb.replay(5), errors.ArgumentError,
     "trace=5: expected a trace file, a kb.load_trace trace or a Result of kb.run, got int"),
    (lambda r: kb.replay(b"t.trace"), errors.ArgumentError,
     "trace=b't.trace': expected a trace file, a kb.load_trace trace or a Result of kb.run, "
     "got bytes"),
    (lambda r: kb.replay(r, costs=5), errors.ArgumentError,
     "costs=5: expected a path (a str or pathlib.Path), got int"),
    (lambda r: kb.replay(r, per_pe="x"), errors.ArgumentError,
     "per_pe='x': expected True or False, got str"),
    (lambda r: kb.load_trace(5), errors.ArgumentError,
     "path=5: expected a path (a str or pathlib.Path), got int"),
    (lambda r: kb.load_trace(None), errors.ArgumentError,
     "path=None: expected a path (a str or pathlib.Path), got NoneType"),
    (lambda r: kb.load_topology(5), errors.ArgumentError,
     "topology=5: expected a topology name or TOML path (or None), got int"),
    (lambda r: kb.load_topology(trace=5), errors.ArgumentError,
     "trace=5: expected a trace file, a kb.load_trace trace or a Result of kb.run, got int"),
    (lambda r: kb.load_kernel(3.5), errors.ArgumentError,
     "kernel=3.5: expected a kernel name or .py path, got float"),
    (lambda r: kb.sensitivity(5), errors.ArgumentError,
     "result=5: expected a Result of kb.run or kb.replay, got int"),
    (lambda r: kb.sensitivity(r, keys="hbm.bandwidth"), errors.ArgumentError,
     "keys='hbm.bandwidth': expected None or a tuple of keys, such as ('hbm.bandwidth',), got "
     "str"),
    (lambda r: kb.sensitivity(r, keys=5), errors.ArgumentError,
     "keys=5: expected None or a tuple of keys, such as ('hbm.bandwidth',), got int"),
    (lambda r: kb.Result.from_dict(5), errors.ArgumentError,
     "Result.from_dict: data=5: expected a `run --json` object (a dict), got int"),
    (lambda r: kb.Result.from_dict({}), errors.ArgumentError,
     "Result.from_dict: no key kernel: not a `run --json` object"),
    (lambda r: kb.Result.from_dict({**r.to_dict(), "latency_ps": "9"}), errors.ArgumentError,
     "Result.from_dict: latency_ps: expected int, got '9'"),
    (lambda r: kb.Result.from_dict({**r.to_dict(), "engines": {"gemm": {}}}),
     errors.ArgumentError,
     "Result.from_dict: no key engines['gemm'].instances: not a `run --json` object"),
    (lambda r: kb.Result.from_dict({**r.to_dict(), "checks": [{"kind": 1}]}),
     errors.ArgumentError, "Result.from_dict: checks[0].kind: expected str, got 1"),
    (lambda r: kb.Result.from_dict({**r.to_dict(), "seed": object()}), errors.ArgumentError,
     "Result.from_dict: not JSON data (Object of type object is not JSON serializable)"),
    (lambda r: kb.run(np.array([1, 2])), errors.ArgumentError,
     "kernel=array([1, 2]): expected a kernel name or .py path, got ndarray"),
    (lambda r: kb.load_sweep(np.array(["a", "b"])), errors.ArgumentError,
     "path=array(['a', 'b'], dtype='<U1'): expected a path (a str or pathlib.Path), got "
     "ndarray"),
    (lambda r: kb.run("softmax", params=b"rows=8"), errors.ParamError,
     "params=b'rows=8': expected a mapping of name: value (or a list of name=value items)"),
    (lambda r: kb.run("softmax", set=b"x"), errors.ConfigError,
     "set=b'x': expected a mapping of key: value (or a list of KEY=VALUE items)"),
    (lambda r: kb.sweep("softmax", params=b"x"), errors.ParamError,
     "-p: expected a mapping of key: values, or KEY=V1,V2,… items; got bytes"),
    (lambda r: kb.run("softmax", params={" rows": 8}), errors.ParamError,
     "params: key ' rows' is not a parameter name"),
    (lambda r: kb.run("softmax", params={"rows=8": 8}), errors.ParamError,
     "params: key 'rows=8' is not a parameter name"),
    (lambda r: kb.sweep(5), errors.ArgumentError,
     "kernel=5: expected a kernel name or .py path, got int"),
    (lambda r: kb.sweep("softmax", out=5), errors.ArgumentError,
     "out=5: expected a path (a str or pathlib.Path), got int"),
    (lambda r: kb.sweep("softmax", on_row=5), errors.ArgumentError,
     "on_row=5: expected a function (or None), got int"),
    (lambda r: kb.sweep("softmax", pair=5), errors.ArgumentError,
     "pair=5: expected a list of axis groups, each 'KEY,KEY' or a list of keys, got int"),
    (lambda r: kb.sweep("softmax", dask=8786), errors.ArgumentError,
     "dask=8786: expected a scheduler address such as tcp://HOST:8786 (or None), got int"),
    (lambda r: kb.sweep("softmax", jobs="2"), errors.ArgumentError,
     "jobs='2': expected an int (1 to 1024) or None, got str"),
    (lambda r: kb.load_sweep(None), errors.ArgumentError,
     "path=None: expected a path (a str or pathlib.Path), got NoneType"),
    (lambda r: kb.load_sweep(5), errors.ArgumentError,
     "path=5: expected a path (a str or pathlib.Path), got int"),
    (lambda r: kb.SweepResult.from_rows("softmax", (), ()).plot(5), errors.ArgumentError,
     "path=5: expected a path (a str or pathlib.Path), got int"),
    (lambda r: kb.SweepResult.from_rows("softmax", (), ()).plot("x.png", y=None),
     errors.ArgumentError, "y=None: expected a metric name (a str), got NoneType"),
    (lambda r: kb.SweepResult.from_rows("softmax", (), ()).plot("x.png", x="rows"),
     errors.KernbenchError, "x 'rows': not a swept axis (axes: none)"),
    (lambda r: kb.SweepResult.from_rows("softmax", (), ()).plot("x.png", y="speed"),
     errors.KernbenchError, "y 'speed': not a metric of these points; one of latency, "
     "gemm_mac_utilization, hbm_gbps, energy, power, perf_per_watt"),
    (lambda r: kb.compare(r, r, labels=5), errors.ArgumentError,
     "labels=5: expected None or a list of labels (strings), got int"),
    (lambda r: kb.compare(r, {"latency_ps": object()}), errors.ArgumentError,
     "run 1: not JSON data (Object of type object is not JSON serializable)"),
]


def test_an_output_ending_in_a_slash_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(errors.KernbenchError) as raised:
        kb.sweep("softmax", params={"rows": [8, 16]}, timing_only=True, out="r.jsonl/")
    assert str(raised.value) == "out r.jsonl/: ends in '/', so it names a folder; give a file name"
    with pytest.raises(errors.KernbenchError) as raised:
        kb.SweepResult.from_rows("softmax", (), ()).plot("f.png/")
    assert str(raised.value) == "path f.png/: ends in '/', so it names a folder; give a file name"
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def small_result():
    return kb.run("softmax", topology=ONE, params={"rows": 8}, timing_only=True)


@pytest.mark.parametrize(("call", "raised", "message"), WRONG_TYPES,
                         ids=[m[:40] for _, _, m in WRONG_TYPES])
def test_a_wrong_typed_argument_is_the_documented_error_in_one_line(small_result, call, raised,
                                                                   message):
    """Not a TypeError, AttributeError or KeyError from deep inside: the `KernbenchError`
    subclass docs/api.md names, its message naming the argument, the value and what it
    takes; exit code 2, as a bad option."""
    with pytest.raises(errors.KernbenchError) as caught:
        call(small_result)
    assert type(caught.value) is raised
    assert caught.value.lines() == [message]
    assert caught.value.exit_code == 2


# ------------------------------------------------------------------ pandas, imports

def test_to_pandas_without_pandas_says_how_to_get_it(monkeypatch):
    result = kb.Result.from_dict(kb.run("softmax", topology=ONE, params={"rows": 8},
                                        timing_only=True).to_dict())
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if not installed
    for call in (result.to_pandas, kb.compare(result, result).to_pandas):
        with pytest.raises(ImportError, match="pip install pandas") as raised:
            call()
        assert isinstance(raised.value, kb.PandasMissing | errors.KernbenchError)
    tables = result.tables()  # the records need no pandas
    assert [row["engine"] for row in tables["engines"]] == list(result.engines)
    assert tables["summary"][0]["latency_ps"] == result.latency_ps


def test_to_pandas_gives_data_frames():
    pd = pytest.importorskip("pandas")
    result = kb.run("softmax", topology=ONE, params={"rows": 8}, timing_only=True)
    frames = result.to_pandas()
    assert isinstance(frames["engines"], pd.DataFrame)
    assert list(frames["engines"]["engine"]) == list(result.engines)
    assert frames["summary"]["latency_ps"][0] == result.latency_ps
    swept = kb.sweep("softmax", topology=ONE, set={"pe.gemm.cols": [16, 32]},
                     params={"rows": 8}, timing_only=True, jobs=2)
    table = swept.to_pandas()
    assert str(table["pe.gemm.cols"].dtype) == "int64" and list(table.index) == [0, 1]


def test_import_is_light_and_names_are_lazy():
    probe = (
        "import sys\n"
        "import kernbench_cli as kb\n"
        "heavy = {'numpy', 'simpy', 'greenlet', 'ml_dtypes', 'rich', 'pandas', 'typer'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"
        "kb.Result, kb.SweepResult, kb.Comparison\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n"
        "import kernbench_cli.explore.sweep\n"
        "print(callable(kb.sweep) and kb.sweep.__module__, 'run' in dir(kb))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out == ["[]", "[]", "kernbench_cli.api.sweeps True"]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        kb.nope  # noqa: B018


def test_a_message_past_two_thousand_characters_keeps_its_head_and_tail():
    """A path of 100,000 characters through the API (the CLI's argv cannot carry one): the
    message shows its start, its length and its end (what went wrong), not all of it."""
    with pytest.raises(errors.KernbenchError) as raised:
        kb.load_trace("a" * 100000)
    text = str(raised.value)
    assert len(text) <= errors.MESSAGE_MOST and "… (100," in text
    assert text.startswith("a" * 100) and text.endswith(": cannot read: File name too long")


def _kernel_with_helper(folder: Path, wait: int) -> Path:
    """A kernel in `folder` that waits `helper.WAIT` ns on PE 0, `helper.py` beside it."""
    folder.mkdir()
    (folder / "helper.py").write_text(f"WAIT = {wait}\n")
    kernel = folder / "k.py"
    kernel.write_text("import helper\n\nPARAMS = {}\n\n\ndef setup(host, p):\n    return {}\n\n\n"
                      "def kernel(tl):\n    if tl.pid == 0:\n        tl.cycles(helper.WAIT)\n\n\n"
                      "def reference(host, p):\n    return {}\n\n\n"
                      "def outputs(host, args, p):\n    return {}\n")
    return kernel


def test_a_kernels_helpers_are_its_own_on_every_run_in_one_process(tmp_path, monkeypatch):
    """Two kernels each with a `helper.py` beside it, and a helper edited between runs: each
    run imports the helpers beside its kernel as they are (in a fresh process alike), the
    kernel digest names them, and neither the caller's own `helper` nor a later run sees
    another's."""
    first, second = (_kernel_with_helper(tmp_path / name, wait)
                     for name, wait in (("a", 1000), ("b", 5000)))
    caller = tmp_path / "caller"
    caller.mkdir()
    (caller / "helper.py").write_text("WAIT = 7\n")
    monkeypatch.syspath_prepend(str(caller))
    import helper  # the caller's own module of that name

    def latency(kernel: Path) -> tuple[float, str]:
        result = kb.run(str(kernel), timing_only=True)
        return result.latency_ps, result.kernel_digest

    a, digest_a = latency(first)
    assert (a, latency(second)[0]) == (1_000_000, 5_000_000)
    (first.parent / "helper.py").write_text("WAIT = 3000\n")
    again, digest_again = latency(first)
    assert again == 3_000_000 and digest_again != digest_a
    assert sys.modules["helper"] is helper and helper.WAIT == 7


@pytest.mark.parametrize("kernel", ["deadlock.py", "raises_while_waited.py"])
def test_a_run_that_fails_with_a_pe_waiting_frees_its_system(kernel):
    """A PE left waiting in a receive (a deadlock; a PE that failed while another waited on
    it) kept its greenlet suspended, and with it the run's whole system, for the life of
    the process: some 100 MB a failed `rack` run, in a notebook."""
    import gc

    from kernbench_cli.hw.system import System

    def systems() -> int:
        gc.collect()
        return sum(isinstance(o, System) for o in gc.get_objects())

    before = systems()
    for _ in range(3):
        with pytest.raises(kb.KernbenchError):
            kb.run(TESTS / "kernels" / kernel, topology=PAIR)
    guard = time.monotonic() + 30  # the last run's watchdog thread ends within a tick
    while systems() > before and time.monotonic() < guard:
        time.sleep(0.05)
    assert systems() <= before  # (one an earlier test left may be freed meanwhile)


def test_state_a_kernel_leaves_on_its_tl_class_dies_with_the_run():
    """`tests/kernels/leaky.py` counts its runs on `type(tl)` and waits 1000 cycles more each
    run: in one process the runs drifted (1, 17, 33 us), where a fresh process (the CLI, a
    sweep's point) gives 1 us every time. Each launch has a `tl` class of its own."""
    kernel = TESTS / "kernels" / "leaky.py"
    assert [kb.run(kernel, topology=ONE, timing_only=True).latency_ps for _ in range(3)] == \
        [1_000_000] * 3


def test_results_hash_as_they_compare():
    """`hash(result)` raised "unhashable type: 'ReadOnly'" (a frozen dataclass promises a
    hash): a result as a dict key or in a set, in a sweep driver. Equal results hash alike."""
    first, again = (kb.run("softmax", topology=ONE, timing_only=True) for _ in range(2))
    other = kb.run("softmax", topology=ONE, timing_only=True, set={"pe.math.lanes": 8})
    assert first == again and hash(first) == hash(again) and len({first, again, other}) == 2
    assert hash(kb.bounds("all_reduce")) == hash(kb.bounds("all_reduce"))
