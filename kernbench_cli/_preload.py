"""What a sweep's fork server imports before it forks workers (`explore.sweep._worker_context`).

It ignores Ctrl-C first: the server shares the sweep's process group, and a Ctrl-C while it
imports must not print a traceback (the sweep stops its workers itself). The fork server
ignores Ctrl-C from then on anyway; each worker sets its own handling.
"""

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)

import kernbench_cli.explore.sweep  # noqa: E402
import kernbench_cli.report.run  # noqa: E402
import kernbench_cli.sim.run  # noqa: E402, F401
