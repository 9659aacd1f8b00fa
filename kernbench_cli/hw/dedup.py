"""Trajectory dedup: one representative timed per class of PEs (`hw.symmetry`), exactly.

The timing pass times each class's representative with the unchanged
engine. A representative's IPCQ messages go to the ring of its partner's
representative (`Routes.pair`), so every ring of the pass stands for the
rings of a class of receivers, one sender per class. A representative of a
class of several PEs books *ghosts* of the calendars on its paths: private
copies that record every interval booked on them (`Ghost.spans`). After the
pass, `overlaps` lays every member's intervals (its representative's, on
the member's own calendars, found by the same address or partner offset)
beside every other PE's on each real calendar: a member whose interval
meets (touches included) another PE's would have shared a link, a slice or
the SRAM port, which its representative did not, so it becomes a class of
its own and the pass is re-timed. When none meet, no member's transfer
interacted with another PE's: each streamed alone, as its ghost did, and
the classes' timings are the full pass's. `expand` then gives every PE its
representative's results: engine statistics and rings shared, calendars
summed (their intervals do not meet, so busy time adds), per-command times
and causes viewed through the member's PE index and partners
(`Relocated`), and the op log copied with the member's addresses.
"""

from __future__ import annotations

from array import array

import numpy as np

from kernbench_cli.hw.engines import ENGINES
from kernbench_cli.hw.network import Calendar

PID_BITS, PE_SHIFT, CAUSE_SHIFT = 22, 36, 58
INDEX = _INDEX = (1 << PE_SHIFT) - 1  # an op reference's command index
_PID = (1 << PID_BITS) - 1


class Ghost(Calendar):
    """A private copy of calendar `real` for one representative, recording its intervals
    ([start, end], zero-length ones too) and how to find each member's own (`recipes`:
    (position in a path, what the path is of))."""

    __slots__ = ("real", "recipes", "spans")

    def __init__(self, real: Calendar):
        super().__init__(real.level, real.name, real.bandwidth, real.latency_ps)
        self.page_bytes, self.faw_ps, self.activates = real.page_bytes, real.faw_ps, \
            real.activates
        self.user, self.shared = real.user, real.shared
        self.real = real
        self.spans: list[tuple[int, int]] = []
        self.recipes: set[tuple] = set()

    def book(self, t: int, duration: int) -> int:
        start = super().book(t, duration)
        self.spans.append((start, start + duration))
        return start

    def reserve(self, t: int, duration: int) -> None:
        super().reserve(t, duration)
        self.spans.append((t, t + duration))

    def occupy(self, t: int, end: int) -> None:
        super().occupy(t, end)
        self.spans.append((t, end))


class Ghosts:
    """The ghosts of the representatives of classes of several PEs."""

    def __init__(self, reps: set[int]):
        self.reps = reps
        self.of: dict[tuple[int, int], Ghost] = {}  # (rep, id of the real calendar) -> ghost
        self.by_rep: dict[int, list[Ghost]] = {}

    def resources(self, rep: int, resources: tuple, recipe: tuple) -> tuple:
        out = []
        for position, cal in enumerate(resources):
            ghost = self.of.get((rep, id(cal)))
            if ghost is None:
                ghost = self.of[(rep, id(cal))] = Ghost(cal)
                self.by_rep.setdefault(rep, []).append(ghost)
            ghost.recipes.add((position, recipe))
            out.append(ghost)
        return tuple(out)


class Relocated:
    """A representative's per-command causes (an array, a list of tile tuples, or a dict)
    as member `pid` reads them: op references to the representative point at `pid`, those
    to another PE at `pid`'s partner in that PE's class (`partners`)."""

    __slots__ = ("data", "field", "mapping")

    def __init__(self, data, mapping: dict[int, int], field: int | None = None):
        self.data, self.mapping, self.field = data, mapping, field

    def ref(self, ref: int) -> int:
        if ref <= 0 or ref & _INDEX == _INDEX:
            return ref
        pid = ref >> PE_SHIFT & _PID
        return ref + ((self.mapping.get(pid, pid) - pid) << PE_SHIFT)

    def _one(self, value):
        if self.field is None:
            return self.ref(value)
        if isinstance(value, list):  # a receive's copies (`PeProcess.copies`)
            return [self._one(v) for v in value]
        return (*value[:self.field], self.ref(value[self.field]), *value[self.field + 1:])

    def __getitem__(self, i):
        return self._one(self.data[i])

    def __len__(self) -> int:
        return len(self.data)

    def get(self, key, default=None):
        value = self.data.get(key)
        return default if value is None else self._one(value)


class RelocatedKeys(Relocated):
    """A dict keyed by op references (`proc.waits`: ref -> (calendar, ps)), as member reads
    it; calendars mapped by `calendars`."""

    __slots__ = ("calendars", "inverse")

    def __init__(self, data, mapping: dict[int, int], calendars: dict[int, Calendar]):
        super().__init__(data, mapping)
        self.calendars = calendars
        self.inverse = {v: k for k, v in mapping.items()}

    def get(self, key, default=None):
        pid = key >> PE_SHIFT & _PID
        back = key + ((self.inverse.get(pid, pid) - pid) << PE_SHIFT)
        value = self.data.get(back)
        if value is None:
            return default
        cal, ps = value
        return (self.calendars.get(id(cal), cal) if cal is not None else None), ps


def relocate(addrs: np.ndarray, spans: list[tuple[int, int, int]]) -> np.ndarray:
    """`addrs` with each address in [lo, lo + size) moved by `delta`, per (lo, size, delta)."""
    out = addrs.copy()
    for lo, size, delta in spans:
        if delta:
            inside = (addrs >= lo) & (addrs < lo + size)
            out[inside] += delta
    return out


def spans_meet(spans: dict[int, list[tuple[int, int]]]) -> set[int]:
    """The owners (keys) whose intervals ([start, end], closed) meet another owner's."""
    events = sorted((s, e, who) for who, intervals in spans.items() for s, e in intervals)
    bad: set[int] = set()
    cluster: set[int] = set()
    end = None
    for s, e, who in events:
        if end is not None and s <= end:
            cluster.add(who)
            end = max(end, e)
            continue
        if len(cluster) > 1:
            bad |= cluster
        cluster, end = {who}, e
    if len(cluster) > 1:
        bad |= cluster
    return bad


class _Where:
    """Where member PEs' own things are: HBM slices, PE resource windows, coordinates."""

    def __init__(self, timing):
        system = timing.system
        amap = system.amap
        self.timing = timing
        self.slice_bytes = amap.slice_bytes
        self.base = system.slice_bases
        tcm = amap.resources.get("tcm")
        self.pe_window = max(r.end for r in amap.resources.ranges)
        self.pe_base = [amap.pe_tcm_addr(*c, 0) - tcm.start for c in system.coords]
        self.found: dict[tuple[int, int], Calendar | None] = {}  # (ghost id, pid) -> its own

    def own(self, ghost: Ghost, rep: int, pid: int) -> Calendar | None:
        """Member `pid`'s calendar that `rep`'s `ghost` stands for (None: its recipes do not
        agree on one)."""
        key = (id(ghost), pid)
        if key in self.found:
            return self.found[key]
        timing, found = self.timing, set()
        for position, (what, *args) in ghost.recipes:
            if what == "path":
                addr, inbound = args
                if self.base[rep] <= addr < self.base[rep] + self.slice_bytes:
                    addr += self.base[pid] - self.base[rep]
                found.add(timing.routes.real_path(pid, addr, inbound)[0][position])
            else:
                coords = timing.system.coords
                found.add(timing.system.network.route(
                    coords[pid], coords[pid + args[0]]).resources[position])
        cal = self.found[key] = found.pop() if len(found) == 1 else None
        return cal


def overlaps(timing, classes) -> set[int] | None:
    """Members whose transfers met another PE's on a calendar (see the module docstring);
    None if a ghost went above its bandwidth (the full pass says where)."""
    where = timing.where = _Where(timing)
    bad: set[int] = set()
    on: dict[int, tuple[Calendar, dict]] = {}
    for rep, members in zip(classes.rep, classes.members, strict=True):
        for ghost in timing.ghosts.by_rep.get(rep, []) if len(members) > 1 else ():
            if ghost.overdrawn is not None:
                return None
            for pid in members:
                cal = where.own(ghost, rep, pid)
                if cal is None:
                    bad.add(pid)
                    continue
                spans = on.setdefault(id(cal), (cal, {}))[1]
                spans.setdefault(pid, []).extend(ghost.spans)
    for cal, spans in on.values():
        if cal.ops:  # PEs of classes of one book it for real
            spans[-1] = list(zip(cal.starts, cal.ends, strict=True))
        if len(spans) > 1:
            bad |= {pid for pid in spans_meet(spans) if pid >= 0}
    return bad


def tie_faults(timing, classes) -> set[int]:
    """Members whose representatives met on a ring at one simulated time (`Timing.ties`)
    in an order of PE index other than their own: the timing pass breaks ties by that
    order, so the members would have met the other way. Each member of the ring's class
    reads the pair as its own ring's PEs: itself, or its sender of that class. The
    receiver taking chunks and a sender putting one is no tie on a ring of one sender:
    either way the receiver takes it then, with the same copies."""
    of, rep, bad = classes.of, classes.rep, set()
    for owner, direction, a, b, kind in timing.ties:
        for member in classes.members[of[owner]]:
            real = {owner: member}
            senders = classes.rings.get((member, direction), ())
            if kind == "chunks" and owner in (a, b) and len(senders) == 1:
                continue
            for s in senders:
                real.setdefault(rep[of[s]], s)
            x, y = real.get(a), real.get(b)
            if x is None or y is None or (x < y) != (a < b):
                bad |= {member} | {p for p in (x, y) if p is not None}
    return bad


_PROC_VALUES = ("done", "at", "n", "last_end", "tcm_peak", "tile_worst", "planned", "dequant",
                "end", "start", "issue")


def expand(timing, classes) -> None:
    """Every PE's results from its representative's (see the module docstring)."""
    where = timing.where
    procs, pes = timing.procs, timing.system.pes
    streams = timing.program.streams
    partners, talks, rep_of = classes.partners, classes.talks, classes.rep_of
    log_rows = []
    for rep, members in zip(classes.rep, classes.members, strict=True):
        source = procs[rep]
        raw = (source.why, source.cpu, source.after, source.tiles, source.made, source.waits,
               source.copies)
        ghosts = timing.ghosts.by_rep.get(rep, []) if len(members) > 1 else []
        for pid in members:
            mapping = {rep_of[p]: p for p in partners[pid]}  # ring senders
            mapping.update({rep_of[p]: p + pid - rep for p in talks[rep]})  # multicast
            mapping[rep] = pid
            own = {}
            for ghost in ghosts:
                cal = own[id(ghost)] = where.own(ghost, rep, pid)
                _add(cal, ghost)
            proc = procs[pid]
            if pid != rep:
                for name in _PROC_VALUES:
                    setattr(proc, name, getattr(source, name))
                proc.credited = source.credited
                for name in ENGINES:
                    setattr(pes[pid], name, getattr(pes[rep], name))
                pes[pid].rings = pes[rep].rings
                log_rows.append((rep, pid, own))
            if any(k != v for k, v in mapping.items()) or ghosts:
                why, cpu, after, tiles, made, waits, copies = raw
                proc.why, proc.cpu = Relocated(why, mapping), Relocated(cpu, mapping)
                proc.copies = Relocated(copies, mapping, 2)
                proc.after, proc.tiles = Relocated(after, mapping, 1), Relocated(tiles, mapping, 2)
                proc.made = Relocated(made, mapping)
                proc.waits = RelocatedKeys(waits, mapping, own)
    timing.planned_bytes = sum(p.planned for p in procs)
    if timing.oplog is not None:
        _expand_log(timing, classes, where, log_rows, streams)


def _add(cal: Calendar, ghost: Ghost) -> None:
    """Add what `ghost` carried to `cal` (their intervals do not meet: busy time adds)."""
    cal.busy_ps += ghost.busy_ps
    cal.bytes += ghost.bytes
    cal.ops += ghost.ops
    cal.pages += ghost.pages
    if ghost.flow_peak > cal.flow_peak:  # fair-shared flows' meter (`hw.flows.FairShare`)
        cal.flow_peak, cal.flow_peak_at = ghost.flow_peak, ghost.flow_peak_at
    if cal.flow_short is None:
        cal.flow_short = ghost.flow_short


def _expand_log(timing, classes, where: _Where, rows: list, streams) -> None:
    """Each member's op-log records, CPU and scheduler slices and ring occupancy: its
    representative's, with the member's index, addresses and resources."""
    log = timing.oplog
    pid_col = np.frombuffer(log.pid, dtype=np.int32).copy()
    by_pid: dict[int, np.ndarray] = {}
    send = log.kinds.index("send") if "send" in log.kinds else -1
    ghost_paths = [(key, ident) for key, ident in log._path_ids.items()
                   if key and isinstance(key[0], Ghost)]
    columns = [(name, width, np.frombuffer(getattr(log, name),
                                           dtype=getattr(log, name).typecode).copy())
               for name, width in (("engine", 1), ("kind", 1), ("times", 3), ("amounts", 2),
                                   ("addrs", 2), ("command", 1), ("queued", 1), ("streams", 2),
                                   ("via", 1), ("shape", 1))]
    cpu_of: dict[int, list] = {}
    for s in log.cpu:
        cpu_of.setdefault(s.pid, []).append(s)
    sched_of: dict[int, list] = {}
    for s in log.scheduler:
        sched_of.setdefault(s.pid, []).append(s)
    for rep, pid, own in rows:
        mine = by_pid.get(rep)
        if mine is None:
            mine = by_pid[rep] = np.flatnonzero(pid_col == rep)
        b, pb = where.base, where.pe_base
        spans = [(b[rep], where.slice_bytes, b[pid] - b[rep]),
                 (pb[rep], where.pe_window, pb[pid] - pb[rep])]
        vias = {ident: log.path(tuple(own.get(id(g), g) for g in key))
                for key, ident in ghost_paths if id(key[0]) in own}
        log.pid.extend(array("i", [pid]) * len(mine))
        for name, width, col in columns:
            part = col.reshape(-1, width)[mine].copy()
            if name == "addrs":
                moved = relocate(part, spans)
                sends = np.flatnonzero(columns[1][2][mine] == send)
                for k in sends.tolist():
                    i = int(columns[5][2][mine[k]])
                    src_d, dst_d = streams[rep].arg[i], streams[pid].arg[i]
                    if part[k, 1] >= 0:
                        moved[k, 1] = part[k, 1] + pb[dst_d] - pb[src_d]
                part = moved
            elif name == "via" and vias:
                part = np.array([vias.get(int(v), int(v)) for v in part.ravel()],
                                dtype=col.dtype).reshape(-1, 1)
            getattr(log, name).frombytes(part.astype(col.dtype).tobytes())
        log.cpu.extend(s._replace(pid=pid) for s in cpu_of.get(rep, ()))
        log.scheduler.extend(s._replace(pid=pid) for s in sched_of.get(rep, ()))
    coords = timing.system.coords
    for pid, c in enumerate(classes.of):
        rep = classes.rep[c]
        if rep != pid:
            for direction in "EWNS":
                trail = log.rings.get(f"PE ({coords[rep]}) {direction} ring")
                if trail is not None:
                    log.rings[f"PE ({coords[pid]}) {direction} ring"] = trail
