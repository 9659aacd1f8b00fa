"""`--set KEY=VALUE`: any topology or cost-table key from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernbench_cli.hw.network import transfer_ps
from tests.conftest import TESTS

LOAD_DOT = str(TESTS / "kernels" / "load_dot.py")


def _json(cli, *args):
    code, out, err = cli("run", LOAD_DOT, "--json", *args)
    assert (code, err) == (0, "")
    return json.loads(out)


def test_a_set_key_moves_the_run_as_the_formula_says(cli, amap):
    """load_dot: 4 ns issue, then setup + 4 KiB at the HBM stream rate (the peak less
    refresh) + HBM latency, then 376 ns of GEMM. Doubling the bandwidth and raising the load's
    issue cost move it exactly so."""
    topo = amap.topology
    base = _json(cli)
    faster = _json(cli, "--set", "hbm.bandwidth=204.8GB/s", "--set", "costs.issue.load=10ns")

    def latency(bandwidth, issue):
        rate = bandwidth * 3_640 // 3_900  # refresh: 260 ns of every 3.9 us
        return issue + topo.pe.dma.setup + transfer_ps(4096, rate) + topo.hbm.latency \
            + 376_000

    assert base["latency_ps"] == latency(topo.hbm.bandwidth, 4_000)
    assert faster["latency_ps"] == latency(204_800_000_000, 10_000)
    assert faster["overrides"] == ["hbm.bandwidth=204.8GB/s", "costs.issue.load=10ns"]
    assert base["overrides"] == []
    assert faster["topology"] == base["topology"] == "default"  # the name stays; the digest
    assert faster["topology_digest"] != base["topology_digest"]  # tells them apart
    assert faster["costs_digest"] != base["costs_digest"]


def test_the_digest_is_of_the_configuration_not_of_how_it_was_given(cli, write_topology):
    """A file saying hbm.bandwidth = 204.8GB/s and --set saying it give one digest."""
    from kernbench_cli.shipped import resolve_topology

    text = Path(resolve_topology("default")).read_text()
    text = "\n".join(line for line in text.splitlines() if not line.startswith("costs ="))
    text = text.replace('bandwidth = "102.4GB/s"', 'bandwidth = "204.8GB/s"')
    path = write_topology(system="", extra=text)
    from_file = _json(cli, "-t", str(path))
    from_set = _json(cli, "--set", "hbm.bandwidth=204.8GB/s")
    assert from_file["topology_digest"] == from_set["topology_digest"]
    assert from_file["latency_ps"] == from_set["latency_ps"]


def test_the_summary_names_the_overrides(cli):
    code, out, _ = cli("run", LOAD_DOT, "--set", "pe.gemm.rows=64")
    assert code == 0
    assert "\nset            pe.gemm.rows=64" in out


@pytest.mark.parametrize(("item", "message"), [
    ("hbm.bandwith=1GB/s", "--set hbm.bandwith=1GB/s: hbm.bandwith: unknown key; did you mean "
                           "'bandwidth'?"),
    ("hmb.bandwidth=1GB/s", "--set hmb.bandwidth=1GB/s: hmb: unknown key; did you mean 'hbm'?"),
    ("hbm.bandwidth=fast", "--set hbm.bandwidth=fast: hbm.bandwidth: expected a bandwidth such "
                           "as '64GB/s' (units: B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, "
                           "GiB/s, TiB/s), got 'fast'"),
    ("pe.gemm.rows=0", "--set pe.gemm.rows=0: pe.gemm.rows: expected a positive integer, got 0"),
    ("costs.issue.lod=1ns", "--set costs.issue.lod=1ns: costs.issue.lod: unknown key; did you "
                            "mean 'load'?"),
    ("costs.issue.load=-1ns", "--set costs.issue.load=-1ns: costs.issue.load: expected a time "
                              "such as '30ns' (units: ps, ns, us, µs, ms, s), got '-1ns'"),
    ("hbm", "--set 'hbm': expected KEY=VALUE, KEY a dotted TOML path (hbm.bandwidth=409.6GB/s, "
            "costs.issue.composite=80ns)"),
    ("name.x=1", "--set name.x=1: name is a value, not a table"),
    # a newline or a terminal escape is shown escaped: one line, printed as text
    ("hbm.bandwidth=1GB/s\nfoo=1", "--set hbm.bandwidth=1GB/s\\nfoo=1: hbm.bandwidth: "
     "expected a bandwidth such as '64GB/s' (units: B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, "
     "MiB/s, GiB/s, TiB/s), got '1GB/s\\nfoo=1'"),
    ("hbm.band\x1b[2Jwidth=1GB/s", "--set hbm.band\\x1b[2Jwidth=1GB/s: hbm.band\\x1b[2Jwidth: "
     "unknown key; did you mean 'bandwidth'?"),
])
def test_a_bad_set_is_one_line_naming_the_key(cli, item, message):
    code, out, err = cli("run", LOAD_DOT, "--set", item)
    assert (code, out, err) == (2, "", f"error: {message}\n")


def test_topology_show_and_validate_take_sets(cli):
    code, out, _ = cli("topology", "show", "--toml", "--set", "pe.gemm.dataflow=ws")
    assert code == 0 and 'dataflow = "ws"' in out
    from kernbench_cli.shipped import resolve_topology

    code, _, err = cli("topology", "validate", str(resolve_topology("default")), "--set",
                       "system.pes_per_cube=6")
    assert code == 2
    assert "system.pe_mesh: [4, 2] holds 8 PEs but system.pes_per_cube is 6" in err


def test_replay_takes_sets(cli, amap, tmp_path):
    """A recorded load_dot replayed with twice the HBM bandwidth: the formula's latency."""
    topo = amap.topology
    trace = tmp_path / "t.kbtrace"
    code, _, _ = cli("run", LOAD_DOT, "--record", str(trace))
    assert code == 0
    code, out, err = cli("replay", str(trace), "--json", "--set", "hbm.bandwidth=204.8GB/s")
    assert (code, err) == (0, "")
    result = json.loads(out)
    rate = 204_800_000_000 * 3_640 // 3_900  # less refresh
    assert result["latency_ps"] == 4_000 + topo.pe.dma.setup + transfer_ps(4096, rate) \
        + topo.hbm.latency + 376_000
    assert result["overrides"] == ["hbm.bandwidth=204.8GB/s"]


def test_golden_check_under_a_set_shows_what_would_move(cli):
    code, out, err = cli("golden", "check", "--only", "gqa_attention.default", "--set",
                         "costs.issue.math=8ns")
    assert code == 1
    assert "engines.cpu.busy_ps_total" in out and "latency_ps" in out
    assert "energy_aj.static" in out  # a longer run leaks longer
    assert err.endswith("error: 9 differences in 1 of 1 golden cases; if the change is "
                        "intended, run `kernbench golden regen` and add a CHANGELOG entry\n")


def test_a_factor_scales_the_configured_value(cli):
    import json

    runs = [json.loads(cli("run", "softmax", "--timing-only", "--json", "--set", item)[1])
            for item in ("hbm.bandwidth=x2", "hbm.bandwidth=204.8GB/s")]
    assert runs[0] == runs[1]
    assert runs[0]["overrides"] == ["hbm.bandwidth=204.8GB/s"]


def test_a_table_wildcard_stands_for_each_of_its_keys(cli):
    import json

    code, out, _ = cli("run", "softmax", "--timing-only", "--json", "--set",
                       "costs.issue.*=x0.5", "--set", "pe.math.op_cycles.*=2")
    assert code == 0
    overrides = json.loads(out)["overrides"]
    assert {"costs.issue.composite=20ns", "costs.issue.load=2ns", "costs.issue.wait=2ns",
            "pe.math.op_cycles.exp=2", "pe.math.op_cycles.cast=2"} <= set(overrides)
    assert len(overrides) == 8 + 10  # issue costs, PE_MATH op classes


@pytest.mark.parametrize(("item", "message"), [
    ("pe.ipcq.slots=x0.3", "--set pe.ipcq.slots=x0.3: pe.ipcq.slots = 4 x 0.3 is not a whole "
                           "number of its unit"),
    ("pe.gemm.dataflow=x2", "--set pe.gemm.dataflow=x2: pe.gemm.dataflow is not a quantity; "
                            "only numbers and quantities with units scale"),
    ("hbm=x2", "--set hbm=x2: hbm is a table; give one of its keys or hbm.*"),
    ("hbm.bandwidth.*=x2", "--set hbm.bandwidth.*=x2: hbm.bandwidth is a value, not a table"),
    ("hbm.band\nwidth.*=x2", "--set hbm.band\\nwidth.*=x2: hbm.band\\nwidth: unknown key; "
     "did you mean 'bandwidth'?"),
    ("hbm.bandwith=x2", "--set hbm.bandwith=x2: hbm.bandwith: unknown key; did you mean "
                        "'bandwidth'?"),
    ("pe.gemm.rows=x" + "9" * 5000, "--set pe.gemm.rows=x99999999999999999999999999999999999"
     "99999999999… (5,014 characters): a factor of 5,000 characters; a factor is a plain "
     "number such as x2, x0.5 or x1e3"),
    ("pe.gemm.rows=x" + "9" * 30, "--set pe.gemm.rows=x" + "9" * 30 + ": pe.gemm.rows = 16 x "
     + "9" * 30 + " is out of range: it must be below 2^62 of the key's unit"),
    ("pe.tcm.size=x1e999999999", "--set pe.tcm.size=x1e999999999: pe.tcm.size = 2MiB x "
     "1e999999999 is out of range: it must be below 2^62 of the key's unit"),
    ("hbm.bandwidth=1B/s", "--set hbm.bandwidth=1B/s: hbm.bandwidth: 1 B/s streams less than "
     "1 B/s once refresh takes its share (1 - hbm.refresh_time / hbm.refresh_interval); it "
     "needs at least 2 B/s"),
])
def test_bad_factors_and_wildcards_are_one_line(cli, item, message):
    assert cli("run", "softmax", "--timing-only", "--set", item) == (2, "", f"error: {message}\n")


@pytest.mark.parametrize(("items", "value"), [
    (("hbm.bandwidth=x2", "hbm.bandwidth=x3"), "614.4GB/s"),  # default: 102.4GB/s
    (("hbm.bandwidth=10GB/s", "hbm.bandwidth=x3"), "30GB/s"),
    (("hbm.bandwidth=x3", "hbm.bandwidth=10GB/s"), "10GB/s"),
    (("hbm.*=x2", "hbm.bandwidth=x0.5"), "102.4GB/s"),
])
def test_a_key_given_twice_composes_in_order(cli, items, value):
    """A factor scales what the items before it set the key to; a plain value after it
    wins, as any later item does."""
    args = [a for item in items for a in ("--set", item)]
    code, out, err = cli("run", "softmax", "--timing-only", "--json", *args)
    assert (code, err) == (0, "")
    overrides = json.loads(out)["overrides"]
    assert [o for o in overrides if o.startswith("hbm.bandwidth=")] == [f"hbm.bandwidth={value}"]


def test_a_sweep_over_factors_of_cost_keys_replays_one_recording(cli):
    import json

    code, out, _ = cli("sweep", "softmax", "--timing-only", "--json", "--set",
                       "costs.issue.*=x1,x0.5")
    assert code == 0
    a, b = (row["result"] for row in json.loads(out))
    assert a["kernel"].endswith("(replay)") and b["kernel"].endswith("(replay)")
    assert "costs.issue.load=2ns" in b["overrides"] and "costs.issue.load=4ns" in a["overrides"]
    assert b["latency_ps"] < a["latency_ps"]
