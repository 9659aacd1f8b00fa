"""The op log: every engine occupation of a timing pass, and what a timeline needs besides.

Kept only when asked for (`run --oplog`, `--chrome-trace`, golden runs): the
timing pass appends to it as it goes. Records iterate as tuples of
`OP_FIELDS` (what `--oplog` writes and the goldens digest); the timeline
columns beside them (the command a record belongs to, whether it held a
scheduler queue slot, when a transfer streamed and over which resources)
and the per-PE CPU and scheduler activity and ring occupancy feed
`report.chrome_trace`.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import NamedTuple

from kernbench_cli.hw.engines import ENGINES

#: Fields of one op-log record, as `OpLog` iterates them.
OP_FIELDS = ("seq", "pid", "engine", "kind", "issue_ps", "start_ps", "end_ps", "bytes", "flops",
             "src", "dst")

#: (column, values per record) of the per-record arrays, in `OpLog.ordered`'s care.
_COLUMNS = (("pid", 1), ("engine", 1), ("kind", 1), ("times", 3), ("amounts", 2), ("addrs", 2),
            ("command", 1), ("queued", 1), ("streams", 2), ("via", 1), ("shape", 1))


class Slice(NamedTuple):
    """A stretch of PE_CPU's or PE_SCHEDULER's time: [start_ps, end_ps) doing `name` for
    command `command` of PE `pid`."""

    pid: int
    start_ps: int
    end_ps: int
    name: str
    command: int


class OpLog:
    """Every engine occupation of a run, as columns; iterates records as tuples (`OP_FIELDS`).

    A record is a command, or one tile of a composite, or one chunk of a
    send. Addresses absent from a record are None. `ordered` sorts the
    records by start time, PE, then the order the PE made them.

    Beside each record: `command` (the PE's command it belongs to: for a
    tile, its composite; for a chunk, its send), `queued` (1 if [issue,
    start] is the command's wait in the scheduler queue), `streams` (for a
    transfer: when its bytes streamed, [from, to); the engine's occupation
    otherwise), `via` (for a transfer: its shared resources, an index into
    `paths`; -1: none) and `shape` (for a GEMM record, a DOT or a composite's
    tile: its (m, k, n), an index into `shapes`; -1: none). Besides the
    records: `cpu` and `scheduler` slices per PE, and `rings`, each ring's
    occupancy changes (time, +1 or -1 slot whose credit is out).
    """

    def __init__(self) -> None:
        self.pid = array("i")
        self.engine = array("B")
        self.kind = array("H")
        self.times = array("q")  # issue, start, end per record
        self.amounts = array("q")  # bytes, flops per record
        self.addrs = array("q")  # src, dst per record (-1: none)
        self.command = array("q")
        self.queued = array("B")
        self.streams = array("q")
        self.via = array("i")
        self.shape = array("i")
        self.kinds: list[str] = []
        self._codes: dict[str, int] = {}
        self.paths: list[tuple[str, ...]] = []  # resource names ("hbm rack=0 …") per path
        self._path_ids: dict[tuple, int] = {}
        self.shapes: list[tuple[int, int, int]] = []  # (m, k, n) of GEMM records
        self._shape_ids: dict[tuple[int, int, int], int] = {}
        self.cpu: list[Slice] = []
        self.scheduler: list[Slice] = []
        self.rings: dict[str, list[tuple[int, int]]] = {}

    def code(self, kind: str) -> int:
        """The code of record kind `kind` ("load", "gemm_tile", "exp", …)."""
        code = self._codes.get(kind)
        if code is None:
            code = self._codes[kind] = len(self.kinds)
            self.kinds.append(kind)
        return code

    def path(self, resources: tuple) -> int:
        """The index in `paths` of a transfer's resources (calendars: `level`, `name`)."""
        code = self._path_ids.get(resources)
        if code is None:
            code = self._path_ids[resources] = len(self.paths)
            self.paths.append(tuple(f"{cal.level} {cal.name}" for cal in resources))
        return code

    def gemm_shape(self, m: int, k: int, n: int) -> int:
        """The index in `shapes` of a GEMM of `m` x `k` by `k` x `n`."""
        key = (m, k, n)
        code = self._shape_ids.get(key)
        if code is None:
            code = self._shape_ids[key] = len(self.shapes)
            self.shapes.append(key)
        return code

    def append(self, pid: int, engine: int, kind: int, issue: int, start: int, end: int,
               nbytes: int, flops: int, src: int | None, dst: int | None, command: int = -1,
               queued: bool = False, streams: tuple[int, int] | None = None,
               via: int = -1, shape: int = -1) -> None:
        self.pid.append(pid)
        self.engine.append(engine)
        self.kind.append(kind)
        self.times.extend((issue, start, end))
        self.amounts.extend((nbytes, flops))
        self.addrs.extend((-1 if src is None else src, -1 if dst is None else dst))
        self.command.append(command)
        self.queued.append(queued)
        self.streams.extend(streams or (start, end))
        self.via.append(via)
        self.shape.append(shape)

    def ordered(self) -> OpLog:
        """The same records by (start time, PE, the order the PE made them); the CPU and
        scheduler slices by PE (in the order each PE made them), an order that does not
        depend on which PEs the timing pass walked (`hw.dedup`)."""
        times, pids = self.times, self.pid
        order = sorted(range(len(pids)), key=lambda r: (times[3 * r + 1], pids[r], r))
        out = OpLog()
        out.kinds, out._codes = self.kinds, self._codes
        out.paths, out._path_ids = self.paths, self._path_ids
        out.shapes, out._shape_ids = self.shapes, self._shape_ids
        out.cpu = sorted(self.cpu, key=lambda s: s.pid)
        out.scheduler = sorted(self.scheduler, key=lambda s: s.pid)
        out.rings = self.rings
        for name, width in _COLUMNS:
            col = getattr(self, name)
            if width == 1:
                getattr(out, name).extend(col[r] for r in order)
            else:
                getattr(out, name).extend(v for r in order
                                          for v in col[width * r:width * r + width])
        return out

    def __len__(self) -> int:
        return len(self.pid)

    def __iter__(self) -> Iterator[tuple]:
        kinds, times, amounts, addrs = self.kinds, self.times, self.amounts, self.addrs
        for seq, (pid, engine, kind) in enumerate(zip(self.pid, self.engine, self.kind,
                                                      strict=True)):
            src, dst = addrs[2 * seq], addrs[2 * seq + 1]
            yield (seq, pid, ENGINES[engine], kinds[kind], times[3 * seq],
                   times[3 * seq + 1], times[3 * seq + 2], amounts[2 * seq],
                   amounts[2 * seq + 1], None if src < 0 else src, None if dst < 0 else dst)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OpLog) and list(self) == list(other)

    __hash__ = None  # mutable
