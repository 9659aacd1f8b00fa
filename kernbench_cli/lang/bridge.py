"""The one place greenlet is used: each PE's kernel in a greenlet, driven by SimPy.

A PE's kernel runs as plain Python in its own greenlet. It leaves the
greenlet only where it must: to let global simulated time catch up with its
local clock before it books a shared resource (`sync`), or to wait for
another PE (`block`). Either way it hands SimPy an event whose callback
switches back into the greenlet when the event fires; SimPy's loop runs in
the main greenlet. (A callback rather than a SimPy process per PE: one
generator layer less on every switch, which is what a synchronising kernel
spends its time on.)

Ties at one simulated time go to the lower PE index (the event priority),
and `sync` skips the switch when no other event can come first, so the
order of bookings is a function of simulated time alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import simpy
from greenlet import greenlet


class PeThread:
    """The greenlet of one PE, resumed by callbacks of the SimPy events it waits on."""

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
        self.wake_at(0, self._event())

    def _event(self) -> simpy.Event:
        event = self.env.event()
        event.callbacks.append(self._resume)
        return event

    def _resume(self, _event: simpy.Event) -> None:
        """SimPy fired this PE's event: run its kernel until it waits again or ends."""
        self.events += 1
        self.glet.switch()

    @property
    def finished(self) -> bool:
        return self.glet.dead

    # The two calls below run inside the kernel's greenlet.

    def sync(self, t: int) -> None:
        """Return once every event before simulated time `t` has run."""
        if t < self.env.peek():
            return
        self.wake_at(t, self._event())
        self._switch_out()

    def block(self, event: simpy.Event, what: str) -> None:
        """Wait for `event` (fired by another PE); `what` names the wait for deadlock reports."""
        self.blocked_on = what
        event.callbacks.append(self._resume)
        self._switch_out()
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

    def _switch_out(self) -> None:
        self.switches += 1
        self.glet.parent.switch()


def run(env: simpy.Environment, threads: list[PeThread],
        targets: list[Callable[[], Any]]) -> None:
    """Start every PE on its target and run the simulation until no event is left."""
    for thread, target in zip(threads, targets, strict=True):
        thread.start(target)
    env.run()
