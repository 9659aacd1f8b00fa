"""`tl`: the kernel language a PE's kernel is written in (the functional pass).

Every PE runs the kernel with its own `TL` object. A call checks its
arguments, computes its values with numpy in program order (float32, rounded
to the result dtype; nothing with ``timing_only``), allocates TCM for its
result, and appends a command to the PE's stream (`kernbench_cli.stream`).
No time passes here: the timing pass (`hw.timing`) times the streams
afterwards, which it can because a kernel cannot observe time. Tensors are
futures in that timing: a command that consumes one depends on the command
that made it.

Semantics kept simple on purpose, and documented in the README:
- Memory is coherent within a PE in program order; between PEs only through
  IPCQ messages (the kernels here never read what another PE stores).
- A composite's tile buffers are taken from the TCM free at issue.
"""

from __future__ import annotations

import functools
import math
import operator
import struct
import sys
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any

import numpy as np

from kernbench_cli import collector
from kernbench_cli.address.allocator import FreeListPool, Sharded
from kernbench_cli.address.physaddr import PeCoord
from kernbench_cli.config.units import format_size
from kernbench_cli.errors import AddressError, KernelError, clip
from kernbench_cli.hw.composite import PlanCosts, plan_gemm
from kernbench_cli.lang import DEFAULT_MAX_COMMANDS
from kernbench_cli.lang.bridge import Hub, PeThread
from kernbench_cli.lang.dtypes import DTYPES, NAMES, dtype, promote
from kernbench_cli.lang.memory import Memory
from kernbench_cli.lang.tensor import Handle, Ref, Tensor
from kernbench_cli.stream import (
    COLUMNS,
    COMPOSITE,
    CYCLES,
    DOT,
    LOAD,
    MATH,
    MATH_KINDS,
    NONE,
    READ,
    RECV,
    SEND,
    STORE,
    WAIT,
    Composite,
    Interner,
    Program,
    Stream,
)

if TYPE_CHECKING:
    from kernbench_cli.hw.system import System

F32 = DTYPES["f32"]


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return 1 / np.sqrt(x)


def _select(cond: np.ndarray, x: Any, y: Any) -> np.ndarray:
    return np.where(cond != 0, x, y)


#: The PE_MATH kind (`MATH_KINDS` index) of each function `tl` computes values with.
_KIND_OF = {fn: [name for _, name in MATH_KINDS].index(name) for fn, name in (
    (np.add, "add"), (np.subtract, "subtract"), (np.negative, "negative"),
    (np.multiply, "multiply"), (np.divide, "divide"), (np.maximum, "maximum"),
    (np.minimum, "minimum"), (np.exp, "exp"), (np.log, "log"), (np.sqrt, "sqrt"),
    (np.max, "max"), (np.sum, "sum"), (_rsqrt, "rsqrt"), (np.reciprocal, "reciprocal"),
    (np.absolute, "abs"), (np.tanh, "tanh"), (_select, "where"))}
_FILL, _CAST = (MATH_KINDS.index(kind) for kind in (("add", "fill"), ("cast", "cast")))
_MATH_CALLS = tuple(f"tl.{name}" for _, name in MATH_KINDS)  # how TCM errors name them
F64 = np.dtype(np.float64)
_OPERANDS = (Tensor, Ref)
_SCALARS_OR_TENSORS = (Tensor, int, float)


class Launch:
    """What every PE of one functional pass shares: the system, memory, the program, mail."""

    def __init__(self, system: System, memory: Memory, timing_only: bool, kernel_file: str,
                 max_commands: int = DEFAULT_MAX_COMMANDS):
        self.system = system
        self.memory = memory
        self.timing_only = timing_only
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


class TL:
    """The `tl` object of one PE. See the README for the full list of calls."""

    f16, bf16, f32 = "f16", "bf16", "f32"

    def __init__(self, launch: Launch, pid: int, thread: PeThread):
        self._launch = launch
        self._pid = pid
        self._thread = thread
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

    # ------------------------------------------------------------ grid (ADR-0022)

    def program_id(self, axis: int = 0) -> int:
        """axis 0: PE in its cube; 1: cube in its SIP; 2: SIP in the system."""
        c, s = self._coord, self._launch.system.topology.system
        return (c.pe, c.cube, c.rack * s.sips_per_rack + c.sip)[self._axis(axis)]

    def num_programs(self, axis: int = 0) -> int:
        s = self._launch.system.topology.system
        return (s.pes_per_cube, s.cubes_per_sip, s.racks * s.sips_per_rack)[self._axis(axis)]

    @staticmethod
    def _axis(axis: int) -> int:
        if axis not in (0, 1, 2):
            raise KernelError(f"axis must be 0 (PE in cube), 1 (cube in SIP) or 2 (SIP); "
                              f"got {axis!r}")
        return axis

    def mesh(self, axis: int = 0) -> tuple[int, int]:
        """(columns, rows) of the PE mesh of a cube (axis 0), of the cube mesh of a SIP
        (axis 1), or of the system's SIPs (axis 2: one row). Mesh neighbours are one hop
        apart (PE index = row * columns + column)."""
        s = self._launch.system.topology.system
        return (tuple(s.pe_mesh), tuple(s.cube_mesh),
                (s.racks * s.sips_per_rack, 1))[self._axis(axis)]

    def ring_capacity(self) -> tuple[int, int]:
        """(slots, slot bytes) of each inbound IPCQ ring: a sender may have that much of
        messages not yet taken by a receiver before its `send` waits for a credit."""
        ipcq = self._launch.system.topology.pe.ipcq
        return ipcq.slots, ipcq.slot_size

    @property
    def pid(self) -> int:
        """Global PE index: PEs of a cube fastest, then cubes, then SIPs."""
        return self._pid

    @staticmethod
    def itemsize(dtype: str) -> int:
        """Bytes per element of `dtype` (for pointer arithmetic)."""
        return _dtype(dtype).itemsize

    @property
    def num_pes(self) -> int:
        return len(self._launch.system.pes)

    def shard(self, allocation: Sharded, pid: int | None = None) -> int:
        """Address of PE `pid`'s copy (this PE's by default) of a symmetric allocation."""
        if not isinstance(allocation, Sharded):
            raise KernelError(f"tl.shard expects a sharded allocation, got {allocation!r}")
        coord = self._coord_of(self._pid if pid is None else pid)
        return self._launch.system.amap.pe_hbm_addr(*coord, allocation.offset)

    # ------------------------------------------------------------ memory

    def load(self, ptr: int, shape: Sequence[int], dtype: str, stride: int | None = None) -> Tensor:
        """Start moving `shape` of `dtype` at `ptr` into TCM (rows `stride` apart); lazy."""
        shape_t, dt = _shape(shape), _dtype(dtype)
        nbytes = _nbytes(shape_t, dt)
        span = _span_bytes(shape_t, dt, stride)
        _aligned(ptr, dt, "tl.load")
        self._memory.check(ptr, span, "tl.load")
        i, tcm = self._make(LOAD, NONE, NONE, nbytes, span, ptr, nbytes, "tl.load",
                            block=_block_rows(shape_t, stride))
        value = self._memory.read_f32(ptr, shape_t, dt, "tl.load", stride) \
            if self._values else None
        return Tensor(self, shape_t, dt, value, i, tcm, None, nbytes)

    def ref(self, ptr: int, shape: Sequence[int], dtype: str, stride: int | None = None) -> Ref:
        """Name `shape` of `dtype` at `ptr` without moving it (a composite operand)."""
        shape_t, dt = _shape(shape), _dtype(dtype)
        if len(shape_t) != 2:
            raise KernelError(f"tl.ref: shape must be 2D, got {list(shape_t)}")
        _aligned(ptr, dt, "tl.ref")
        self._memory.check(ptr, _span_bytes(shape_t, dt, stride), "tl.ref")
        return Ref(ptr, shape_t, dt, shape_t[1] if stride is None else stride)

    def store(self, ptr: int, tensor: Tensor, stride: int | None = None) -> None:
        """Write `tensor` to memory at `ptr` (rows `stride` apart)."""
        tensor = self._own(tensor, "store")
        span = _span_bytes(tensor.shape, tensor.dtype, stride)
        _aligned(ptr, tensor.dtype, "tl.store")
        self._memory.check(ptr, span, "tl.store")
        self._emit(STORE, tensor.cmd, NONE, tensor.nbytes, span, _offset(tensor.tcm), ptr,
                   block=_block_rows(tensor.shape, stride))
        if self._values:
            self._memory.write(ptr, _as(tensor.value, tensor.dtype), "tl.store", stride)

    # ------------------------------------------------------------ GEMM

    def dot(self, a: Tensor, b: Tensor, trans_b: bool = False, out_dtype: str = "f32") -> Tensor:
        """a @ b (or a @ b.T) on PE_GEMM; both operands in TCM."""
        a, b = self._own(a, "dot"), self._own(b, "dot")
        m, k, n = _gemm_shape("tl.dot", a.shape, b.shape, trans_b)
        out_dt = _dtype(out_dtype)
        width = max(a.dtype.itemsize, b.dtype.itemsize)  # the array's rate follows it
        nbytes = m * n * out_dt.itemsize
        i, tcm = self._make(DOT, a.cmd, b.cmd, 2 * m * k * n,
                            self._launch.gemm_shape((m, k, n, width)), _offset(a.tcm), nbytes,
                            "tl.dot")
        value = _matmul(a.value, b.value, trans_b, out_dt) if self._values else None
        return Tensor(self, (m, n), out_dt, value, i, tcm, None, nbytes)

    def composite(self, op: str = "gemm", *, a: Tensor | Ref, b: Tensor | Ref,
                  out_ptr: int | None = None, trans_b: bool = False, out_dtype: str | None = None,
                  out_stride: int | None = None) -> Handle:
        """Hand a whole GEMM to PE_SCHEDULER, which tiles it and streams operands (non-blocking).

        Operands are tensors in TCM or `tl.ref`s in memory. With `out_ptr` the
        result is stored there; without, it stays in TCM as ``wait(h)``'s value.
        """
        if op != "gemm":
            raise KernelError(f"tl.composite: op {op!r} is not supported (supported: 'gemm')")
        for name, x in (("a", a), ("b", b)):
            if not isinstance(x, _OPERANDS):
                raise KernelError(f"tl.composite: {name} must be a tensor or a tl.ref, got {x!r}")
            if isinstance(x, Tensor):
                self._own(x, "composite")
        m, k, n = _gemm_shape("tl.composite", a.shape, b.shape, trans_b)
        out_dt = a.dtype if out_dtype is None else _dtype(out_dtype)
        row_stride = n if out_stride is None else out_stride
        if out_ptr is not None:
            self._memory.check(out_ptr, _span_bytes((m, n), out_dt, row_stride),
                               "tl.composite out_ptr")
        a_tcm, b_tcm = isinstance(a, Tensor), isinstance(b, Tensor)
        moved = (0 if a_tcm else a.nbytes) + (0 if b_tcm else b.nbytes)
        i = self._emit(COMPOSITE, a.cmd if a_tcm else NONE, b.cmd if b_tcm else NONE, moved, NONE,
                       _offset(a.tcm) if a_tcm else a.addr,
                       NONE if out_ptr is None else out_ptr)
        value = _matmul(self._operand_value(a), self._operand_value(b), trans_b, out_dt) \
            if self._values else None
        out = None
        if out_ptr is None:
            out = self._result(i, (m, n), out_dt, value, "tl.composite result")
        free = self._tcm.size - self._tcm.used  # at best: other composites may hold some
        if plan_gemm(m, k, n, a.dtype.itemsize, b.dtype.itemsize, out_dt.itemsize, a_tcm, b_tcm,
                     *self._gemm, free, _FITS) is None:  # whether any plan fits, not which
            raise KernelError(f"tl.composite: no tile plan for a {m}x{k}x{n} GEMM fits the "
                              f"{free} B of free TCM")
        program = self._launch.program
        _ARG_AT.pack_into(self._rows, _ROW_BYTES * i + _ARG_AT_OFFSET, len(program.composites))
        program.composites.append(Composite(
            m, k, n, a.dtype.itemsize, b.dtype.itemsize, out_dt.itemsize, a_tcm, b_tcm,
            NONE if a_tcm else a.addr, 0 if a_tcm else a.row_stride,
            NONE if b_tcm else b.addr, 0 if b_tcm else b.row_stride, bool(trans_b),
            NONE if out_ptr is None else out_ptr, row_stride))
        if out_ptr is not None and self._values:
            self._memory.write(out_ptr, value.astype(out_dt), "tl.composite", out_stride)
        return Handle(i, out)

    def fence(self) -> None:
        """Stall PE_CPU until every `tl.store` this PE issued so far has landed in memory.

        Between PEs only IPCQ messages order memory, and a message orders what
        its sender *issued* before it: a store is still on its way when a
        `send` after it leaves. ``tl.store(…); tl.fence(); tl.send(…)`` makes
        the receiver's loads after its `recv` see the stored bytes; without
        the fence, the race detector reports the pattern ("in flight"). A
        composite's output is waited for with `tl.wait(handle)`.
        """
        self._emit(WAIT, NONE, NONE, 0, 0)

    def region(self, name: str) -> AbstractContextManager[None]:
        """``with tl.region("attn"): …``: the commands issued inside belong to region `name`
        (nested regions make paths, "layer/attn"), which the report times: on the critical
        path, by engine, and in the timeline. No command, no time."""
        if not isinstance(name, str) or not name or "/" in name or not name.isprintable():
            raise KernelError(f"tl.region: a name is a non-empty printable string without "
                              f"'/', got {clip(name)}")
        return _Region(self, name)

    def wait(self, handle: Handle) -> Tensor | None:
        """Stall PE_CPU until a composite is done; returns its TCM result (if any)."""
        if not isinstance(handle, Handle):
            raise KernelError(f"tl.wait expects a composite handle, got {handle!r}")
        self._emit(WAIT, handle.cmd, NONE, 0, 0)
        return handle.out

    # ------------------------------------------------------------ PE_MATH

    def exp(self, x: Tensor) -> Tensor:
        return self._unary(np.exp, x)

    def log(self, x: Tensor) -> Tensor:
        return self._unary(np.log, x)

    def sqrt(self, x: Tensor) -> Tensor:
        return self._unary(np.sqrt, x)

    def rsqrt(self, x: Tensor) -> Tensor:
        """1 / sqrt(x), one PE_MATH command (the `sqrt` op class)."""
        return self._unary(_rsqrt, x)

    def reciprocal(self, x: Tensor) -> Tensor:
        """1 / x, one PE_MATH command (the `div` op class)."""
        return self._unary(np.reciprocal, x)

    def abs(self, x: Tensor) -> Tensor:
        return self._unary(np.absolute, x)

    def tanh(self, x: Tensor) -> Tensor:
        """One PE_MATH command (the `exp` op class: the special-function unit)."""
        return self._unary(np.tanh, x)

    def where(self, cond: Tensor, x: Tensor | float, y: Tensor | float) -> Tensor:
        """`x` where `cond` is non-zero, else `y`; shapes broadcast. PE_MATH's `cmp` class:
        one command, or two passes when `x` and `y` are both tensors (a command names two
        producers, as the unit reads two operand streams)."""
        cond = self._own(cond, "where")
        for v in (x, y):
            if not isinstance(v, _SCALARS_OR_TENSORS):
                raise KernelError(f"tl.where: x and y must be tensors or numbers, got "
                                  f"{type(v).__name__}")
        tensors = [self._own(v, "where") for v in (x, y) if isinstance(v, Tensor)]
        shape = _broadcast(cond.shape, *(v.shape for v in tensors))
        if shape is None:
            raise KernelError("tl.where: shapes " + " and ".join(
                str(list(v.shape)) for v in (cond, *tensors)) + " do not broadcast")
        dt = promote(*(v.dtype for v in tensors)) if tensors else F32
        values = (cond.value, *(v.value if isinstance(v, Tensor) else v for v in (x, y)))
        kind, count = _KIND_OF[_select], math.prod(shape)
        if len(tensors) < 2:
            return self._math(kind, cond.cmd, tensors[0].cmd if tensors else NONE, shape, dt,
                              count, _select, *values)
        first = self._math(kind, cond.cmd, tensors[0].cmd, shape, dt, count, _select, *values)
        return self._math(kind, first.cmd, tensors[1].cmd, shape, dt, count, _identity,
                          first.value)

    def maximum(self, x: Tensor | float, y: Tensor | float) -> Tensor:
        return self._binary(np.maximum, x, y)

    def minimum(self, x: Tensor | float, y: Tensor | float) -> Tensor:
        return self._binary(np.minimum, x, y)

    def max(self, x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return self._reduce(np.max, x, axis, keepdims)

    def sum(self, x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return self._reduce(np.sum, x, axis, keepdims)

    def zeros(self, shape: Sequence[int], dtype: str = "f32") -> Tensor:
        return self.full(shape, 0.0, dtype)

    def full(self, shape: Sequence[int], value: float, dtype: str = "f32") -> Tensor:
        shape_t, dt = _shape(shape), _dtype(dtype)
        return self._math(_FILL, NONE, NONE, shape_t, dt, math.prod(shape_t), np.full, shape_t,
                          value, F32)

    # ------------------------------------------------------------ IPCQ

    def send(self, tensor: Tensor, to: str | int) -> None:
        """Send `tensor` to a neighbour ("E", "W", "N", "S") or PE `to` (global index).

        The bytes go by this PE's DMA into the receiver's ring for the side
        they arrive from, one slot per chunk; with no free slot the CPU waits.
        """
        tensor = self._own(tensor, "send")
        launch = self._launch
        dst = launch.system.pid_of[self._peer(to, "tl.send")]
        self._emit(SEND, tensor.cmd, NONE, tensor.nbytes, dst, _offset(tensor.tcm))
        box = launch.mail.get((self._pid, dst))
        if box is None:
            box = launch.mail[(self._pid, dst)] = deque()
        box.append((tensor.nbytes, tensor.dtype, tensor.value))
        receiver = launch.receivers.get(dst)
        if receiver is not None:
            receiver.wake()

    def recv(self, frm: str | int, shape: Sequence[int], dtype: str) -> Tensor:
        """Take the next message from a neighbour ("E", …) or PE `frm`; waits for it."""
        shape_t, dt = _shape(shape), _dtype(dtype)
        launch = self._launch
        peer = self._peer(frm, "tl.recv")
        src = launch.system.pid_of[peer]
        nbytes = _nbytes(shape_t, dt)
        i = self._emit(RECV, NONE, NONE, nbytes, src)
        box = launch.mail.get((src, self._pid))
        while not box:
            launch.receivers[self._pid] = self._thread
            self._thread.block()
            del launch.receivers[self._pid]
            box = launch.mail.get((src, self._pid))
        sent, sent_dt, value = box.popleft()
        if sent != nbytes:
            raise KernelError(f"tl.recv expects {nbytes} B from PE ({peer}) but its message "
                              f"is {sent} B")
        if value is not None:
            value = value.reshape(shape_t) if sent_dt == dt else \
                np.ascontiguousarray(_as(value, sent_dt)).view(dt).reshape(shape_t).astype(F32)
        return self._result(i, shape_t, dt, value, "tl.recv")

    # ------------------------------------------------------------ CPU

    def cycles(self, n: int) -> None:
        """Spend `n` PE_CPU cycles (explicit CPU time)."""
        if not isinstance(n, int) or not 0 <= n < 2**62:
            raise KernelError(f"tl.cycles expects an integer from 0 to 2^62, got {clip(n)}")
        self._emit(CYCLES, NONE, NONE, 0, n)

    # ------------------------------------------------------------ internals

    def _emit(self, op: int, a: int, b: int, size: int, arg: int, src: int = NONE,
              dst: int = NONE, depth: int = 2, block: int = 0) -> int:
        """Append a command to this PE's stream; its index. The kernel line is found here
        (`_line`), looked for from `depth` frames up: the fewest `tl` frames between the
        kernel and here on this path (frames cost time to look at)."""
        rows = self._rows
        i = len(rows) // _ROW_BYTES
        rows += _PACK(op, a, b, size, arg, src, block,
                      _line(sys._getframe(depth), self._kernel_file, self._lines), dst,
                      self._tcm.used)
        if op != READ:
            launch = self._launch
            launch.commands += 1
            if launch.commands > launch.max_commands:
                raise KernelError(f"the kernel issued more than {launch.max_commands:,} "
                                  "commands; an endless loop? (--max-commands raises the limit)")
        return i

    def _enter_region(self, region: int) -> None:
        """The next commands belong to `region` (an index of the program's regions)."""
        if region == self._region:
            return
        self._region = region
        marks = self._launch.program.region_marks[self._pid]
        at = len(self._rows) // _ROW_BYTES
        if marks and marks[-1][0] == at:  # nothing issued in the region just left
            marks.pop()
        if not marks or marks[-1][1] != region:
            marks.append((at, region))

    def _make(self, op: int, a: int, b: int, size: int, arg: int, src: int, nbytes: int,
              what: str, depth: int = 2, block: int = 0) -> tuple[int, int]:
        """`_emit` for a command that makes a tensor of `nbytes` in fresh TCM, taken first
        so that the row is written whole: (its index, the tensor's TCM offset). `what` names
        the call if TCM is full. Either error leaves the command in the stream as it was
        issued, with no TCM of its own (the command limit: `_emit` raises)."""
        launch = self._launch
        try:
            tcm = self._tcm.alloc(nbytes, what) if launch.commands < launch.max_commands \
                else NONE
        except AddressError as exc:
            self._emit(op, a, b, size, arg, src, NONE, depth + 1, block)
            raise KernelError(f"tensors overflow TCM: {exc}{self._holders()}") from None
        return self._emit(op, a, b, size, arg, src, tcm, depth + 1, block), tcm

    def _result(self, i: int, shape: tuple[int, ...], dt: np.dtype, value: np.ndarray | None,
                what: str) -> Tensor:
        """The tensor command `i`, emitted before, makes, in fresh TCM (its offset goes into
        the stream): for commands that wait between issue and result (`recv`)."""
        nbytes = math.prod(shape) * dt.itemsize
        try:
            tcm = self._tcm.alloc(nbytes, what)
        except AddressError as exc:
            raise KernelError(f"tensors overflow TCM: {exc}{self._holders()}") from None
        _DST_TCM.pack_into(self._rows, _ROW_BYTES * i + _DST_OFFSET, tcm, self._tcm.used)
        return Tensor(self, shape, dt, value, i, tcm, None, nbytes)

    def _holders(self) -> str:
        """'; held by: SIZE CALL (line N), …' for the live tensors, largest first."""
        live = self._tcm.allocations()
        if not live:
            return ""
        table, made = _table(self._rows), {}
        ops, args, dsts, lines = (table[name].tolist() for name in ("op", "arg", "dst", "line"))
        for i in range(len(ops) - 1, -1, -1):  # the latest command at each offset
            dst = dsts[i]
            if dst in live and dst not in made and ops[i] != STORE:
                made[dst] = i
        held = sorted(live.items(), key=lambda item: (-item[1], item[0]))
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

    def _operand_value(self, x: Tensor | Ref) -> np.ndarray:
        if isinstance(x, Tensor):
            return x.value
        stride = x.row_stride if x.row_stride != x.shape[1] else None
        return self._memory.view(x.addr, x.shape, x.dtype, "tl.ref", stride)

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
        if not isinstance(pid, int) or not 0 <= pid < len(coords):
            raise KernelError(f"PE index {pid!r} does not exist (0..{len(coords) - 1})")
        return coords[pid]

    def _peer(self, who: str | int, what: str) -> PeCoord:
        if isinstance(who, str):
            if who not in ("E", "W", "N", "S"):
                raise KernelError(f"{what}: direction {who!r} is not one of E, W, N, S")
            peer = self._launch.system.neighbour(self._coord, who)
            if peer is None:
                raise KernelError(f"{what}: PE ({self._coord}) has no neighbour to the {who}")
            return peer
        peer = self._coord_of(who)
        if peer == self._coord:
            raise KernelError(f"{what}: PE ({peer}) cannot message itself")
        return peer

    def _read(self, x: Tensor) -> np.ndarray:
        """The value of `x` in its dtype: the CPU waits for it (a READ in the stream)."""
        if not self._values:
            raise KernelError("the kernel reads a tensor value, which --timing-only does not "
                              "compute")
        self._emit(READ, self._own(x, "Tensor.numpy").cmd, NONE, 0, 0, depth=3)
        return _as(x.value, x.dtype)

    # -- math helpers ---------------------------------------------------------

    def _math(self, kind: int, a: int, b: int, shape: tuple[int, ...], dt: np.dtype,
              count: int, fn: Callable[..., np.ndarray], *args: Any) -> Tensor:
        """PE_MATH command `kind` (`MATH_KINDS`) over `count` elements; its value is
        ``fn(*args)`` rounded to `dt`. (Called from the kernel through two frames at least:
        `tl.full` and this.)"""
        nbytes = math.prod(shape) * dt.itemsize
        i, tcm = self._make(MATH, a, b, count, kind, NONE, nbytes, _MATH_CALLS[kind], 3)
        value = _rounded(fn(*args), dt) if self._values else None
        return Tensor(self, shape, dt, value, i, tcm, None, nbytes)

    def _unary(self, fn: Callable, x: Tensor) -> Tensor:
        kind = _KIND_OF[fn]
        x = self._own(x, MATH_KINDS[kind][1])
        return self._math(kind, x.cmd, NONE, x.shape, x.dtype, x.numel, fn, x.value)

    def _binary(self, fn: Callable, x: Any, y: Any) -> Tensor:
        if x.__class__ is Tensor and x._tl is self:  # the common cases first, kept lean
            if y.__class__ is Tensor and y._tl is self:
                shape = x.shape if x.shape == y.shape else _broadcast(x.shape, y.shape)
                if shape is not None:
                    return self._math(_KIND_OF[fn], x.cmd, y.cmd, shape,
                                      x.dtype if x.dtype == y.dtype else F32, math.prod(shape),
                                      fn, x.value, y.value)
            elif y.__class__ is float or y.__class__ is int:
                return self._math(_KIND_OF[fn], x.cmd, NONE, x.shape, x.dtype, x.numel, fn,
                                  x.value, y)
        elif y.__class__ is Tensor and y._tl is self and x.__class__ in (int, float):
            return self._math(_KIND_OF[fn], y.cmd, NONE, y.shape, y.dtype, y.numel, fn, x,
                              y.value)
        return self._binary_slow(fn, x, y)

    def _binary_slow(self, fn: Callable, x: Any, y: Any) -> Tensor:
        """`_binary` for the rest: numbers of other types (bool, float64), and errors."""
        tensors = [v for v in (x, y) if isinstance(v, Tensor)]
        for v in (x, y):
            if not isinstance(v, _SCALARS_OR_TENSORS):
                raise KernelError(f"tl.{fn.__name__}: operands must be tensors or numbers, "
                                  f"got {type(v).__name__}")
            if isinstance(v, Tensor):
                self._own(v, fn.__name__)
        shape = _broadcast(*(v.shape for v in tensors))
        if shape is None:
            raise KernelError(f"tl.{fn.__name__}: shapes "
                              f"{' and '.join(str(list(v.shape)) for v in tensors)} do not "
                              "broadcast")
        dt = promote(*(v.dtype for v in tensors))
        return self._math(_KIND_OF[fn], tensors[0].cmd,
                          tensors[1].cmd if len(tensors) == 2 else NONE, shape, dt,
                          math.prod(shape), fn,
                          *(v.value if isinstance(v, Tensor) else v for v in (x, y)))

    def _reduce(self, fn: Callable, x: Tensor, axis: int | None, keepdims: bool) -> Tensor:
        x = self._own(x, fn.__name__)
        if axis is not None and not -x.ndim <= axis < x.ndim:
            raise KernelError(f"tl.{fn.__name__}: axis {axis} is out of range for shape "
                              f"{list(x.shape)}")
        shape = _reduced_shape(x.shape, axis, keepdims)
        return self._math(_KIND_OF[fn], x.cmd, NONE, shape, x.dtype, x.numel, _reduction, fn,
                          x.value, axis, keepdims)

    def _cast(self, x: Tensor, name: str) -> Tensor:
        x = self._own(x, "Tensor.to")
        return self._math(_CAST, x.cmd, NONE, x.shape, _dtype(name), x.numel, _identity,
                          x.value)

    # -- views (free) ----------------------------------------------------------

    def _view(self, x: Tensor, index: Any) -> Tensor:
        try:  # the value's view, or a stand-in of no memory (zero strides) for its shape
            value = (x.value if x.value is not None else _stand_in(x.shape))[index]
        except (IndexError, TypeError, ValueError) as exc:
            raise KernelError(f"tensor index {index!r} on shape {list(x.shape)}: {exc}") from None
        return Tensor(self, value.shape, x.dtype, value if x.value is not None else None, x.cmd,
                      None, base=x)

    def _transpose(self, x: Tensor) -> Tensor:
        if x.ndim != 2:
            raise KernelError(f"Tensor.T needs a 2D tensor, got shape {list(x.shape)}")
        value = x.value.T if x.value is not None else None
        return Tensor(self, (x.shape[1], x.shape[0]), x.dtype, value, x.cmd, None, base=x)

    def _reshape(self, x: Tensor, shape: tuple[int, ...]) -> Tensor:
        shape_t = _shape(shape)
        if math.prod(shape_t) != x.numel:
            raise KernelError(f"cannot reshape {list(x.shape)} to {list(shape_t)}")
        value = x.value.reshape(shape_t) if x.value is not None else None
        return Tensor(self, shape_t, x.dtype, value, x.cmd, None, base=x)


class _Region:
    """The context manager of `TL.region`: marks where the PE's commands enter and leave."""

    __slots__ = ("name", "outer", "tl")

    def __init__(self, tl: TL, name: str):
        self.tl, self.name, self.outer = tl, name, 0

    def __enter__(self) -> None:
        tl = self.tl
        self.outer = tl._region
        program = tl._launch.program
        path = f"{program.regions[self.outer]}/{self.name}".lstrip("/")
        tl._enter_region(tl._launch.region_index(path))

    def __exit__(self, *exc: object) -> None:
        self.tl._enter_region(self.outer)


def functional_pass(launch: Launch, kernel: Callable[[TL], None],
                    guard: AbstractContextManager | None = None) -> list[TL]:
    """Run `kernel(tl)` on every PE of `launch` until each has ended or waits for good.

    `kernel` handles its own errors (it is the launcher's wrapper around the
    kernel); streams end where a PE stopped. The kernels run inside `guard`
    (the watchdog), their streams are made after it. Returns each PE's `TL`.
    The garbage collector stays on, out of the way (`collector.deferred`): the
    kernel's own Python may leave cycles to free.
    """
    with collector.deferred():
        hub = launch.hub
        threads = [hub.thread(pid) for pid in range(len(launch.system.pes))]
        tls = [TL(launch, pid, thread) for pid, thread in enumerate(threads)]
        with guard or nullcontext():
            hub.run(threads, [(lambda tl=tl: kernel(tl)) for tl in tls])
        program = launch.program
        for tl in tls:
            program.tcm_peak[tl._pid] = tl._tcm.peak
        batch = 256  # PEs converted at once: fewer numpy calls, little extra memory
        for first in range(0, len(launch.rows), batch):
            rows = launch.rows[first:first + batch]
            program.streams[first:first + batch] = _columns(rows)
            launch.rows[first:first + batch] = [bytearray() for _ in rows]
    return tls


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
_FITS = PlanCosts(1.0, 0.0, 0.0)  # costs do not decide whether a plan fits
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


# ---------------------------------------------------------------- helpers


def _offset(tcm: int | None) -> int:
    return NONE if tcm is None else tcm


def _shape(shape: Any) -> tuple[int, ...]:
    if shape.__class__ is tuple and shape and all(
            n.__class__ is int and n > 0 for n in shape):
        return shape
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        out = tuple(operator.index(n) for n in shape)
    except TypeError:
        raise KernelError(f"shape must be a sequence of integers, got {clip(shape)}") from None
    if not out or any(n <= 0 for n in out):
        raise KernelError(f"shape must be non-empty with positive sizes, got {clip(list(out))}")
    if math.prod(out) >= 2**40:
        raise KernelError(f"shape {clip(list(out))} has {math.prod(out):.3g} elements: more "
                          "than any memory holds")
    return out


def _dtype(name: Any) -> np.dtype:
    return DTYPES.get(name) or dtype(name)


def _nbytes(shape: tuple[int, ...], dt: np.dtype) -> int:
    return math.prod(shape) * dt.itemsize


def _aligned(ptr: int, dt: np.dtype, what: str) -> None:
    """A memory address must be a multiple of its dtype's size (the DMA moves whole
    elements)."""
    if isinstance(ptr, (int, np.integer)) and ptr % dt.itemsize:
        raise KernelError(f"{what}: address {ptr:#x} is not aligned for {NAMES[dt]}: it "
                          f"needs a multiple of {dt.itemsize} B ({ptr % dt.itemsize} B past one)")


def _block_rows(shape: tuple[int, ...], stride: int | None) -> int:
    """The rows a load or store moves as separate runs of memory: a strided block's rows,
    or 1 for a contiguous one."""
    return shape[0] if stride is not None and len(shape) == 2 and shape[0] else 1


def _span_bytes(shape: tuple[int, ...], dt: np.dtype, stride: int | None) -> int:
    if stride is None:
        return _nbytes(shape, dt)
    if len(shape) != 2:
        raise KernelError(f"a row stride needs a 2D shape, got {list(shape)}")
    if stride < shape[1]:
        raise KernelError(f"row stride {stride} is less than the row length {shape[1]}")
    return ((shape[0] - 1) * stride + shape[1]) * dt.itemsize


def _gemm_shape(what: str, a: tuple[int, ...], b: tuple[int, ...],
                trans_b: bool) -> tuple[int, int, int]:
    if len(a) != 2 or len(b) != 2:
        raise KernelError(f"{what}: operands must be 2D, got {list(a)} and {list(b)}")
    kb, n = (b[1], b[0]) if trans_b else b
    if a[1] != kb:
        shown = f"{list(b)} (transposed)" if trans_b else str(list(b))
        raise KernelError(f"{what}: shapes {list(a)} and {shown} do not match "
                          f"({a[1]} != {kb})")
    return a[0], a[1], n


def _as(value: np.ndarray, dt: np.dtype) -> np.ndarray:
    """A float32 value in dtype `dt` (no copy for f32)."""
    return value.astype(dt, copy=False)


def _rounded(value: np.ndarray, dt: np.dtype) -> np.ndarray:
    """`value` rounded to dtype `dt`, kept as float32 (a tensor's value)."""
    if dt == F32:
        return value.astype(F32, copy=False)
    return value.astype(dt).astype(F32)


def _matmul(a: np.ndarray, b: np.ndarray, trans_b: bool, out: np.dtype) -> np.ndarray:
    """Accumulated in float64, rounded to float32 (the accumulator), then to the result dtype.

    float64 makes the value independent of the BLAS's summation order, which differs by
    CPU: products of f16/bf16/f32 operands are exact in it and sums almost always are, so
    every machine gets the same bits (numpy's f16 matmul would also be ~180x slower).
    Returned as a tensor value: float32, holding numbers of `out`.
    """
    a64, b64 = a.astype(F64), b.astype(F64)
    return _rounded((a64 @ (b64.T if trans_b else b64)).astype(F32), out)


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...] | None:
    """numpy's broadcast of `shapes`, or None when they do not broadcast."""
    rank = max(len(shape) for shape in shapes)
    out = [1] * rank
    for shape in shapes:
        for i, n in enumerate(shape, rank - len(shape)):
            if n != out[i]:
                if out[i] != 1 and n != 1:
                    return None
                out[i] = max(n, out[i])
    return tuple(out)


def _reduction(fn: Callable, value: np.ndarray, axis: int | None, keepdims: bool) -> np.ndarray:
    return fn(value, axis=axis, keepdims=keepdims)


def _identity(value: np.ndarray) -> np.ndarray:
    return value


@functools.lru_cache(maxsize=256)
def _stand_in(shape: tuple[int, ...]) -> np.ndarray:
    """An array of `shape` that takes no memory: what views index when there are no values."""
    return np.broadcast_to(np.empty((), bool), shape)


def _reduced_shape(shape: tuple[int, ...], axis: int | None,
                   keepdims: bool) -> tuple[int, ...]:
    if axis is None:
        return tuple(1 for _ in shape) if keepdims else (1,)
    axis %= len(shape)
    if keepdims:
        return (*shape[:axis], 1, *shape[axis + 1:])
    return (*shape[:axis], *shape[axis + 1:]) or (1,)


def kernel_line(kernel_file: str, tb) -> int | None:
    """The line of the innermost frame of traceback `tb` that is in `kernel_file`."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == kernel_file:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
