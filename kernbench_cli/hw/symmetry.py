"""Classes of PEs that the timing pass may time once: equal streams, equal surroundings.

Two PEs are in one class when their streams are equal up to relocation
(addresses in a PE's own HBM slice relative to that slice, IPCQ partners
relative to the PE: ``partner - pid``; every other column, composite
descriptor and address as it is), their commands are in the same regions
(a representative books its class's energy to its own), and their
surroundings are too:

- every path they move bytes over has the same latency, round trip and
  resources (level, bandwidth, DRAM page and tFAW, latency), and is private
  (only one PE books it) for both or for neither;
- every IPCQ message they send or receive goes the same way (ring direction,
  route), matched with the same command there (the k-th send from one PE to
  another meets the k-th receive of it); a message they receive comes from
  a PE of the same class;
- the rings they receive on have senders of the same classes, in the same
  order of PE index.

A message they send may go to PEs of different classes: the timing pass
multicasts the representative's send to every receiving class's
representative (`hw.multicast`), each copy on a credit of that ring, and
checks that the copies' credits look the same to the sender; where they do
not, the class is split by the copy each member's send went to (`split`).

The matching conditions refer to classes, so they are refined until stable
(colour refinement, starting from the stream classes). On top of that, a
PE is made a class of its own (`force`) when two senders of one of its
rings are in one class, two of its partners are, or it messages a PE of
its own class (a representative would have to stand for two PEs at once).

The timing pass then times one representative per class (`hw.timing`), and
checks what the classes cannot say by themselves (`hw.dedup`): whether a
transfer of a class's member meets another PE's on a calendar they both
book, whether the copies of a multicast got the same credits, and whether
two representatives that met on a ring at one simulated time did so in the
order of PE index their members would have. Where a check fails the class
is split (PEs made classes of their own, or by the copies of a multicast)
and the pass re-timed.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kernbench_cli.stream import COLUMNS, COMPOSITE, LOAD, NONE, RECV, SEND, STORE

#: Dedup pays when the classes are at most 1/WORTH of the PEs (measured: with half, the
#: ghosts, checks and expansion cost more than timing every PE); with more, the full pass
#: times every PE (its cost per PE is that of classing it, or less).
WORTH = 8

#: (column, typecode) of what a key holds: the kernel line does not time
_TYPECODES = [(name, code) for name, code in COLUMNS if name != "line"]
_FIELDS = [name for name, _ in _TYPECODES]


class Classes:
    """A partition of the PEs: `of[pid]` is a class, `members[c]` its PEs (by index),
    `rep[c]` its representative (the lowest index)."""

    def __init__(self, of: list[int]):
        self.of = of
        self.members: list[list[int]] = []
        for pid, c in enumerate(of):
            if c == len(self.members):
                self.members.append([])
            self.members[c].append(pid)
        self.rep = [m[0] for m in self.members]

    @property
    def rep_of(self) -> list[int]:
        return [self.rep[c] for c in self.of]

    def singleton(self, pid: int) -> bool:
        return len(self.members[self.of[pid]]) == 1


def _numbered(keys: list) -> list[int]:
    """Class numbers from keys, numbered by first appearance in PE order."""
    ids: dict = {}
    return [ids.setdefault(k, len(ids)) for k in keys]


def stream_keys(program, slice_base: list[int], slice_bytes: int, page: int,
                leaves: list | None = None, limit: int | None = None) -> list[bytes] | None:
    """Per PE, its stream relocated (see the module docstring) as bytes, and with `leaves`
    its commands' regions after it: equal bytes, equal streams up to relocation (the
    comparison is exact, not a hash's); equal keys are one bytes object. None as soon as
    more than `limit` keys differ.

    Made stream by stream: a run whose streams all differ (a decode step: every PE its
    own ring position) stops after `limit` + 1 of them, and no more than one stream's
    columns are copied at once (all at once took some 300 B a command at the start of
    the timing pass: gigabytes on a rack decode step)."""
    descs = program.composites
    reloc_ok = slice_bytes > 0 and (not page or all(b % page == 0 for b in slice_base))
    comp_rest = _numbered([(d.m, d.k, d.n, d.a_format, d.b_format, d.out_format,
                            d.a_tcm, d.b_tcm, d.a_row_stride, d.b_row_stride, d.trans_b,
                            d.out_row_stride, d.out_addr >= 0) for d in descs])
    comp_addr = np.array([(d.a_addr, d.b_addr, d.out_addr) for d in descs] or
                         np.zeros((0, 3)), dtype=np.int64).reshape(-1, 3)
    comp_a_tcm = np.array([d.a_tcm for d in descs], dtype=bool)
    rest = np.array(comp_rest, dtype=np.int64)
    seen: dict[bytes, bytes] = {}
    keys = []
    for pid, stream in enumerate(program.streams):
        own = (slice_base[pid], slice_bytes) if reloc_ok else None
        cols = {name: np.frombuffer(getattr(stream, name), dtype=typecode).astype(np.int64)
                for name, typecode in _TYPECODES}
        op, arg = cols["op"], cols["arg"]
        arg[(op == SEND) | (op == RECV)] -= pid
        comp = op == COMPOSITE
        planned = comp & (arg != NONE)
        extra = np.zeros((len(op), 3), dtype=np.int64)
        src_is_addr = op == LOAD
        if planned.any():
            idx = arg[planned]
            arg[planned] = rest[idx]
            extra[planned] = _relative(comp_addr[idx], np.ones((len(idx), 3), dtype=bool),
                                       own)
            src_is_addr[planned] = ~comp_a_tcm[idx]
        cols["src"] = _relative(cols["src"], src_is_addr, own)
        cols["dst"] = _relative(cols["dst"], (op == STORE) | comp & (cols["dst"] != NONE), own)
        key = np.column_stack([cols[name] for name in _FIELDS] + [extra]).tobytes()
        if leaves is not None:
            key += leaves[pid].tobytes()
        keys.append(seen.setdefault(key, key))
        if limit is not None and len(seen) > limit:
            return None
    return keys


def _relative(values: np.ndarray, where: np.ndarray, own: tuple[int, int] | None) -> np.ndarray:
    """`values` that are addresses (`where`) in a PE's own slice (`own`: its base and size;
    None: none are relocated) made relative to it, flagged by a 2^62 offset."""
    if own is None:
        return values
    base, size = own
    mine = where & (values >= base) & (values < base + size)
    return np.where(mine, values - base - (1 << 62), values)


def few_enough(streams, limit: int) -> bool:
    """Whether the streams fall into at most `limit` groups by their op and size columns
    (which relocation leaves alone): classes are at least as many, so with more groups
    dedup cannot pay, and finding that out costs a look at two columns."""
    seen: set[tuple[bytes, bytes]] = set()
    for stream in streams:
        seen.add((bytes(stream.op), bytes(stream.size)))
        if len(seen) > limit:
            return False
    return True


def refine(start: list, matched: Callable[[list[int]], list], limit: int) -> list[int] | None:
    """Colour refinement: classes from keys `start`, split by `matched(of)` (per PE, what
    it meets, in terms of the classes `of`) until no class splits; None once there are
    more than `limit` classes (too many to be worth timing by representatives)."""
    of = _numbered(start)
    while max(of, default=-1) < limit:
        again = _numbered(list(zip(of, matched(of), strict=True)))
        if max(again, default=-1) == max(of, default=-1):
            return again
        of = again
    return None


def _cal_sig(cal) -> tuple:
    return (cal.level, cal.bandwidth, cal.latency_ps, cal.page_bytes, cal.faw_ps, cal.activates)


def _path_sig(path, private: bool, cals: dict[int, tuple]) -> tuple:
    """What a path's timing depends on (`cals`: the calendars' signatures by id, filled
    as they are met: a rack's PEs share most of their calendars)."""
    sigs = []
    for cal in path[0]:
        sig = cals.get(id(cal))
        if sig is None:
            sig = cals[id(cal)] = _cal_sig(cal)
        sigs.append(sig)
    return (path[1], path[2], private, tuple(sigs))


def _regions(stream, descs, shift: int) -> set[tuple[bool, int]]:
    """(inbound, an address) per address region a stream's transfers reach."""
    op = np.frombuffer(stream.op, dtype=np.uint8)
    found: list[tuple[bool, np.ndarray]] = [
        (True, np.frombuffer(stream.src, dtype=np.int64)[op == LOAD]),
        (False, np.frombuffer(stream.dst, dtype=np.int64)[op == STORE])]
    out = set()
    args = np.frombuffer(stream.arg, dtype=np.int64)[op == COMPOSITE]
    for a in np.unique(args[args != NONE]).tolist():
        d = descs[a]  # an operand in memory, or the output: one address each
        if not d.a_tcm:
            out.add((True, d.a_addr))
        if not d.b_tcm:
            out.add((True, d.b_addr))
        if d.out_addr >= 0:
            out.add((False, d.out_addr))
    for inbound, addrs in found:
        if len(addrs):
            _, first = np.unique(addrs >> shift if shift < 64 else addrs, return_index=True)
            out.update((inbound, int(addrs[k])) for k in first)
    return out


def _by_partner(stream, kind: int) -> list[tuple[int, list[int]]]:
    """(partner, the indices of its commands, in order) of a stream's commands of `kind`
    (SEND or RECV), by partner."""
    op = np.frombuffer(stream.op, dtype=np.uint8)
    idx = np.flatnonzero(op == kind)
    if not len(idx):
        return []
    partners = np.frombuffer(stream.arg, dtype=np.int64)[idx]
    order = np.argsort(partners, kind="stable")
    found, starts = np.unique(partners[order], return_index=True)
    return list(zip(found.tolist(), (g.tolist() for g in np.split(idx[order], starts[1:])),
                    strict=True))


class _Surroundings:
    """What the classes are refined by, from the streams and the routes (see the module
    docstring): per PE its IPCQ commands (index, partner, the matched command there) and
    the senders of each of its rings, and a static key (paths and routes)."""

    def __init__(self, timing, keys: list[bytes]):
        system, program = timing.system, timing.program
        amap = system.amap
        self.n = n = len(system.pes)
        base = system.slice_bases
        size, shift = amap.slice_bytes, timing.routes.region_shift
        self.ipcq: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
        self.rings: dict[tuple[int, str], list[int]] = {}
        static: list[list] = [[] for _ in range(n)]
        sent: dict[tuple[int, int], list[int]] = {}  # (sender, receiver) -> sends, in order
        got: dict[tuple[int, int], list[int]] = {}
        cals: dict[int, tuple] = {}
        for pid, stream in enumerate(program.streams):
            for inbound, addr in sorted(_regions(stream, program.composites, shift)):
                path, private = timing.routes.path(pid, addr, inbound)
                own = base[pid] <= addr < base[pid] + size
                static[pid].append((inbound, own, (addr - base[pid]) >> min(shift, 62) if own
                                    else addr >> min(shift, 62), _path_sig(path, private, cals)))
            for partner, sends in _by_partner(stream, SEND):
                sent[(pid, partner)] = sends
                direction, _, route, back, private = timing.routes.pair(pid, partner)
                self.rings.setdefault((partner, direction), []).append(pid)
                # the way to each partner (the stream key says which sends go to which)
                static[pid].append((sends[0], direction, back, _path_sig(route, private, cals)))
            for partner, recvs in _by_partner(stream, RECV):
                got[(partner, pid)] = recvs
        for (src, dst), sends in sent.items():
            recvs = got.get((src, dst), [])
            for k, i in enumerate(sends):
                j = recvs[k] if k < len(recvs) else -1
                self.ipcq[src].append((i, dst, j))
                if j >= 0:
                    self.ipcq[dst].append((j, src, i))
        for (src, dst), recvs in got.items():
            for j in recvs[len(sent.get((src, dst), [])):]:
                self.ipcq[dst].append((j, src, -1))
        for cmds in self.ipcq:
            cmds.sort()
        #: per PE, the PEs it receives from, each once, in the order first received from
        self.froms = [list(dict.fromkeys(p for i, p, _ in cmds
                                         if program.streams[pid].op[i] != SEND))
                      for pid, cmds in enumerate(self.ipcq)]
        for senders in self.rings.values():
            senders[:] = sorted(set(senders))
        self.by_pe: list[list[tuple[str, list[int]]]] = [[] for _ in range(n)]
        for (dst, direction), senders in sorted(self.rings.items()):
            self.by_pe[dst].append((direction, senders))
        self.start = [(k, tuple(s), tuple((i, j) for i, _, j in cmds))
                      for k, s, cmds in zip(keys, static, self.ipcq, strict=True)]

    def matched(self, of: list[int]) -> list:
        """Per PE, what it meets in terms of the classes `of`: the classes of the PEs it
        receives from (its IPCQ commands and the ones they are matched with are in its
        start key, and the partners' offsets in its stream: PEs of one class receive from
        the same offsets in the same order) and of its rings' senders (not its sends'
        receivers': a send is multicast to every receiving class)."""
        return [(tuple(of[p] for p in froms),
                 tuple((d, tuple(of[s] for s in senders)) for d, senders in by_pe))
                for froms, by_pe in zip(self.froms, self.by_pe, strict=True)]


def partition(timing, forced: set[int], split: dict[int, tuple]) -> Classes:
    """The classes a timing pass may time by representatives (see the module docstring);
    `forced` PEs are classes of their own, `split` gives some PEs one more key (the copies
    their multicasts went to, `hw.multicast`). The surroundings are made once per timing
    pass (`timing.around`), however often it partitions."""
    n = len(timing.program.streams)
    if not few_enough(timing.program.streams, n // WORTH):
        return Classes(list(range(n)))
    if timing.around is None:
        # the classes split the PEs at least as finely as their relocated streams do
        system = timing.system
        # (and by their commands' regions: a class's energy is booked to its own)
        keys = stream_keys(timing.program, system.slice_bases, system.amap.slice_bytes,
                           system.topology.hbm.page_size, timing.leaves, n // WORTH)
        if keys is None:
            return Classes(list(range(n)))
        timing.around = _Surroundings(timing, keys)
    around = timing.around
    forced = set(forced)
    while True:
        start = [("alone", pid) if pid in forced else (key, split.get(pid))
                 for pid, key in enumerate(around.start)]
        of = refine(start, around.matched, around.n // WORTH)
        if of is None:
            return Classes(list(range(around.n)))
        classes = Classes(of)
        more = _conflicts(classes, around)
        if more <= forced:
            classes.partners = [{p for _, p, _ in around.ipcq[pid]} |
                                {s for _, senders in around.by_pe[pid] for s in senders}
                                for pid in range(around.n)]
            classes.rings = around.rings
            classes.talks = [{p for _, p, _ in cmds} for cmds in around.ipcq]
            return classes
        forced |= more


def _conflicts(classes: Classes, around: _Surroundings) -> set[int]:
    """PEs a representative cannot stand for: two senders of a ring in one class, two
    partners (messages or senders of its rings) of one PE in one class, or a partner in
    the PE's own class."""
    of, force = classes.of, set()
    for senders in around.rings.values():
        seen: dict[int, int] = {}
        for s in senders:
            if of[s] in seen:
                force |= {s, seen[of[s]]}
            seen.setdefault(of[s], s)
    for pid in range(around.n):
        partners = {p for _, p, _ in around.ipcq[pid]}
        partners.update(s for _, senders in around.by_pe[pid] for s in senders)
        seen = {of[pid]: pid}
        for p in sorted(partners):
            if of[p] in seen and not classes.singleton(p):
                force |= {p, seen[of[p]]}
            seen.setdefault(of[p], p)
    return force
