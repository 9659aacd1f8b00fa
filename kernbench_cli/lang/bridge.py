"""The one place greenlet is used: each PE's kernel in its own greenlet (the functional pass).

A PE's kernel runs as plain Python, in program order, from its first line to
its last, unless a `recv` finds its message not yet sent: then the kernel
switches to the hub, which runs the next PE that can run, and the `send`
that delivers the message makes the receiver runnable again. PEs start in
PE-index order and resume in the order messages free them. Nothing a kernel
computes depends on that order: a message goes from one sender to one
receiver, which takes that sender's messages in the order they were sent.

No time passes here: timing is the timing pass's business (`hw.timing`).
When no PE can run and some still wait, the kernel has deadlocked; the
waiting PEs' streams end with the receive they wait in.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable
from typing import Any

from greenlet import GreenletExit, greenlet

from kernbench_cli.lang.confine import KernelMisuse

#: what a kernel that switches greenlets itself is told, at the line that switched
SWITCHED = ("a kernel may not switch greenlets itself (each PE's kernel runs in one; a "
            "`recv` waits by handing the turn on)")


class Dropped(GreenletExit):
    """A waiting PE's kernel ended from outside (its greenlet dropped when the pass
    stopped), as against a `GreenletExit` the kernel's own code raised (its failure)."""


class PeThread:
    """The greenlet of one PE's kernel."""

    __slots__ = ("glet", "hub", "pid", "waiting")

    def __init__(self, hub: Hub, pid: int):
        self.hub = hub
        self.pid = pid
        self.glet: greenlet | None = None
        self.waiting = False  # blocked in a receive

    @property
    def finished(self) -> bool:
        return self.glet is not None and self.glet.dead

    def block(self) -> None:
        """Wait (inside the kernel's greenlet) until another PE calls `wake`."""
        self.waiting = True
        self.hub.switches += 1
        try:
            self.hub.glet.switch()
        except GreenletExit:
            raise Dropped from None

    def wake(self) -> None:
        """Make a PE waiting in `block` runnable again."""
        if self.waiting:
            self.waiting = False
            self.hub.ready.append(self)


class Hub:
    """Runs PE kernels until each has ended or waits for a message that never comes."""

    def __init__(self) -> None:
        self.ready: deque[PeThread] = deque()
        self.switches = 0
        self.glet: greenlet | None = None
        self.current: PeThread | None = None  # the PE whose kernel runs (or ran last)
        self.threads: list[PeThread] = []

    def thread(self, pid: int) -> PeThread:
        return PeThread(self, pid)

    def run(self, threads: list[PeThread], targets: list[Callable[[], Any]]) -> None:
        """Run `targets[i]` as PE `threads[i]`'s kernel; returns when nothing can run."""
        self.glet = greenlet.getcurrent()
        self.threads = threads
        for thread, target in zip(threads, targets, strict=True):
            thread.glet = greenlet(target, parent=self.glet)
        self.ready.extend(threads)
        while self.ready:
            thread = self.current = self.ready.popleft()
            self.switches += 1
            self._turn(thread)

    def stop(self) -> None:
        """End the kernels still waiting in a receive (a deadlock, or a PE that failed
        while another waited on it), once the run is done with them: left suspended,
        their greenlets' frames held the whole run for the life of the process (a `rack`
        system a failed run, in a notebook). Each is thrown `GreenletExit` (`block`
        raises `Dropped`) and unwinds: a kernel's own `finally` code runs then, and what
        it raises is dropped (the run's result or error is made already)."""
        for thread in self.threads:
            if thread.glet is not None and not thread.glet.dead:
                with contextlib.suppress(Exception):  # the kernel's clean-up, after its run
                    thread.glet.throw()
            thread.glet = None
        self.threads, self.current = [], None

    @staticmethod
    def _turn(thread: PeThread) -> None:
        """PE `thread`'s kernel run until it ends or waits in a receive. A kernel that
        handed the turn back otherwise (a greenlet switch or throw of its own) is failed
        there with `SWITCHED`, so its stream does not end short as if it had finished."""
        try:
            thread.glet.switch()
        except BaseException:
            if thread.glet.dead or thread.waiting:
                raise  # raised on the way out of the kernel, not thrown by it
        while not (thread.glet.dead or thread.waiting):
            thread.glet.throw(KernelMisuse(SWITCHED))
