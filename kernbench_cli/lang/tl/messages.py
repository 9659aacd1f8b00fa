"""`tl`'s messages: `send` and `recv` over the IPCQ rings, to a neighbour or any PE.

A send puts the tensor's bytes (and, with values, the value) in the mail of
(sender, receiver) at issue; a receive takes the next one of its sender's,
in send order, and waits in the greenlet bridge (`PeThread.block`) while
there is none. The timing pass times the rings, slots and credits; here only
the order and the bytes are kept.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from kernbench_cli.address.physaddr import PeCoord
from kernbench_cli.errors import KernelError
from kernbench_cli.lang.dtypes import reinterpret
from kernbench_cli.lang.tensor import Tensor
from kernbench_cli.lang.tl.checks import blocks, dtype_of, nbytes_of, offset, shape_of
from kernbench_cli.lang.tl.core import Core
from kernbench_cli.stream import NONE, RECV, SEND


class MessageOps(Core):
    """`tl.send`, `tl.recv` and `tl.ring_capacity`."""

    def send(self, tensor: Tensor, to: str | int) -> None:
        """Send `tensor` to a neighbour ("E", "W", "N", "S") or PE `to` (global index).

        The bytes go by this PE's DMA into the receiver's ring for the side
        they arrive from, one slot per chunk; with no free slot the CPU waits.
        """
        tensor = self._own(tensor, "send")
        launch = self._launch
        dst = launch.system.pid_of[self._peer(to, "tl.send")]
        self._emit(SEND, tensor.cmd, NONE, tensor.nbytes, dst, offset(tensor.tcm))
        box = launch.mail.get((self._pid, dst))
        if box is None:
            box = launch.mail[(self._pid, dst)] = deque()
        box.append((tensor.nbytes, tensor.dtype, tensor.value))
        if self._take is not None:  # a repetition recorded (`tl.repeat`)
            self._take.sent.append(tensor.dtype)
        receiver = launch.receivers.get(dst)
        if receiver is not None:
            receiver.wake()

    def recv(self, frm: str | int, shape: Sequence[int], dtype: str) -> Tensor:
        """Take the next message from a neighbour ("E", …) or PE `frm`; waits for it."""
        shape_t, dt = shape_of(shape), dtype_of(dtype)
        blocks("tl.recv", shape_t, dt)
        launch = self._launch
        peer = self._peer(frm, "tl.recv")
        src = launch.system.pid_of[peer]
        nbytes = nbytes_of(shape_t, dt)
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
            value = value.reshape(shape_t) if sent_dt == dt else reinterpret(value, sent_dt,
                                                                             dt, shape_t)
        return self._result(i, shape_t, dt, value, "tl.recv")

    def ring_capacity(self) -> tuple[int, int]:
        """(slots, slot bytes) of each inbound IPCQ ring: a sender may have that much of
        messages not yet taken by a receiver before its `send` waits for a credit."""
        ipcq = self._launch.system.topology.pe.ipcq
        self._launch.program.ring_capacity = (ipcq.slots, ipcq.slot_size)  # the program reads it
        return ipcq.slots, ipcq.slot_size

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
