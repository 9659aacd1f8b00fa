"""A PE's walk in the timing pass as data: its records, its composites, why things waited.

`PeProcess` is one PE's walk over its stream (resumed by SimPy event callbacks) and
what it records per command for the critical path; `Running` and `Composites`
are its composites in flight and the TCM their tile buffers hold (why each
operation started when it did: `hw.causes`). `TimingError` and
`Stuck` are how a walk ends other than by finishing. The walk itself is
`hw.walk`, the pass around it `hw.timing`.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from heapq import heappop, heappush

import simpy

from kernbench_cli.errors import KernelError
from kernbench_cli.hw.causes import NOBODY
from kernbench_cli.hw.composite import GemmTiling, TileOp

PENDING = -1  # `end` of a composite still running


class TimingError(KernelError):
    """A stream the topology cannot time; `pid`, `index` (the command) and `time_ps` say where."""

    def __init__(self, message: str, pid: int, index: int, time_ps: int):
        super().__init__(message)
        self.pid, self.index, self.time_ps = pid, index, time_ps


TOO_LATE = ("the simulated time passed 2^63 ps (about 107 days): a configured time, size or "
             "count is too large for the model")


class TimeRangeError(TimingError):
    """Accepted values whose times the model cannot hold (past 2^63 ps): bad input."""

    exit_code = 2


@dataclass
class Stuck:
    """A PE still waiting when nothing is left to run."""

    pid: int
    index: int  # the command it waits in
    what: str
    time_ps: int


class Clock(simpy.Environment):
    """The timing pass's SimPy environment, run by a loop of its own.

    Its events are all wake-ups made triggered, each one callback and its argument, that
    never fail and that nothing yields or waits for: an entry of SimPy's queue, (time,
    priority, id, callback, argument), in SimPy's order (time, then priority: PE index,
    then id). Per event that leaves out an event object, `Environment.step`'s call and
    its checks for failure and `StopSimulation`; and `now` is an attribute, not SimPy's
    property (a call each read). `schedule` and `peek` stay SimPy's."""

    now = 0  # an attribute in place of SimPy's property; `run` sets it with `_now`

    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.queue, self.ids = self._queue, self._eid

    def schedule(self, event, priority=1, delay=0) -> None:
        """Refused: SimPy's events go in its queue as entries `run` does not take."""
        raise TypeError("the timing pass's clock takes wake-ups only (Clock.wake)")

    def wake(self, t: int, priority: int, callback, arg=None) -> None:
        """Call `callback(arg)` at `t` (now if past), after the events of lower `priority`
        at that time."""
        now = self.now
        heappush(self.queue, (t if t > now else now, priority, next(self.ids), callback, arg))

    def run(self, until=None) -> None:
        """Run every event (`until` is not taken: the pass runs to the end)."""
        if until is not None:
            raise ValueError("the timing pass's clock runs to the end")
        queue = self.queue
        while queue:
            t, _, _, callback, arg = heappop(queue)
            self._now = self.now = t
            callback(arg)


class TileOps:
    """A PE's composites' tile operations, in the order they ran: per operation (start,
    end, why, engine, of: its composite), five integers in one array (as tuples in a list
    they took about 180 B an operation; here 40)."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data = array("q")

    def append(self, op: tuple[int, int, int, int, int]) -> int:
        """Add `op`; its index."""
        data = self.data
        data.extend(op)
        return len(data) // 5 - 1

    def __len__(self) -> int:
        return len(self.data) // 5

    def __getitem__(self, k: int) -> tuple[int, ...]:
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(k)
        return tuple(self.data[5 * k:5 * k + 5])


class Copies:
    """A PE's receives' copies out of ring slots, in the order made: per copy its receive's
    index, and its start, end and why, in two flat arrays (32 B a copy; as a list of
    tuples per receive they took about 160 B). A receive makes its copies before the next
    one starts (the walk is in order), so the receives' column is sorted."""

    __slots__ = ("data", "recv")

    def __init__(self) -> None:
        self.recv = array("q")
        self.data = array("q")

    def add(self, i: int, start: int, end: int, why: int) -> None:
        self.recv.append(i)
        self.data.extend((start, end, why))

    def get(self, i: int, default=None) -> list[tuple[int, int, int]] | None:
        """Receive `i`'s copies as (start, end, why), in order; `default` if it made none."""
        lo, hi = bisect_left(self.recv, i), bisect_right(self.recv, i)
        data = self.data
        return [(data[3 * k], data[3 * k + 1], data[3 * k + 2]) for k in range(lo, hi)] \
            if hi > lo else default


class After:
    """Per command that PE_CPU waited after issuing, until when and why (`proc.after[i] =
    (until, why)`, `proc.after.get(i)`), in flat arrays (24 B a command; as a dict of
    tuples about 130 B). The walk sets them in command order; setting the last again
    replaces it."""

    __slots__ = ("data", "index")

    def __init__(self) -> None:
        self.index = array("q")
        self.data = array("q")

    def __setitem__(self, i: int, value: tuple[int, int]) -> None:
        index = self.index
        if index and index[-1] >= i:
            if index[-1] != i:
                raise ValueError(f"command {i} after command {index[-1]}: out of order")
            self.data[-2:] = array("q", value)
            return
        index.append(i)
        self.data.extend(value)

    def get(self, i: int, default=None) -> tuple[int, int] | None:
        k = bisect_left(self.index, i)
        if k == len(self.index) or self.index[k] != i:
            return default
        return self.data[2 * k], self.data[2 * k + 1]


class PeProcess:
    """One PE's walk over its stream as a SimPy-style process: event callbacks resume it."""

    __slots__ = ("after", "at", "copies", "cpu", "credited", "dequant", "done", "due", "end",
                 "env", "error", "events", "gen", "issue", "last_end", "made", "n", "offers",
                 "pid", "planned", "resume_cb", "start", "tcm_peak", "tcm_wait", "tile_buffers",
                 "tile_worst", "tiles", "waiting", "waits", "why")

    def __init__(self, env: Clock, pid: int):
        self.env = env
        self.pid = pid
        self.planned = 0  # what its composites' plans move, by formula (invariants)
        #: composite -> the elements its plan has PE_MATH dequantise, by formula (invariants)
        self.dequant: dict[int, int] = {}
        self.gen: Iterator[None] | None = None
        self.done = False
        self.at = 0  # the command it waits in, while it waits
        #: what it waits for, while it waits on another PE: a str, or a function that
        #: makes it, called only for a PE left stuck (most waits end)
        self.waiting: str | Callable[[], str] = ""
        self.end = array("q")  # per command: when its result is ready (PENDING: not yet)
        self.last_end = 0  # the latest end of anything it did
        # For the critical path (see `hw.walk`): per command its issue time, start,
        # and why it started then, and how PE_CPU reached its issue (a `because`, 0: simply
        # after the command before); PE_CPU's waits after a command: index -> (until, why)
        self.n = 0
        self.issue = array("q")
        self.start = array("q")
        self.why = array("q")
        self.cpu = array("q")
        self.after = After()
        self.tiles = TileOps()
        self.made: dict[int, int] = {}  # composite -> its last tile operation
        self.waits: dict[int, tuple] = {}  # op -> (the resource a transfer waited for, ps)
        # its receives' copies out of ring slots (`Copies`); and when the copy that freed a
        # credit ended, for a send whose first chunk waited for it (send -> end) or after
        # which PE_CPU did (~send -> end)
        self.copies = Copies()
        self.credited: dict[int, int] = {}
        self.tcm_wait = NOBODY  # PE_CPU waited for TCM held by this op (-1: no)
        self.events = 0
        self.error: TimingError | None = None  # what stopped it
        self.tcm_peak = (0, 0, 0)  # TCM high water: (bytes, time, command)
        # per running composite: the largest tile of each streamed operand (bytes) and the
        # largest output tile (elements), as its tiles ran; then, for the invariants, the
        # largest (buffers those tiles needed, buffers its plan reserved, composite)
        self.tile_buffers: dict[int, list] = {}
        self.tile_worst = (0, 0, -1)
        self.resume_cb = self._resume
        self.due: list[int] | None = None  # the resume `wake_by` planned, while it waits
        #: while a multicast waits on several rings (`hw.multicast`): id(ring) -> the
        #: soonest it was offered a credit by that ring
        self.offers: dict[int, int] | None = None

    def waits_for(self) -> str:
        """What it waits for (`waiting`), in words."""
        return self.waiting if isinstance(self.waiting, str) else self.waiting()

    def _resume(self, _arg=None) -> None:
        self.events += 1
        try:
            next(self.gen)
        except StopIteration:
            self.done = True
        except TimingError as exc:  # this PE stops; the others go on (see Timing.run)
            self.error, self.done = exc, True
        except OverflowError:  # a time past the 64-bit picosecond range of the op records
            self.error = TimeRangeError(TOO_LATE, self.pid, self.at, self.env.now)
            self.done = True

    def wake_at(self, t: int, callback=None) -> None:
        """Resume at simulated time `t` (now if past), in PE-index order among equals
        (`callback`: what resumes it, if not `_resume`)."""
        env = self.env
        now = env.now
        heappush(env.queue, (t if t > now else now, self.pid, next(env.ids),
                             callback or self.resume_cb, None))

    def wake_by(self, t: int) -> None:
        """Resume at `t` at the latest: a wait for the earliest of times learnt while it
        sleeps (an IPCQ credit given back after another that is back later). A resume
        planned for later is called off; one planned for `t` or sooner stands."""
        due = self.due
        if due is not None and due[0] <= t:
            return
        self.due = due = [t]

        def resume(_arg) -> None:
            if self.due is due:  # not called off since
                self.due = None
                self._resume()

        self.wake_at(t, resume)


class Running:
    """A composite between dispatch and end: its tile operations and TCM tile buffers."""

    __slots__ = ("depth", "dispatched", "end", "index", "issued", "ops", "private", "region",
                 "sizes", "tcm_bytes", "width")

    def __init__(self, index: int, issued: int, dispatched: int, ops: Generator,
                 tiling: GemmTiling, private: bool, width: int, region: int | None,
                 sizes: list):
        self.index, self.issued, self.dispatched = index, issued, dispatched
        self.ops, self.private = ops, private
        self.tcm_bytes, self.depth = tiling.tcm_bytes, tiling.depth
        self.end = PENDING
        self.width = width  # its GEMM array's format code (`gemm_datapath`)
        self.region = region  # the region it counts in (None: the kernel names none)
        # the largest tile of each streamed operand (bytes) and output tile (elements), as
        # its tiles run (`PeProcess.tile_buffers`)
        self.sizes = sizes


class Composites:
    """A PE's composites in flight: tile operations in issue order, and their TCM.

    Tile buffers are held from dispatch until a composite ends: `pending` bytes
    for composites still running, and `ended` (a heap by end time) for those
    ended at a time later than the PE has reached.
    """

    __slots__ = ("by_index", "ended", "heap", "held", "pending", "seq")

    def __init__(self) -> None:
        # (next operations' issue, seq, the composite, those operations)
        self.heap: list[tuple[int, int, Running, list[TileOp]]] = []
        self.by_index: dict[int, Running] = {}
        self.pending = 0  # tile-buffer bytes of composites still running
        # (end, seq, bytes, last tile operation) of ended composites
        self.ended: list[tuple[int, int, int, int]] = []
        self.held = 0  # bytes in `ended`
        self.seq = 0

    def __bool__(self) -> bool:
        return bool(self.pending or self.held)

    def buffers(self, t: int, prune: bool = False) -> int:
        """TCM held by tile buffers at `t` (tile operations up to `t` done). With `prune`,
        forgets composites ended by `t`: only for a `t` that later calls never go below
        (PE_CPU's time)."""
        ended = self.ended
        if prune:
            while ended and ended[0][0] <= t:
                self.held -= heapq.heappop(ended)[2]
            return self.pending + self.held
        return self.pending + sum(nbytes for end, _, nbytes, _ in ended if end > t)

    def start(self, running: Running) -> None:
        self.pending += running.tcm_bytes
        self.by_index[running.index] = running

    def finish(self, running: Running, last: int) -> None:
        self.pending -= running.tcm_bytes
        self.held += running.tcm_bytes
        self.seq += 1
        heappush(self.ended, (running.end, self.seq, running.tcm_bytes, last))

    def holders(self, t: int) -> list[Running | tuple[int, int]]:
        """What holds tile buffers at `t`: composites running, and (end, last operation) of
        ended ones."""
        return [r for _, _, r, _ in self.heap] + [(end, last) for end, _, _, last in self.ended
                                                 if end > t]
