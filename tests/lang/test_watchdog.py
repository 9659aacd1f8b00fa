"""The kernel watchdog (`--kernel-timeout`): a kernel's Python that issues no command for
the limit is stopped, even where the timeout lands in a finaliser."""

from __future__ import annotations

import pytest


def test_a_timeout_landing_in_a_finaliser_is_raised_after_it():
    """Python drops an exception raised inside `__del__`: a loop that mostly runs
    finalisers (temporary tensors dropped each turn) must still be stopped."""
    import time

    from kernbench_cli.lang.watchdog import KernelTimeout, watchdog

    class Slow:
        def __del__(self):  # every tick lands here
            end = time.monotonic() + 0.2
            while time.monotonic() < end:
                pass

    start = time.monotonic()
    with pytest.raises(KernelTimeout), watchdog(lambda: 0, 0.05):
        while time.monotonic() < start + 5:
            Slow()
    assert time.monotonic() < start + 1  # the first finaliser after the limit
