"""IPCQ rings (ADR-0023/0030): per PE, one inbound ring per mesh direction.

A ring has `slots` slots of `slot_size` bytes, which are also the sender's
credits. A message is split into slot-sized chunks; each chunk needs a free
slot before the sender's DMA may move it, and frees its slot when the
receiver has taken it (its `recv` posted and the chunk arrived) and the
credit has travelled back to the sender (the reverse route's latency).

Two senders on the same side of a PE share its ring. A posted `recv` takes
chunks in arrival order and sets aside those of other senders (the
"unexpected message" queue of MPI), freeing their slots, so a sender that
got there first cannot starve the one the receiver waits for.

A chunk leaves its slot when the receiver's PE_DMA has copied it out (into
the receive's tensor, or aside): the slot, and so the sender's credit, is
free from the end of that copy (`take`'s `copy` says when). The ring
keeps only timing and the chunks in flight (the values went through the
functional pass); blocking and waking PEs is the timing pass's business.
"""

from __future__ import annotations

import functools
import heapq
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

DIRECTIONS = ("E", "W", "N", "S")
OPPOSITE = {"E": "W", "W": "E", "N": "S", "S": "N"}


@functools.cache
def _all_free(slots: int) -> tuple[tuple[int, int, int, int], ...]:
    """A ring's credits before anything is sent: each slot free at 0 (a sorted heap)."""
    return tuple((0, s, -1, 0) for s in range(slots))


def chunks_for(nbytes: int, slot_bytes: int) -> int:
    """Slot-sized chunks of a message of `nbytes` (an empty message still takes one)."""
    return max(1, -(-nbytes // slot_bytes))


class Chunk(NamedTuple):
    sender: int  # global pid
    index: int  # chunk number in the message
    count: int  # chunks in the message
    nbytes: int  # bytes of the whole message
    slot: int
    arrival: int
    back: int  # ps for the slot's credit to reach the sender (the reverse route's latency)
    who: int = -1  # the send that moved it (the timing pass's op reference)


class Ring:
    """One inbound ring: `credits` are the times at which its free slots free up.

    A plain class with slots, not a dataclass: a rack builds 32,768 of them per
    system (`hw.system`), and a timing pass that splits its classes builds the system
    again."""

    __slots__ = ("bytes", "chunks", "credits", "gave", "ops", "receiver_waiting", "seen",
                 "sender_waiting", "slot_bytes", "slot_ps", "slots", "stash", "trail", "where")

    def __init__(self, slots: int, slot_bytes: int):
        self.slots = slots
        self.slot_bytes = slot_bytes
        #: heap of (time the slot is free, slot, the receive that freed it or -1, when
        #: that receive's copy out of the slot ended); every slot free at 0 to begin with
        self.credits: list[tuple[int, int, int, int]] = list(_all_free(slots))
        self.chunks: deque[Chunk] = deque()
        self.sender_waiting: list = []  # PEs out of credits, to wake
        self.receiver_waiting: Any = None  # the PE waiting for a chunk, to wake
        #: with an op log: (time, +1) when a sender uses a credit, (time, -1) when it is back
        self.trail: list[tuple[int, int]] | None = None
        #: the timing pass's (PE, direction) of it, and (time, PE) of the last PE that used
        #: its credits or its chunks (keyed by the timing pass)
        self.where: tuple = ()
        self.seen: dict = {}
        self.gave: list | None = None  # if a list, `take` adds the credits it gives back
        #: taken for a later recv: (chunk, when its copy out of the slot ended), by sender
        self.stash: dict[int, deque[tuple[Chunk, int]]] = {}
        self.slot_ps = 0  # slot-time chunks sat in slots, arrival to copied out, summed
        self.ops = 0  # chunks that passed through
        self.bytes = 0  # and their bytes

    def chunks_for(self, nbytes: int) -> int:
        return chunks_for(nbytes, self.slot_bytes)

    def take_credit(self) -> tuple[int, int, int, int] | None:
        """(time the slot is free, slot, who freed it, when its copy out ended) of the
        earliest free slot, or None."""
        return heapq.heappop(self.credits) if self.credits else None

    def give_credit(self, t: int, slot: int, who: int = -1, copied: int = 0) -> None:
        heapq.heappush(self.credits, (t, slot, who, copied))

    @property
    def busy_ps(self) -> int:
        """The ring's busy time as a share of its capacity: slot-time over its slots
        (a ring whose every slot held a chunk for the whole run is busy the whole run)."""
        return self.slot_ps // self.slots

    def take(self, sender: int, copy: Callable[[Chunk], int],
             who: int = -1) -> tuple[Chunk, int] | None:
        """The next chunk from `sender` and when it was out of its slot: set aside earlier,
        or the ring's oldest chunks taken until one is from `sender`. `copy(chunk)` copies a
        chunk out of its slot and returns when that ended: its slot frees then (the credit
        is back at the sender a way back later); `who` is the receive taking them.

        None when the ring holds nothing more from anyone.
        """
        waiting = self.stash.get(sender)
        if waiting:
            return waiting.popleft()
        while self.chunks:
            chunk = self.chunks.popleft()
            copied = copy(chunk)
            self.give_credit(copied + chunk.back, chunk.slot, who, copied)
            if self.gave is not None:
                self.gave.append((copied + chunk.back, chunk.slot, who, copied))
            if self.trail is not None:
                self.trail.append((copied + chunk.back, -1))
            self.slot_ps += copied - chunk.arrival
            self.ops += 1
            size = chunk.nbytes - chunk.index * self.slot_bytes
            self.bytes += size if size < self.slot_bytes else self.slot_bytes
            if chunk.sender == sender:
                return chunk, copied
            self.stash.setdefault(chunk.sender, deque()).append((chunk, copied))
        return None
