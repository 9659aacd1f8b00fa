"""What every concern of `tl` stands on: the launch, one PE's state, and its command rows.

`Launch` is what every PE of one functional pass shares (the system, memory,
the program, mail). `Core` is one PE's `tl` state (its stream rows, TCM,
region) and the few steps every call that issues a command takes: emit the
row with the kernel's line (`_emit`), take TCM for a result (`_make`,
`_result`), check that a tensor is this PE's (`_own`). The concern modules
(`memory`, `gemm`, `pe_math`, `messages`, `ordering`, `regions`, `grid`) are
mixins on `Core`; `TL` is their sum.

While the pass runs a command is a packed row (`_ROW`); `Launch.finish` makes
the rows the program's stream columns when it ends.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any

import numpy as np

from kernbench_cli.address.allocator import FreeListPool
from kernbench_cli.address.physaddr import PeCoord
from kernbench_cli.config.units import format_size
from kernbench_cli.errors import AddressError, KernelError, clip
from kernbench_cli.lang import DEFAULT_MAX_COMMANDS
from kernbench_cli.lang.bridge import Hub, PeThread
from kernbench_cli.lang.memory import Memory
from kernbench_cli.lang.tensor import Tensor
from kernbench_cli.lang.tl.checks import nbytes_of
from kernbench_cli.stream import (
    COLUMNS,
    COMPOSITE,
    DOT,
    LOAD,
    MATH,
    MATH_KINDS,
    NONE,
    READ,
    RECV,
    STORE,
    Interner,
    Program,
    Stream,
)

if TYPE_CHECKING:
    from kernbench_cli.hw.system import System


class PeFailed(BaseException):
    """A `tl` call of a PE that has failed already (TCM full, the command limit): the kernel
    took that failure and carried on, but its PE issues nothing more, and the run reports
    the first failure. Not an `Exception`, so that a kernel's ``except Exception`` retry
    loop ends there: retrying, each call appended a command past the limit (15 GB and
    minutes after `--max-commands 1000`) or failed TCM again, without end."""


class CommandLimit(KernelError):
    """The kernel issued more than `--max-commands` commands (on the PE that issued the one
    too many, and on every PE after it)."""


class Launch:
    """What every PE of one functional pass shares: the system, memory, the program, mail."""

    def __init__(self, system: System, memory: Memory, timing_only: bool, kernel_file: str,
                 max_commands: int = DEFAULT_MAX_COMMANDS, shortcuts: bool = True):
        self.system = system
        self.memory = memory
        self.timing_only = timing_only
        #: timing only, whether `tl.repeat` copies a proven repetition instead of running it
        self.shortcuts = shortcuts
        #: `tl.repeat`'s repetitions: run and recorded, run and proven alike, copied, run
        #: (not repeatable, or alike to none recorded)
        self.repeats = {"recorded": 0, "proven": 0, "copied": 0, "run": 0}
        self.copied = 0  # commands `tl.repeat` copied (counted in `commands` too)
        self.kernel_file = kernel_file  # co_filename of the kernel's code: how lines are found
        #: id of a code object of the kernel's file -> (the code, {instruction offset:
        #: line}): the cache of `_line`, shared by every PE (they run the same code)
        self.lines: dict[int, tuple[CodeType, dict[int, int]]] = {}
        self.max_commands = max_commands
        self.commands = 0
        self.program = Program.empty(len(system.pes))
        #: per PE, the commands as packed rows (`_ROW`), made into the program's columns
        #: when the pass ends
        self.rows = [bytearray() for _ in system.pes]
        self.gemm_shape = Interner(self.program.gemm_shapes)
        self.hub = Hub()
        #: (sender, receiver) -> messages sent and not yet received: (bytes, dtype, value)
        self.mail: dict[tuple[int, int], deque[tuple[int, np.dtype, np.ndarray | None]]] = {}
        self.receivers: dict[int, PeThread] = {}  # PEs waiting in a receive, by pid
        self.region_index = Interner(self.program.regions)  # region path -> index
        #: per PE, the first error a `tl` call raised after putting its command in the
        #: stream (the command limit, TCM full), and that command's index: the PE has
        #: failed with it, even if the kernel took it and carried on (its stream is cut
        #: after that command, as it would have ended had the kernel not taken it)
        self.failed: dict[int, tuple[KernelError, int]] = {}

    def finish(self, tls: list[Core]) -> None:
        """The program's TCM peaks and streams from the PEs' `tl`s and rows (rows emptied)."""
        program = self.program
        for tl in tls:
            program.tcm_peak[tl._pid] = tl._tcm.peak
        for pid, (_, at) in self.failed.items():
            del self.rows[pid][(at + 1) * _ROW_BYTES:]
            program.region_marks[pid] = [m for m in program.region_marks[pid] if m[0] <= at + 1]
        batch = 256  # PEs converted at once: fewer numpy calls, little extra memory
        for first in range(0, len(self.rows), batch):
            rows = self.rows[first:first + batch]
            program.streams[first:first + batch] = _columns(rows)
            self.rows[first:first + batch] = [bytearray() for _ in rows]


class Core:
    """One PE's `tl` state and the steps every command takes; the concerns build on it."""

    def __init__(self, launch: Launch, pid: int, thread: PeThread):
        self._launch = launch
        self._pid = pid
        self._thread = thread
        self._hub = launch.hub  # its `current`: the PE whose kernel runs
        system = launch.system
        self._coord: PeCoord = system.coords[pid]
        self._rows = launch.rows[pid]
        self._memory = launch.memory
        self._values = not launch.timing_only
        self._kernel_file = launch.kernel_file
        self._lines = launch.lines
        topo = system.topology
        self._tcm = FreeListPool(f"TCM of PE ({self._coord})", 0, topo.pe.tcm.size)
        self._gemm = (topo.pe.gemm.rows, topo.pe.gemm.cols, topo.pe.gemm.dataflow)
        self._region = 0  # the region its next command belongs to
        self._open = None  # the innermost `tl.region` entered and not left (`_Region`)
        self._pinned = 0  # inside a `library_call`: the kernel line of its commands
        self._take = None  # the repetition `tl.repeat` records, while it runs
        self._copying = False  # whether `tl.repeat` copies a repetition (and may wait in it)
        self._failed = False  # the PE has failed (`_lasting`): it issues nothing more
        self._repeats: dict = {}  # `tl.repeat`'s records, by key
        self._held: dict = {}  # the dicts `tl.repeat` keys by identity, by id

    def _emit(self, op: int, a: int, b: int, size: int, arg: int, src: int = NONE,
              dst: int = NONE, depth: int = 2, block: int = 0) -> int:
        """Append a command to this PE's stream; its index. The kernel line is found here
        (`_line`), looked for from `depth` frames up: the fewest `tl` frames between the
        kernel and here on this path (frames cost time to look at)."""
        if self._hub.current is not self._thread:
            raise self._foreign()
        if self._failed:
            raise self._done()
        rows = self._rows
        i = len(rows) // _ROW_BYTES
        rows += _PACK(op, a, b, size, arg, src, block,
                      self._pinned or _line(sys._getframe(depth), self._kernel_file,
                                            self._lines), dst, self._tcm.used)
        if op != READ:
            launch = self._launch
            launch.commands += 1
            if launch.commands > launch.max_commands:
                raise self._lasting(i, CommandLimit(
                    f"the kernel issued more than {launch.max_commands:,} commands; an "
                    "endless loop? (--max-commands raises the limit)"))
        return i

    def _make(self, op: int, a: int, b: int, size: int, arg: int, src: int, nbytes: int,
              what: str, depth: int = 2, block: int = 0) -> tuple[int, int]:
        """`_emit` for a command that makes a tensor of `nbytes` in fresh TCM, taken first
        so that the row is written whole: (its index, the tensor's TCM offset). `what` names
        the call if TCM is full. Either error leaves the command in the stream as it was
        issued, with no TCM of its own (the command limit: `_emit` raises)."""
        launch = self._launch
        if self._failed:
            raise self._done()
        try:
            tcm = self._tcm.alloc(nbytes, what) if launch.commands < launch.max_commands \
                else NONE
        except AddressError as exc:
            i = self._emit(op, a, b, size, arg, src, NONE, depth + 1, block)
            raise self._lasting(i, KernelError(f"tensors overflow TCM: {exc}"
                                               f"{self._holders()}")) from None
        return self._emit(op, a, b, size, arg, src, tcm, depth + 1, block), tcm

    def _foreign(self) -> KernelError:
        """The error of a command issued through this PE's `tl` (or one of its tensors) by
        another PE's kernel: it would be charged to this PE, in its stream."""
        running = self._hub.current
        other = "kernbench's own code" if running is None else \
            f"the kernel of PE ({self._launch.system.coords[running.pid]})"
        return KernelError(f"a command of PE ({self._coord}) issued by {other}: each PE "
                           "issues through its own `tl` and tensors (one kept from another "
                           "PE's kernel, in a global?)")

    def _lasting(self, i: int, exc: KernelError) -> KernelError:
        """`exc`, raised by a call that leaves its command `i` in the stream: the PE's
        failure (`Launch.failed`) whether or not the kernel takes it."""
        self._launch.failed.setdefault(self._pid, (exc, i))
        self._failed = True
        return exc

    def _done(self) -> PeFailed:
        """The error of a command after the PE's failure (`PeFailed`)."""
        return PeFailed(f"the PE failed before ({self._launch.failed[self._pid][0]}), and "
                        "the kernel carried on: it issues no more commands")

    def _result(self, i: int, shape: tuple[int, ...], dt: np.dtype, value: np.ndarray | None,
                what: str) -> Tensor:
        """The tensor command `i`, emitted before, makes, in fresh TCM (its offset goes into
        the stream): for commands that wait between issue and result (`recv`)."""
        nbytes = nbytes_of(shape, dt)
        try:
            tcm = self._tcm.alloc(nbytes, what)
        except AddressError as exc:
            raise self._lasting(i, KernelError(f"tensors overflow TCM: {exc}"
                                               f"{self._holders()}")) from None
        _DST_TCM.pack_into(self._rows, _ROW_BYTES * i + _DST_OFFSET, tcm, self._tcm.used)
        return Tensor(self, shape, dt, value, i, tcm, None, nbytes)

    def _issued(self) -> int:
        """How many commands this PE has issued: the index of its next one."""
        return len(self._rows) // _ROW_BYTES

    def _set_arg(self, i: int, arg: int) -> None:
        """Command `i`'s `arg`, known only after its row was emitted (a composite's index)."""
        _ARG_AT.pack_into(self._rows, _ROW_BYTES * i + _ARG_AT_OFFSET, arg)

    def _holders(self) -> str:
        """'; held by: SIZE CALL (line N), …' for the live tensors, largest first, then in
        the order they were made."""
        live = self._tcm.allocations()
        if not live:
            return ""
        table, made = _table(self._rows), {}
        ops, args, dsts, lines = (table[name].tolist() for name in ("op", "arg", "dst", "line"))
        for i in range(len(ops) - 1, -1, -1):  # the latest command at each offset
            dst = dsts[i]
            if dst in live and dst not in made and ops[i] != STORE:
                made[dst] = i
        held = sorted(live.items(),
                      key=lambda item: (-item[1], made.get(item[0], len(ops)), item[0]))
        parts = []
        for offset, size in held[:5]:
            i = made.get(offset)
            if i is None:
                what = "a tensor"
            else:
                call = f"{MATH_KINDS[args[i]][1]} (PE_MATH)" if ops[i] == MATH \
                    else _CALLS[ops[i]]
                what = f"{call} (line {lines[i]})"
            parts.append(f"{format_size(size)} {what}")
        more = f", and {len(held) - 5} more" if len(held) > 5 else ""
        return f"; held by: {', '.join(parts)}{more}"

    def _own(self, x: Any, op: str) -> Tensor:
        """`x` if it is a tensor of this PE; `op` names the call in the error ("dot")."""
        if x.__class__ is Tensor and x._tl is self:
            return x
        what = op if "." in op else f"tl.{op}"
        if not isinstance(x, Tensor):
            raise KernelError(f"{what} expects a tensor, got {type(x).__name__}")
        raise KernelError(f"{what}: the tensor belongs to another PE")

    def _coord_of(self, pid: int) -> PeCoord:
        coords = self._launch.system.coords
        if not isinstance(pid, int) or pid.__class__ is bool:
            raise KernelError(f"a PE index is an int, not {clip(pid)} ({type(pid).__name__})")
        if not 0 <= pid < len(coords):
            raise KernelError(f"PE index {pid!r} does not exist (0..{len(coords) - 1})")
        return coords[pid]


#: A command while the pass runs: its columns (`COLUMNS`, each in its stream type) packed
#: in a row, 53 B; dst and tcm, which a result written after its command fills, side by
#: side at the end. One `pack` a command is a third of the time of a row of integers.
_ROW_COLUMNS = ("op", "a", "b", "size", "arg", "src", "rows", "line", "dst", "tcm")
_ROW = struct.Struct("=" + "".join(dict(COLUMNS)[name] for name in _ROW_COLUMNS))
_ROW_DTYPE = np.dtype([(name, dict(COLUMNS)[name]) for name in _ROW_COLUMNS])
_ROW_BYTES, _PACK = _ROW.size, _ROW.pack
_ARG_AT, _DST_TCM = struct.Struct("=" + dict(COLUMNS)["arg"]), struct.Struct(
    "=" + dict(COLUMNS)["dst"] + dict(COLUMNS)["tcm"])
_ARG_AT_OFFSET, _DST_OFFSET = (_ROW_DTYPE.fields[name][1] for name in ("arg", "dst"))
_CALLS = {LOAD: "tl.load", DOT: "tl.dot", COMPOSITE: "tl.composite",
          RECV: "tl.recv"}  # what a tensor's producer is called in messages


def _line(frame: FrameType | None, kernel_file: str,
          lines: dict[int, tuple[CodeType, dict[int, int]]]) -> int:
    """The line the innermost frame of `kernel_file`'s code, from `frame` outwards, is at;
    0 if none is. Cached in `lines` by code object, then instruction offset: ``f_lineno``
    reads the code's line table from its start (the further into a long kernel, the
    slower: 1.6 us at line 200, more than the rest of the command's emission), while the
    line at an offset of a code object never changes. A code object's hash reads its whole
    bytecode, so the key is its id; the entry holds the code, so that no other object
    takes that id while the entry lives."""
    while frame is not None:
        code = frame.f_code
        if code.co_filename == kernel_file:
            known = lines.get(id(code))
            if known is None:
                known = lines[id(code)] = (code, {})
            at = frame.f_lasti
            line = known[1].get(at)
            if line is None:
                line = known[1][at] = frame.f_lineno
            return line
        frame = frame.f_back
    return 0


@contextmanager
def library_call(tl: Core) -> Iterator[None]:
    """Around library code a kernel calls (the collectives): every command the block issues
    gets the kernel line of the call into it, found here once. The same line as `_line`
    finds from each command, since no frame between the kernel's and `tl`'s is the
    kernel's own; without it each of a collective's commands walks the library's frames
    (four or five) out to the kernel's, one by one. Nested calls keep the outermost's
    line."""
    if tl._pinned:
        yield
        return
    tl._pinned = _line(sys._getframe(), tl._kernel_file, tl._lines)
    try:
        yield
    finally:
        tl._pinned = 0


def kernel_line(kernel_file: str, tb) -> int | None:
    """The line of the innermost frame of traceback `tb` that is in `kernel_file`."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == kernel_file:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _table(rows: bytearray) -> np.ndarray:
    """One PE's rows as a numpy record array (a view), a field per column."""
    return np.frombuffer(rows, dtype=_ROW_DTYPE)


def _columns(rows: list[bytearray]) -> list[Stream]:
    """Streams from their commands' rows (`_ROW`)."""
    table = _table(b"".join(rows))
    streams = [Stream() for _ in rows]
    for name, code in COLUMNS:
        column = np.ascontiguousarray(table[name]).tobytes()
        width, at = array(code).itemsize, 0
        for stream, r in zip(streams, rows, strict=True):
            end = at + len(r) // _ROW_BYTES * width
            getattr(stream, name).frombytes(column[at:end])
            at = end
    return streams
