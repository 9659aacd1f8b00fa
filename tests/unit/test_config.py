"""Topology and cost-table loading: shipped files, defaults, and every bad-input message."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernbench_cli.address import AddressMap
from kernbench_cli.config import load_costs, load_topology
from kernbench_cli.config.loader import config_digest
from kernbench_cli.config.schema import Topology
from kernbench_cli.errors import ConfigError
from kernbench_cli.shipped import data_dir, resolve_topology
from tests.conftest import SYSTEM, shipped

BAD = Path(__file__).parents[1] / "bad_configs"


@pytest.mark.parametrize(("name", "pes", "cubes"), [
    ("default", 16, 2), ("sip", 128, 8), ("rack", 8192, 512),
])
def test_shipped_topologies_load_and_compile(name, pes, cubes):
    topo = load_topology(shipped(name))
    assert (topo.name, topo.num_pes, topo.num_cubes) == (name, pes, cubes)
    assert topo.cost_table.issue.composite == 40_000  # ps: the shipped cost of issuing a composite
    assert topo.cost_table.issue.load == 4_000
    assert topo.cost_table.scheduler.plan == 0
    AddressMap.compile(topo)


def test_rack_is_the_largest_one_rack_the_layout_allows():
    s = load_topology(shipped("rack")).system
    assert (s.racks, s.sips_per_rack, s.cubes_per_sip, s.pes_per_cube) == (1, 16, 32, 16)


def test_omitted_keys_take_the_documented_defaults(write_topology):
    topo = load_topology(write_topology())
    defaults = Topology()
    assert topo.pe == defaults.pe
    assert topo.hbm.bandwidth == 51_200_000_000
    assert topo.ucie.latency == 10_000
    assert topo.name == "t"


def test_a_partial_link_table_keeps_that_levels_other_defaults(write_topology):
    topo = load_topology(write_topology('[ucie]\nbandwidth = "128GB/s"\n'))
    assert topo.ucie.bandwidth == 128_000_000_000
    assert topo.ucie.latency == 10_000  # UCIe's default, not the generic link default


def test_a_partial_range_keeps_its_default_start(write_topology):
    topo = load_topology(write_topology('[pe.resources]\ntcm = { size = "8MiB" }\n'))
    assert (topo.pe.resources.tcm.start, topo.pe.resources.tcm.size) == (0, 8 * 2**20)


def test_without_a_costs_key_the_shipped_cost_table_is_used(write_topology):
    topo = load_topology(write_topology())
    assert topo.cost_table.source == data_dir("topologies") / "costs" / "default.toml"


def test_costs_override(write_topology, tmp_path):
    costs = tmp_path / "fast.toml"
    costs.write_text('[issue]\ncomposite = "10ns"\n')
    topo = load_topology(write_topology(), costs=costs)
    assert topo.cost_table.issue.composite == 10_000
    assert topo.cost_table.issue.dot == 4_000
    assert topo.cost_table.name == "fast"


def test_cost_table_keys_are_checked(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[issue]\ncompsite = "10ns"\n')
    with pytest.raises(ConfigError) as info:
        load_costs(path)
    assert str(info.value) == f"{path}: issue.compsite: unknown key; did you mean 'composite'?"


def test_topology_names_resolve_to_shipped_files():
    assert resolve_topology(None) == shipped("default")
    assert resolve_topology("sip") == shipped("sip")
    with pytest.raises(ConfigError, match=r"no topology named 'nope' \(shipped: default, rack, "
                                          r"sip; or give a path to a \.toml file\)"):
        resolve_topology("nope")


def _bad_cases():
    return sorted(BAD.glob("*.toml"))


@pytest.mark.parametrize("path", _bad_cases(), ids=lambda p: p.stem)
def test_bad_topology_gives_its_stated_errors(path, cli):
    expected = [m.format(file=path, dir=path.parent)
                for m in re.findall(r"^# expect: (.*)$", path.read_text(), re.M)]
    assert expected, f"{path.name} states no '# expect:' line"
    code, out, err = cli("topology", "validate", str(path))
    assert code == 2
    assert out == ""
    assert err.splitlines() == [f"error: {m}" for m in expected]


def test_the_bad_folder_covers_each_class_of_mistake():
    names = {p.stem for p in _bad_cases()}
    assert {"syntax_error", "unknown_key", "missing_key", "wrong_type", "wrong_unit",
            "mesh_mismatch", "overlap", "misaligned", "outside_window", "tcm_too_small",
            "ipcq_too_small"} <= names


def test_one_line_form_counts_the_other_problems():
    with pytest.raises(ConfigError) as info:
        load_topology(BAD / "many_problems.toml")
    assert str(info.value).endswith("got '1GB' (and 2 more problems)")


def test_a_flood_of_problems_is_listed_up_to_twenty_and_counted(cli, write_topology,
                                                                 monkeypatch):
    """800,000 unknown keys: 20 lines and a count (not 800,000 lines), and a close match
    looked for only for the keys shown (the search, not the counting, is what takes time)."""
    import difflib
    from types import SimpleNamespace

    from kernbench_cli.config import loader

    searched = []

    def close_matches(word, *args, **kwargs):
        searched.append(word)
        return difflib.get_close_matches(word, *args, **kwargs)

    monkeypatch.setattr(loader, "difflib", SimpleNamespace(get_close_matches=close_matches))
    path = write_topology("[pe]\n" + "".join(f"k{i} = 1\n" for i in range(800_000)))
    code, out, err = cli("topology", "validate", str(path))
    assert len(searched) <= 21, len(searched)
    lines = err.splitlines()
    assert (code, out, len(lines)) == (2, "", 21)
    assert lines[0] == (f"error: {path}: pe.k0: unknown key (known: clock, scheduler, dma, "
                        "gemm, math, tcm, ipcq, resources)")
    assert lines[-1] == f"error: {path}: and 799,980 more problems (the first 20 are above)"


@pytest.mark.parametrize(("value", "message"), [
    ('"' + "n" * 256 + '"', "a name of 256 characters; at most 255"),
    ('"' + "n" * 5000 + '"', "a string of 5,000 characters; at most 4,096")])
def test_a_name_too_long_to_show_is_refused(cli, write_topology, value, message):
    path = write_topology(system=f"name = {value}\n" + SYSTEM)
    assert cli("topology", "validate", str(path)) == (2, "", f"error: {path}: name: "
                                                             f"{message}\n")


def test_validate_accepts_shipped_topologies(cli):
    code, out, _ = cli("topology", "validate", str(shipped("sip")))
    assert code == 0
    assert out.startswith(f"{shipped('sip')}: ok: 1 rack x 1 SIP x 8 cubes x 16 PEs = 128 PEs")


def test_missing_file_and_directory(cli, tmp_path):
    code, _, err = cli("topology", "validate", str(tmp_path / "none.toml"))
    assert (code, err) == (2, f"error: {tmp_path / 'none.toml'}: no such file\n")
    code, _, err = cli("topology", "validate", str(tmp_path))
    assert (code, err) == (2, f"error: {tmp_path}: is a directory, expected a TOML file\n")


def test_reference_doc_matches_the_schema():
    from kernbench_cli.config.reference import render

    doc = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    assert doc.read_text() == render(), (
        "docs/configuration.md is stale: python -m kernbench_cli.config.reference "
        "> docs/configuration.md")


def test_every_key_has_a_doc():
    from dataclasses import fields

    def walk(cls):
        for f in fields(cls):
            if f.metadata.get("internal"):
                continue
            assert f.metadata.get("doc"), f"{cls.__name__}.{f.name} has no doc"
            if "section" in f.metadata:
                walk(f.metadata["section"])

    from kernbench_cli.config.schema import CostTable
    walk(Topology)
    walk(CostTable)


def test_config_objects_are_immutable_values(write_topology):
    from dataclasses import FrozenInstanceError, replace

    a = load_topology(write_topology())
    b = load_topology(write_topology())
    assert a.pe == b.pe and hash(a.pe) == hash(b.pe)
    with pytest.raises(FrozenInstanceError):
        a.pe.gemm.rows = 8
    changed = replace(a.pe.gemm, rows=8)
    assert (changed.rows, a.pe.gemm.rows) == (8, 16)
    assert repr(changed) == ("GemmConfig(rows=8, cols=16, dataflow='os', "
                             "passes=GemmPasses(f16=1, f32=3), macs_per_cell=GemmNarrow("
                             "fp8=2, int8=2, fp4=4, int4=4))")


@pytest.mark.parametrize("name", ["default", "sip", "rack"])
def test_show_toml_round_trips_to_the_same_topology(cli, tmp_path, name):
    from dataclasses import replace

    code, out, _ = cli("topology", "show", name, "--toml")
    assert code == 0
    path = tmp_path / f"{name}.toml"
    path.write_text(out)
    again = load_topology(path)
    original = load_topology(shipped(name))

    def hardware(t):  # all but where the files are
        return replace(t, source=None, costs="", cost_table=replace(t.cost_table, source=None))

    assert hardware(again) == hardware(original)
    assert again.cost_table.source.resolve() == original.cost_table.source.resolve()


@pytest.mark.parametrize(("kind", "value", "text"), [
    ("time", 1_234_567, "1.234567us"), ("time", 40_000, "40ns"), ("time", 7, "7ps"),
    ("frequency", 1_250_000_000, "1.25GHz"), ("bandwidth", 51_200_000_000, "51.2GB/s"),
    ("size", 2**30 + 4096, "1048580KiB"),
])
def test_exact_units_parse_back_to_the_same_integer(kind, value, text):
    from kernbench_cli.config.schema import KINDS
    from kernbench_cli.config.writer import exact

    assert exact(kind, value) == text
    assert KINDS[kind][0](text) == value


def test_a_shipped_topology_copied_anywhere_loads_with_its_shipped_costs(tmp_path, cli):
    copy = tmp_path / "mine.toml"
    copy.write_text(shipped("sip").read_text())
    code, _, err = cli("topology", "validate", str(copy))
    assert (code, err) == (0, "")
    assert load_topology(copy).cost_table.source.resolve() == \
        (data_dir("topologies") / "costs" / "default.toml").resolve()


def test_topology_show_toml_is_portable_and_readable(tmp_path, cli):
    code, text, _ = cli("topology", "show", "sip", "--toml")
    assert code == 0
    assert 'costs = "default"' in text.splitlines()
    assert "cube_mesh = [4, 2]" in text.splitlines() and "pe_mesh = [4, 4]" in text.splitlines()
    assert "start = 0x1000000" in text.splitlines()
    copy = tmp_path / "elsewhere" / "shown.toml"
    copy.parent.mkdir()
    copy.write_text(text)
    assert config_digest(load_topology(copy)) == config_digest(load_topology(shipped("sip")))
