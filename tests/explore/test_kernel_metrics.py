"""A kernel's own metrics (its `metrics()`) and the axes' numbers in exploration: sweep tables
and results files, `to_pandas`, compare rows, plots, and `kernbench plot` redrawing a finished
sweep without running it again."""

from __future__ import annotations

import json

import pytest

import kernbench_cli as kb
from kernbench_cli.config.units import quantity
from kernbench_cli.explore.sweep import axis_number
from kernbench_cli.report import metrics
from tests.conftest import TESTS, test_topology

ONE = test_topology("one")
METERED = str(TESTS / "kernels" / "metered.py")
#: two points: the bandwidths in an order their text does not sort in, `extra` 0 then 3 (the
#: second point states one metric more)
SETS = {"hbm.bandwidth": ["51.2GB/s", "102.4GB/s"]}
PARAMS = {"extra": [0, 3]}
CLI_AXES = ("-t", ONE, "--set", "hbm.bandwidth=51.2GB/s,102.4GB/s", "-p", "extra=0,3", "--zip",
            "--jobs", "2")
LATENCY_PS = (585_715, 542_858)  # the two points' latencies


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The two-point sweep, its .jsonl written."""
    out = tmp_path_factory.mktemp("swept") / "r.jsonl"
    result = kb.sweep(METERED, topology=ONE, set=SETS, params=PARAMS, zip=True, jobs=2, out=out)
    return result, out


# ------------------------------------------------------------------ axis numbers

@pytest.mark.parametrize(("text", "number", "unit"), [
    ("102.4GB/s", 102_400_000_000, "B/s"), ("512MB/s", 512_000_000, "B/s"),
    ("30ns", 30_000, "ps"), ("1.5GHz", 1_500_000_000, "Hz"), ("64KiB", 65_536, "B"),
    ("0.11pJ", 110_000, "aJ"), ("50mW", 50_000, "uW"), ("16", 16, ""), ("0.5", 0.5, ""),
    ("x0.5", 0.5, "x"), ("x2", 2, "x"), ("ws", None, None), ("true", None, None),
    ("[4, 2]", None, None), ("inf", None, None), ("1e999999999ns", None, None)])
def test_an_axis_value_as_a_number_in_its_stored_unit(text, number, unit):
    got = axis_number(text)
    assert got == (number, unit) and type(got[0]) is type(number)


def test_a_quantity_not_whole_in_its_stored_unit_is_a_float():
    assert quantity("0.5ps") == (0.5, "ps") and quantity("GB/s") is None


def test_the_jsonl_rows_and_the_table_carry_the_numbers(swept):
    """Each row's `axis_numbers` and `axis_units` beside the text given; `table()` and
    `to_pandas()` have a `KEY:number` column, so a sort orders by the quantity."""
    result, out = swept
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["axes"], r["axis_numbers"], r["axis_units"]) for r in rows] == [
        ({"hbm.bandwidth": "51.2GB/s", "extra": "0"}, {"hbm.bandwidth": 51_200_000_000,
                                                       "extra": 0},
         {"hbm.bandwidth": "B/s", "extra": ""}),
        ({"hbm.bandwidth": "102.4GB/s", "extra": "3"}, {"hbm.bandwidth": 102_400_000_000,
                                                        "extra": 3},
         {"hbm.bandwidth": "B/s", "extra": ""})]
    assert [r["axis_numbers"] for r in result.to_dicts()] == [r["axis_numbers"] for r in rows]
    assert dict(result.points[1].numbers) == {"hbm.bandwidth": 102_400_000_000, "extra": 3}
    assert dict(result.points[1].units) == {"hbm.bandwidth": "B/s", "extra": ""}
    pd = pytest.importorskip("pandas")
    table = result.to_pandas()
    assert isinstance(table, pd.DataFrame)
    assert str(table["hbm.bandwidth:number"].dtype) == "int64"
    assert table.sort_values("hbm.bandwidth")["hbm.bandwidth"].tolist() == [
        "102.4GB/s", "51.2GB/s"]  # the text sorts wrong
    assert table.sort_values("hbm.bandwidth:number")["hbm.bandwidth"].tolist() == [
        "51.2GB/s", "102.4GB/s"]


def test_rows_resumed_from_an_older_file_get_their_numbers(swept, tmp_path):
    """A .jsonl written before the numbers were: its rows get them when resumed."""
    result, out = swept
    old = tmp_path / "old.jsonl"
    old.write_text("".join(
        json.dumps({k: v for k, v in json.loads(line).items()
                    if k not in ("axis_numbers", "axis_units")}, sort_keys=True) + "\n"
        for line in out.read_text().splitlines()))
    again = kb.sweep(METERED, topology=ONE, set=SETS, params=PARAMS, zip=True, out=old,
                     resume=True)
    assert [dict(p.numbers) for p in again.points] == [dict(p.numbers) for p in result.points]


# ------------------------------------------------------------------ metric columns

def test_the_kernels_metrics_are_columns_of_the_table(swept):
    """Every metric any point states, sorted, as ``metrics.NAME`` after the summary columns;
    None where a point states none; the values are the run's own."""
    result, _ = swept
    assert result.metrics == ("energy_per_item_uj", "extra", "items_per_s", "time_per_item_ps")
    assert result.columns() == (
        "point", "hbm.bandwidth", "extra", "hbm.bandwidth:number", "extra:number", "latency_ps",
        "latency_ns", "bound", "verified", "gemm_mac_utilization", "hbm_gbps", "error",
        "replayed", "lower_bound_ps", "bound_gap", "pruned", "metrics.energy_per_item_uj",
        "metrics.extra", "metrics.items_per_s", "metrics.time_per_item_ps")
    table = result.table()
    assert [r["metrics.time_per_item_ps"] for r in table] == [lat / 4 for lat in LATENCY_PS]
    assert [r["metrics.items_per_s"] for r in table] == [4e12 / lat for lat in LATENCY_PS]
    assert [r["metrics.extra"] for r in table] == [None, 3.0]
    assert [r["latency_ps"] for r in table] == list(LATENCY_PS)


def test_a_csv_results_file_gets_a_column_per_metric_and_resumes_them(tmp_path):
    """The second point states a metric the first does not: the file is rewritten with its
    column (the first row's cell empty); resumed, the metrics come back from it."""
    out = tmp_path / "r.csv"
    first = kb.sweep(METERED, topology=ONE, set=SETS, params=PARAMS, zip=True, jobs=2, out=out)
    lines = out.read_text().splitlines()
    assert lines[0] == ("point,hbm.bandwidth,extra,latency_ps,bound,verified,"
                        "gemm_mac_utilization,hbm_gbps,energy_pj,lower_bound_ps,bound_gap,"
                        "pruned,error,sweep,"
                        "metrics.energy_per_item_uj,metrics.extra,metrics.items_per_s,"
                        "metrics.time_per_item_ps")
    assert lines[1].split(",")[-4:] == ["0.213314925", "", repr(4e12 / LATENCY_PS[0]),
                                        "146428.75"]
    assert lines[2].split(",")[-3] == "3.0" and len(lines) == 3
    again = kb.sweep(METERED, topology=ONE, set=SETS, params=PARAMS, zip=True, out=out,
                     resume=True)
    assert again.points[0].result is None  # from the .csv: its columns only
    assert again.table() == first.table()


def test_the_printed_table_shows_the_metrics_with_their_units(cli, monkeypatch):
    """`--format md`: a column per metric after "vs first", named by its words, the unit
    in the cell (a `_ps` as a time, a `_uj` as an energy); a metric whose name is taken (an
    axis `extra`) by its JSON path. On a narrow terminal the metrics that are the same at
    every point go first."""
    code, out, _ = cli("sweep", METERED, *CLI_AXES, "--format", "md")
    assert code == 0
    assert out.splitlines()[2:] == [
        "| # | hbm.bandwidth | extra | latency | vs first | energy per item | metrics.extra "
        "| items per s | time per item | energy | power | bound by | GEMM MAC |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
        "| 0 | 51.2GB/s | 0 | 585.715ns | +0.0% | 213nJ | - | 6,829,260 | 146.429ns "
        "| 853nJ | 1.46 W | gemm | 43.7% |",
        "| 1 | 102.4GB/s | 3 | 542.858ns | -7.3% | 202nJ | 3 | 7,368,409 | 135.714ns "
        "| 810nJ | 1.49 W | gemm | 47.2% |"], out
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli("sweep", METERED, "-t", ONE, "-p", "extra=0,3", "--jobs", "2")
    assert code == 0
    assert ("energy per item, items per s, time per item and GEMM MAC left out to fit 80 "
            "columns" in " ".join(out.split()))


def test_units_read_from_a_metrics_name():
    assert [metrics.cell(n, v) for n, v in [
        ("tpot_ps", 1_234_567.0), ("t_us", 2.5), ("energy_per_token_uj", 3210.0),
        ("e_pj", 1.5), ("busbw_gbps", 12.345), ("power_w", 1.5), ("tokens_per_s", 77771.2),
        ("top1_agreement", 0.96875), ("logits_rel_l2", 0.000123456), ("tpot_ps", None)]] == [
        "1.235us", "2.5us", "3.21mJ", "1.50pJ", "12.35 GB/s", "1.5 W", "77,771", "0.9688",
        "0.0001235", "-"]
    assert metrics.heading("energy_per_token_uj") == "energy\nper\ntoken"
    assert metrics.axis("tpot_ps") == ("tpot (us)", 1e-6)
    assert metrics.axis("energy_per_token_uj") == ("energy per token (uJ)", 1.0)
    assert metrics.axis("top1_agreement") == ("top1 agreement", 1.0)
    assert metrics.headings(["latency_ps", "ttft_ps", "ttft_us"], ["latency"]) == {
        "latency_ps": "metrics.latency_ps", "ttft_ps": "metrics.ttft_ps",
        "ttft_us": "metrics.ttft_us"}


# ------------------------------------------------------------------ compare

def test_compare_has_a_row_per_metric(cli, swept):
    """`metrics.NAME` rows after the latency, with their change against the first run;
    the table names them by their words."""
    result, out = swept
    comparison = kb.compare(out)
    names = list(comparison.metrics)
    assert names[:5] == ["latency_ps", "metrics.energy_per_item_uj", "metrics.extra",
                         "metrics.items_per_s", "metrics.time_per_item_ps"]
    assert comparison.metrics["metrics.time_per_item_ps"] == (146_428.75, 135_714.5)
    assert comparison.delta_pct["metrics.time_per_item_ps"] == (
        0.0, round((135_714.5 - 146_428.75) / 146_428.75 * 100, 3))
    assert comparison.metrics["metrics.extra"] == (None, 3.0)
    assert kb.compare(result).metrics == comparison.metrics  # the same from the API
    code, text, _ = cli("compare", str(out), "--format", "md")
    assert code == 0
    assert "| time per item | 146.429ns | 135.714ns (-7.3%) |" in text.splitlines()
    assert "| metrics.extra | - | 3 |" in text.splitlines()  # "extra" is a setting's row


# ------------------------------------------------------------------ plots

def _row(point: int, bandwidth: str, latency_ps: int, **stated: float) -> dict:
    return {"point": point, "axes": {"hbm.bandwidth": bandwidth}, "error": None,
            "axis_numbers": {"hbm.bandwidth": quantity(bandwidth)[0]},
            "axis_units": {"hbm.bandwidth": "B/s"},
            "result": {"latency_ps": latency_ps, "engines": {}, "metrics": stated}}


def test_a_plot_of_a_metric_and_of_values_in_different_units():
    """--y a kernel's metric: its values in the axis's unit (a time in us); a point without
    it left out. Values in different units of one kind sit at their numbers (512MB/s left
    of 1GB/s), each tick labelled as given."""
    pytest.importorskip("matplotlib")
    from kernbench_cli.report.plot import figure

    rows = [_row(0, "512MB/s", 8_000_000, tpot_ps=8e6), _row(1, "1GB/s", 5_000_000),
            _row(2, "2GB/s", 4_000_000, tpot_ps=4e6)]
    for y in ("tpot_ps", "metrics.tpot_ps"):
        top = figure(rows, None, y, "k").axes[0]
        (line,) = top.get_lines()
        assert line.get_xydata().tolist() == [[512e6, 8.0], [2e9, 4.0]]
        assert top.get_ylabel() == "tpot (us)"
        assert [t.get_text() for t in top.get_xticklabels()] == ["512MB/s", "1GB/s", "2GB/s"]
        assert [t for t in top.get_xticks()] == [512e6, 1e9, 2e9]
        assert top.get_xlabel() == "hbm.bandwidth"  # no one unit to name


def test_plot_redraws_a_finished_sweep_as_the_sweep_drew_it(cli, tmp_path):
    """`kernbench plot RESULTS.jsonl` gives the SVG `sweep --plot` gave, byte for byte, and
    draws a metric the kernel states."""
    pytest.importorskip("matplotlib")
    out, drawn, again = tmp_path / "r.jsonl", tmp_path / "s.svg", tmp_path / "again.svg"
    code, _, _ = cli("sweep", METERED, "-t", ONE, "--set", "hbm.bandwidth=51.2GB/s,102.4GB/s",
                     "--jobs", "2", "--out", str(out), "--plot", str(drawn), "--y",
                     "time_per_item_ps")
    assert code == 0 and "time per item (us)" in drawn.read_text()
    code, text, err = cli("plot", str(out), "--y", "time_per_item_ps", "-o", str(again))
    assert (code, err) == (0, "")
    assert text == f"{again}: time_per_item_ps against hbm.bandwidth, 2 points\n"
    assert again.read_bytes() == drawn.read_bytes()
    code, _, _ = cli("plot", str(out))
    assert code == 0 and out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


def test_plot_errors_are_one_line_and_leave_no_figure(cli, swept, tmp_path):
    pytest.importorskip("matplotlib")
    _, out = swept
    foreign, empty, failed = tmp_path / "f.jsonl", tmp_path / "e.jsonl", tmp_path / "x.jsonl"
    foreign.write_text('{"latency_ps": 5}\n')
    empty.write_text("")
    failed.write_text(json.dumps({"point": 0, "axes": {"a": "1"}, "result": None,
                                  "error": "boom", "sweep": "s"}) + "\n")
    long = tmp_path / "l.jsonl"  # an axis value no sweep writes: the figure took minutes
    long.write_text(json.dumps({"point": 0, "axes": {"a": "1" * 5000}, "result": None,
                                "error": "boom", "sweep": "s"}) + "\n")
    figure = tmp_path / "fig.png"
    row = json.loads(out.read_text().splitlines()[0])
    name = next(iter(row["result"]["metrics"]))
    row["result"]["metrics"][name] = "x"
    bad = tmp_path / "b.jsonl"  # a result that is not one: which file and point
    bad.write_text(json.dumps(row) + "\n")
    binary = tmp_path / "t.jsonl"  # another file's first bytes (was read whole: "not text")
    binary.write_bytes(b"\x1f\x8b\x08" + b"\xff" * 4096)
    cases = [
        ((str(tmp_path / "none.jsonl"),), f"{tmp_path / 'none.jsonl'}: no such file"),
        ((str(foreign),), f"{foreign}:1: not a row of a sweep's .jsonl results file (a row "
                          "has point, axes, result and error)"),
        ((str(empty),), f"{empty}: no rows (an empty sweep): nothing to read"),
        ((str(binary),), f"{binary}:1: not a row of a sweep's .jsonl results file (a row "
                         "has point, axes, result and error)"),  # before it is read whole
        ((str(failed),), "no point has a result to plot: all 1 failed"),
        ((str(bad),), f"{bad}: point {row['point']}: Result.from_dict: metrics[{name!r}]: "
                      "expected float, got 'x'"),
        ((str(long),), f"{long}:1: axis 'a': a key or value of more than 256 characters; "
                       "not a row a sweep writes"),
        ((str(out), "--x", "hbm.latency"),
         "--x 'hbm.latency': not a swept axis (axes: extra, hbm.bandwidth)"),
        ((str(out), "--y", "tpot_ps"),
         "--y 'tpot_ps': not a metric of these points; one of latency, gemm_mac_utilization, "
         "hbm_gbps, energy, power, perf_per_watt, energy_per_item_uj, extra, items_per_s, "
         "time_per_item_ps"),
        ((str(tmp_path / "r.csv"),), f"{tmp_path / 'r.csv'}: a .csv keeps only the summary "
                                     "columns; give the sweep's .jsonl (sweep --out "
                                     "FILE.jsonl)"),
    ]
    for args, message in cases:
        assert cli("plot", *args, "-o", str(figure)) == (2, "", f"error: {message}\n"), args
    assert cli("plot", str(out), "-o", str(tmp_path / "f.gif")) == (
        2, "", f"error: --out '{tmp_path / 'f.gif'}': the figure must end in .png, .svg, "
               ".pdf\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.jsonl", "e.jsonl", "f.jsonl",
                                                          "l.jsonl", "t.jsonl", "x.jsonl"]


def test_an_interrupted_plot_leaves_no_file(cli, swept, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    def cut(self, out, **kwargs):
        out.write(b"half a figure")
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", cut)
    _, out = swept
    code, _, err = cli("plot", str(out), "-o", str(tmp_path / "fig.svg"))
    assert (code, err) == (130, "interrupted\n")
    assert list(tmp_path.iterdir()) == []


def test_sweep_plot_of_a_metric_no_point_states(cli, tmp_path):
    """The kernel states metrics, so --y is checked once the points are known: the table
    and the results file first, then the one-line error; no figure."""
    pytest.importorskip("matplotlib")
    out, figure = tmp_path / "r.jsonl", tmp_path / "s.png"
    code, text, err = cli("sweep", METERED, "-t", ONE, "-p", "extra=0,3", "--jobs", "2",
                          "--out", str(out), "--plot", str(figure), "--y", "ttft_ps")
    assert code == 2 and "Sweep: 2 points" in text and out.is_file()
    assert err.splitlines()[-1].startswith("error: --y 'ttft_ps': not a metric of these "
                                           "points; one of latency,")
    assert not figure.exists()


def test_load_sweep_is_the_sweep(swept):
    result, out = swept
    loaded = kb.load_sweep(out)
    assert loaded.kernel == "metered" and loaded.axes == ("extra", "hbm.bandwidth")
    assert loaded.table() == [{k: r[k] for k in loaded.columns()} for r in result.table()]
