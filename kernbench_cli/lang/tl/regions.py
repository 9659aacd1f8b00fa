"""`tl`'s named regions: ``with tl.region("attn"): …`` marks the commands issued inside.

A region issues no command and takes no time: the PE's program keeps marks
(command index, region) where its commands enter and leave one, and the
report times each region on the critical path, by engine and in the
timeline. Nested regions make paths ("layer/attn"), interned once per launch.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager

from kernbench_cli.errors import KernelError, clip
from kernbench_cli.lang.tl.core import Core, _line
from kernbench_cli.stream import region_name_problem


class Regions(Core):
    """`tl.region`."""

    def region(self, name: str) -> AbstractContextManager[None]:
        """``with tl.region("attn"): …``: the commands issued inside belong to region `name`
        (nested regions make paths, "layer/attn"), which the report times: on the critical
        path, by engine, and in the timeline. No command, no time."""
        problem = region_name_problem(name)
        if problem is not None:
            raise KernelError(f"tl.region: {problem}, got {clip(name)}")
        return _Region(self, name)

    def _left_open(self) -> KernelError | None:
        """At the kernel's end: the error of a region it entered and never left (its
        `__enter__` called by hand), the commands after it booked to the region; its
        `at_line` is where it was entered (the report's kernel line: no frame of the
        kernel's is left to find it in)."""
        inner = self._open
        if inner is None:
            return None
        error = KernelError(f"tl.region({clip(inner.name)}) was entered and never left: "
                            "the kernel ended inside it (`with tl.region(...):` leaves it)")
        error.at_line = inner.line
        return error

    def _enter_region(self, region: int, at: int | None = None) -> None:
        """The commands from the next (or from command `at`) belong to `region` (an index
        of the program's regions)."""
        if region == self._region:
            return
        self._region = region
        marks = self._launch.program.region_marks[self._pid]
        if at is None:
            at = self._issued()
        if self._take is not None:  # a repetition recorded (`tl.repeat`)
            self._take.regions.append((at, region))
        if marks and marks[-1][0] == at:  # nothing issued in the region just left
            marks.pop()
        if not marks or marks[-1][1] != region:
            marks.append((at, region))


class _Region:
    """The context manager of `Regions.region`: marks where the PE's commands enter and
    leave. Regions nest: one is left before the region it was entered in, and one
    object is entered once at a time (either misuse would book the commands after it to
    a region they are not in)."""

    __slots__ = ("before", "inside", "line", "name", "outer", "tl")

    def __init__(self, tl: Regions, name: str):
        self.tl, self.name, self.outer = tl, name, 0
        self.inside: int | None = None  # the region entered, until it is left
        self.before: _Region | None = None  # the region open when this one was entered
        self.line = 0  # the kernel line it was entered at

    def __enter__(self) -> None:
        tl = self.tl
        if self.inside is not None:
            raise KernelError(f"tl.region({clip(self.name)}) entered again while inside it: "
                              "call tl.region for each `with`")
        self.outer = tl._region
        program = tl._launch.program
        path = f"{program.regions[self.outer]}/{self.name}".lstrip("/")
        self.inside = tl._launch.region_index(path)
        tl._enter_region(self.inside)
        self.before, tl._open = tl._open, self
        self.line = _line(sys._getframe(1), tl._kernel_file, tl._lines)

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        tl, inside, self.inside = self.tl, self.inside, None
        if kind is None and inside is None:
            raise KernelError(f"tl.region({clip(self.name)}) left without being entered")
        if kind is None and tl._region != inside:
            regions = tl._launch.program.regions
            raise KernelError(f"tl.region({clip(self.name)}) left while "
                              f"{clip(regions[tl._region])}, entered inside it, is still open: "
                              "regions nest (`with`)")
        tl._enter_region(self.outer)
        tl._open, self.before = self.before, None
