"""A bug in kernbench is one line and exit 70, with the traceback in a file; running out of
memory is one line and exit 1."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.mark.parametrize("bug", [ZeroDivisionError("a bug"), FileNotFoundError(2, "a bug")])
def test_an_internal_error_is_one_line_exit_70_with_the_traceback_in_a_file(cli, monkeypatch,
                                                                            bug):
    """Any exception that is not a user's (an OSError too, unless it is stdout's) is a bug."""
    from kernbench_cli.sim import run as sim_run

    def broken(*args, **kwargs):
        raise bug

    monkeypatch.setattr(sim_run, "run_kernel", broken)
    code, out, err = cli("run", "sharded_gemm")
    kind = type(bug).__name__
    assert (code, out) == (70, "")
    assert err.startswith(f"internal error: {kind}: {bug} (please report, with the "
                          "traceback in ")
    report = Path(err.rsplit(" ", 1)[1].rstrip(")\n"))
    assert f"{kind}: {bug}" in report.read_text()
    report.unlink()


def test_running_out_of_memory_is_a_one_line_error(cli, monkeypatch):
    from kernbench_cli.sim import run as sim_run

    def too_big(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(sim_run, "run_kernel", too_big)
    assert cli("run", "sharded_gemm") == (1, "", "error: this machine ran out of memory (a "
                                          "smaller problem, or --timing-only, which keeps no "
                                          "values)\n")
