"""What a sweep's fork server imports before it forks workers (`explore.sweep._worker_context`).

It ignores Ctrl-C (and SIGHUP) first: the server shares the sweep's process group, and a
Ctrl-C while it imports must not print a traceback (the sweep stops its workers itself). The
fork server ignores Ctrl-C from then on anyway; each worker sets its own handling.

A worker the server forks as an interrupted sweep ends may find the sweep's semaphores
already gone: its start-up (unpickling the pool's queues, before any kernbench code runs)
fails with FileNotFoundError, which the server's child prints through `sys.excepthook`.
That worker had no point to run and the sweep has said "interrupted", so that one failure
is quiet (`_quiet`), as is the server's own EOFError where a sweep gave up starting a worker
half-way (past its open-files limit, which it says); any other is printed as ever.
"""

import signal
import sys

signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal's, to the process group


def _quiet(kind, value, tb) -> None:
    """`sys.excepthook` of the fork server and the workers it forks (see the module)."""
    import traceback

    last = traceback.extract_tb(tb)[-1:] if tb is not None else []
    if issubclass(kind, FileNotFoundError) and last and last[0].name == "__setstate__" \
            and last[0].filename.endswith("synchronize.py"):
        return  # a semaphore of a sweep that has ended
    if issubclass(kind, EOFError) and last and last[0].name == "recvfds":
        return  # the server's: a sweep gave up starting a worker (its files' limit), and says so
    sys.__excepthook__(kind, value, tb)


sys.excepthook = _quiet

import kernbench_cli.explore.sweep  # noqa: E402
import kernbench_cli.report.run  # noqa: E402
import kernbench_cli.sim.run  # noqa: E402, F401
