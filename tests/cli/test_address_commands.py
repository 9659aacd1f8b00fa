"""`kernbench decode`, `encode` and `topology show` through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def test_decode_human(cli):
    code, out, err = cli("decode", "0xe0_0000_1234", "--topology", "sip")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "HBM rack=0 sip=0 cube=3 pe=0 offset=0x1234 (cube offset 0x1234)"
    assert "  cube       3               [42:38]" in lines
    assert "  window     1 HBM           [37]" in lines


def test_decode_json_has_exactly_the_documented_keys(cli):
    code, out, _ = cli("decode", "0xc1002012", "--json")
    assert code == 0
    obj = json.loads(out)
    assert list(obj) == ["addr", "kind", "rack", "sip", "cube", "unit_type", "pe", "ext",
                         "component", "component_offset", "direction", "slot", "text"]
    assert obj == {
        "addr": 0xC1002012, "kind": "pe_resource", "rack": 0, "sip": 0, "cube": 0,
        "unit_type": "PE", "pe": 3, "ext": 0, "component": "ipcq", "component_offset": 0x2012,
        "direction": "E", "slot": 2,
        "text": "IPCQ ring rack=0 sip=0 cube=0 pe=3 dir=E slot=2 offset=0x12",
    }


def test_decode_json_nulls_where_not_applicable(cli):
    obj = json.loads(cli("decode", "0x2000000100", "--json")[1])
    assert (obj["unit_type"], obj["ext"], obj["direction"], obj["slot"]) == (None, None, None, None)


def test_decode_accepts_decimal(cli):
    assert cli("decode", str(0xC1002012))[1] == cli("decode", "0xc100_2012")[1]
    assert cli("decode", "0" * 5000 + "5")[1] == cli("decode", "5")[1]  # zeros: no digits
    assert cli("decode", "0b101")[1] == cli("decode", "0o5")[1] == cli("decode", "5")[1]


@pytest.mark.parametrize(("addr", "message"), [
    ("zz", "address 'zz' is not a number (hex 0x…, or decimal)"),
    ("0x8000000000000", "address 0x8000000000000 is wider than 51 bits"),
    ("0x" + "f" * 100_000, "address 0xffffffffffffffffffffff…ffffffff (100,002 characters) "
                           "is too large (more than 64 bits)"),
    ("0x" + "f" * 20, "address 0xffffffffffffffffffff is too large (more than 64 bits)"),
    # the grammar of `-p`: 0b and 0o too; no doubled `_` or digits of other scripts
    ("\u0663", "address '\u0663' is not a number (hex 0x…, or decimal)"),
    ("0x1__0", "address '0x1__0' is not a number (hex 0x…, or decimal)"),
    # past Python's 4,300-digit limit on decimals (it was "not a number")
    ("9" * 100_000, "address 999999999999999999999999…99999999 (100,000 characters) is too "
                    "large (more than 64 bits)"),
])
def test_decode_errors_are_one_line_exit_2(cli, addr, message):
    code, out, err = cli("decode", addr)
    assert (code, out, err) == (2, "", f"error: {message}\n")


@pytest.mark.parametrize(("addr", "code", "problem", "lines"), [
    ("0xe000001234", 3, "not in topology 'default': cube = 3 does not exist in topology "
                        "'default' (system.cubes_per_sip = 2: 0..1)",
     ["0xe000001234: not in topology 'default'; its fields:",
      "  addr       0xe000001234", "  rack       0               [50:47]",
      "  sip        0               [46:43]", "  cube       3               [42:38]",
      "  window     1 HBM           [37]", "  hbm_offset 0x1234          [36:0]"]),
    ("0x3f000000", 3, "not in topology 'default': pe_offset 0x3f000000 falls in reserved space "
                      "of the PE resource window (no [pe.resources] range holds it)", None),
    ("0x1c00000000", 2, "not a valid PhysAddr: unit_type = 7 is not a unit type (PE=0, MCPU=1, "
                        "SRAM=2)", None),
])
def test_decode_shows_the_fields_of_any_51_bit_address(cli, addr, code, problem, lines):
    got, out, err = cli("decode", addr)
    assert (got, err) == (code, f"error: {problem}\n")
    assert out.splitlines()[1] == f"  addr       {int(addr, 16):#x}"
    if lines:
        assert out.splitlines() == lines
    got, out, _ = cli("decode", addr, "--json")
    obj = json.loads(out)
    assert (got, obj["addr"], obj["problem"]) == (code, int(addr, 16), problem)


def test_negative_address_is_rejected(cli):
    code, _, err = cli("decode", "--", "-5")
    assert (code, err) == (2, "error: address '-5' is negative\n")


@pytest.mark.parametrize("args", [
    ["tcm", "--cube", "1", "--pe", "7", "--offset", "0x100"],
    ["ipcq", "--pe", "3", "--dir", "E", "--slot", "2", "--offset", "0x12"],
    ["hbm", "--cube", "1", "--pe", "2", "--offset", "4096"],
    ["sram", "--cube", "1", "--offset", "0x40"],
    ["status", "--pe", "1"],
])
def test_encode_is_the_inverse_of_decode(cli, args):
    code, out, err = cli("encode", *args)
    assert (code, err) == (0, "")
    addr = out.strip()
    assert addr.startswith("0x")
    decoded = json.loads(cli("decode", addr, "--json")[1])
    assert decoded["component"] == args[0]


def test_encode_reports_the_exact_address(cli):
    assert cli("encode", "ipcq", "--pe", "3", "--dir", "E", "--slot", "2", "--offset", "0x12")[1] \
        == "0xc1002012\n"


@pytest.mark.parametrize(("args", "message"), [
    (["tcm", "--pe", "99"], "pe = 99 does not fit the 4-bit field [33:30] (0..15)"),
    (["tcm", "--dir", "E"], "--dir and --slot go together (an IPCQ ring slot)"),
    (["tcm", "--dir", "E", "--slot", "0"], "--dir and --slot apply to ipcq, not tcm"),
    (["sram", "--pe", "2"], "sram is one per cube: use --pe 0"),
    (["tcm", "--offset", "x1"], "--offset 'x1' is not a number (hex 0x…, or decimal)"),
])
def test_encode_errors(cli, args, message):
    code, _, err = cli("encode", *args)
    assert (code, err) == (2, f"error: {message}\n")


def test_topology_show_prints_the_tree_and_the_resource_map(cli):
    code, out, _ = cli("topology", "show", "sip")
    assert code == 0
    assert "sip: 128 PEs" in out
    assert "cube x8, mesh 4x2" in out
    assert "PE x16, mesh 4x4" in out
    assert "composite 40ns" in out
    for name in ("tcm", "ipcq", "scratchpad", "regfile", "status", "reserved"):
        assert f"│ {name}" in out


def test_unknown_topology(cli):
    code, _, err = cli("topology", "show", "nope")
    assert code == 2
    assert err.startswith("error: no topology named 'nope'")


def test_decode_imports_neither_simpy_nor_numpy():
    """`kernbench decode` must start fast: no simulator or numpy import on its path."""
    probe = (
        "import sys\n"
        "from kernbench_cli.cli.app import app\n"
        "try:\n"
        "    app(['decode', '0x1000'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'numpy', 'simpy', 'greenlet', "
        "'ml_dtypes'})\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "HEAVY []"
