"""PE_CPU: issues the kernel's commands (as the timing pass replays them)."""

from __future__ import annotations


class PeCpu:
    """The PE's control processor, as a local clock.

    `time` runs ahead of global simulated time while the PE issues commands
    (results are futures); it pays each command's issue cost (ADR-0064 D1)
    as busy time, and waits (stalls) for a full scheduler queue, a value the
    kernel reads, a `wait`, or an IPCQ ring.
    """

    __slots__ = ("busy_ps", "ops", "stall_ps", "time")

    def __init__(self) -> None:
        self.time = 0
        self.busy_ps = 0
        self.stall_ps = 0
        self.ops = 0

    def issue(self, cost_ps: int) -> int:
        """Spend `cost_ps` issuing one command; returns the time it is issued."""
        self.time += cost_ps
        self.busy_ps += cost_ps
        self.ops += 1
        return self.time

    def wait_until(self, t: int) -> None:
        """Stall until `t` (no-op if already past it)."""
        if t > self.time:
            self.stall_ps += t - self.time
            self.time = t
