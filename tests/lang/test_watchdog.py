"""The kernel watchdog (`--kernel-timeout`): a kernel's Python that issues no command for
the limit is stopped, even where the timeout lands in a finaliser."""

from __future__ import annotations

import pytest


def test_a_timeout_landing_in_a_finaliser_is_raised_after_it(monkeypatch):
    """Python drops an exception raised inside `__del__`: a loop that mostly runs
    finalisers (temporary tensors dropped each turn) must still be stopped, at the line
    after the finaliser where the limit passed. The watchdog's clock is the test's: the
    first finaliser moves it past the limit, then waits for the watchdog's next tick."""
    import time
    from types import SimpleNamespace

    from kernbench_cli.lang import watchdog as watching
    from tests.conftest import HANG_GUARD_S

    clock, ticks = [0.0], []
    monkeypatch.setattr(watching, "time", SimpleNamespace(monotonic=lambda: clock[0]))

    def progress() -> int:  # the watchdog reads it at each tick
        ticks.append(clock[0])
        return 0  # no command issued, ever

    class Finalised:
        def __del__(self):
            clock[0] += 1.0  # past the limit of 0.05 s
            seen, guard = len(ticks), time.monotonic() + HANG_GUARD_S
            while len(ticks) == seen and time.monotonic() < guard:
                pass  # the tick lands here, in the finaliser

    made = 0
    with pytest.raises(watching.KernelTimeout), watching.watchdog(progress, 0.05):
        while made < 1_000:
            made += 1
            Finalised()
    assert made == 1  # raised after the first finaliser, not dropped
