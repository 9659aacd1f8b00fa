"""PE_SCHEDULER: the bounded command queue between PE_CPU and the engines."""

from __future__ import annotations

import heapq

from kernbench_cli.config.schema import SchedulerConfig
from kernbench_cli.hw.cpu import PeCpu


class Scheduler:
    """Dispatches commands in order to the engines' in-order queues.

    A command takes a queue slot when PE_CPU has issued it and holds it until
    its engine starts it (a composite: until it is planned, ADR-0064 Q2: the
    dispatch is non-blocking). With every slot held, PE_CPU stalls until the
    first one frees: back-pressure. A composite costs `plan_ps` of scheduler
    time (the cost table's `scheduler.plan`, ADR-0064 D3).
    """

    __slots__ = ("busy_ps", "depth", "free_at", "held", "last", "ops", "stalled_by")

    def __init__(self, config: SchedulerConfig):
        self.depth = config.queue_depth
        self.free_at = 0
        self.busy_ps = 0
        self.ops = 0
        # min-heap of (when a held slot frees, who holds it): see `hold`
        self.held: list[tuple[int, int]] = []
        self.stalled_by = -1  # who freed the slot the last command waited for (-1: none)
        self.last = -1  # the command whose planning last occupied the scheduler

    def enqueue(self, cpu: PeCpu, cost_ps: int, plan_ps: int = 0) -> tuple[int, int]:
        """PE_CPU issues a command (`cost_ps` of its time) into the queue, stalling while
        every slot is held; the command is dispatched in order after `plan_ps` of
        scheduler time. Returns (issued, dispatched).
        """
        t = cpu.time + cost_ps
        cpu.busy_ps += cost_ps
        cpu.ops += 1
        held = self.held
        while held and held[0][0] <= t:
            heapq.heappop(held)
        self.stalled_by = -1
        if len(held) >= self.depth:  # full: wait for the first slot to free
            slot, self.stalled_by = heapq.heappop(held)
            cpu.stall_ps += slot - t
            t = slot
        cpu.time = t
        start = t if t > self.free_at else self.free_at
        self.free_at = start + plan_ps
        self.busy_ps += plan_ps
        self.ops += 1
        return t, self.free_at

    def hold(self, until: int, who: int = -1) -> None:
        """The slot of the command just dispatched (`who`) frees at `until`."""
        heapq.heappush(self.held, (until, who))
