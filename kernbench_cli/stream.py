"""The command stream: what a PE's kernel asked for, in program order.

The functional pass (`lang`) emits one `Stream` per PE while it runs the
kernel with values; the timing pass (`hw.timing`) times the streams; a trace
file (`kernbench run --record`) is the streams written to disk. The stream is
the one thing `lang` and `hw` share, so it lives below both.

A stream is a set of columns (compact `array`s, about 53 bytes per command),
not an object per command. Column `a` and `b` name the commands whose results
a command consumes (its producers: the timing pass starts it no earlier than
they end); `line` is the kernel line that issued it; `tcm` is the TCM bytes
the PE's tensors hold once the command's result has its place (composite
tile buffers come on top of that, in time); `rows` is, for a LOAD or STORE,
the rows of its block that lie apart in memory (1 when it is contiguous; 0
for other kinds): with the size and span it gives the row length and stride
the HBM model needs (pages opened). The other columns mean, per kind
(`-` is ``NONE``):

========== ============ ========= ============ ================ ============ ==============
kind        a, b         size      arg          src              dst          timing
========== ============ ========= ============ ================ ============ ==============
LOAD        -            bytes     span         memory address   TCM offset   DMA
STORE       tensor       bytes     span         TCM offset       address      DMA
DOT         a, b         flops     gemm shape   TCM offset of a  TCM offset   GEMM
MATH        x, y         elements  math kind    -                TCM offset   MATH
COMPOSITE   a, b         bytes     composite    a's address      out          SCHED, DMA, GEMM
WAIT        composite/-  -         -            -                -            CPU
SEND        tensor       bytes     peer pid     TCM offset       -            DMA, IPCQ
RECV        -            bytes     peer pid     -                TCM offset   CPU, IPCQ
CYCLES      -            -         cycles       -                -            CPU
READ        tensor       -         -            -                -            CPU (waits)
========== ============ ========= ============ ================ ============ ==============

A `gemm shape` is (m, k, n, the stream format the array multiplies in:
`formats.gemm_datapath`). A WAIT without a producer is `tl.fence`: it waits
for every STORE before it to land. A LOAD's or STORE's span is the bytes from
its first to one past its last in memory (more than its size when rows are
strided). TCM addresses are offsets in the PE's TCM (the timing pass adds the
base of the topology it times on); a negative one (not NONE) is a large tensor's,
counted from the top of the TCM (`FreeListPool`), so that it stays at the top
of any TCM size the stream is timed on. `gemm shape`, `math kind` and `composite` index
the run's tables in `Program`. A COMPOSITE's operands are TCM tensors (a
producer, `src` a TCM offset) or memory (`tl.ref`: no producer, `src` an
address); its `dst` is the output address, or the TCM offset of a result
kept in TCM. READ is not a command (it costs no issue): the CPU waits there
for a value the kernel reads.

Streams hold no times and no values: kernels cannot observe time, so a
stream holds for any cost table, and a run and its replay share one timing pass (as
ADR-0064's requirements 4 and 5 ask of its two paths).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import NamedTuple

LOAD, STORE, DOT, MATH, COMPOSITE, WAIT, SEND, RECV, CYCLES, READ = range(10)
KINDS = ("load", "store", "dot", "math", "composite", "wait", "send", "recv", "cycles", "read")
NONE = -1

#: The op classes of PE_MATH (`[pe.math.op_cycles]`), in the order of its config keys.
MATH_CLASSES = ("add", "mul", "div", "cmp", "exp", "log", "sqrt", "reduce", "cast", "dequant")
#: PE_MATH commands: (op class of `[pe.math.op_cycles]`, name in the op log); a MATH
#: command's `arg` indexes this table (a program carries it, so traces say what they mean).
#: New kinds are appended, so older traces keep their meaning.
MATH_KINDS: tuple[tuple[str, str], ...] = (
    ("add", "fill"), ("add", "add"), ("add", "subtract"), ("add", "negative"),
    ("mul", "multiply"), ("div", "divide"), ("cmp", "maximum"), ("cmp", "minimum"),
    ("exp", "exp"), ("log", "log"), ("sqrt", "sqrt"), ("reduce", "max"), ("reduce", "sum"),
    ("cast", "cast"), ("sqrt", "rsqrt"), ("div", "reciprocal"), ("add", "abs"),
    ("exp", "tanh"), ("cmp", "where"), ("exp", "erf"), ("dequant", "dequantize"))

#: (column, array typecode): the layout of a stream and of a trace file.
COLUMNS = (("op", "B"), ("a", "i"), ("b", "i"), ("size", "q"), ("arg", "q"), ("src", "q"),
           ("dst", "q"), ("line", "i"), ("tcm", "i"), ("rows", "i"))


class Stream:
    """One PE's commands, in program order, as columns (see the module docstring)."""

    __slots__ = tuple(name for name, _ in COLUMNS)

    def __init__(self) -> None:
        for name, code in COLUMNS:
            setattr(self, name, array(code))

    def __len__(self) -> int:
        return len(self.op)

    def columns(self) -> list[array]:
        return [getattr(self, name) for name, _ in COLUMNS]

    def commands(self) -> int:
        """Commands (everything but READ)."""
        return len(self.op) - self.op.count(READ)


class Composite(NamedTuple):
    """What the timing pass needs to tile one `tl.composite` GEMM.

    The operands' and the output's formats are stream format codes
    (`kernbench_cli.formats`: a 16-bit float is 2, f32 4, its element size).
    `a_addr`/`b_addr` and their row strides (in elements) locate operands in memory
    (unused for an operand already in TCM: `a_tcm`/`b_tcm`). `out_addr` is NONE when
    the result stays in TCM. The scheduler plans the tiles at dispatch, into the
    TCM free then (the timing pass knows it), so the plan holds on any topology.
    """

    m: int
    k: int
    n: int
    a_format: int
    b_format: int
    out_format: int
    a_tcm: bool
    b_tcm: bool
    a_addr: int
    a_row_stride: int
    b_addr: int
    b_row_stride: int
    trans_b: bool
    out_addr: int
    out_row_stride: int


#: The report's row for the time outside every named region: no region may take its name.
OUTSIDE = "(outside)"
#: Characters of one region name: it is a row of the report (a file name's length).
MAX_REGION_CHARS = 255


def region_name_problem(name: object) -> str | None:
    """What is wrong with `name` as a region name (`tl.region`, a trace's regions), or None:
    a region is named by a non-empty printable string without '/' (paths join names with
    it), of at most `MAX_REGION_CHARS` characters, not in parentheses (the form of the
    report's own rows, such as `OUTSIDE`)."""
    if not isinstance(name, str) or not name or "/" in name or not name.isprintable():
        return "a name is a non-empty printable string without '/'"
    if len(name) > MAX_REGION_CHARS:
        return f"a name of {len(name):,} characters; at most {MAX_REGION_CHARS}"
    if name.startswith("(") and name.endswith(")"):
        return f"names in parentheses, such as {OUTSIDE}, are the report's own rows"
    return None


@dataclass
class Program:
    """Every PE's stream and the tables they index: a run as the timing pass needs it.

    `tcm_peak[pid]` is the TCM the PE's tensors need at their offsets (the
    allocator's `peak`: the end of a block from the bottom plus the depth of one
    from the top, at most, over blocks in use at once): a topology with less TCM
    cannot time it.
    """

    streams: list[Stream]
    gemm_shapes: list[tuple[int, int, int, int]] = field(default_factory=list)
    math_kinds: list[tuple[str, str]] = field(default_factory=lambda: list(MATH_KINDS))
    composites: list[Composite] = field(default_factory=list)
    tcm_peak: list[int] = field(default_factory=list)
    #: named regions (`tl.region`): their paths ("layer/attn"; index 0 is "", outside any),
    #: and per PE where its commands change region: (first command, region index) pairs
    regions: list[str] = field(default_factory=lambda: [""])
    region_marks: list[list[tuple[int, int]]] = field(default_factory=list)
    #: the IPCQ ring capacity (slots, slot bytes) the kernel read (`tl.ring_capacity`) to
    #: cut its messages, None if it read none: a replay on rings of another capacity
    #: would time a program a run there would not make
    ring_capacity: tuple[int, int] | None = None

    @classmethod
    def empty(cls, pes: int) -> Program:
        return cls([Stream() for _ in range(pes)], tcm_peak=[0] * pes,
                   region_marks=[[] for _ in range(pes)])

    def region_of(self, pid: int) -> list[int]:
        """The region index of each of PE `pid`'s commands."""
        n = len(self.streams[pid].op)
        out, marks = [0] * n, self.region_marks[pid] if self.region_marks else []
        for k, (first, region) in enumerate(marks):
            end = marks[k + 1][0] if k + 1 < len(marks) else n
            out[first:end] = [region] * (end - first)
        return out

    @property
    def commands(self) -> int:
        return sum(s.commands() for s in self.streams)


class Interner:
    """Indexes of the distinct entries of a table, appended as first seen."""

    __slots__ = ("index", "table")

    def __init__(self, table: list) -> None:
        self.table = table
        self.index = {entry: i for i, entry in enumerate(table)}

    def __call__(self, entry) -> int:
        i = self.index.get(entry)
        if i is None:
            i = self.index[entry] = len(self.table)
            self.table.append(entry)
        return i
