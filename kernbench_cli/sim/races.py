"""Data races between PEs, in simulated time.

Memory is coherent within a PE; between PEs it is ordered only by IPCQ
messages: an access X of PE a is ordered before an access Y of PE b when a
chain of messages leads from a after X to b before Y (a sends after X, the
receiver sends on after that receive, …, b receives before Y). A write X
(a store, a composite's output) counts only from where PE a waited for it to
land: a `tl.fence()` after it (or `tl.wait` on the composite), as the timing
model makes a send after a fence wait for the stores before it. Two accesses
of different PEs to overlapping bytes of HBM or the cube SRAM race when one
is a write and

- nothing orders them ("unordered"): which one lands first is up to timing
  (a store followed by a send with no fence between them is one);
- or, for a read and a write, they overlap in simulated time ("in flight"):
  messages may order them, yet the read was still on its way when the write
  landed (a DMA completes after the CPU has moved on, and a send after a load
  does not wait for it).

An access is a load's or store's byte span (strided rows: from the first
byte to one past the last, gaps included) or a composite's operands and
output, over the time its command ran. Only memory two PEs touch (by 1 GiB
regions) is looked at, so a kernel whose PEs keep to their own data costs a
few array operations per PE.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from kernbench_cli.address.physaddr import AddressMap
from kernbench_cli.config.units import format_time_ps
from kernbench_cli.formats import nbytes
from kernbench_cli.hw.timing import Timing
from kernbench_cli.stream import COMPOSITE, LOAD, NONE, RECV, SEND, STORE, WAIT


@dataclass(frozen=True)
class Access:
    pid: int
    command: int
    write: bool
    lo: int  # first byte
    hi: int  # one past the last
    start_ps: int
    end_ps: int


@dataclass(frozen=True)
class Race:
    first: Access  # the write (of two writes: the one that started first)
    second: Access
    why: str  # "unordered" or "in flight"
    lo: int  # the bytes both touch
    hi: int

    def text(self, amap: AddressMap, shown: str, lines: list) -> str:
        a, b = self.first, self.second
        try:
            where = amap.decode(self.lo).text
        except Exception:
            where = f"{self.lo:#x}"
        verb = "writes" if b.write else "reads"
        detail = ("no message orders them (a store is ordered before a message only by "
                  "a tl.fence between them)" if self.why == "unordered" else
                  "the read was still in flight")
        return (f"race ({self.why}): PE {a.pid} at {shown}:{lines[a.pid][a.command]} writes "
                f"{self.hi - self.lo} B at {where} during [{format_time_ps(a.start_ps)}, "
                f"{format_time_ps(a.end_ps)}]; PE {b.pid} at {shown}:{lines[b.pid][b.command]} "
                f"{verb} them during [{format_time_ps(b.start_ps)}, "
                f"{format_time_ps(b.end_ps)}]: {detail}")


def find_races(timing: Timing, amap: AddressMap) -> list[Race]:
    """Every race of the run `timing` timed (at most one per pair of commands)."""
    accesses = _accesses(timing, amap)
    if not accesses:
        return []
    order = _Order(timing)
    races = []
    accesses.sort(key=lambda x: (x.lo, x.pid, x.command))
    active: list[Access] = []
    for x in accesses:
        active = [y for y in active if y.hi > x.lo]
        for y in active:
            if y.pid == x.pid or not (x.write or y.write):
                continue
            race = _race(y, x, order)
            if race is not None:
                races.append(race)
        active.append(x)
    races.sort(key=lambda r: (r.first.start_ps, r.first.pid, r.second.pid, r.lo))
    return races


def _race(x: Access, y: Access, order: _Order) -> Race | None:
    first, second = (x, y) if (x.write, -x.start_ps) > (y.write, -y.start_ps) else (y, x)
    lo, hi = max(x.lo, y.lo), min(x.hi, y.hi)
    ordered = order.before(x.pid, x.command, x.write, y.pid, y.command) or \
        order.before(y.pid, y.command, y.write, x.pid, x.command)
    if not ordered:
        return Race(first, second, "unordered", lo, hi)
    if not (x.write and y.write) and first.start_ps < second.end_ps and \
            second.start_ps < first.end_ps:
        return Race(first, second, "in flight", lo, hi)
    return None


REGION = 30  # accesses are grouped by 1 GiB of address space (a PE's slice or window)


def _accesses(timing: Timing, amap: AddressMap) -> list[Access]:
    """The HBM and SRAM accesses to memory more than one PE touches, of every command."""
    program = timing.program
    spans = []  # per PE: (command, write, lo, hi) arrays
    users: dict[int, set[int]] = {}
    for proc, stream in zip(timing.procs, program.streams, strict=True):
        cmds, writes, los, his = _spans(program, stream)
        spans.append((cmds, writes, los, his))
        for region in np.unique(np.concatenate([los >> REGION, (his - 1) >> REGION])).tolist():
            users.setdefault(region, set()).add(proc.pid)
    shared = np.array(sorted(r for r, pes in users.items() if len(pes) > 1), np.int64)
    out: list[Access] = []
    if not shared.size:
        return out
    for proc, (cmds, writes, los, his) in zip(timing.procs, spans, strict=True):
        keep = np.isin(los >> REGION, shared) | np.isin((his - 1) >> REGION, shared)
        for i, write, lo, hi in zip(cmds[keep].tolist(), writes[keep].tolist(),
                                    los[keep].tolist(), his[keep].tolist(), strict=True):
            if amap.locate(lo)[1] in ("hbm", "sram"):
                out.append(Access(proc.pid, i, write, lo, hi, proc.start[i], proc.end[i]))
    return out


def _spans(program, stream) -> tuple[np.ndarray, ...]:
    """(command, write, first byte, one past the last) of a stream's memory accesses."""
    op = np.frombuffer(stream.op, np.uint8)
    size, span = np.frombuffer(stream.size, np.int64), np.frombuffer(stream.arg, np.int64)
    parts = []
    for kind, column, write in ((LOAD, stream.src, False), (STORE, stream.dst, True)):
        idx = np.flatnonzero(op == kind)
        lo = np.frombuffer(column, np.int64)[idx]
        parts.append((idx, np.full(idx.size, write), lo, lo + np.maximum(span[idx], size[idx])))
    rows = []
    for i in np.flatnonzero(op == COMPOSITE).tolist():
        if stream.arg[i] == NONE:
            continue
        c = program.composites[stream.arg[i]]
        b_rows, b_cols = (c.n, c.k) if c.trans_b else (c.k, c.n)
        for addr, nrows, cols, stride, code, resident, write in (
                (c.a_addr, c.m, c.k, c.a_row_stride, c.a_format, c.a_tcm, False),
                (c.b_addr, b_rows, b_cols, c.b_row_stride, c.b_format, c.b_tcm, False),
                (c.out_addr, c.m, c.n, c.out_row_stride, c.out_format, c.out_addr < 0, True)):
            if not resident:
                rows.append((i, write, addr, addr + nbytes(code, (nrows - 1) * stride + cols)))
    if rows:
        cmds, writes, los, his = zip(*rows, strict=True)
        parts.append((np.array(cmds), np.array(writes), np.array(los), np.array(his)))
    return tuple(np.concatenate([part[j] for part in parts]).astype(
        bool if j == 1 else np.int64) for j in range(4))


class _Order:
    """Happens-before between PEs through IPCQ messages (send k of a to b is receive k of b
    from a)."""

    def __init__(self, timing: Timing):
        streams = timing.program.streams
        self.sends: list[list[tuple[int, int, int]]] = [[] for _ in streams]  # (i, dst, recv)
        recvs: dict[tuple[int, int], list[int]] = {}
        for pid, stream in enumerate(streams):
            op = np.frombuffer(stream.op, np.uint8)
            for i in np.flatnonzero(op == RECV).tolist():
                recvs.setdefault((stream.arg[i], pid), []).append(i)
        taken: dict[tuple[int, int], int] = {}
        for pid, stream in enumerate(streams):
            op = np.frombuffer(stream.op, np.uint8)
            for i in np.flatnonzero(op == SEND).tolist():
                dst = stream.arg[i]
                k = taken.get((pid, dst), 0)
                taken[(pid, dst)] = k + 1
                matching = recvs.get((pid, dst), [])
                if k < len(matching):
                    self.sends[pid].append((i, dst, matching[k]))
        self._starts = [[i for i, _, _ in sends] for sends in self.sends]
        # per PE: (command, what it waits for: NONE for a fence, else a composite) of its WAITs
        self._waits = []
        for stream in streams:
            op = np.frombuffer(stream.op, np.uint8)
            self._waits.append([(i, stream.a[i]) for i in np.flatnonzero(op == WAIT).tolist()])

    def landed(self, pe: int, i: int) -> int | None:
        """The first command of PE `pe` after which its write `i` has landed: a fence after
        it, or a wait on it (a composite); None if the PE never waits for it."""
        for k, on in self._waits[pe]:
            if k > i and on in (NONE, i):
                return k
        return None

    def before(self, a: int, i: int, write: bool, b: int, j: int) -> bool:
        """Whether a chain of messages leads from PE a after command i (a `write`: after
        the PE waited for it to land) to PE b before j."""
        if write:
            fenced = self.landed(a, i)
            if fenced is None:
                return False
            i = fenced
        earliest = {a: i}  # the earliest command reached on each PE
        frontier = [a]
        while frontier:
            pe = frontier.pop()
            at = earliest[pe]
            sends = self.sends[pe]
            for k in range(bisect.bisect_right(self._starts[pe], at), len(sends)):
                _, dst, recv = sends[k]
                if dst == b and recv < j:
                    return True
                if recv < earliest.get(dst, 1 << 62):
                    earliest[dst] = recv
                    frontier.append(dst)
        return False
