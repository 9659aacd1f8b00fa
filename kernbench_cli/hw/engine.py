"""The in-order engine: what PE_DMA, PE_GEMM and PE_MATH have in common."""

from __future__ import annotations

from kernbench_cli.stream import NONE


def cycles_to_ps(cycles: int, clock_hz: int) -> int:
    """Picoseconds of `cycles` at `clock_hz`, rounded up (exact at 1 GHz, 1.25 GHz, …)."""
    return -(-cycles * 10**12 // clock_hz)


class InOrderEngine:
    """Runs one command at a time in arrival order.

    Needs no process or queue of its own: a command starts at
    ``max(ready, free_at)`` and the engine is free again when it ends.
    `busy_ps` and `ops` feed the per-engine report.
    """

    __slots__ = ("busy_ps", "free_at", "last", "ops")

    def __init__(self) -> None:
        self.free_at = 0
        self.busy_ps = 0
        self.ops = 0
        self.last = -1  # who ran last (the timing pass's op reference), -1: nobody

    def occupy(self, ready: int, duration_ps: int) -> tuple[int, int]:
        """Run a command of `duration_ps` that may start at `ready`; (start, end)."""
        start = ready if ready > self.free_at else self.free_at
        end = start + duration_ps
        self.free_at = end
        self.busy_ps += duration_ps
        self.ops += 1
        return start, end


def tcm_at(base: int, offset: int, size: int) -> int | None:
    """The address of a tensor's TCM offset in the stream, `offset`, in the TCM of `size`
    bytes at `base`: from `base`, or, negative, from the top (a large tensor's: see
    `FreeListPool`); None for NONE (a view has no TCM of its own)."""
    if offset >= 0:
        return base + offset
    return None if offset == NONE else base + size + offset
