"""Command traces: what a PE's kernel asked of `tl`, recorded and replayed.

While recording, `TL` appends one entry per call that makes or moves data, in
program order, and one ``("del", id)`` when a tensor is dropped (its TCM is
freed then, which decides later TCM addresses and composite tile plans).
Tensors are named by their per-PE creation number, handles likewise, so
replaying the entries in order through `TL` recreates every tensor with the
same number. Replay runs `TL` in timing-only mode: no kernel code, no numpy.

Entries are JSON-ready lists: ``[op, arg, …]`` where an argument is a number,
string, bool, null, list, or one of ``{"t": id}`` (tensor), ``{"h": id}``
(composite handle), ``{"r": [addr, shape, dtype, row_stride]}`` (a `tl.ref`),
``{"s": [start, stop, step]}`` (a slice), ``{"u": [...]}`` (a tuple, inside
an index), ``{"e": 1}`` (Ellipsis).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from kernbench_cli.errors import KernelError
from kernbench_cli.lang.dtypes import NAMES, dtype
from kernbench_cli.lang.tensor import Handle, Ref, Tensor

if TYPE_CHECKING:
    from kernbench_cli.lang.tl import TL

#: numpy functions a trace names, by `__name__` (they also name ops in the op log).
FUNCS = {f.__name__: f for f in (np.add, np.subtract, np.multiply, np.divide, np.negative,
                                 np.exp, np.log, np.sqrt, np.maximum, np.minimum, np.max,
                                 np.sum)}


def encode(value: Any) -> Any:
    """A call argument as JSON-ready data."""
    if isinstance(value, Tensor):
        return {"t": value.tid}
    if isinstance(value, Handle):
        return {"h": value.hid}
    if isinstance(value, Ref):
        return {"r": [value.addr, list(value.shape), NAMES[value.dtype], value.row_stride]}
    if isinstance(value, slice):
        return {"s": [value.start, value.stop, value.step]}
    if value is Ellipsis:
        return {"e": 1}
    if isinstance(value, tuple):
        return {"u": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


class Replayer:
    """Replays one PE's trace through its `TL`."""

    def __init__(self, tl: TL):
        self.tl = tl
        self.tensors: dict[int, Tensor] = {}
        self.handles: dict[int, Handle] = {}
        self._methods = {"load": tl.load, "store": tl.store, "dot": tl.dot, "wait": tl.wait,
                         "full": tl.full, "send": tl.send, "recv": tl.recv, "cycles": tl.cycles,
                         "cast": tl._cast, "transpose": tl._transpose, "read": tl._read}

    def decode(self, value: Any) -> Any:
        if isinstance(value, dict):
            ((tag, body),) = value.items()
            if tag == "t":
                return self.tensors[body]
            if tag == "h":
                return self.handles[body]
            if tag == "r":
                addr, shape, dt, stride = body
                return Ref(addr, tuple(shape), dtype(dt), stride)
            if tag == "s":
                return slice(*body)
            if tag == "e":
                return Ellipsis
            if tag == "u":
                return tuple(self.decode(v) for v in body)
            raise KernelError(f"trace: unknown argument tag {tag!r}")
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        return value

    def run(self, entries: list[list]) -> None:
        tensors, decode = self.tensors, self.decode
        for op, *raw in entries:
            if op == "del":
                tensor = tensors.pop(raw[0], None)
                if tensor is not None:
                    tensor.free()
                continue
            # tensor references and plain values are most arguments: decode them inline
            args = [tensors[a["t"]] if a.__class__ is dict and "t" in a else
                    (decode(a) if a.__class__ in (dict, list) else a) for a in raw]
            result = self._call(op, args)
            if isinstance(result, Handle):
                self.handles[result.hid] = result
                result = result.out
            if isinstance(result, Tensor):
                tensors[result.tid] = result

    def _call(self, op: str, args: list) -> Any:
        method = self._methods.get(op)
        if method is not None:
            return method(*args)
        tl = self.tl
        if op in ("unary", "binary"):
            kind, name, *operands = args
            method = tl._unary if op == "unary" else tl._binary
            return method(kind, FUNCS[name], *operands)
        if op == "reduce":
            name, x, axis, keepdims = args
            return tl._reduce(FUNCS[name], x, axis, keepdims)
        if op == "composite":
            kind, a, b, out_ptr, trans_b, out_dtype, out_stride = args
            return tl.composite(kind, a=a, b=b, out_ptr=out_ptr, trans_b=trans_b,
                                out_dtype=out_dtype, out_stride=out_stride)
        if op == "view":
            return tl._view(args[0], args[1])
        if op == "reshape":
            return tl._reshape(args[0], tuple(args[1]))
        raise KernelError(f"trace: unknown command {op!r}")
