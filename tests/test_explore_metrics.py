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

from .conftest import TESTS, test_topology

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
        "replayed", "metrics.energy_per_item_uj", "metrics.extra", "metrics.items_per_s",
        "metrics.time_per_item_ps")
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
                        "gemm_mac_utilization,hbm_gbps,energy_pj,error,sweep,"
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
