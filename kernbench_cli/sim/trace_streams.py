"""A trace's streams stored once per stream up to relocation (trace format version 6).

PEs of one class run the same commands on their own data: their streams
differ only where a command names the PE's own HBM slice or an IPCQ
partner. A version-6 trace stores each distinct stream once, *relocated*
the way `hw.symmetry` compares streams: an address in the PE's own slice
(a LOAD's `src`, a STORE's `dst`, a COMPOSITE's memory operand `src` and
output `dst`, a composite descriptor's `a_addr`, `b_addr`, `out_addr`) is
stored as ``RELOCATED + (address - slice base)``, and a SEND's or RECV's
partner as ``partner - pid``. Per PE the header keeps which stored stream
it runs (`pe_stream`) and its slice base (`slice_base`; `slice_bytes` is
the slices' size, 0 when nothing is relocated). Every other column, the
kernel line included, is stored as it was, so reading expands back to
exactly the recorded streams.

Composite descriptors (one per COMPOSITE command, in the order the run
issued them) are stored relocated, each distinct one once (`composites`);
`composite_owner` says whose command each of the run's table entries was.
A PE's k-th COMPOSITE command used its k-th entry, so the table and every
`arg` come back as they were. A program not made so (a hand-edited one),
or one with an address at or above `RELOCATED`, is written as version 5
(`pack` returns None).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernbench_cli.stream import (
    COLUMNS,
    COMPOSITE,
    LOAD,
    NONE,
    RECV,
    SEND,
    STORE,
    Composite,
    Stream,
)

#: Where relocated addresses start: above any address a topology has.
RELOCATED = 1 << 62
_ADDRS = [Composite._fields.index(f) for f in ("a_addr", "b_addr", "out_addr")]
_A_TCM = Composite._fields.index("a_tcm")
_BOOLS = {Composite._fields.index(f) for f in ("a_tcm", "b_tcm", "trans_b")}
_WIDTH = len(Composite._fields)


def _np(stream: Stream, name: str) -> np.ndarray:
    col = getattr(stream, name)
    return np.frombuffer(col, dtype=col.typecode).astype(np.int64)


def _masks(op: np.ndarray, arg: np.ndarray, dst: np.ndarray, a_tcm: np.ndarray):
    """Where `src` and `dst` hold memory addresses (`a_tcm`: per command, whether a
    planned COMPOSITE's operand a is in TCM)."""
    planned = (op == COMPOSITE) & (arg != NONE)
    return (op == LOAD) | planned & ~a_tcm, (op == STORE) | (op == COMPOSITE) & (dst != NONE)


def _owners(program) -> np.ndarray | None:
    """Per composite table entry, the PE whose command it is; None unless each entry is
    exactly one command's and each PE's entries come in its program order."""
    n = len(program.composites)
    owner = np.full(n, -1, dtype=np.int64)
    for pid, stream in enumerate(program.streams):
        op, arg = np.frombuffer(stream.op, dtype=np.uint8), _np(stream, "arg")
        used = arg[(op == COMPOSITE) & (arg != NONE)]
        if ((used < 0) | (used >= n)).any() or (np.diff(used) <= 0).any() \
                or (owner[used] >= 0).any():
            return None
        owner[used] = pid
    return owner if (owner >= 0).all() else None


def pack(program, bases: list[int], slice_bytes: int) -> tuple[dict[str, Any], list] | None:
    """(header entries, stored streams) of `program`, relocated by `bases` (each PE's
    slice base) and `slice_bytes`; None when it cannot be stored so (module docstring)."""
    owner = _owners(program)
    table = np.array(program.composites, dtype=np.int64).reshape(-1, _WIDTH)
    if owner is None or (table[:, _ADDRS] >= RELOCATED).any():
        return None
    if len(bases) != len(program.streams):
        bases, slice_bytes = [0] * len(program.streams), 0
    moved = table.copy()
    moved[:, _ADDRS] = _relocate(table[:, _ADDRS], np.array(bases, dtype=np.int64)[owner][
        :, None], slice_bytes)
    stored, entry = np.unique(moved, axis=0, return_inverse=True) if len(moved) else \
        (moved, np.zeros(0, dtype=np.int64))
    keys: dict[bytes, int] = {}
    streams, pe_stream = [], []
    for pid, stream in enumerate(program.streams):
        cols = _stored(stream, pid, bases[pid], slice_bytes, table, entry.reshape(-1))
        if cols is None:
            return None
        key = b"".join(c.tobytes() for c in cols)
        if key not in keys:
            keys[key] = len(streams)
            streams.append(_stream(cols))
        pe_stream.append(keys[key])
    return {"pe_stream": pe_stream, "slice_base": list(bases), "slice_bytes": slice_bytes,
            "composites": stored.tolist(), "composite_owner": owner.tolist()}, streams


def _relocate(values: np.ndarray, base, slice_bytes: int) -> np.ndarray:
    """`values`, those in the slice at `base` relocated."""
    own = (values >= base) & (values < base + slice_bytes)
    return np.where(own, values - base + RELOCATED, values)


def _stored(stream: Stream, pid: int, base: int, slice_bytes: int, table: np.ndarray,
            entry: np.ndarray) -> list[np.ndarray] | None:
    """PE `pid`'s stream as stored: its columns, relocated (module docstring); None if an
    address is at or above `RELOCATED`."""
    cols = [_np(stream, name) for name, _ in COLUMNS]
    op, arg, src, dst = cols[0], cols[4].copy(), cols[5], cols[6]
    planned = (op == COMPOSITE) & (arg != NONE)
    a_tcm = np.zeros(len(op), dtype=bool)
    a_tcm[planned] = table[arg[planned], _A_TCM] != 0
    src_mask, dst_mask = _masks(op, arg, dst, a_tcm)
    if (src[src_mask] >= RELOCATED).any() or (dst[dst_mask] >= RELOCATED).any():
        return None
    ipcq = (op == SEND) | (op == RECV)
    arg[ipcq] -= pid
    arg[planned] = entry[arg[planned]]
    cols[4] = arg
    cols[5] = np.where(src_mask, _relocate(src, base, slice_bytes), src)
    cols[6] = np.where(dst_mask, _relocate(dst, base, slice_bytes), dst)
    return cols


def _stream(cols: list[np.ndarray]) -> Stream:
    stream = Stream()
    for (name, code), values in zip(COLUMNS, cols, strict=True):
        getattr(stream, name).frombytes(values.astype(np.dtype(code)).tobytes())
    return stream


def unpack(stored: list[Stream], pe_stream: list[int], bases: list[int], slice_bytes: int,
           composites: list[tuple], owner: list[int]) -> tuple[list[Stream], list[Composite]]:
    """(per-PE streams, composite table) of a version-6 trace from what it stores (read and
    type-checked by `trace_file`); ValueError names what is wrong."""
    n = len(pe_stream)
    if len(bases) != n:
        raise ValueError("slice_base does not have one entry per PE")
    if not 0 <= slice_bytes < RELOCATED:
        raise ValueError(f"slice_bytes {slice_bytes} is out of range")
    moved = np.array(composites, dtype=np.int64).reshape(-1, _WIDTH)
    owners = np.array(owner, dtype=np.int64)
    if ((owners < 0) | (owners >= n)).any():
        raise ValueError(f"composite_owner names a PE the trace does not have ({n} PEs)")
    entries = np.split(np.argsort(owners, kind="stable"),
                       np.cumsum(np.bincount(owners, minlength=n))[:-1]) if n else []
    table = np.zeros((len(owners), _WIDTH), dtype=np.int64)
    streams = []
    for pid, (s, base) in enumerate(zip(pe_stream, bases, strict=True)):
        if not 0 <= s < len(stored):
            raise ValueError(f"PE {pid} runs stored stream {s}; the trace stores {len(stored)}")
        if not 0 <= base <= RELOCATED - slice_bytes:
            raise ValueError(f"PE {pid}'s slice base {base} is out of range")
        streams.append(_expand(stored[s], pid, base, slice_bytes, moved, entries[pid], table))
    fields = table.T.tolist()
    for j in _BOOLS:
        fields[j] = [bool(v) for v in fields[j]]
    return streams, list(map(Composite._make, zip(*fields, strict=True)))


def _expand(stored: Stream, pid: int, base: int, slice_bytes: int, moved: np.ndarray,
            mine: np.ndarray, table: np.ndarray) -> Stream:
    """PE `pid`'s stream from its stored one; its composite table entries (`mine`) set in
    `table`."""
    cols = [_np(stored, name) for name, _ in COLUMNS]
    op, arg = cols[0], cols[4].copy()
    planned = (op == COMPOSITE) & (arg != NONE)
    which = arg[planned]
    bad = (which < 0) | (which >= len(moved))
    if bad.any():
        k = int(np.flatnonzero(planned)[np.argmax(bad)])
        raise ValueError(f"PE {pid} command {k} names stored composite {int(arg[k])}; the "
                         f"trace stores {len(moved)}")
    if len(which) != len(mine):
        raise ValueError(f"composite_owner gives PE {pid} {len(mine)} composites; its stream "
                         f"has {len(which)}")
    a_tcm = np.zeros(len(op), dtype=bool)
    a_tcm[planned] = moved[which, _A_TCM] != 0
    src_mask, dst_mask = _masks(op, arg, cols[6], a_tcm)
    ipcq = (op == SEND) | (op == RECV)
    arg[ipcq] += pid
    arg[planned] = mine
    cols[4] = arg
    rows = moved[which]
    for j, mask in ((5, src_mask), (6, dst_mask)):
        cols[j] = _restore(cols[j], mask, base, slice_bytes, lambda k: f"PE {pid} command {k}")
    rows[:, _ADDRS] = _restore(rows[:, _ADDRS], np.ones(rows[:, _ADDRS].shape, dtype=bool),
                               base, slice_bytes, lambda k: f"PE {pid}'s composite {k // 3}")
    table[mine] = rows
    return _stream(cols)


def _restore(values: np.ndarray, mask: np.ndarray, base: int, slice_bytes: int, where):
    """`values` with the relocated ones (under `mask`) back in the slice at `base`;
    ValueError naming `where(k)` for one past the slice's end."""
    moved = mask & (values >= RELOCATED)
    past = moved & (values - RELOCATED >= slice_bytes)
    if past.any():
        k = int(np.argmax(past.reshape(-1)))
        raise ValueError(f"{where(k)} has a relocated address past its HBM slice "
                         f"({slice_bytes:,} B)")
    return np.where(moved, values - RELOCATED + base, values)
