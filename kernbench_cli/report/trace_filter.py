"""What part of a run the timeline draws: `--trace-pes` and `--trace-window`.

A rack's full timeline is gigabytes; a window of time on a few PEs is what
one looks at. The filter is applied as the timeline is built, so what is left
out costs no memory. An event is kept when it belongs to a kept PE (a shared
resource's transfer by the PE that made it, a ring by the PE it delivers to)
and overlaps the window, ends included; kept slices are drawn whole, not cut
at the window's edges (a cut slice would show a duration the model never had).
A counter starts at the window with the value it had then.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernbench_cli.config.units import UnitError, format_time_ps, parse_time_ps
from kernbench_cli.errors import KernbenchError, clip


@dataclass(frozen=True)
class TraceFilter:
    """The PEs (None: all) and the window [start_ps, end_ps] (end None: to the end)."""

    pes: frozenset[int] | None = None
    start_ps: int = 0
    end_ps: int | None = None

    def pe(self, pid: int) -> bool:
        return self.pes is None or pid in self.pes

    def overlaps(self, start_ps: int, end_ps: int) -> bool:
        return end_ps >= self.start_ps and (self.end_ps is None or start_ps <= self.end_ps)

    def to_dict(self) -> dict:
        """What the timeline's ``otherData`` says it shows (only what was filtered)."""
        out: dict = {}
        if self.pes is not None:
            out["trace_pes"] = sorted(self.pes)
        if self.start_ps or self.end_ps is not None:
            out["trace_window_ps"] = [self.start_ps, self.end_ps]
        return out


#: a PE index or an inclusive range of them (digits enough for any topology, and int() can
#: read them)
_PES = re.compile(r"(\d{1,18})(?:\s*-\s*(\d{1,18}))?", re.ASCII)


def parse_pes(text: str, num_pes: int) -> frozenset[int]:
    """``--trace-pes 0-3,8,12-15``: PE indexes and inclusive ranges, each below `num_pes`."""
    what = f"--trace-pes {clip(text)}"
    pes: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        match = _PES.fullmatch(part)
        if match is None:
            raise KernbenchError(f"{what}: {clip(part)} is not a PE index or a range of "
                                 "them (give e.g. 0-3,8)")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        if last < first:
            raise KernbenchError(f"{what}: the range {part} runs backwards")
        if last >= num_pes:
            raise KernbenchError(f"{what}: PE {last} does not exist: the topology has "
                                 f"{num_pes:,} PEs (0-{num_pes - 1})")
        pes.update(range(first, last + 1))
    return frozenset(pes)


def parse_window(text: str) -> tuple[int, int]:
    """``--trace-window 10us,25us``: a start and an end in picoseconds, the end after it."""
    what = f"--trace-window {clip(text)}"
    parts = text.split(",")
    if len(parts) != 2:
        raise KernbenchError(f"{what}: give START,END, two times such as 10us,25us")
    try:
        start, end = (parse_time_ps(part.strip()) for part in parts)
    except UnitError as exc:
        raise KernbenchError(f"{what}: {exc}") from None
    if end <= start:
        raise KernbenchError(f"{what}: the end {format_time_ps(end)} is not after the start "
                             f"{format_time_ps(start)}")
    return start, end


def trace_filter(pes: str | None, window: str | None, num_pes: int,
                 chrome_trace: object) -> TraceFilter | None:
    """The filter of the options as given (None: no filter), refused without a timeline to
    filter (`chrome_trace` None)."""
    if pes is None and window is None:
        return None
    if chrome_trace is None:
        given = "--trace-pes" if pes is not None else "--trace-window"
        raise KernbenchError(f"{given} filters the timeline: it goes with --chrome-trace")
    start, end = parse_window(window) if window is not None else (0, None)
    return TraceFilter(parse_pes(pes, num_pes) if pes is not None else None, start, end)


def check_window(keep: TraceFilter | None, latency_ps: int) -> None:
    """A window that starts after the run ended would draw nothing: an error, before any
    file is written."""
    if keep is not None and keep.start_ps > latency_ps:
        raise KernbenchError(f"--trace-window starts at {format_time_ps(keep.start_ps)}, after "
                             f"the run ended (t={format_time_ps(latency_ps)}): nothing to draw")
