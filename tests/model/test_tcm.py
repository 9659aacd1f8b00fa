"""The TCM: tensors and a composite's tile buffers share it, a full TCM names what holds
it, and the high water says how much, when and at which kernel line."""

from __future__ import annotations

import json


def test_tile_buffers_take_tcm_while_the_composite_runs(run):
    """Tensors and a composite's tile buffers share the TCM: the 1 MiB load issued while the
    composite runs waits until its buffers are free, and the TCM never holds more than it
    has (were the buffers left out, 2,158,656 B of the 2 MiB TCM would be in use)."""
    result = run("tcm_pressure", "default")
    records = [r for r in result.oplog if r[1] == 0]
    composite = next(r for r in records if r[3] == "composite")
    big = next(r for r in records if r[3] == "load")
    assert big[4] >= composite[6]  # issued once the composite ended
    assert result.cpu_stall_ps[0] > 0
    tcm = next(i for i in result.invariants if i.name == "tcm")
    assert tcm.passed
    assert tcm.detail == "at most 1,835,008 B of TCM in use (PE (rack=0 sip=0 cube=0 pe=0)), " \
                         "of 2,097,152 B"


def test_a_full_tcm_names_what_holds_it(cli):
    from pathlib import Path

    path = Path(__file__).parents[1] / "kernels" / "tcm_holders.py"
    code, _, err = cli("run", str(path))
    assert code == 1
    assert err == (f"error: {path}:19: PE (rack=0 sip=0 cube=0 pe=0) at t=16ns: tensors overflow "
                   "TCM: TCM of PE (rack=0 sip=0 cube=0 pe=0) is full: tl.load needs 256KiB "
                   "(262144 B); 0 B of 2MiB free, the largest free block it may take is 0 B; "
                   "held by: 1MiB "
                   "tl.load (line 16), 512KiB tl.load (line 17), 512KiB multiply (PE_MATH) "
                   "(line 18)\n")


def test_a_full_tcm_the_kernel_takes_is_its_error_still(cli, tmp_path):
    """A kernel that takes the error (``except Exception``) and carries on: the command
    stays in the stream (it would be timed as a 256 KiB load into no TCM), so the run
    fails as it would have, at the same line and time; nothing after it is timed."""
    from pathlib import Path

    path = Path(__file__).parents[1] / "kernels" / "tcm_holders.py"
    code, _, err = cli("run", str(path))
    assert code == 1
    source = path.read_text().replace(
        '    more = tl.load(x, (64 * 1024,), "f32")  # line 19: 256 KiB more than fits',
        '    try: more = tl.load(x, (64 * 1024,), "f32")  # line 19\n'
        '    except Exception: more = None\n'
        '    tl.cycles(10**6)')
    assert "try:" in source
    taken = tmp_path / "taken.py"
    taken.write_text(source)
    (tmp_path / "_base.py").write_text((path.parent / "_base.py").read_text())
    assert cli("run", str(taken)) == (1, "", err.replace(str(path), str(taken)))


def test_the_tcm_high_water_says_how_much_when_and_where(cli):
    """tcm_pressure: the composite's 512 KiB of tile buffers, then (after it ends) the
    1.75 MiB tensor of line 23 alone: that is the most the TCM held."""
    from pathlib import Path

    path = Path(__file__).parents[1] / "kernels" / "tcm_pressure.py"
    code, out, _ = cli("run", str(path), "--json", "--per-pe")
    assert code == 0
    result = json.loads(out)
    high = result["tcm_high_water"]
    assert (high["pe"], high["bytes"], high["line"], high["tcm_bytes"]) == (
        "rack=0 sip=0 cube=0 pe=0", 1_835_008, 23, 2_097_152)
    pe0 = result["per_pe"][0]
    assert (pe0["tcm_high_water_bytes"], pe0["tcm_high_water_ps"]) == (
        high["bytes"], high["time_ps"])
    assert result["per_pe"][1]["tcm_high_water_bytes"] == 0  # PE 1 did nothing
    code, out, _ = cli("run", str(path))
    assert "TCM            1,835,008 B (87.5%) of 2MiB at most (tensors and tile buffers; PE" \
           "\n               0 at t=268.885us, kernel line 23)" in out
