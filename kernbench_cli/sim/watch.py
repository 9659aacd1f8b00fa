"""What a run is doing now, for a progress line: the pass, and how far it got.

`run_kernel` and `replay_trace` fill a `Watch` as they go (setup, with the
host's counts of placements; the functional pass; the timing pass); another thread
(the CLI's spinner, or its plain progress lines) reads it with `text()`.
Reading plain counters another thread writes is safe under the GIL, and the
passes pay nothing for it. A `Watch` may be told (`on_begin`) when a pass
begins, in the pass's own thread: the CLI prints the estimate of a big run
(`estimate`) there, before the timing pass starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kernbench_cli.config.units import format_time_ps

#: Runs with at least this many commands to time get an estimate before the timing pass
#: (`estimate`). The timing pass (with the report after it) times 5,000-20,000 commands a
#: second on the shipped kernels here, so below this a run is done within seconds, and
#: above it a run takes long enough to want to know how long. Commands, not seconds:
#: whether the line is printed does not depend on how loaded the machine is.
ESTIMATE_FROM = 100_000

#: The timing pass and its report take about this many times the functional pass's wall
#: time per command: measured 2.9-4x on the largest shipped runs on `sip` (all_reduce,
#: 114,048 commands; gqa_attention), and 0.6-12x on small ones, where verification or
#: start-up weighs more (those are under `ESTIMATE_FROM`).
TIMING_PER_FUNCTIONAL = 3.0


class Watch:
    def __init__(self, on_begin: Callable[[Watch], None] | None = None) -> None:
        self.phase = "setting up"
        self.host: Any = None  # the setup's Host, once made (`run_kernel` sets it)
        self.launch: Any = None  # the functional pass's Launch, once it runs
        self.timing: Any = None  # the timing pass's Timing, once it runs
        self.since = time.perf_counter()
        self.began = False  # whether a phase began (a replay's first is its timing pass)
        #: the functional pass's (commands, wall seconds, commands of them copied, not run:
        #: `tl.repeat`), once it has ended
        self.functional: tuple[int, float, int] | None = None
        self.on_begin = on_begin

    def begin(self, phase: str, what: Any) -> None:
        now = time.perf_counter()
        if self.phase == "functional pass" and self.launch is not None:
            self.functional = (self.launch.commands, now - self.since, self.launch.copied)
        self.phase = phase
        if phase == "setting up":
            self.host = what
        elif phase == "functional pass":
            self.launch = what
        else:
            self.timing = what
        self.since, self.began = now, True
        if self.on_begin is not None:
            self.on_begin(self)

    def text(self) -> str:
        """One line: the pass, commands done and their rate, or simulated time reached; in
        setup, the placements made (of those expected, if the kernel said) and their bytes,
        and the inputs' bytes."""
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
        if self.phase == "setting up" and self.host is not None:
            return f"setting up: {_setup(self.host)}, {wall:.1f} s"
        if self.phase == "setting up" and self.began:
            return f"setting up: building the system, {wall:.1f} s"
        return self.phase


def estimate(watch: Watch) -> str | None:
    """The line a big run prints as its timing pass begins: the commands it is to time and,
    after a functional pass, about how long that takes (`TIMING_PER_FUNCTIONAL` times the
    functional pass's time a command it ran; the commands it copied, `tl.repeat`, cost it
    next to nothing, and the timing pass times them as any other). With dedup on it is an
    upper bound, and says so: the classes of PEs that time alike, each timed once, are
    found inside the pass. None before the timing pass, or under `ESTIMATE_FROM`
    commands."""
    if watch.phase != "timing pass" or watch.timing is None:
        return None
    program = watch.timing.program
    commands = sum(stream.commands() for stream in program.streams)
    if commands < ESTIMATE_FROM:
        return None
    pes = sum(1 for stream in program.streams if len(stream))
    text = f"estimate: {commands:,} commands to time on {pes:,} PE{'s' if pes != 1 else ''}"
    # with dedup, PEs that time alike are timed once: the classes are not known yet
    alike = "; less where PEs time alike" if getattr(watch.timing, "dedup", False) else ""
    if watch.functional is None:
        return text + f" (a replay: no functional pass to time it by{alike})"
    issued, seconds, copied = watch.functional
    rate = max(issued - copied, 1) / max(seconds, 1e-9)  # a copied command costs next to none
    expected = commands / rate * TIMING_PER_FUNCTIONAL
    run = f" run ({copied:,} more copied)" if copied else ""
    return (f"{text}: about {_duration(expected)} ({TIMING_PER_FUNCTIONAL:g}x the functional "
            f"pass's {rate:,.0f} commands/s{run}{alike})")


def _setup(host: Any) -> str:
    """How far a host's setup got: placements made (of expected) and bytes, inputs."""
    made, expected = host.placements, host.expected
    of = f" of {expected:,}" if expected is not None and expected >= made else ""
    return (f"{made:,}{of} placements ({_size(host.placed_bytes)}), inputs "
            f"{_size(host.drawn_bytes)}")


def _size(nbytes: int) -> str:
    """Bytes to a tenth of the largest binary unit they reach: 1.5 GiB, 12.0 KiB, 80 B."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.1f} {unit}"
    return f"{nbytes} B"


def _duration(seconds: float) -> str:
    """A wall time as people say it: 40 s, 3.5 min, 1.2 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
