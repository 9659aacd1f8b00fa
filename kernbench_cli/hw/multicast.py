"""A class's sends as multicasts (`hw.symmetry`), checked by what the sender observes.

The members of a class send at one offset to PEs of several receiving classes. The
representative's send goes to the ring of every receiving class's representative (a
*copy*), each copy on a credit of its own ring, and the chunk a copy puts in a ring
carries that ring's slot (its receiver gives that slot back). The representative's
timeline stands for a member's only if the member's own copy's credit looks the same
*to the sender*, which observes of a credit:

- whether it had one at once, or waited, and then when it woke (a sender waiting on
  several rings is woken by each; a copy that would have woken it at another time, or
  not yet, is a different trajectory);
- when its chunk may go: ``max(credit back, data ready)``: credits that come back at
  different times, all before the data is ready, are the same trajectory;
- which receive freed it and when its copy out of the slot ended, where the critical
  path reads it: if the chunk waited for the credit, or PE_CPU did (`Ipcq.send`'s
  two causes);
- its slot, in the op log (the slot's address).

A ring gives its slots back in the order its chunks came, so copies of one sender's
chunks get the same slots unless their times differ where the sender sees them (none
did in the golden cases). Copies that look different split the class by the copy each
member's send goes to (`splits`); the pass is timed again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial

from kernbench_cli.hw.dedup import INDEX
from kernbench_cli.hw.ipcq import Ring

AT_ONCE = "at once"  # how a copy got its credit: there was one when the sender asked


def _plain(credit: tuple[int, int, int, int]) -> tuple:
    """A credit as its copies compare: time, slot, and the receive that freed it by its
    command index (receivers of different classes are different PEs), and when that
    receive's copy ended (where the critical path goes on)."""
    free_at, slot, freer, copied = credit
    return free_at, slot, freer < 0, freer & INDEX, copied


class Multicast:
    """The copies of the timing pass `timing`'s multicast sends, and what they showed."""

    def __init__(self, timing):
        self.timing = timing
        self.rings: dict[tuple[int, int], list[Ring]] = {}  # (class, offset) -> rings
        #: (sender's representative, offset, ring's PE -> group): a send whose copies
        #: looked different; group 0 looked as the representative's own copy did
        self.apart: set[tuple[int, int, tuple[tuple[int, int], ...]]] = set()
        self.hidden = 0  # chunks whose copies' credits differed where the sender looks not
        self.waited = 0  # chunks whose sender waited on several rings

    def copies(self, pid: int, dst: int, ring: Ring) -> list[Ring]:
        """The rings a send from `pid` to `dst` goes to: `ring` (of `dst`'s representative)
        and, if `pid` stands for a class, those of the other classes its members send to
        at the same offset."""
        timing = self.timing
        classes = timing.classes
        c, off = classes.of[pid], dst - pid
        hit = self.rings.get((c, off))
        if hit is None:
            rep_of, direction = timing.rep_of, ring.where[1]
            others = sorted({rep_of[m + off] for m in classes.members[c]} - {rep_of[dst]})
            ring_of = timing.routes.ring
            hit = self.rings[(c, off)] = [ring] + [ring_of(to, direction) for to in others]
        return hit

    def credits(self, proc, pe, i: int, dst: int, rings: list[Ring], t: int,
                ready: int) -> Iterator[None]:
        """A credit of each of `rings` for a chunk of send `i` of `pe` to PE `dst`
        (issued at `t`, data ready at `ready`), waiting as the representative would;
        returns them (None: a copy that has none yet when the representative goes on)
        after noting how each looked (`_look`)."""
        timing = self.timing
        credits = [ring.take_credit() for ring in rings]
        if timing.ties is not None:
            for ring, credit in zip(rings, credits, strict=True):
                timing.ipcq.credit_used(ring, pe.pid, credit)
        ways: list = [AT_ONCE if c is not None else None for c in credits]
        if credits[0] is None:
            yield from self._wait(proc, pe, i, rings, credits, ways,
                                  partial(timing.ipcq.full_ring, dst, rings[0]))
        self._look(pe, dst, rings, credits, ways, t, ready)
        return credits

    def _wait(self, proc, pe, i: int, rings: list[Ring], credits: list, ways: list,
              waiting: Callable[[], str]) -> Iterator[None]:
        """Wait, on every copy's ring still without a credit, until the representative's
        own (the first) has one; each ring that wakes the sender says when (`ways`;
        `waiting`: what it waits for, in words if it is left stuck)."""
        timing = self.timing
        env, ties = timing.env, timing.ties
        left = [k for k, c in enumerate(credits) if c is None]
        proc.offers = offers = {}
        self.waited += 1
        while credits[0] is None:
            for k in left:
                rings[k].sender_waiting.append(proc)
            proc.at, proc.waiting = i, waiting
            yield
            for k in left:
                rings[k].sender_waiting.remove(proc)
            proc.waiting = ""
            now = env.now
            for k in [k for k in left if offers.get(id(rings[k])) == now]:
                del offers[id(rings[k])]
                credits[k] = rings[k].take_credit()
                if ties is not None:
                    timing.ipcq.credit_used(rings[k], pe.pid, credits[k], woken=True)
                if credits[k] is not None:
                    ways[k] = ("woke", now)
            left = [k for k in left if credits[k] is None]
            if credits[0] is None and offers:  # another copy woke it: on to the next offer
                proc.wake_by(min(offers.values()))
        proc.offers = None
        pe.cpu.wait_until(env.now)

    def _look(self, pe, dst: int, rings: list[Ring], credits: list, ways: list, t: int,
              ready: int) -> None:
        """Group the copies by what the sender observes of their credits (the module
        docstring); a send whose copies fall into more than one group goes to `apart`."""
        cpu_waited = pe.cpu.time > t
        keys = []
        for k, credit in enumerate(credits):
            if credit is None:
                keys.append(("no credit", k))
                continue
            free_at, slot = credit[:2]
            cause = free_at > ready or (free_at > t and cpu_waited)
            keys.append((ways[k], max(free_at, ready), slot,
                         _plain(credit)[2:] if cause else None))
        groups: dict = {}
        numbers = [groups.setdefault(key, len(groups)) for key in keys]
        if len(groups) > 1:
            self.apart.add((pe.pid, dst - pe.pid,
                            tuple((ring.where[0], g) for ring, g in zip(rings, numbers,
                                                                        strict=True))))
            return
        first = _plain(credits[0])
        if any(_plain(c) != first for c in credits):
            self.hidden += 1

    def splits(self, classes) -> dict[int, tuple]:
        """Per member of a class whose copies looked different, the group of the copy its
        own send went to, per such send: the key that splits the class (`hw.symmetry`)."""
        out: dict[int, list] = {}
        rep_of = classes.rep_of
        for rep, off, groups in sorted(self.apart):
            group = dict(groups)
            for m in classes.members[classes.of[rep]]:
                out.setdefault(m, []).append(group[rep_of[m + off]])
        return {m: tuple(g) for m, g in out.items()}

