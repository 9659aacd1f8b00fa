"""`tl`: the kernel language a PE's kernel is written in.

Every PE runs the kernel with its own `TL` object. A call becomes a command:
PE_CPU pays its issue cost (the cost table, ADR-0064), the command takes a
slot of PE_SCHEDULER's bounded queue, and its engine times it; results are
futures (`Tensor.ready`), so the CPU runs ahead until the kernel reads a
value, waits on a composite, receives on an IPCQ ring, or finds the queue
full. Values are computed with numpy in program order (float32, rounded to
the result dtype); with ``timing_only`` no value is computed at all.

Semantics kept simple on purpose, and documented in the README:
- Memory is coherent within a PE in program order; between PEs only through
  IPCQ messages (the kernels here never read what another PE stores).
- A composite's tile buffers are taken from the TCM free at dispatch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from kernbench_cli.address.allocator import FreeListPool, Sharded
from kernbench_cli.address.physaddr import AddressMap, PeCoord
from kernbench_cli.config.schema import IssueCosts
from kernbench_cli.errors import AddressError, KernelError
from kernbench_cli.hw.composite import Operand, Stream, plan_gemm, run_gemm
from kernbench_cli.hw.engine import cycles_to_ps
from kernbench_cli.hw.ipcq import Chunk
from kernbench_cli.hw.memory import Memory
from kernbench_cli.hw.network import Path
from kernbench_cli.hw.pe import Pe
from kernbench_cli.lang import DEFAULT_MAX_COMMANDS
from kernbench_cli.lang.bridge import PeThread
from kernbench_cli.lang.dtypes import DTYPES, dtype, promote
from kernbench_cli.lang.tensor import Handle, Ref, Tensor
from kernbench_cli.lang.trace import encode

if TYPE_CHECKING:
    from kernbench_cli.hw.system import System

F32 = DTYPES["f32"]
_OPERANDS = (Tensor, Ref)
_SCALARS_OR_TENSORS = (Tensor, int, float)

#: Fields of one op-log record (a tuple, for speed).
OP_FIELDS = ("seq", "pid", "engine", "kind", "issue_ps", "start_ps", "end_ps", "bytes", "flops",
             "src", "dst")


class Launch:
    """What every PE of one run shares: the system, memory, costs and the op log."""

    def __init__(self, system: System, memory: Memory, costs: IssueCosts, plan_ps: int,
                 env: simpy.Environment, timing_only: bool, record: bool = False):
        self.system = system
        self.memory = memory
        self.costs = {name: getattr(costs, name) for name in
                      ("composite", "load", "store", "dot", "math", "send", "recv", "wait")}
        self.plan_ps = plan_ps
        self.env = env
        self.timing_only = timing_only
        self.oplog: list[tuple] = []
        self.commands = 0
        self.seq = 0
        self.record = record
        self.replaying = False
        self.max_commands = DEFAULT_MAX_COMMANDS


class TL:
    """The `tl` object of one PE. See the README for the full list of calls."""

    f16, bf16, f32 = "f16", "bf16", "f32"

    def __init__(self, launch: Launch, pe: Pe, thread: PeThread):
        self._launch = launch
        self._pe = pe
        self._thread = thread
        self._cpu = pe.cpu
        self._sched = pe.scheduler
        system = launch.system
        self._amap: AddressMap = system.amap
        self._net = system.network
        self._costs = launch.costs
        self._values = not launch.timing_only
        topo = system.topology
        self._clock = topo.pe.clock
        tcm_base = self._amap.pe_tcm_addr(*pe.coord, 0)
        self._tcm = FreeListPool(f"TCM of PE ({pe.coord})", tcm_base, topo.pe.tcm.size)
        self._hbm_bytes_per_cycle = topo.hbm.bandwidth / topo.pe.clock
        self._setup_cycles = topo.pe.dma.setup * topo.pe.clock / 10**12
        self._trace: list[list] | None = [] if launch.record else None
        self._next_tid = 0
        self._next_hid = 0
        # Routes depend only on which PE owns an address: cache them per aligned region
        # that one PE owns whole (a power-of-two HBM slice, or a PE's 1 GiB window).
        slice_bytes = topo.hbm.slice_size
        power_of_two = slice_bytes & (slice_bytes - 1) == 0
        self._region_shift = min(30, slice_bytes.bit_length() - 1) if power_of_two else 64
        self._from_cache: dict[int, tuple] = {}
        self._to_cache: dict[int, tuple] = {}
        self.last_end = 0

    # ------------------------------------------------------------ grid (ADR-0022)

    def program_id(self, axis: int = 0) -> int:
        """axis 0: PE in its cube; 1: cube in its SIP; 2: SIP in the system."""
        c, s = self._pe.coord, self._launch.system.topology.system
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

    @property
    def pid(self) -> int:
        """Global PE index: PEs of a cube fastest, then cubes, then SIPs."""
        return self._pe.pid

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
        coord = self._coord_of(self._pe.pid if pid is None else pid)
        return self._amap.pe_hbm_addr(*coord, allocation.offset)

    # ------------------------------------------------------------ memory

    def load(self, ptr: int, shape: Sequence[int], dtype: str, stride: int | None = None) -> Tensor:
        """Start moving `shape` of `dtype` at `ptr` into TCM (rows `stride` apart); lazy."""
        if self._trace is not None:
            self._rec("load", ptr, shape, dtype, stride)
        shape_t, dt = _shape(shape), _dtype(dtype)
        nbytes = _nbytes(shape_t, dt)
        self._launch.memory.check(ptr, _span_bytes(shape_t, dt, stride), "tl.load")
        t, dispatched = self._issue("load")
        path = self._path_from(ptr)
        self._thread.sync(t)
        start, end = self._pe.dma.transfer(dispatched, nbytes, path)
        self._sched.hold(start)
        value = self._launch.memory.read(ptr, shape_t, dt, "tl.load", stride) \
            if self._values else None
        out = self._tensor(shape_t, dt, value, end, "tl.load")
        self._log("dma", "load", t, start, end, nbytes, 0, ptr, out.tcm)
        return out

    def ref(self, ptr: int, shape: Sequence[int], dtype: str, stride: int | None = None) -> Ref:
        """Name `shape` of `dtype` at `ptr` without moving it (a composite operand)."""
        shape_t, dt = _shape(shape), _dtype(dtype)
        if len(shape_t) != 2:
            raise KernelError(f"tl.ref: shape must be 2D, got {list(shape_t)}")
        self._launch.memory.check(ptr, _span_bytes(shape_t, dt, stride), "tl.ref")
        return Ref(ptr, shape_t, dt, shape_t[1] if stride is None else stride)

    def store(self, ptr: int, tensor: Tensor, stride: int | None = None) -> None:
        """Write `tensor` to memory at `ptr` (rows `stride` apart)."""
        if self._trace is not None:
            self._rec("store", ptr, tensor, stride)
        tensor = self._own(tensor, "store")
        nbytes = tensor.nbytes
        self._launch.memory.check(ptr, _span_bytes(tensor.shape, tensor.dtype, stride),
                                  "tl.store")
        t, dispatched = self._issue("store")
        path = self._path_to(ptr)
        self._thread.sync(t)
        start, end = self._pe.dma.transfer(max(dispatched, tensor.ready), nbytes, path)
        self._sched.hold(start)
        if self._values:
            self._launch.memory.write(ptr, tensor.value, "tl.store", stride)
        self._log("dma", "store", t, start, end, nbytes, 0, tensor.tcm, ptr)

    # ------------------------------------------------------------ GEMM

    def dot(self, a: Tensor, b: Tensor, trans_b: bool = False, out_dtype: str = "f32") -> Tensor:
        """a @ b (or a @ b.T) on PE_GEMM; both operands in TCM."""
        if self._trace is not None:
            self._rec("dot", a, b, trans_b, out_dtype)
        a, b = self._own(a, "dot"), self._own(b, "dot")
        m, k, n = _gemm_shape("tl.dot", a.shape, b.shape, trans_b)
        out_dt = _dtype(out_dtype)
        t, dispatched = self._issue("dot")
        start, end = self._pe.gemm.run(max(dispatched, a.ready, b.ready), m, k, n)
        self._sched.hold(start)
        value = _matmul(a.value, b.value, trans_b, out_dt) if self._values else None
        out = self._tensor((m, n), out_dt, value, end, "tl.dot")
        self._log("gemm", "dot", t, start, end, 0, 2 * m * k * n, a.tcm, out.tcm)
        return out

    def composite(self, op: str = "gemm", *, a: Tensor | Ref, b: Tensor | Ref,
                  out_ptr: int | None = None, trans_b: bool = False, out_dtype: str | None = None,
                  out_stride: int | None = None) -> Handle:
        """Hand a whole GEMM to PE_SCHEDULER, which tiles it and streams operands (non-blocking).

        Operands are tensors in TCM or `tl.ref`s in memory. With `out_ptr` the
        result is stored there; without, it stays in TCM as ``wait(h)``'s value.
        """
        if self._trace is not None:
            self._rec("composite", op, a, b, out_ptr, trans_b, out_dtype, out_stride)
        if op != "gemm":
            raise KernelError(f"tl.composite: op {op!r} is not supported (supported: 'gemm')")
        for name, x in (("a", a), ("b", b)):
            if not isinstance(x, _OPERANDS):
                raise KernelError(f"tl.composite: {name} must be a tensor or a tl.ref, got {x!r}")
            if isinstance(x, Tensor):
                self._own(x, "composite")
        m, k, n = _gemm_shape("tl.composite", a.shape, b.shape, trans_b)
        out_dt = a.dtype if out_dtype is None else _dtype(out_dtype)
        if out_ptr is not None:
            stride = n if out_stride is None else out_stride
            self._launch.memory.check(out_ptr, _span_bytes((m, n), out_dt, stride),
                                      "tl.composite out_ptr")
        t, dispatched = self._issue("composite", self._launch.plan_ps)
        self._sched.hold(dispatched)
        value = _matmul(self._operand_value(a), self._operand_value(b), trans_b, out_dt) \
            if self._values else None
        out = None
        if out_ptr is None:
            out = self._tensor((m, n), out_dt, value, 0, "tl.composite result")
        opa, opb = self._operand(a), self._operand(b)
        tiling = plan_gemm(m, k, n, a.dtype.itemsize, b.dtype.itemsize, out_dt.itemsize,
                           opa.resident, opb.resident, self._pe.gemm.rows, self._pe.gemm.cols,
                           self._tcm.largest_free(), self._hbm_bytes_per_cycle,
                           self._setup_cycles)
        if tiling is None:
            raise KernelError(f"tl.composite: no tile plan for a {m}x{k}x{n} GEMM fits the "
                              f"{self._tcm.largest_free()} B of free TCM")
        ready = max(dispatched, *(x.ready for x in (a, b) if isinstance(x, Tensor)))
        self._thread.sync(t)
        hid = self._next_hid
        self._next_hid += 1
        end = run_gemm(ready, tiling, opa, opb, n, trans_b, out_ptr, out_dt.itemsize,
                       n if out_stride is None else out_stride, self._stream())
        if out is not None:
            out.ready = end
        elif self._values:
            self._launch.memory.write(out_ptr, value, "tl.composite", out_stride)
        moved = (0 if opa.resident else a.nbytes) + (0 if opb.resident else b.nbytes)
        self._log("scheduler", "composite", t, dispatched, end, moved, 2 * m * k * n,
                  opa.addr, out_ptr if out_ptr is not None else out.tcm)
        return Handle(end, out, hid)

    def wait(self, handle: Handle) -> Tensor | None:
        """Stall PE_CPU until a composite is done; returns its TCM result (if any)."""
        if self._trace is not None:
            self._rec("wait", handle)
        if not isinstance(handle, Handle):
            raise KernelError(f"tl.wait expects a composite handle, got {handle!r}")
        t = self._cpu.issue(self._costs["wait"])
        self._count()
        self._cpu.wait_until(handle.end)
        self._log("cpu", "wait", t, t, self._cpu.time, 0, 0, None, None)
        return handle.out

    # ------------------------------------------------------------ PE_MATH

    def exp(self, x: Tensor) -> Tensor:
        return self._unary("exp", np.exp, x)

    def log(self, x: Tensor) -> Tensor:
        return self._unary("log", np.log, x)

    def sqrt(self, x: Tensor) -> Tensor:
        return self._unary("sqrt", np.sqrt, x)

    def maximum(self, x: Tensor | float, y: Tensor | float) -> Tensor:
        return self._binary("cmp", np.maximum, x, y)

    def minimum(self, x: Tensor | float, y: Tensor | float) -> Tensor:
        return self._binary("cmp", np.minimum, x, y)

    def max(self, x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return self._reduce(np.max, x, axis, keepdims)

    def sum(self, x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return self._reduce(np.sum, x, axis, keepdims)

    def zeros(self, shape: Sequence[int], dtype: str = "f32") -> Tensor:
        return self.full(shape, 0.0, dtype)

    def full(self, shape: Sequence[int], value: float, dtype: str = "f32") -> Tensor:
        if self._trace is not None:
            self._rec("full", shape, value, dtype)
        shape_t, dt = _shape(shape), _dtype(dtype)
        return self._math("add", "fill", [], lambda: np.full(shape_t, value, F32), shape_t, dt)

    # ------------------------------------------------------------ IPCQ

    def send(self, tensor: Tensor, to: str | int) -> None:
        """Send `tensor` to a neighbour ("E", "W", "N", "S") or PE `to` (global index).

        The bytes go by this PE's DMA into the receiver's ring for the side
        they arrive from, one slot per chunk; with no free slot the CPU waits.
        """
        if self._trace is not None:
            self._rec("send", tensor, to)
        tensor = self._own(tensor, "send")
        system = self._launch.system
        me, dst = self._pe.coord, self._peer(to, "tl.send")
        ring_dir = system.arrival_direction(me, dst)
        ring = system.pes[system.pid_of[dst]].rings[ring_dir]
        t, dispatched = self._issue("send")
        self._thread.sync(t)
        path = self._net.path(me, dst, None)
        count = ring.chunks_for(tensor.nbytes)
        ready = max(dispatched, tensor.ready)
        first = None
        for index in range(count):
            credit = ring.take_credit()
            while credit is None:
                event = self._launch.env.event()
                ring.sender_waiting.append((event, self._thread))
                self._thread.block(event, f"send to PE ({dst}): its {ring_dir} ring is full")
                self._cpu.wait_until(self._launch.env.now)
                credit = ring.take_credit()
            free_at, slot = credit
            nbytes = min(ring.slot_bytes, tensor.nbytes - index * ring.slot_bytes)
            start, end = self._pe.dma.transfer(max(ready, free_at), nbytes, path)
            first = start if first is None else first
            value = tensor.value if index == count - 1 else None
            ring.chunks.append(Chunk(self._pe.pid, index, count, tensor.nbytes, slot, end, value))
            self._log("dma", "send", t, start, end, nbytes, 0, tensor.tcm,
                      self._amap.pe_ipcq_slot_addr(*dst, ring_dir, slot))
            if ring.receiver_waiting is not None:
                event, thread = ring.receiver_waiting
                ring.receiver_waiting = None
                thread.wake_at(self._launch.env.now, event)
        self._sched.hold(first)

    def recv(self, frm: str | int, shape: Sequence[int], dtype: str) -> Tensor:
        """Take the next message from a neighbour ("E", …) or PE `frm`; waits for it."""
        if self._trace is not None:
            self._rec("recv", frm, shape, dtype)
        shape_t, dt = _shape(shape), _dtype(dtype)
        system = self._launch.system
        me, src = self._pe.coord, self._peer(frm, "tl.recv")
        src_pid = system.pid_of[src]
        ring_dir = system.arrival_direction(src, me)
        ring = self._pe.rings[ring_dir]
        nbytes = _nbytes(shape_t, dt)
        t = self._cpu.issue(self._costs["recv"])
        self._count()
        self._thread.sync(t)
        done, value = t, None
        for _ in range(ring.chunks_for(nbytes)):
            credits = len(ring.credits)
            chunk = ring.take(src_pid, self._cpu.time)
            while chunk is None:
                self._wake_senders(ring, credits)
                event = self._launch.env.event()
                ring.receiver_waiting = (event, self._thread)
                self._thread.block(event, f"recv from PE ({src}) on its {ring_dir} ring")
                self._cpu.wait_until(self._launch.env.now)
                credits = len(ring.credits)
                chunk = ring.take(src_pid, self._cpu.time)
            self._wake_senders(ring, credits)
            if chunk.nbytes != nbytes:
                raise KernelError(f"tl.recv expects {nbytes} B from PE ({src}) but its message "
                                  f"is {chunk.nbytes} B")
            done = max(done, self._cpu.time, chunk.arrival)
            value = chunk.value if chunk.index == chunk.count - 1 else value
        self._cpu.wait_until(done)
        if self._values:
            value = np.ascontiguousarray(value).view(dt).reshape(shape_t)
        out = self._tensor(shape_t, dt, value, done, "tl.recv")
        self._log("cpu", "recv", t, t, done, nbytes, 0,
                  self._amap.pe_ipcq_slot_addr(*me, ring_dir, 0), out.tcm)
        return out

    def _wake_senders(self, ring, credits_before: int) -> None:
        """Wake the senders waiting on `ring` if taking chunks gave credits back."""
        if len(ring.credits) > credits_before and ring.sender_waiting:
            at = min(free for free, _ in ring.credits)
            for event, thread in ring.sender_waiting:
                thread.wake_at(at, event)
            ring.sender_waiting.clear()

    # ------------------------------------------------------------ CPU

    def cycles(self, n: int) -> None:
        """Spend `n` PE_CPU cycles (explicit CPU time)."""
        if self._trace is not None:
            self._rec("cycles", n)
        if not isinstance(n, int) or n < 0:
            raise KernelError(f"tl.cycles expects a non-negative integer, got {n!r}")
        start = self._cpu.time
        self._cpu.issue(cycles_to_ps(n, self._clock))
        self._count()
        self._log("cpu", "cycles", start, start, self._cpu.time, 0, 0, None, None)

    # ------------------------------------------------------------ internals

    def _count(self) -> None:
        """One more command; an endless kernel stops at the launch's limit."""
        launch = self._launch
        launch.commands += 1
        if launch.commands > launch.max_commands:
            raise KernelError(f"the kernel issued more than {launch.max_commands:,} commands; "
                              "an endless loop? (--max-commands raises the limit)")

    def _rec(self, op: str, *args: Any) -> None:
        self._trace.append([op, *(encode(a) for a in args)])

    def _issue(self, kind: str, plan_ps: int = 0) -> tuple[int, int]:
        """PE_CPU issues a command into the scheduler's queue: (issued, dispatched)."""
        self._count()
        return self._sched.enqueue(self._cpu, self._costs[kind], plan_ps)

    def _log(self, engine: str, kind: str, issue: int, start: int, end: int, nbytes: int,
             flops: int, src: int | None, dst: int | None) -> None:
        launch = self._launch
        launch.oplog.append((launch.seq, self._pe.pid, engine, kind, issue, start, end, nbytes,
                             flops, src, dst))
        launch.seq += 1
        if end > self.last_end:
            self.last_end = end

    def _stream(self) -> Stream:
        pe, log = self._pe, self._log

        def gemm_run(ready: int, m: int, k: int, n: int) -> tuple[int, int]:
            start, end = pe.gemm.run(ready, m, k, n)
            log("gemm", "gemm_tile", ready, start, end, 0, 2 * m * k * n, None, None)
            return start, end

        def load(ready: int, op: Operand, r0: int, c0: int, nr: int, nc: int) -> tuple[int, int]:
            addr = op.addr + (r0 * op.row_stride + c0) * op.itemsize
            nbytes = nr * nc * op.itemsize
            start, end = pe.dma.transfer(ready, nbytes, self._path_from(addr))
            log("dma", "load_tile", ready, start, end, nbytes, 0, addr, None)
            return start, end

        def store(ready: int, addr: int, nbytes: int) -> tuple[int, int]:
            start, end = pe.dma.transfer(ready, nbytes, self._path_to(addr))
            log("dma", "store_tile", ready, start, end, nbytes, 0, None, addr)
            return start, end

        return Stream(gemm_run, load, store)

    def _operand_value(self, x: Tensor | Ref) -> np.ndarray:
        if isinstance(x, Tensor):
            return x.value
        stride = x.row_stride if x.row_stride != x.shape[1] else None
        return self._launch.memory.read(x.addr, x.shape, x.dtype, "tl.ref", stride)

    def _operand(self, x: Tensor | Ref) -> Operand:
        if isinstance(x, Tensor):
            return Operand(x.shape[0], x.shape[1], x.dtype.itemsize, True, x.tcm or 0)
        return Operand(x.shape[0], x.shape[1], x.dtype.itemsize, False, x.addr, x.row_stride)

    def _path_from(self, addr: int) -> Path:
        """The DMA path of a transfer from `addr` into this PE."""
        key = addr >> self._region_shift
        hit = self._from_cache.get(key)
        if hit is None:
            owner, is_hbm = self._amap.locate(addr)
            hit = self._net.path(owner, self._pe.coord, owner if is_hbm else None)
            if self._region_shift < 64:
                self._from_cache[key] = hit
        return hit

    def _path_to(self, addr: int) -> Path:
        """The DMA path of a transfer from this PE to `addr`."""
        key = addr >> self._region_shift
        hit = self._to_cache.get(key)
        if hit is None:
            owner, is_hbm = self._amap.locate(addr)
            hit = self._net.path(self._pe.coord, owner, owner if is_hbm else None)
            if self._region_shift < 64:
                self._to_cache[key] = hit
        return hit

    def _tensor(self, shape: tuple[int, ...], dt: np.dtype, value: np.ndarray | None, ready: int,
                what: str) -> Tensor:
        nbytes = math.prod(shape) * dt.itemsize
        try:
            addr = self._tcm.alloc(nbytes, what)
        except AddressError as exc:
            raise KernelError(f"tensors overflow TCM: {exc}") from None
        return Tensor(self, shape, dt, value, ready, addr, nbytes=nbytes)

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
            peer = self._launch.system.neighbour(self._pe.coord, who)
            if peer is None:
                raise KernelError(f"{what}: PE ({self._pe.coord}) has no neighbour to the {who}")
            return peer
        peer = self._coord_of(who)
        if peer == self._pe.coord:
            raise KernelError(f"{what}: PE ({peer}) cannot message itself")
        return peer

    def _read(self, x: Tensor) -> np.ndarray | None:
        if self._trace is not None:
            self._rec("read", x)
        if self._launch.replaying:
            self._cpu.wait_until(x.ready)
            return None
        if not self._values:
            raise KernelError("the kernel reads a tensor value, which --timing-only does not "
                              "compute")
        self._cpu.wait_until(x.ready)
        return x.value

    # -- math helpers ---------------------------------------------------------

    def _math(self, kind: str, name: str, inputs: list[Tensor], fn: Callable[..., np.ndarray],
              shape: tuple[int, ...], dt: np.dtype, elements: int | None = None) -> Tensor:
        t, dispatched = self._issue("math")
        ready = dispatched
        for x in inputs:
            if x.ready > ready:
                ready = x.ready
        count = elements if elements is not None else math.prod(shape)
        start, end = self._pe.math.run(ready, kind, count)
        self._sched.hold(start)
        value = fn().astype(dt) if self._values else None
        out = self._tensor(shape, dt, value, end, "tl." + name)
        self._log("math", name, t, start, end, 0, count, None, out.tcm)
        return out

    def _unary(self, kind: str, fn: Callable, x: Tensor) -> Tensor:
        if self._trace is not None:
            self._rec("unary", kind, fn.__name__, x)
        x = self._own(x, kind)
        return self._math(kind, fn.__name__, [x], lambda: fn(_f32(x.value)), x.shape, x.dtype)

    def _binary(self, kind: str, fn: Callable, x: Any, y: Any) -> Tensor:
        if self._trace is not None:
            self._rec("binary", kind, fn.__name__, x, y)
        tensors = [v for v in (x, y) if isinstance(v, Tensor)]
        for v in (x, y):
            if not isinstance(v, _SCALARS_OR_TENSORS):
                raise KernelError(f"tl.{fn.__name__}: operands must be tensors or numbers, "
                                  f"got {type(v).__name__}")
            if isinstance(v, Tensor):
                self._own(v, fn.__name__)
        try:
            if len(tensors) == 1 or tensors[0].shape == tensors[1].shape:
                shape = tensors[0].shape
            else:
                shape = np.broadcast_shapes(*(v.shape for v in tensors))
        except ValueError:
            raise KernelError(f"tl.{fn.__name__}: shapes "
                              f"{' and '.join(str(list(v.shape)) for v in tensors)} do not "
                              "broadcast") from None
        dt = promote(*(v.dtype for v in tensors))

        def compute() -> np.ndarray:
            return fn(*(_f32(v.value) if isinstance(v, Tensor) else v for v in (x, y)))

        return self._math(kind, fn.__name__, tensors, compute, shape, dt)

    def _reduce(self, fn: Callable, x: Tensor, axis: int | None, keepdims: bool) -> Tensor:
        if self._trace is not None:
            self._rec("reduce", fn.__name__, x, axis, keepdims)
        x = self._own(x, fn.__name__)
        if axis is not None and not -x.ndim <= axis < x.ndim:
            raise KernelError(f"tl.{fn.__name__}: axis {axis} is out of range for shape "
                              f"{list(x.shape)}")
        shape = _reduced_shape(x.shape, axis, keepdims)
        return self._math("reduce", fn.__name__, [x],
                          lambda: fn(_f32(x.value), axis=axis, keepdims=keepdims), shape,
                          x.dtype, elements=x.numel)

    def _cast(self, x: Tensor, name: str) -> Tensor:
        if self._trace is not None:
            self._rec("cast", x, name)
        x = self._own(x, "Tensor.to")
        return self._math("cast", "cast", [x], lambda: _f32(x.value), x.shape, _dtype(name))

    # -- views (free) ----------------------------------------------------------

    def _view(self, x: Tensor, index: Any) -> Tensor:
        if self._trace is not None:
            self._rec("view", x, index)
        try:
            shape = np.broadcast_to(np.empty((), bool), x.shape)[index].shape
        except (IndexError, TypeError, ValueError) as exc:
            raise KernelError(f"tensor index {index!r} on shape {list(x.shape)}: {exc}") from None
        value = x.value[index] if x.value is not None else None
        return Tensor(self, shape, x.dtype, value, x.ready, None, base=x)

    def _transpose(self, x: Tensor) -> Tensor:
        if self._trace is not None:
            self._rec("transpose", x)
        if x.ndim != 2:
            raise KernelError(f"Tensor.T needs a 2D tensor, got shape {list(x.shape)}")
        value = x.value.T if x.value is not None else None
        return Tensor(self, (x.shape[1], x.shape[0]), x.dtype, value, x.ready, None, base=x)

    def _reshape(self, x: Tensor, shape: tuple[int, ...]) -> Tensor:
        if self._trace is not None:
            self._rec("reshape", x, shape)
        shape_t = _shape(shape)
        if math.prod(shape_t) != x.numel:
            raise KernelError(f"cannot reshape {list(x.shape)} to {list(shape_t)}")
        value = x.value.reshape(shape_t) if x.value is not None else None
        return Tensor(self, shape_t, x.dtype, value, x.ready, None, base=x)


# ---------------------------------------------------------------- helpers


def _shape(shape: Any) -> tuple[int, ...]:
    if shape.__class__ is tuple and shape and all(
            n.__class__ is int and n > 0 for n in shape):
        return shape
    if isinstance(shape, int):
        shape = (shape,)
    try:
        out = tuple(int(n) for n in shape)
    except (TypeError, ValueError):
        raise KernelError(f"shape must be a sequence of integers, got {shape!r}") from None
    if not out or any(n <= 0 for n in out):
        raise KernelError(f"shape must be non-empty with positive sizes, got {list(out)}")
    return out


def _dtype(name: Any) -> np.dtype:
    return DTYPES.get(name) or dtype(name)


def _nbytes(shape: tuple[int, ...], dt: np.dtype) -> int:
    return math.prod(shape) * dt.itemsize


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


def _f32(value: np.ndarray) -> np.ndarray:
    return value.astype(F32, copy=False)


def _matmul(a: np.ndarray, b: np.ndarray, trans_b: bool, out: np.ndarray) -> np.ndarray:
    """Accumulated in float64, rounded to float32 (the accumulator), then to the result dtype.

    float64 makes the value independent of the BLAS's summation order, which differs by
    CPU: products of f16/bf16/f32 operands are exact in it and sums almost always are, so
    every machine gets the same bits (numpy's f16 matmul would also be ~180x slower).
    """
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return (a64 @ (b64.T if trans_b else b64)).astype(F32).astype(out)


def _reduced_shape(shape: tuple[int, ...], axis: int | None,
                   keepdims: bool) -> tuple[int, ...]:
    if axis is None:
        return tuple(1 for _ in shape) if keepdims else (1,)
    axis %= len(shape)
    if keepdims:
        return tuple(1 if i == axis else n for i, n in enumerate(shape))
    out = tuple(n for i, n in enumerate(shape) if i != axis)
    return out or (1,)


def kernel_line(kernel_file: str, tb) -> int | None:
    """The line of the innermost frame of traceback `tb` that is in `kernel_file`."""
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == kernel_file:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
