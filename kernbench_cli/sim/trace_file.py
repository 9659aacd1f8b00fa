"""Trace files: `kernbench run --record FILE` writes one, `kernbench replay FILE` reads it.

A trace is the run's command streams (`kernbench_cli.stream`) with what a
replay needs around them, gzip-compressed:

    b"kernbench-trace\\n"              magic
    8 bytes, little-endian            length of the header
    header                            JSON: format, version, kernel, params, seed,
                                      topology (name and file), the host's allocations,
                                      the stream tables, each stored stream's command
                                      count (`lengths`), per PE its TCM peak, its
                                      named regions and which stored stream it runs,
                                      and the IPCQ ring capacity the kernel read, if
                                      any (`ring_capacity`: a replay needs the same)
    columns                           each stream column (`stream.COLUMNS`), every stored
                                      stream's in turn, as little-endian machine integers

Version 6 stores each distinct stream once, up to relocation (own-slice
addresses relative to the slice, IPCQ partners relative to the PE:
`sim.trace_streams`), so a PE that runs as another does costs a few header
entries, not its stream; versions 4 and 5 (still read) store every PE's
stream in full.

It holds no values and no costs: a replay times the same commands under any
cost table, on any topology they fit. Writing is atomic and deterministic
(the same run gives the same bytes); reading checks everything a replay
relies on, so a damaged or hand-made trace is an error naming what is wrong,
never a crash.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import sys
import zlib
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernbench_cli import gc_control
from kernbench_cli.errors import KernbenchError, clip
from kernbench_cli.fileio import atomic_write, read_input
from kernbench_cli.formats import FORMATS
from kernbench_cli.sim.trace_streams import pack, unpack
from kernbench_cli.stream import (
    COLUMNS,
    COMPOSITE,
    DOT,
    KINDS,
    LOAD,
    MATH,
    MATH_CLASSES,
    READ,
    RECV,
    SEND,
    STORE,
    WAIT,
    Composite,
    Program,
    Stream,
    region_name_problem,
)

FORMAT = "kernbench-trace"
#: 4: the `rows` column, an operand width in each gemm shape; 5: tl.fence; 6: each distinct
#: stream stored once (`trace_streams`)
VERSION = 6
READS = (4, 5, 6)  # versions this kernbench reads (a version 4 trace has no fence)
MAGIC = FORMAT.encode() + b"\n"


#: Bytes of a (compressed) trace file worth reading.
MAX_TRACE_BYTES = 2**34
#: Bytes of a trace's JSON header worth reading (host allocations, tables: MBs at rack scale).
MAX_HEADER_BYTES = 2**30


class TraceError(KernbenchError):
    """A trace file that cannot be read, or does not fit the topology asked for."""


@dataclass
class Trace:
    """A recorded run: where it came from, the host's allocations, and its streams."""

    kernel: str
    params: dict[str, Any]
    seed: int
    topology: str
    topology_file: str
    memory: list[tuple[int, int, str]]  # (address, bytes, name) of every host allocation
    program: Program
    sets: tuple[str, ...] = ()  # the run's `--set` items, as given
    costs_file: str = ""  # the cost table the run used (absolute path)
    #: each PE's HBM slice base and the slices' size on the run's topology: how a version-6
    #: trace relocates streams (none given: streams stored once only where equal as they are)
    slice_base: list[int] = field(default_factory=list)
    slice_bytes: int = 0
    #: per parameter naming a file the kernel read, its digest (`fileio.file_digest`): a
    #: replay checks it is still the file (absent in traces before it)
    files: dict[str, str] = field(default_factory=dict)
    #: the digests (`config_digest`) of the topology, as the run resolved it with its
    #: `--set` items, and of its cost table: a replay on them checks they are still those;
    #: and of the kernel file the run loaded (`fileio.file_digest`), which the replay's
    #: result states (absent in traces before it)
    digests: dict[str, str] = field(default_factory=dict)
    #: the file it was read from, as given (messages name it); "" for a run's own trace
    source: str = field(default="", compare=False)


def write_trace(path: Path, trace: Trace, version: int = VERSION) -> None:
    """Write `trace` atomically: the whole file or none. Version 6 unless its program cannot
    be stored so (`trace_streams.pack`) or `version` asks for 5 (every PE's stream in full)."""
    program = trace.program
    packed = pack(program, trace.slice_base, trace.slice_bytes) if version == 6 else None
    streams = program.streams if packed is None else packed[1]
    header = {
        "format": FORMAT, "version": 5 if packed is None else 6, "kernel": trace.kernel,
        "params": trace.params, "seed": trace.seed, "topology": trace.topology,
        "topology_file": trace.topology_file, "sets": list(trace.sets),
        "costs_file": trace.costs_file, "memory": [list(a) for a in trace.memory],
        "lengths": [len(s) for s in streams], "gemm_shapes": [list(s) for s in program.gemm_shapes],
        "math_kinds": [list(k) for k in program.math_kinds], "tcm_peak": program.tcm_peak,
        **(packed[0] if packed else {"composites": [list(c) for c in program.composites]}),
    }
    if trace.files:  # absent: the parameters named no file (older traces too)
        header["files"] = trace.files
    if trace.digests:  # absent in older traces
        header["digests"] = trace.digests
    if program.ring_capacity is not None:  # absent: the kernel read none (older traces too)
        header["ring_capacity"] = list(program.ring_capacity)
    if len(program.regions) > 1:  # named regions: a version-5 trace without them has none
        header["regions"] = program.regions
        header["region_marks"] = [[x for mark in marks for x in mark]
                                  for marks in program.region_marks]
    columns = [(name, stream) for name, _ in COLUMNS for stream in streams]
    body = hashlib.sha256()
    for name, stream in columns:
        body.update(_little(getattr(stream, name)))  # its buffer: no copy
    header["body"] = body.hexdigest()[:16]  # an edited body is damage, not another program
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()

    def write(raw) -> None:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=6) as out:
            out.write(MAGIC + len(head).to_bytes(8, "little") + head)
            for name, stream in columns:
                out.write(_little(getattr(stream, name)).tobytes())

    atomic_write(path, write, "--record")


def read_trace(path: Path) -> Trace:
    """Read and check a trace file; TraceError names what is wrong."""
    def gzipped(first: bytes) -> None:  # before a file of gigabytes is read whole
        if not first.startswith(b"\x1f\x8b"):
            raise TraceError(f"{path}: not a kernbench trace (Not a gzipped file "
                             f"({first[:2]!r}))")

    try:
        raw = read_input(path, MAX_TRACE_BYTES, "a trace file", gzipped)
    except TraceError:
        raise
    except KernbenchError as exc:
        raise TraceError(str(exc)) from None
    data = _Inflate(raw, path)
    start = data.take(len(MAGIC) + 8)
    if start.startswith(MAGIC):
        size = int.from_bytes(start[len(MAGIC):], "little")
        if size > MAX_HEADER_BYTES:
            raise TraceError(f"{path}: damaged trace: a header of {size:,} bytes")
        head = data.take(size)
    else:  # version 1 was one JSON document: enough of it to name its version
        head = start + data.take(2**20)
    try:
        with gc_control.paused(collect=False):
            header = json.loads(head)
    except (ValueError, RecursionError) as exc:  # not JSON, nested too deep, 10^5 digits
        raise TraceError(f"{path}: not a kernbench trace (header: "
                         f"{str(exc).split(';')[0]})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise TraceError(f"{path}: not a kernbench trace (no format {FORMAT!r})")
    if header.get("version") not in READS or isinstance(header.get("version"), bool):
        raise TraceError(f"{path}: trace version {header.get('version')!r} is not one this "
                         f"kernbench reads ({', '.join(map(str, READS))}); record the run "
                         "again")
    try:
        _printable(header)
        columns = data.columns(header)
        if "body" in header and len(columns) == data.size and \
                header["body"] != hashlib.sha256(columns).hexdigest()[:16]:
            raise ValueError("its streams are not the ones it was written with (their digest "
                             "differs from the header's)")
        trace = _trace(header, columns)
    except (KeyError, TypeError, ValueError, OverflowError, IndexError, AttributeError) as exc:
        what = f"no {clip(exc.args[0])}" if isinstance(exc, KeyError) else str(exc)[:300]
        raise TraceError(f"{path}: damaged trace: {what}") from None
    trace.source = str(path)
    return trace


class _Inflate:
    """A trace's bytes, decompressed only as far as asked: a header says how long the columns
    are, so a file that inflates past them (a gzip bomb) is a damaged trace, not a machine
    out of memory."""

    def __init__(self, raw: bytes, path: Path):
        self.inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)  # gzip
        self.pending, self.path, self.limit = raw, path, len(raw) * 1032  # deflate's top ratio
        self.size = 0  # the bytes of columns the header calls for (`columns`)

    def take(self, n: int) -> bytes:
        """Up to `n` more bytes (fewer at the end of the data)."""
        parts, got = [], 0
        try:
            while got < n and not self.inflater.eof:
                part = self.inflater.decompress(self.pending, n - got)
                self.pending = self.inflater.unconsumed_tail
                if not part:
                    break
                parts.append(part)
                got += len(part)
        except zlib.error as exc:
            raise TraceError(f"{self.path}: not a kernbench trace ({exc})") from None
        return b"".join(parts)

    def columns(self, header: dict[str, Any]) -> memoryview:
        """The rest of the data: the stream columns `header`'s lengths call for (`size`
        bytes), and one byte more if there is more (which `_trace` refuses)."""
        lengths = _ints(header["lengths"], "lengths")
        size = self.size = sum(lengths) * sum(array(code).itemsize for _, code in COLUMNS)
        if size > self.limit:
            raise ValueError(f"its lengths call for {size:,} bytes of columns, more than "
                             "the file can hold")
        body = self.take(size + 1)
        if len(body) <= size and not self.inflater.eof:
            raise ValueError("the file ends before its gzip stream does")
        return memoryview(body)


def _trace(header: dict[str, Any], columns: memoryview) -> Trace:
    lengths = _ints(header["lengths"], "lengths")
    streams = [Stream() for _ in lengths]
    at = 0
    for name, code in COLUMNS:
        width = array(code).itemsize
        for stream, n in zip(streams, lengths, strict=True):
            col = getattr(stream, name)
            col.frombytes(columns[at:at + n * width])
            if len(col) != n:
                raise ValueError(f"column {name!r} is cut short")
            at += n * width
            if sys.byteorder != "little":
                col.byteswap()
    if at != len(columns):
        raise ValueError(f"{len(columns) - at} bytes after the last column")
    composites = [_tuple(c, len(Composite._fields), "composites")
                  for c in _list(header["composites"], "composites")]
    if header["version"] == 6:
        streams, composites = unpack(
            streams, _ints(header["pe_stream"], "pe_stream"),
            _ints(header["slice_base"], "slice_base"), _int(header["slice_bytes"], "slice_bytes"),
            composites, _ints(header["composite_owner"], "composite_owner"))
    else:
        composites = [Composite(*c) for c in composites]
    program = Program(
        streams,
        [_tuple(s, 4, "gemm_shapes") for s in _list(header["gemm_shapes"], "gemm_shapes")],
        [_kind(k) for k in _list(header["math_kinds"], "math_kinds")], composites,
        _ints(header["tcm_peak"], "tcm_peak"))
    if len(program.tcm_peak) != len(streams):
        raise ValueError("tcm_peak does not have one entry per PE")
    if "ring_capacity" in header:
        slots, slot = _ints(header["ring_capacity"], "ring_capacity")
        program.ring_capacity = (slots, slot)
    _regions(header, program)
    memory = [(_int(a, "memory"), _int(n, "memory"), _str(name, "memory"))
              for a, n, name in _list(header["memory"], "memory")]
    if not isinstance(header["params"], dict):
        raise ValueError("params is not an object")
    check_program(program, memory)
    return Trace(_name(header["kernel"], "kernel"), header["params"],
                 _int(header.get("seed", 0), "seed"), _name(header["topology"], "topology"),
                 _str(header.get("topology_file", ""), "topology_file"), memory, program,
                 tuple(_set_item(item) for item in _list(header.get("sets", []), "sets")),
                 _str(header.get("costs_file", ""), "costs_file"),
                 list(header["slice_base"]) if header["version"] == 6 else [],
                 header["slice_bytes"] if header["version"] == 6 else 0,
                 _files(header.get("files", {})), _files(header.get("digests", {}), "digests"))


def _files(files: Any, key: str = "files") -> dict[str, str]:
    """The header's "files" (parameter -> digest) or "digests" (topology, costs ->
    digest), each a string."""
    if not isinstance(files, dict) or not all(
            isinstance(v, str) and len(v) == 8 and all(c in "0123456789abcdef" for c in v)
            for v in files.values()):
        raise ValueError(f"{key} is not an object of digests (8 hex digits each)")
    other = sorted(set(files) - {"topology", "costs", "kernel"}) if key == "digests" else []
    if other:
        raise ValueError(f"digests names {clip(other[0])}, not topology, costs or kernel")
    return dict(files)


def check_program(program: Program, memory: list[tuple[int, int, str]]) -> None:
    """ValueError unless every command of `program` is one a replay can time.

    Producers come earlier in their stream, table indexes exist, peers are
    other PEs, and every memory address lies in a host allocation. Checked
    over every PE's columns at once.
    """
    streams = program.streams
    lengths = np.array([len(s) for s in streams], dtype=np.int64)
    if not lengths.sum():
        return
    op, a, b, size, arg, src, dst, line, tcm, rows = (
        np.concatenate([np.frombuffer(getattr(s, name), dtype=code) for s in streams])
        .astype(np.int64) for name, code in COLUMNS)
    pid = np.repeat(np.arange(len(streams)), lengths)
    index = np.arange(len(op)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    where = (pid, index)
    _require(op <= READ, where, "a command of unknown kind")
    needs_a = np.isin(op, (STORE, DOT, SEND, READ))  # a WAIT without one: tl.fence
    _require((a < index) & ((a >= 0) | ~needs_a) & (a >= -1), where,
             "a producer that is not an earlier command")
    _require((b < index) & ((b >= 0) | (op != DOT)) & (b >= -1), where,
             "a producer that is not an earlier command")
    _require((size >= 0) & (line >= 0) & (tcm >= 0), where, "a negative size, line or TCM")
    peaks = np.array(program.tcm_peak, dtype=np.int64)
    _require(tcm <= peaks[pid] if peaks.size == len(streams) else tcm < 0, where,
             "more TCM in use than the PE's recorded peak")
    moves = (op == LOAD) | (op == STORE)
    _require(~moves | ((rows >= 1) & (rows <= np.maximum(size, 1))), where,
             "a load or store whose rows are not between 1 and its bytes")
    _require(~moves | (arg >= size), where, "a load or store whose span is less than its bytes")
    for kind, count in ((DOT, len(program.gemm_shapes)), (MATH, len(program.math_kinds))):
        _require((op != kind) | ((arg >= 0) & (arg < count)), where,
                 f"a {KINDS[kind]} naming no table entry")
    _require((op != COMPOSITE) | ((arg >= -1) & (arg < len(program.composites))), where,
             "a composite naming no table entry")
    peer = (op == SEND) | (op == RECV)
    _require(~peer | ((arg >= 0) & (arg < len(streams)) & (arg != pid)), where,
             "a message to or from a PE that is not another PE")
    first = np.repeat(np.cumsum(lengths) - lengths, lengths)  # each command's stream start
    _require((op != WAIT) | (a < 0) | (op[first + np.maximum(a, 0)] == COMPOSITE), where,
             "a wait on something that is not a composite")
    comps = np.array(program.composites, dtype=np.int64).reshape(-1, len(Composite._fields))
    col = {name: comps[:, j] for j, name in enumerate(Composite._fields)}
    positive = ("m", "k", "n", "a_format", "b_format", "out_format")
    counts = ("a_row_stride", "b_row_stride", "out_row_stride")
    if comps.size and not (all((col[f] > 0).all() for f in positive)
                           and all((col[f] >= 0).all() for f in counts)):
        raise ValueError("a composite has a size that is not positive")
    if program.gemm_shapes and min(min(shape) for shape in program.gemm_shapes) <= 0:
        raise ValueError("a gemm shape is not positive")
    codes = [*(shape[3] for shape in program.gemm_shapes),
             *(int(code) for f in ("a_format", "b_format", "out_format")
               for code in col.get(f, ()))]
    if any(code not in FORMATS for code in codes):
        raise ValueError("a gemm shape or composite names a format that does not exist")
    used = (op == COMPOSITE) & (arg >= 0)
    loads, stores = op == LOAD, op == STORE
    _in_memory(np.concatenate([src[loads], dst[stores]]),
               np.concatenate([pid[loads], pid[stores]]), memory,
               np.concatenate([arg[loads], arg[stores]]))
    ends = []
    for addr, in_tcm in (("a_addr", col.get("a_tcm")), ("b_addr", col.get("b_tcm")),
                         ("out_addr", None)):
        if not comps.size:
            break
        which = arg[used]
        mine = col[addr][which]
        memory_end = (mine >= 0) if in_tcm is None else (in_tcm[which] == 0)
        ends.append((mine[memory_end], pid[used][memory_end]))
    if ends:
        _in_memory(np.concatenate([e for e, _ in ends]), np.concatenate([p for _, p in ends]),
                   memory)


def _require(ok: np.ndarray, where: tuple[np.ndarray, np.ndarray], what: str) -> None:
    if not ok.all():
        bad = int(np.argmin(ok))
        raise ValueError(f"PE {int(where[0][bad])} command {int(where[1][bad])} has {what}")


def _in_memory(addrs: np.ndarray, pids: np.ndarray, memory: list[tuple[int, int, str]],
               spans: np.ndarray | None = None) -> None:
    """ValueError unless each address (and the `spans` bytes from it: a load's or store's
    first to one past its last) lies in one host allocation."""
    if not addrs.size:
        return
    bases = np.array(sorted(a for a, _, _ in memory), dtype=np.int64)
    ends = np.array([a + n for a, n, _ in sorted(memory)], dtype=np.int64)
    slot = np.searchsorted(bases, addrs, side="right") - 1
    ok = (slot >= 0) & (addrs < ends[np.maximum(slot, 0)]) if bases.size else addrs < 0
    if not ok.all():
        bad = int(np.argmin(ok))
        raise ValueError(f"PE {int(pids[bad])} reaches {int(addrs[bad]):#x}, which no host "
                         "allocation holds")
    if spans is not None:
        past = spans > ends[slot] - addrs
        if past.any():
            bad = int(np.argmax(past))
            raise ValueError(f"PE {int(pids[bad])} moves {int(spans[bad]):,} B from "
                             f"{int(addrs[bad]):#x}, past the end of the host allocation "
                             "holding it")


def _little(col: array) -> array:
    if sys.byteorder == "little":
        return col
    swapped = array(col.typecode, col)
    swapped.byteswap()
    return swapped


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -2**63 <= value < 2**63:
        raise ValueError(f"{what} holds {clip(value)}, not a 64-bit integer")
    return value


def _regions(header: dict[str, Any], program: Program) -> None:
    """The named regions of `header`, if it has any, checked and set on `program`."""
    program.region_marks = [[] for _ in program.streams]
    if "regions" not in header:
        return
    names = [_str(n, "regions") for n in _list(header["regions"], "regions")]
    marks = _list(header["region_marks"], "region_marks")
    if not names or names[0] != "" or len(marks) != len(program.streams):
        raise ValueError("regions do not start with the unnamed one, or region_marks does "
                         "not have one entry per PE")
    for path in names[1:]:
        problem = next(filter(None, map(region_name_problem, path.split("/"))), None)
        if problem is not None:
            raise ValueError(f"region {clip(path)}: {problem}")
    program.regions = names
    for pid, flat in enumerate(marks):
        flat = _ints(flat, "region_marks")
        pairs = list(zip(flat[::2], flat[1::2], strict=True)) if len(flat) % 2 == 0 else None
        n = len(program.streams[pid].op)
        if pairs is None or any(not 0 <= c <= n or not 0 <= r < len(names) for c, r in pairs) \
                or any(a[0] >= b[0] for a, b in itertools.pairwise(pairs)):
            raise ValueError(f"region_marks of PE {pid} are not (command, region) pairs in "
                             "order")
        program.region_marks[pid] = pairs


def _ints(values: Any, what: str) -> list[int]:
    return [_int(v, what) for v in _list(values, what)]


def _list(values: Any, what: str) -> list:
    if not isinstance(values, list):
        raise ValueError(f"{what} is not a list")
    return values


#: Characters of a string in a trace's header (a path, a --set item): a path's limit.
MAX_STRING_CHARS = 4096
#: Characters of a name a replay shows in its report (the kernel's, the topology's).
MAX_NAME_CHARS = 255


def _printable(header: dict[str, Any]) -> None:
    """ValueError if a string in `header` holds a control character or is longer than
    `MAX_STRING_CHARS`: names from a trace are printed, a terminal escape in one would be
    run by the terminal, and a megabyte-long one would take the report minutes to lay
    out."""
    todo: list[Any] = [header]
    while todo:
        value = todo.pop()
        if isinstance(value, dict):
            todo.extend(value.keys())
            todo.extend(value.values())
        elif isinstance(value, list):
            todo.extend(value)
        elif isinstance(value, str) and not value.isprintable():
            raise ValueError(f"a string with a control character ({clip(value)})")
        elif isinstance(value, str) and len(value) > MAX_STRING_CHARS:
            raise ValueError(f"a string of {len(value):,} characters ({value[:20]!r}…); at "
                             f"most {MAX_STRING_CHARS:,}")


def _name(value: Any, what: str) -> str:
    """A name the report shows: a string of at most `MAX_NAME_CHARS` characters."""
    value = _str(value, what)
    if len(value) > MAX_NAME_CHARS:
        raise ValueError(f"{what} is a name of {len(value):,} characters ({value[:20]!r}…); "
                         f"at most {MAX_NAME_CHARS}")
    return value


def _set_item(value: Any) -> str:
    """A recorded `--set` item: ``KEY=VALUE`` (the loader checks the key and value)."""
    value = _str(value, "sets")
    if "=" not in value:
        raise ValueError(f"sets holds {clip(value)}, not a KEY=VALUE item")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} holds {clip(value)}, not a string")
    return value


def _tuple(values: Any, n: int, what: str) -> tuple:
    if not isinstance(values, list) or len(values) != n:
        raise ValueError(f"an entry of {what} is not a list of {n} numbers")
    return tuple(v if isinstance(v, bool) else _int(v, what) for v in values)


def _kind(values: Any) -> tuple[str, str]:
    if not (isinstance(values, list) and len(values) == 2 and values[0] in MATH_CLASSES
            and isinstance(values[1], str)):
        raise ValueError(f"math kind {values!r} is not [op class, name]")
    return values[0], values[1]
