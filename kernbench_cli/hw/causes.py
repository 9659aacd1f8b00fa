"""Why an operation started when it did, packed in one integer, for the critical path.

A cause and the operation it points at are packed as
``cause << CAUSE_SHIFT | pid << PE_SHIFT | index``; `index` counts a PE's
commands, then its composites' tile operations (`because`). The walk's
steps (`hw.walk`, `hw.dma`, `hw.gemm`, `hw.pe_math`) record one per operation;
`sim.critical` unpacks them.
"""

from __future__ import annotations

START, ISSUED, SCHEDULER, PRODUCER, ENGINE, CREDIT, MESSAGE, QUEUE, TCM = range(9)
CAUSES = ("start", "CPU issue", "scheduler", "producer", "engine busy", "IPCQ credit",
          "IPCQ message", "queue full", "TCM")
PE_SHIFT, CAUSE_SHIFT = 36, 58
NOBODY = -1


def because(cause: int, ref: int) -> int:
    """`cause` and the operation `ref` it points at, packed (NOBODY: none)."""
    return cause << CAUSE_SHIFT | ref if ref >= 0 else cause << CAUSE_SHIFT | (1 << PE_SHIFT) - 1


def by(cause: int) -> int:
    """`cause` packed alone: ``by(cause) | ref`` is ``because(cause, ref)`` for a `ref` >= 0."""
    return cause << CAUSE_SHIFT
