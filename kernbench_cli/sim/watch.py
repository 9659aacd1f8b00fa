"""What a run is doing now, for a progress line: the pass, and how far it got.

`run_kernel` and `replay_trace` fill a `Watch` as they go; another thread
(the CLI's spinner) reads it with `text()`. Reading plain counters another
thread writes is safe under the GIL, and the passes pay nothing for it.
"""

from __future__ import annotations

import time
from typing import Any

from kernbench_cli.config.units import format_time_ps


class Watch:
    def __init__(self) -> None:
        self.phase = "setting up"
        self.launch: Any = None  # the functional pass's Launch, once it runs
        self.timing: Any = None  # the timing pass's Timing, once it runs
        self.since = time.perf_counter()

    def begin(self, phase: str, what: Any) -> None:
        self.phase = phase
        if phase == "functional pass":
            self.launch = what
        else:
            self.timing = what
        self.since = time.perf_counter()

    def text(self) -> str:
        """One line: the pass, commands done and their rate, or simulated time reached."""
        wall = max(time.perf_counter() - self.since, 1e-9)
        if self.phase == "timing pass" and self.timing is not None:
            timing = self.timing
            done = sum(1 for proc in timing.procs if proc.done)
            return (f"timing pass: t={format_time_ps(timing.env.now)} simulated, "
                    f"{done:,} of {len(timing.procs):,} PEs done, {wall:.1f} s")
        if self.phase == "functional pass" and self.launch is not None:
            commands = self.launch.commands
            return (f"functional pass: {commands:,} commands, {commands / wall:,.0f} "
                    f"commands/s")
        return self.phase
