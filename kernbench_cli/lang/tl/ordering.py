"""`tl`'s ordering: where PE_CPU waits (a composite, its stores, a value it reads) or spends
cycles of its own.

Within a PE memory is coherent in program order; between PEs only IPCQ
messages order it, and a message orders what its sender *issued* before it.
`fence` waits for the PE's stores to land, `wait` for a composite, and
reading a tensor's value (`numpy()`, `float()`, `bool()`) for the command
that made it: each is a command the timing pass stalls PE_CPU on.
"""

from __future__ import annotations

import numpy as np

from kernbench_cli.errors import KernelError, clip
from kernbench_cli.lang.dtypes import as_dtype
from kernbench_cli.lang.tensor import Handle, Tensor
from kernbench_cli.lang.tl.core import Core
from kernbench_cli.stream import CYCLES, NONE, READ, WAIT


class Ordering(Core):
    """`tl.fence`, `tl.wait`, `tl.cycles`; reading a tensor's value."""

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

    def wait(self, handle: Handle) -> Tensor | None:
        """Stall PE_CPU until a composite is done; returns its TCM result (if any)."""
        if not isinstance(handle, Handle):
            raise KernelError(f"tl.wait expects a composite handle, got {handle!r}")
        self._emit(WAIT, handle.cmd, NONE, 0, 0)
        return handle.out

    def cycles(self, n: int) -> None:
        """Spend `n` PE_CPU cycles (explicit CPU time)."""
        if not isinstance(n, int) or n.__class__ is bool or not 0 <= n < 2**62:
            raise KernelError(f"tl.cycles expects an integer from 0 to 2^62 - 1, got {clip(n)}")
        self._emit(CYCLES, NONE, NONE, 0, n)

    def _read(self, x: Tensor) -> np.ndarray:
        """The value of `x` in its dtype: the CPU waits for it (a READ in the stream).
        Read-only: a view of the tensor's own values, which a change in numpy would
        change untimed (work done on the host, stored and verified as the kernel's)."""
        if not self._values:
            raise KernelError("the kernel reads a tensor value, which --timing-only does not "
                              "compute")
        self._emit(READ, self._own(x, "Tensor.numpy").cmd, NONE, 0, 0, depth=3)
        value = as_dtype(x.value, x.dtype)
        if isinstance(value, np.ndarray):  # a scalar cannot be written through
            value = value.view()
            value.flags.writeable = False
        return value
