"""`tl.repeat`: a loop body (a decoder layer) emitted once per PE and variant; its later
repetitions are copies.

``tl.repeat(body, moves, state, *args, **kwargs)`` calls ``body(tl, moves, state, *args,
**kwargs)``. With values, or with shortcuts off (``--no-shortcuts``), that is all it does.
In a timing-only run the commands a repetition emits follow from what it is given, so a
repetition given what an earlier one was need not run:

- `moves`: a dict of what differs between the repetitions: addresses (ints) of memory
  each repetition has its own of (a layer's weights and KV cache), each one shift D from
  the first repetition's and in an allocation of the same size at the same offset; its
  other values (None, tuples) alike.
- `state`: a list of tensors the body takes (pops) and leaves holding its outputs (a
  layer's residual stream: from a list the body can drop its input before it ends).
- `args`, `kwargs`: alike in every repetition: numbers, strings and None by value (a
  float with its sign: 0.0 is not -0.0), tuples and lists item by item (a list holding
  itself cannot be keyed), tensors by shape, dtype, place in TCM and holders; anything
  else (a plan, a table) by identity, and it must not change while the loop runs: a dict
  (which no weak reference can follow) is then kept for the run, so it may hold only
  plain values (no tensor: its TCM would stay taken), and anything else is followed by a
  weak reference (a repetition after it is gone is a new key).

What the body may do to be copied: leave in `state` only tensors it made (each once),
return nothing, end in the region it began in, use only tensors it was given, and change
no list or dict of `moves`, `args` or `kwargs` (a copy would not change them). A
repetition that does otherwise is run, and so is every later one of its key. What the key
cannot see is the kernel's contract: the body's commands follow from what it is given
(not from a global or closure that changes between repetitions, nor from the value of
an address of `moves` beyond using it as one: whatever it does with one, it does with
each), and the PEs' kernels do not count on when Python collects their cyclic garbage
(a tensor in a reference cycle frees its TCM then, in a copy as in a run). A run made
again without shortcuts (below) runs the kernel's module code again: a kernel keeping
state in its module between calls sees it twice.

A repetition's key is all of that (the addresses by their allocations), with the PE's
TCM allocator state (`FreeListPool.state`) and the kernel line it is called from. The
first repetition of a key runs and is recorded: its command rows, region marks,
messages, composites, the allocator's state after it and its outputs. The second runs
too, and is checked against the first relocated: command indexes shifted, the addresses
that lie in the first's allocations of `moves` (and its composites' operands there)
moved by D, regions renamed under the one the repetition runs in. If they are equal, the
key is proven and every later repetition is the first's rows relocated: its messages
posted and taken in order (a receive still waits for its message, as it would), its
composites appended and regions entered where they would be, the allocator set to the
state after, its outputs made. If not, every repetition of that key runs. A proof with D
= 0 (the two shared their addresses) holds for D = 0 only (an address that does not move
may lie in the first's allocations; only a shift tells the two apart) until a later
repetition one shift away is proven alike too. Either way the
streams, the program's tables and the hub's switches are what running every repetition
gives (the oracle: ``--no-shortcuts``). A run that would stop inside a copy (the command
limit reached, a receive that waits for good or takes a message of another size) cannot
stop there as running would: it is made again without shortcuts (`ShortcutMissed`).
"""

from __future__ import annotations

import inspect
import math
import sys
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from kernbench_cli.address.allocator import Sharded
from kernbench_cli.errors import KernelError
from kernbench_cli.lang.tensor import Tensor
from kernbench_cli.lang.tl.core import _ROW_BYTES, _ROW_DTYPE, Core, _line
from kernbench_cli.stream import COMPOSITE, LOAD, READ, RECV, SEND, STORE

#: values a key holds as they are
_BY_VALUE = frozenset((int, float, str, bool, type(None), complex, bytes))
#: what a container held for the run (`Repeats._key_of`) may hold: no TCM (a tensor's)
_INERT = _BY_VALUE | {Sharded}
#: how far a key is proven: not yet; for a shift of 0 (the first two repetitions shared
#: their addresses), other shifts untried; for 0, a shift tried and refuted; every shift
_UNPROVEN, _ZERO, _ZERO_ONLY, _SHIFTS = range(4)
#: what a repetition's events are, in the order of one command's (a region is entered
#: before the command it starts with is issued)
_REGION, _COMPOSITE, _SEND, _RECV = range(4)


class ShortcutMissed(BaseException):
    """A run stopped inside a copied repetition (the command limit reached in it, a
    deadlock in one of its receives, a message of another size), where a copy cannot stop
    as running would: the launcher runs it again without shortcuts. Not an `Exception`, so
    that a kernel's ``except Exception`` does not take it. `missed()` makes the one
    `tl.repeat` raises; another (a kernel's own `raise ShortcutMissed`) is the kernel's
    failure."""

    @classmethod
    def missed(cls) -> ShortcutMissed:
        return cls(_MISSED)

    @property
    def ours(self) -> bool:
        return self.args == (_MISSED,)


_MISSED = "a copied repetition stopped where running it would"


class _NotRepeatable(Exception):
    """A repetition that cannot be keyed (a view of a tensor among what it is given, a
    list holding itself)."""


class _Take:
    """One repetition as it ran (`Repeats._record`), and once proven, what copying it
    takes (`_Take.prepare`)."""

    __slots__ = ("addrs", "after", "commands", "composites", "events", "ext", "ext_at",
                 "inside", "moved", "outputs", "peak", "ranges", "regions", "relative",
                 "sent", "start", "table")

    def __init__(self, start: int):
        self.start = start
        self.regions: list[tuple[int, int]] = []  # (command, region) as entered
        self.sent: list[Any] = []  # the dtype of each message sent, in order
        self.events: list[tuple[int, int, Any]] | None = None  # once prepared

    def prepare(self) -> None:
        """Index what a copy changes (command indexes inside and outside, addresses to
        move) and the events it replays in order."""
        if self.events is not None:
            return
        table, start = self.table, self.start
        self.inside, self.ext_at = {}, {}
        for col in ("a", "b"):
            v = table[col]
            self.inside[col] = np.flatnonzero(v >= start)
            self.ext_at[col] = [(np.flatnonzero(v == cmd), j) for j, cmd in
                                enumerate(self.ext) if (v == cmd).any()]
        op = table["op"]
        self.moved = {col: np.flatnonzero((op == kind) & self._in_ranges(table[col]))
                      for col, kind in (("src", LOAD), ("dst", STORE))}
        commands = np.cumsum(op != READ)  # commands issued up to and including each row
        events: list[tuple[int, int, Any]] = [(at, _REGION, rel) for at, rel in self.relative]
        sent = iter(self.sent)
        k = 0
        for i in np.flatnonzero((op == COMPOSITE) | (op == SEND) | (op == RECV)).tolist():
            kind = int(op[i])
            if kind == COMPOSITE:
                d = self.composites[k]
                events.append((i, _COMPOSITE, (k, not d.a_tcm, d.out_addr >= 0)))
                k += 1
            elif kind == SEND:
                events.append((i, _SEND, (int(table["arg"][i]), int(table["size"][i]),
                                          next(sent))))
            else:  # issued (with the commands before it) before it waits
                events.append((i, _RECV, (int(table["arg"][i]), int(table["size"][i]),
                                          int(commands[i]))))
        events.sort(key=lambda e: (e[0], e[1] != _REGION))  # stable: regions in order
        self.events = events

    def _in_ranges(self, v: np.ndarray) -> np.ndarray:
        hit = np.zeros(len(v), dtype=bool)
        for lo, hi in self.ranges:
            hit |= (v >= lo) & (v < hi)
        return hit

    def move(self, addr: int, delta: int) -> int:
        """`addr` moved by `delta` if it lies in one of the allocations that moves."""
        for lo, hi in self.ranges:
            if lo <= addr < hi:
                return addr + delta
        return addr

    def relocated(self, start: int, ext: list[int], delta: int) -> np.ndarray:
        """The rows as a repetition from command `start` makes them, given tensors made by
        `ext` (commands) and addresses `delta` from the first's (composite indexes as
        recorded: the copy sets them)."""
        table = self.table.copy()
        shift = start - self.start
        for col in ("a", "b"):
            v = table[col]
            v[self.inside[col]] += shift
            for at, j in self.ext_at[col]:
                v[at] = ext[j]
        if delta:
            for col, at in self.moved.items():
                table[col][at] += delta
            src, dst = table["src"], table["dst"]
            for i, kind, what in self.events:
                if kind == _COMPOSITE:
                    _k, src_moves, dst_moves = what
                    if src_moves:
                        src[i] = self.move(int(src[i]), delta)
                    if dst_moves:
                        dst[i] = self.move(int(dst[i]), delta)
        return table

    def moved_composites(self, delta: int) -> list:
        return [d._replace(a_addr=self.move(d.a_addr, delta), b_addr=self.move(d.b_addr, delta),
                           out_addr=self.move(d.out_addr, delta)) for d in self.composites]


class Repeats(Core):
    """`tl.repeat`."""

    def repeat(self, body: Callable[..., None], moves: dict, state: list,
               *args: Any, **kwargs: Any) -> None:
        """``body(tl, moves, state, *args, **kwargs)``, one repetition of a loop body (a
        decoder layer): `moves` the addresses each repetition has its own of, `state` a
        list of the tensors it takes and leaves its outputs in, the rest alike in every
        repetition. Timing only, a repetition alike to two before it is not run but
        copied; see the module `kernbench_cli.lang.tl.repeat`."""
        launch = self._launch
        if not isinstance(moves, dict) or not isinstance(state, list):
            raise KernelError("tl.repeat(body, moves, state, ...): moves is a dict and state "
                              "a list")
        _check_body(body)
        memory = self._memory
        addrs = [value for value in moves.values() if value.__class__ is int]
        extents = [memory.extent(value, f"tl.repeat: moves[{name!r}]") for name, value in
                 moves.items() if value.__class__ is int]  # checked in every run alike
        if not (launch.timing_only and launch.shortcuts) or self._take is not None:
            return body(self, moves, state, *args, **kwargs)  # with values, or nested
        counts = launch.repeats
        tensors: list[Tensor] = []
        keep: list = []
        try:
            key = self._repeat_key(body, moves, state, args, kwargs, tensors, keep, extents)
        except _NotRepeatable:
            counts["run"] += 1
            return body(self, moves, state, *args, **kwargs)
        ext = [t.cmd for t in tensors]
        del tensors
        known = self._repeats.get(key)
        if known is not None and not all(ref() is not None for ref in known[2]):
            known = None  # an object it was given by identity is gone: its id is another's
        if known is None:
            out, take = self._record(body, moves, state, args, kwargs, ext, addrs, extents)
            self._repeats[key] = [take, _UNPROVEN, keep]
            counts["recorded" if take is not None else "run"] += 1
            return out
        take, proven, _ = known
        delta = _delta(take, addrs) if take is not None else None
        if delta is None or (proven == _ZERO_ONLY and delta):
            counts["run"] += 1  # not repeatable, not one shift from the first, refuted
            return body(self, moves, state, *args, **kwargs)
        if proven == _SHIFTS or (proven != _UNPROVEN and delta == 0):
            self._copy(take, state, ext, delta)
            counts["copied"] += 1
            return None
        # the second of a key, or the first one shift away after a proof for 0 only (an
        # address that does not move may lie in the first's allocations: only a shift
        # that is not 0 tells the two apart)
        out, second = self._record(body, moves, state, args, kwargs, ext, addrs, extents)
        if second is not None and self._alike(take, second, delta):
            known[1] = _SHIFTS if delta or not addrs else _ZERO
            counts["proven"] += 1
        else:
            if proven == _UNPROVEN:
                known[0] = None
            else:
                known[1] = _ZERO_ONLY
            counts["run"] += 1
        return out

    def _repeat_key(self, body: Callable, moves: dict, state: list, args: tuple,
                    kwargs: dict, tensors: list, keep: list,
                    extents: list[tuple[int, int]]) -> tuple:
        """The key of a repetition (see the module); `extents`: the (base, bytes) of the
        allocation of each address of `moves`, in order."""
        where, at = [], iter(extents)
        for name, value in moves.items():
            if value.__class__ is int:
                base, size = next(at)
                where.append((name, size, value - base))
            else:
                where.append((name, self._key_of(value, tensors, keep)))
        return (self._key_of(body, tensors, keep), tuple(where),
                self._key_of(tuple(state), tensors, keep),
                self._key_of(args, tensors, keep),
                tuple(sorted((k, self._key_of(v, tensors, keep)) for k, v in kwargs.items())),
                tuple(_first_equal([t.cmd for t in tensors])), self._region == 0,
                self._tcm.state(),
                # the kernel line a command of code outside the kernel's file gets
                self._pinned or _line(sys._getframe(2), self._kernel_file, self._lines))

    def _key_of(self, x: Any, tensors: list, keep: list,
                within: frozenset = frozenset()) -> tuple:
        cls = x.__class__
        if cls is Tensor:
            if x._tl is not self or x._base is not None or x.tcm is None:
                raise _NotRepeatable
            tensors.append(x)
            return (Tensor, x.shape, x.dtype, x.tcm, x.nbytes, sys.getrefcount(x))
        if cls in _BY_VALUE:
            if cls is float:
                return (cls, x, math.copysign(1.0, x))
            return (cls, repr(x)) if cls is complex else (cls, x)
        if cls is tuple or cls is list:
            if id(x) in within:  # a list holding itself
                raise _NotRepeatable
            within = within | {id(x)}
            return (cls, *(self._key_of(y, tensors, keep, within) for y in x))
        try:
            keep.append(weakref.ref(x))
        except TypeError:  # a dict: kept for the run if it holds plain values only
            if self._held.get(id(x)) is not x:
                if cls is not dict or not _inert(x):
                    raise _NotRepeatable from None
                self._held[id(x)] = x
        return (cls, id(x))

    def _record(self, body: Callable, moves: dict, state: list, args: tuple, kwargs: dict,
                ext: list[int], addrs: list[int],
                extents: list[tuple[int, int]]) -> tuple[Any, _Take | None]:
        """Run the repetition and record it: (what the body returned, the record, or None
        if it cannot be copied: it returned something, left its region, or used a tensor
        it was not given)."""
        start, tcm, region = self._issued(), self._tcm, self._region
        take = _Take(start)
        peak, tcm.peak = tcm.peak, 0
        self._take = take
        held = (moves, args, kwargs)
        before = _contents(held)  # what a copy would not change
        state_out: list[Tensor] = []
        try:
            out = body(self, moves, state, *args, **kwargs)
        finally:
            self._take = None
            take.peak = tcm.peak
            tcm.peak = max(peak, take.peak)
        end = self._issued()
        take.table = np.frombuffer(bytes(self._rows[start * _ROW_BYTES:end * _ROW_BYTES]),
                                   dtype=_ROW_DTYPE).copy()
        take.ext, take.addrs, table = ext, addrs, take.table
        given = set(ext)
        for col in ("a", "b"):
            v = table[col]
            outside = v[(v >= 0) & (v < start)]
            if not given.issuperset(outside.tolist()):
                return out, None
        outputs = []
        for t in state:  # tensors it made, each once: a copy makes them anew
            if t.__class__ is not Tensor or t._tl is not self or t._base is not None \
                    or t.tcm is None or t.cmd < start or any(o is t for o in state_out):
                return out, None
            state_out.append(t)
            outputs.append((t.shape, t.dtype, t.tcm, t.nbytes, t.cmd - start))
        if out is not None or self._region != region or _changed(before, _contents(held)):
            return out, None
        program = self._launch.program
        take.outputs, take.after = outputs, tcm.state()
        take.commands = int(np.count_nonzero(table["op"] != READ))
        take.composites = [program.composites[arg] for arg in
                           table["arg"][table["op"] == COMPOSITE].tolist()]
        take.ranges = sorted({(base, base + size) for base, size in extents})
        base = program.regions[region]
        take.relative = []
        for at, r in take.regions:  # each region entered, as a suffix of the one it ran in
            path = program.regions[r]
            if base and path != base and not path.startswith(base + "/"):
                return out, None
            take.relative.append((at - start, path[len(base):] if base else "/" + path
                                  if path else ""))
        return out, take

    def _alike(self, first: _Take, second: _Take, delta: int) -> bool:
        """Whether `second` is `first` relocated (see the module)."""
        if len(first.table) != len(second.table) or first.outputs != second.outputs \
                or first.after != second.after or first.peak != second.peak \
                or first.sent != second.sent or first.relative != second.relative:
            return False
        first.prepare()
        if first.moved_composites(delta) != second.composites:
            return False
        mine = first.relocated(second.start, second.ext, delta)
        theirs = second.table.copy()
        for table in (mine, theirs):
            table["arg"][table["op"] == COMPOSITE] = 0  # an index of the whole run's table
        return mine.tobytes() == theirs.tobytes()

    def _copy(self, take: _Take, state: list, ext: list[int], delta: int) -> None:
        """Copy proven repetition `take` here (see the module). Its commands count as
        they would be issued, up to each receive that may wait: the run's count passes
        each point between PEs as it would; `ShortcutMissed` where it passes the limit."""
        launch = self._launch
        start = self._issued()
        table = take.relocated(start, ext, delta)
        self._rows += table.tobytes()
        counted = 0
        program, mail, pid = launch.program, launch.mail, self._pid
        composites = take.moved_composites(delta)
        region_path = program.regions[self._region]
        for at, kind, what in take.events:
            at += start
            if kind == _REGION:
                self._enter_region(launch.region_index((region_path + what).lstrip("/")), at)
            elif kind == _COMPOSITE:
                self._set_arg(at, len(program.composites))
                program.composites.append(composites[what[0]])
            elif kind == _SEND:
                dst, nbytes, dt = what
                box = mail.get((pid, dst))
                if box is None:
                    box = mail[(pid, dst)] = deque()
                box.append((nbytes, dt, None))
                receiver = launch.receivers.get(dst)
                if receiver is not None:
                    receiver.wake()
            else:
                src, nbytes, issued = what
                self._count(issued - counted)
                counted = issued
                box = mail.get((src, pid))
                while not box:
                    launch.receivers[pid] = self._thread
                    self._copying = True
                    self._thread.block()
                    self._copying = False
                    del launch.receivers[pid]
                    box = mail.get((src, pid))
                if box[0][0] != nbytes:  # the receive's error, at its own line: run it
                    raise ShortcutMissed.missed()
                box.popleft()
        self._count(take.commands - counted)
        launch.copied += take.commands
        state.clear()  # the inputs go (their TCM with them), the state after comes
        tcm = self._tcm
        tcm.restore(take.after)
        tcm.peak = max(tcm.peak, take.peak)
        for shape, dtype, handle, nbytes, cmd in take.outputs:
            state.append(Tensor(self, shape, dtype, None, start + cmd, handle, None, nbytes))

    def _count(self, commands: int) -> None:
        """Count `commands` issued (`ShortcutMissed` past the limit)."""
        launch = self._launch
        if launch.commands + commands > launch.max_commands:
            raise ShortcutMissed.missed()
        launch.commands += commands


def _check_body(body: Any) -> None:
    """`tl.repeat`'s body, a plain function (KernelError): a generator or async one, called,
    runs none of its body (as `kernel` itself may not be)."""
    if not callable(body):
        raise KernelError(f"tl.repeat: body must be a function, not {type(body).__name__}")
    for test, what in ((inspect.isgeneratorfunction, "a generator"),
                       (inspect.iscoroutinefunction, "an async function"),
                       (inspect.isasyncgenfunction, "an async generator")):
        if test(body):
            raise KernelError(f"tl.repeat: body {getattr(body, '__qualname__', '')}() is "
                              f"{what}: calling it would run none of its body; write a plain "
                              "function")


def _inert(x: Any, within: frozenset = frozenset()) -> bool:
    """Whether `x` holds, through dicts, lists and tuples, plain values only (no TCM; not
    itself)."""
    if x.__class__ in _INERT:
        return True
    if id(x) in within:
        return False
    within = within | {id(x)}
    if x.__class__ is dict:
        return all(_inert(k, within) and _inert(v, within) for k, v in x.items())
    if x.__class__ in (list, tuple):
        return all(_inert(v, within) for v in x)
    return False


def _contents(x: Any, seen: dict | None = None) -> dict:
    """What the lists and dicts reached from `x` through lists, tuples and dicts hold, by
    identity: {id: its items' ids, or its keys' and values'} (``seen[None]`` keeps them,
    so that no id is another's while the result is kept)."""
    seen = {None: []} if seen is None else seen
    cls = x.__class__
    if cls is tuple or cls is list or cls is dict:
        if id(x) in seen:
            return seen
        seen[None].append(x)
        if cls is dict:
            seen[id(x)] = (tuple(map(id, x.keys())), tuple(map(id, x.values())))
            items = x.values()
        else:
            if cls is list:
                seen[id(x)] = tuple(map(id, x))
            items = x
        for y in items:
            _contents(y, seen)
    return seen


def _changed(before: dict, after: dict) -> bool:
    """Whether two `_contents` differ (a list or dict changed, came or went)."""
    return before.keys() != after.keys() or any(before[k] != after[k] for k in before
                                                if k is not None)


def _delta(take: _Take, addrs: list[int]) -> int | None:
    """The one shift from `take`'s addresses to `addrs`, or None if there is none."""
    if not addrs:
        return 0
    delta = addrs[0] - take.addrs[0]
    return delta if all(a - b == delta for a, b in zip(addrs, take.addrs, strict=True)) \
        else None


def _first_equal(values: list) -> list[int]:
    """For each value, the index of the first equal one: which tensors given are one."""
    first: dict = {}
    return [first.setdefault(v, i) for i, v in enumerate(values)]
