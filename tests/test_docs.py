"""docs/kernels.md matches the code: its worked kernels are the shipped ones, its errors are
the ones the CLI prints, every `tl` call it lists exists."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from kernbench_cli.lang.tl import TL
from kernbench_cli.sim.kernels import load_kernel

ROOT = Path(__file__).resolve().parent.parent
GUIDE = (ROOT / "docs" / "kernels.md").read_text()


@pytest.mark.parametrize("name", ["softmax", "rmsnorm"])
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
