"""Bad input never yields a traceback: random topologies load or raise ConfigError."""

from __future__ import annotations

from dataclasses import fields

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernbench_cli.address import AddressMap
from kernbench_cli.config import load_topology
from kernbench_cli.config.schema import Topology
from kernbench_cli.errors import ConfigError

VALUES = st.one_of(
    st.integers(-5, 1 << 40), st.booleans(), st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["", "1GHz", "64KiB", "30ns", "51.2GB/s", "0.5ps", "-3ns", "1e3ns", "x",
                     "8GiB", "2MiB", "0x10", "16"]),
    st.lists(st.integers(-2, 40), max_size=3),
    st.text(max_size=6),
)


def _tables(cls: type, depth: int = 0):
    """A TOML table for `cls`: some of its keys (and a stray one), random values."""
    entries = {}
    for f in fields(cls):
        if f.metadata.get("internal"):
            continue
        sub = f.metadata.get("section")
        if sub is not None and depth < 3:
            entries[f.name] = st.one_of(_tables(sub, depth + 1), VALUES)
        else:
            entries[f.name] = VALUES
    entries["stray_key"] = VALUES
    return st.fixed_dictionaries({}, optional=entries)


SYSTEM = {"racks": 1, "sips_per_rack": 1, "cubes_per_sip": 2, "cube_mesh": [2, 1],
          "pes_per_cube": 8, "pe_mesh": [4, 2]}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(doc=_tables(Topology), keep_system=st.booleans())
def test_random_topologies_load_or_fail_cleanly(tmp_path, doc, keep_system):
    if keep_system:  # half the time a valid shape, so the checks past it run too
        doc["system"] = dict(SYSTEM)
    doc.pop("costs", None)  # a random path would only test "no such file"
    path = tmp_path / "t.toml"
    path.write_text(tomli_w.dumps(doc))
    try:
        AddressMap.compile(load_topology(path))
    except ConfigError as exc:
        for line in exc.lines():
            assert line.startswith(f"{path}: "), line
            assert "\n" not in line
