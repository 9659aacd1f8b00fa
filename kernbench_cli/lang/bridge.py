"""The one place greenlet is used: each PE's kernel in a greenlet, driven by SimPy.

A PE's kernel runs as plain Python in its own greenlet. It leaves the
greenlet only where it must: to let global simulated time catch up with its
local clock before it books a shared resource (`sync`), or to wait for
another PE (`block`). The SimPy process that drives it yields the event the
kernel handed over and switches back in when it fires.

Ties at one simulated time go to the lower PE index (the event priority),
and `sync` skips the switch when no other event can come first, so the
order of bookings is a function of simulated time alone.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy
from greenlet import greenlet


class PeThread:
    """The greenlet of one PE and the SimPy process that drives it."""

    __slots__ = ("blocked_on", "env", "events", "glet", "pid", "switches")

    def __init__(self, env: simpy.Environment, pid: int):
        self.env = env
        self.pid = pid
        self.glet: greenlet | None = None
        self.blocked_on: str | None = None
        self.switches = 0  # times the kernel left its greenlet
        self.events = 1  # SimPy events this PE waited on, its start included

    def start(self, target: Callable[[], Any]) -> None:
        """Run `target` (the PE's kernel) in a new greenlet, from simulated time 0."""
        self.glet = greenlet(target)
        self.env.process(self._drive())

    def _drive(self) -> Generator[simpy.Event, Any, None]:
        event = self.glet.switch()
        while not self.glet.dead:
            self.events += 1
            yield event
            event = self.glet.switch()

    @property
    def finished(self) -> bool:
        return self.glet.dead

    # The two calls below run inside the kernel's greenlet.

    def sync(self, t: int) -> None:
        """Return once every event before simulated time `t` has run."""
        env = self.env
        if t < env.peek():
            return
        self._switch_out(self.wake_at(t))

    def block(self, event: simpy.Event, what: str) -> None:
        """Wait for `event` (fired by another PE); `what` names the wait for deadlock reports."""
        self.blocked_on = what
        self._switch_out(event)
        self.blocked_on = None

    def wake_at(self, t: int, event: simpy.Event | None = None) -> simpy.Event:
        """Fire `event` (a new one if None) at simulated time `t`, in PE-index order."""
        env = self.env
        if event is None:
            event = env.event()
        event._ok = True
        event._value = None
        env.schedule(event, self.pid, max(0, t - env.now))
        return event

    def _switch_out(self, event: simpy.Event) -> None:
        self.switches += 1
        self.glet.parent.switch(event)


def run(env: simpy.Environment, threads: list[PeThread],
        targets: list[Callable[[], Any]]) -> None:
    """Start every PE on its target and run the simulation until no event is left."""
    for thread, target in zip(threads, targets, strict=True):
        thread.start(target)
    env.run()
