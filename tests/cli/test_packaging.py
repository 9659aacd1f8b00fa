"""A plain (non-editable) wheel carries kernels/, topologies/ and goldens/ and finds them."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True)
    (path,) = out.glob("kernbench-*.whl")
    return path


def test_wheel_contains_the_shipped_files(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for shipped in ROOT.glob("topologies/**/*.toml"):
        assert f"kernbench_cli/_data/{shipped.relative_to(ROOT)}" in names
    for shipped in ROOT.glob("kernels/*.py"):
        assert f"kernbench_cli/_data/{shipped.relative_to(ROOT)}" in names
    assert any(n.startswith("kernbench_cli/_data/goldens/") for n in names)
    assert not any(n.startswith("tests/") for n in names)


def test_installed_copy_finds_topologies_by_name(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import kernbench_cli.shipped as r\n"
        "print(r.data_dir('topologies'))\n"
        "from kernbench_cli.cli.app import app\n"
        "app(['topology', 'validate', str(r.resolve_topology('sip'))])\n"
    )
    run = subprocess.run([sys.executable, "-I", "-c", probe, str(site)], cwd=tmp_path,
                         capture_output=True, text=True)
    lines = run.stdout.splitlines()
    assert lines[0] == str(site / "kernbench_cli" / "_data" / "topologies")
    assert ": ok: 1 rack x 1 SIP x 8 cubes x 16 PEs = 128 PEs" in lines[1]
    assert run.returncode == 0, run.stderr


def test_one_version_in_pyproject_the_package_and_the_changelog():
    """`kernbench --version` (the package's `__version__`), pyproject.toml and the
    CHANGELOG's latest release say the same version."""
    import re
    import tomllib

    import kernbench_cli

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    released = re.search(r"^## \[(\d+\.\d+\.\d+)\]", (ROOT / "CHANGELOG.md").read_text(),
                         re.MULTILINE)
    assert released, "CHANGELOG.md has no released version"
    assert kernbench_cli.__version__ == project == released.group(1)


def test_version(cli):
    import tomllib

    from kernbench_cli import __version__

    assert cli("--version") == (0, f"kernbench {__version__}\n", "")
    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert project["project"]["version"] == __version__  # one version, said twice


@pytest.mark.parametrize(("name", "made"), [("simpy", "simpy.py"), ("numpy", "numpy/__init__.py"),
                                            ("typer", "typer.py")])
def test_a_dependency_shadowed_by_the_working_folder_is_one_line(tmp_path, name, made):
    """`python -m kernbench_cli` puts the working folder first on the path: a `simpy.py`
    there was "internal error, please report", a `numpy` folder blamed the shipped kernel
    that imports it, a `typer.py` a raw traceback. Named in one line, exit 2; the console
    script, which does not put the working folder on the path, runs as ever."""
    path = tmp_path / made
    path.parent.mkdir(exist_ok=True)
    path.write_text("raise ImportError('not the real one')\n")
    done = subprocess.run([sys.executable, "-m", "kernbench_cli", "run", "rmsnorm",
                           "--timing-only"], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (done.returncode, done.stderr) == (
        2, f"error: {path}: a file in the working folder shadows the installed {name} "
           "(python -m puts this folder first on the path): rename it, or run kernbench "
           "from another folder\n")
