"""docs/kernels.md matches the code: its worked kernels are the shipped ones, its errors are
the ones the CLI prints, every `tl` call it lists exists."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest

from kernbench_cli.lang.tl import TL
from kernbench_cli.sim.kernels import load_kernel

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "kernels.md").read_text()


@pytest.mark.parametrize("name", ["sharded_gemm", "softmax", "rmsnorm"])
def test_the_worked_kernels_are_the_shipped_ones(name):
    source = inspect.getsource(load_kernel(name).fn("kernel")).strip()
    blocks = re.findall(r"```python\n(def kernel.+?)\n```", GUIDE, re.DOTALL)
    assert source in [b.strip() for b in blocks], f"docs/kernels.md shows another {name} kernel"


def test_every_tl_call_in_the_reference_exists():
    calls = set(re.findall(r"`tl\.([a-z_]+)\(", GUIDE)) | set(re.findall(r"`tl\.([a-z_]+)`",
                                                                          GUIDE))
    assert {"load", "store", "where", "rsqrt", "tanh", "abs", "reciprocal"} <= calls
    assert not {c for c in calls if not hasattr(TL, c)}


def test_the_broadcast_error_is_the_one_shown(cli, tmp_path):
    kernel = tmp_path / "k.py"
    kernel.write_text(
        "PARAMS = {}\n"
        "def setup(host, p):\n    return {}\n"
        "def kernel(tl):\n    tl.full((8, 64), 1.0) * tl.full((8,), 1.0)\n"
        "def reference(host, p):\n    return {}\n"
        "def outputs(host, args, p):\n    return {}\n")
    code, _, err = cli("run", str(kernel), "-t", str(ROOT / "tests" / "topologies" / "one.toml"))
    assert code == 1
    message = err.split(": ", 3)[-1].strip()
    assert message == "tl.multiply: shapes [8, 64] and [8] do not broadcast"
    assert f"`{message}`" in GUIDE


def test_the_in_order_dma_example_is_what_the_model_does(cli, tmp_path):
    """The page's PE_DMA example (tests/kernels/store_then_load.py on the default topology):
    a load issued after a store that waits for a dot starts right behind the store; issued
    before it, at once. The times are the ones the page states."""
    kernel = str(ROOT / "tests" / "kernels" / "store_then_load.py")
    times = {}
    for first in (0, 1):
        log = tmp_path / f"{first}.jsonl"
        code, _, _ = cli("run", kernel, "--timing-only", "-p", f"load_first={first}",
                         "--oplog", str(log))
        records = [json.loads(line) for line in log.read_text().splitlines()]
        (store,) = [r for r in records if r["kind"] == "store"]
        (load,) = [r for r in records if r["kind"] == "load" and r["bytes"] == 64 * 64 * 2]
        times[first] = (code, store["start_ps"], load["start_ps"],
                        max(r["end_ps"] for r in records))
    assert times == {0: (0, 10_167_430, 10_187_430, 10_680_574),
                     1: (0, 10_167_430, 709_715, 10_458_859)}
    for figure in ("10.167 us", "10.187 us", "10.681 us", "0.710 us", "10.459 us"):
        assert figure in " ".join(GUIDE.split())


def test_the_tolerance_example_is_the_one_the_code_takes(tmp_path):
    """The page's TOLERANCE line, added to the f16 GEMM of tests/kernels, passes where the
    dtype's default fails, off by the 2^-12 the page states."""
    import kernbench_cli as kb

    (line,) = re.findall(r"```python\n(TOLERANCE = .+?)\s+#", GUIDE)
    kernel = tmp_path / "gemm.py"
    kernel.write_text((ROOT / "tests" / "kernels" / "f16_gemm_f32_out.py").read_text()
                      + line + "\n")
    one = str(ROOT / "tests" / "topologies" / "one.toml")
    result = kb.run(kernel, topology=one)
    assert result.verified is True and result.max_abs_err == 2.0**-12
