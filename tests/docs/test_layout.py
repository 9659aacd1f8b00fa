"""The layout of tests/: every test file sits in the directory of its concern, none at the
top, and every directory is one this map describes."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

#: Each directory of tests/ and what it holds.
LAYOUT = {
    "unit": "units, addresses, allocators, the exact ratio, config and Hugging Face config "
            "parsing, simulated memory, the garbage collector's pauses",
    "lang": "the `tl` language: ops against numpy, tolerances, kernel lines, regions, program "
            "ids, kernels that misuse Python, confinement, the watchdog",
    "model": "the timing and energy model: engines, network, fair share, IPCQ, GEMM, issue "
             "costs, TCM, the two passes, dedup, invariants, critical path, races, energy, "
             "roofline, planner, determinism",
    "replay": "recording and replaying traces, and the trace format",
    "explore": "sweeps, compare, sensitivity, --set, kernels' metrics",
    "workloads": "decode, attention, collectives, norms, and the decode step's accounting",
    "cli": "commands through the CLI: run, golden, kernels, decode and encode, outputs, "
           "progress, limits, internal errors, help, packaging",
    "api": "the Python API (`import kernbench_cli as kb`)",
    "report": "what results look like: the Chrome trace, tables on narrow terminals",
    "docs": "the README and docs pages run as shown, and this layout",
    "hostile": "hostile inputs, signals and pipes; the shell corpora are marked slow",
    # data the tests read
    "kernels": "test kernels", "topologies": "test topologies", "configs": "model configs",
    "costs": "cost tables", "bad_configs": "broken topologies, one mistake each",
}


def test_no_test_file_at_the_top_of_tests():
    """Only the shared conftest.py (and the package's __init__.py) sit at the top: a test
    file belongs in the directory of its concern (LAYOUT)."""
    top = sorted(p.name for p in TESTS.glob("*.py") if p.name not in ("__init__.py",
                                                                      "conftest.py"))
    assert top == [], f"move {', '.join(top)} to the tests/ directory of its concern"


def test_every_directory_is_in_the_layout_and_every_test_directory_a_package():
    """A new directory is added to LAYOUT with what it holds; one with tests has an
    __init__.py, so that two test files of one name in two directories do not clash."""
    dirs = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))}
    assert dirs == set(LAYOUT), (sorted(dirs - set(LAYOUT)), sorted(set(LAYOUT) - dirs))
    for folder in sorted(TESTS.iterdir()):
        if folder.is_dir() and any(folder.glob("test_*.py")):
            assert (folder / "__init__.py").is_file(), folder.name
