"""The timing pass's IPCQ: sends on credits, deliveries, receives, and ties on rings.

`Ipcq` is held by `hw.timing.Timing` (`timing.ipcq`). A send's chunks each
take a credit of the receiver's ring (the sender waits for one if there is
none) and are delivered at their arrival; a receive takes them (waiting for
them) and PE_DMA copies each out of its slot, giving its credit back. When
representatives stand for classes of PEs (`hw.dedup`), every use of a ring's
chunks or credits at one time by two PEs is noted (`ties`), as the order of
PE indexes broke it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from heapq import heappop
from typing import TYPE_CHECKING

from kernbench_cli.hw.causes import (
    CREDIT,
    ENGINE,
    ISSUED,
    MESSAGE,
    PE_SHIFT,
    PRODUCER,
    SCHEDULER,
    because,
)
from kernbench_cli.hw.dma import LOCAL
from kernbench_cli.hw.engine import tcm_at
from kernbench_cli.hw.engines import PE_CPU, PE_DMA
from kernbench_cli.hw.ipcq import Chunk, Ring
from kernbench_cli.hw.network import LEDGER
from kernbench_cli.hw.pe import Pe
from kernbench_cli.hw.process import Composites, PeProcess

if TYPE_CHECKING:
    from kernbench_cli.hw.timing import Timing

IPCQ = LEDGER.index("ipcq")


class Ipcq:
    """The IPCQ side of timing pass `timing` (see the module)."""

    __slots__ = ("composites", "env", "fair", "issue", "leaves", "program", "routes",
                 "system", "timing")

    def __init__(self, timing: Timing):
        self.timing = timing  # its ties, multicast, representatives and op log change by pass
        self.env, self.system, self.program = timing.env, timing.system, timing.program
        self.issue, self.fair, self.leaves = timing.issue, timing.fair, timing.leaves
        self.routes, self.composites = timing.routes, timing.composites

    def _met(self, ring: Ring, pid: int) -> None:
        """PE `pid` uses `ring`'s chunks (a sender puts one, the receiver takes them) now: a
        tie with the last PE that used them at this time (`ties`)."""
        now, seen = self.env.now, ring.seen.get("chunks")
        if seen is not None and seen[0] == now and seen[1] != pid:
            self.timing.ties.add((*ring.where, seen[1], pid, "chunks"))
        ring.seen["chunks"] = (now, pid)

    def credit_used(self, ring: Ring, pid: int, used, woken: bool = False) -> None:
        """PE `pid` used `ring`'s credits now: a sender took credit `used` (None: there was
        none), or the receiver gave back the list `used`. A tie (`ties`) with an earlier
        use at this time by another PE if the other order would have changed what a
        sender took: it took a credit given back then, found none, or one later than
        a credit given back after it. A sender the receiver woke (`woken`) went after
        the receiver's credits whatever the order of PEs."""
        now = self.env.now
        seen = ring.seen.get("credits")
        if seen is None or seen[0] != now:
            seen = ring.seen["credits"] = (now, [])
        owner, giving = ring.where[0], isinstance(used, list)
        for other, before in seen[1]:
            if other == pid or (woken and other == owner):
                continue
            if isinstance(before, list) == giving:  # two senders (one receiver per ring)
                matters = True
            elif giving:  # `before` was taken, then `used` given
                matters = before is None or any(c < before for c in used)
            else:
                matters = used is None or used in before
            if matters:
                self.timing.ties.add((*ring.where, other, pid, "credits"))
        seen[1].append((pid, used))

    # ------------------------------------------------------------------ IPCQ

    def send(self, proc: PeProcess, pe: Pe, comps: Composites, i: int) -> Iterator[None]:
        """SEND `i`: PE_CPU issues it, and once global time reaches the issue, its chunks go,
        each on a credit of the receiver's ring (waits for one) once its data is ready (its
        producer ended); returns (issue, when the last chunk arrives)."""
        t, ready = pe.scheduler.enqueue(pe.cpu, self.issue.send)
        if t >= self.env.peek():
            proc.at = i
            proc.wake_at(t)
            yield
        stream = self.program.streams[pe.pid]
        me = pe.pid << PE_SHIFT | i
        why = because(SCHEDULER, pe.scheduler.last) if ready > t else because(ISSUED, me)
        a = stream.a[i]
        if proc.end[a] > ready:
            ready, why = proc.end[a], because(PRODUCER, proc.made.get(a, pe.pid << PE_SHIFT | a))
        dst, nbytes = stream.arg[i], stream.size[i]
        direction, ring, route, back, private = self.routes.pair(pe.pid, dst)
        multicast = self.timing.multicast
        rings = multicast.copies(pe.pid, dst, ring) if multicast is not None else None
        if rings is not None and len(rings) == 1:
            rings = None
        cpu, log, dma, ties, credits = pe.cpu, self.timing.oplog, pe.dma, self.timing.ties, None
        slot_bytes = ring.slot_bytes
        count = max(1, -(-nbytes // slot_bytes))  # `ipcq.chunks_for`
        first = last = None
        region = self.leaves[pe.pid][i] if self.leaves else None
        shared = self.fair and not private
        for index in range(count):
            if rings is not None:
                credits = yield from multicast.credits(proc, pe, i, dst, rings, t, ready)
                credit = credits[0]
            elif ties is None and ring.credits:  # `_credit` with one at hand
                credit = heappop(ring.credits)
            else:
                credit = yield from self._credit(proc, pe, i, dst, ring)
            free_at, slot, freer, copied = credit
            if free_at > t and cpu.time > t:  # PE_CPU waited for this credit
                proc.after[i] = (cpu.time, because(CREDIT, freer))
                proc.credited[~i] = copied
            size = nbytes - index * slot_bytes
            if size > slot_bytes:
                size = slot_bytes
            if free_at > ready:
                at, chunk_why = free_at, because(CREDIT, freer)
                if first is None:
                    proc.credited[i] = copied
            else:
                at, chunk_why = ready, why
            if comps.heap:
                yield from self.composites.advance(proc, pe, comps, at)
            if region is not None:
                dma.region = region
            if shared:
                start, end = yield from self.routes.flow(proc, dma, at, size, route)
            else:
                start, end = dma.transfer(at, size, route)
            if first is None:
                first = start
                proc.start[i] = start
                proc.why[i] = because(ENGINE, dma.last) if start > at else chunk_why
            dma.last = me
            if dma.waited_on is not None:
                proc.waits[me] = (dma.waited_on, dma.waited)
            chunk = Chunk(pe.pid, index, count, nbytes, slot, end, back, me)
            self._deliver(ring, chunk, at)
            if credits is not None:
                for each, credit in zip(rings[1:], credits[1:], strict=True):
                    mine = credit[1] if credit is not None else slot  # the copy's own slot
                    self._deliver(each, chunk if mine == slot else chunk._replace(slot=mine),
                                  at)
            last = end if last is None or end > last else last
            if log is not None:
                amap = self.system.amap
                log.append(pe.pid, PE_DMA, log.code("send"), t, start, end, size, 0,
                           self._tcm(pe, stream.src[i]),
                           amap.pe_ipcq_slot_addr(*self.system.coords[dst], direction, slot),
                           i, index == 0, (dma.stream_at, dma.free_at), log.path(route[0]))
        pe.scheduler.hold(first, me)
        proc.end[i] = last
        return t, last

    def _tcm(self, pe: Pe, offset: int) -> int | None:
        """The address of a TCM offset in the stream on `pe` (op log only)."""
        return tcm_at(self.system.amap.pe_tcm_addr(*pe.coord, 0), offset, self.timing.tcm_bytes)

    def _credit(self, proc: PeProcess, pe: Pe, i: int, dst: int, ring: Ring) -> Iterator[None]:
        """A credit of `ring` for send `i` of `pe` to PE `dst`: the earliest, waited for if
        there is none."""
        ties, cpu, env = self.timing.ties, pe.cpu, self.env
        credit = ring.take_credit()
        if ties is not None:
            self.credit_used(ring, pe.pid, credit)
        while credit is None:
            ring.sender_waiting.append(proc)
            proc.at, proc.waiting = i, partial(self.full_ring, dst, ring)
            yield
            ring.sender_waiting.remove(proc)
            proc.waiting = ""
            cpu.wait_until(env.now)
            credit = ring.take_credit()
            if ties is not None:
                self.credit_used(ring, pe.pid, credit, woken=True)
        return credit

    def full_ring(self, dst: int, ring: Ring) -> str:
        """What a sender to PE `dst` waits for when `ring` has no credit."""
        return f"send to PE ({self.system.coords[dst]}): its {ring.where[1]} ring is full"

    def empty_ring(self, src: int, direction: str) -> str:
        """What a receiver waits for from PE `src` on its `direction` ring with nothing from
        it."""
        return f"recv from PE ({self.system.coords[src]}) on its {direction} ring"

    def _deliver(self, ring: Ring, chunk: Chunk, at: int) -> None:
        """Put `chunk` (its credit taken at `at`) in `ring`; wake its waiting receiver."""
        if ring.trail is not None:
            ring.trail.append((at, 1))
        ring.chunks.append(chunk)
        if self.timing.ties is not None:
            self._met(ring, chunk.sender)
        waiting = ring.receiver_waiting
        if waiting is not None:
            ring.receiver_waiting = None
            waiting.wake_at(self.env.now)
            if self.timing.ties is not None:  # it goes on after this, whatever the order of PEs
                ring.seen["chunks"] = (self.env.now, waiting.pid)

    def recv(self, proc: PeProcess, pe: Pe, comps: Composites, i: int) -> Iterator[None]:
        """RECV `i`: PE_CPU issues it, and once global time reaches the issue, it takes its
        chunks from the ring (waits for them), each copied out of its slot by PE_DMA;
        returns (issue, when the last copy is done).

        For the critical path the receive is a DMA operation: from the start of the
        copies that kept PE_DMA busy to its end, started by what the first of them
        waited for (the chunk's arrival, the engine, or the issue). Each copy is kept too
        (`proc.copies`): a credit it gave back, or PE_DMA's next operation, may have
        waited for one long before the receive ended (a chunk of another sender, copied
        aside while the receive waited for its own).
        """
        t = pe.cpu.issue(self.issue.recv)
        if t >= self.env.peek():
            proc.at = i
            proc.wake_at(t)
            yield
        stream = self.program.streams[pe.pid]
        me = pe.pid << PE_SHIFT | i
        src, nbytes = stream.arg[i], stream.size[i]
        direction, ring, _, _, _ = self.routes.pair(src, pe.pid, sending=False)
        sender = self.timing.rep_of[src] if self.timing.rep_of is not None else src
        cpu, env = pe.cpu, self.env
        slot_bytes = ring.slot_bytes
        done = t
        began = [t, because(ISSUED, me), -1]  # the copies' start, why, and the last one's end
        copy = self._copier(proc, pe, i, ring, direction, began)
        if comps.heap:  # tile operations issued before it go first on PE_DMA
            yield from self.composites.advance(proc, pe, comps, cpu.time)
        take = ring.take if self.timing.ties is None else \
            lambda sender, copy, who: self._take(ring, pe.pid, sender, copy, who)
        for _ in range(max(1, -(-nbytes // slot_bytes))):  # `ipcq.chunks_for`
            credits = len(ring.credits)
            taken = take(sender, copy, me)
            while taken is None:
                self._wake_senders(ring, credits)
                ring.receiver_waiting = proc
                proc.at = i
                proc.waiting = partial(self.empty_ring, src, direction)
                yield
                proc.waiting = ""
                cpu.wait_until(env.now)
                credits = len(ring.credits)
                taken = take(sender, copy, me)
            if ring.sender_waiting:
                self._wake_senders(ring, credits)
            if taken[1] > done:
                done = taken[1]
        cpu.wait_until(done)
        if began[2] < 0:  # every chunk was copied aside before this receive
            began[1] = because(ISSUED, me)
        proc.start[i], proc.why[i] = min(began[0], done), began[1]
        if done > t:
            proc.after[i] = (done, because(PRODUCER, me))
        log = self.timing.oplog
        if log is not None:
            amap = self.system.amap
            log.append(pe.pid, PE_CPU, log.code("recv"), t, t, done, nbytes, 0,
                       amap.pe_ipcq_slot_addr(*pe.coord, direction, 0),
                       self._tcm(pe, stream.dst[i]), i)
        proc.end[i] = done
        return t, done

    def _copier(self, proc: PeProcess, pe: Pe, i: int, ring: Ring, direction: str,
                began: list[int]) -> Callable[[Chunk], int]:
        """How RECV `i` copies each chunk it takes out of its slot of `ring` (on side
        `direction`) into TCM on PE_DMA: a function of the chunk that returns the copy's
        end. It keeps each copy in `proc.copies` and, in `began`, where the copies that
        kept PE_DMA busy began and why, and the last one's end."""
        stream, me = self.program.streams[pe.pid], pe.pid << PE_SHIFT | i
        cpu, dma, log, amap = pe.cpu, pe.dma, self.timing.oplog, self.system.amap
        slot_bytes = ring.slot_bytes
        tcm = self._tcm(pe, stream.dst[i]) if log is not None else None  # op log only
        copy_code = log.code("recv copy") if log is not None else 0
        add = proc.copies.add
        region = self.leaves[pe.pid][i] if self.leaves else 0
        row = dma.ledger[region]

        def copy(chunk: Chunk) -> int:
            size = chunk.nbytes - chunk.index * slot_bytes
            if size > slot_bytes:
                size = slot_bytes
            ready = cpu.time if cpu.time > chunk.arrival else chunk.arrival
            busy_with = dma.last
            dma.region = region
            row[IPCQ] += size * dma.weight  # through the ring's slot (energy)
            start, end = dma.transfer(ready, size, LOCAL)
            why = (because(ENGINE, busy_with) if start > ready and busy_with >= 0 else
                   because(MESSAGE, chunk.who) if chunk.arrival > cpu.time else
                   because(ISSUED, me))
            add(i, start, end, why)
            if start > began[2]:  # PE_DMA was not busy with this receive's copies
                began[0], began[1] = start, why
            began[2] = end
            dma.last = me
            if log is not None:
                log.append(pe.pid, PE_DMA, copy_code, ready, start, end, size, 0,
                           amap.pe_ipcq_slot_addr(*pe.coord, direction, chunk.slot),
                           tcm, i, False,
                           (dma.stream_at, dma.free_at))
            return end

        return copy

    def _take(self, ring: Ring, pid: int, sender: int, copy, who: int):
        """`ring.take`, its uses of chunks and credits noted if ties are looked for."""
        if self.timing.ties is None:
            return ring.take(sender, copy, who)
        self._met(ring, pid)
        ring.gave = []
        taken = ring.take(sender, copy, who)
        self.credit_used(ring, pid, ring.gave)
        ring.gave = None
        return taken

    @staticmethod
    def _wake_senders(ring: Ring, credits_before: int) -> None:
        """Wake the senders waiting on `ring` when its earliest credit is back, if taking
        chunks gave credits back. They stay waiting until they resume: a credit given
        back later may be back sooner (its way back is shorter), and wakes them sooner."""
        if len(ring.credits) > credits_before and ring.sender_waiting:
            at = ring.credits[0][0]  # a heap: the earliest credit is its head
            for proc in ring.sender_waiting:
                if proc.offers is not None:  # a multicast waiting on several rings
                    offer = max(at, proc.env.now)
                    if proc.offers.get(id(ring), offer) >= offer:
                        proc.offers[id(ring)] = offer
                proc.wake_by(at)
