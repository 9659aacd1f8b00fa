"""Groups of PEs for the collectives: ranks in mesh order, parts of a buffer, the levels
`hier` rings over, and a call's checked arguments (`start`)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

ALGOS = {
    "all_reduce": ("ring", "direct", "tree", "rhd", "hier"),
    "reduce_scatter": ("ring", "direct", "rhd", "hier"),
    "all_gather": ("ring", "direct", "rhd", "hier"),
    "broadcast": ("tree", "ring", "direct"),
    "reduce": ("tree", "ring", "direct"),
}
OPS = ("sum", "max", "min")


def part(count: int, n: int, rank: int) -> tuple[int, int]:
    """(offset, count) of part `rank` of a balanced split of `count` elements into `n`
    parts in rank order: the first `count % n` parts have one element more."""
    q, r = divmod(count, n)
    return rank * q + min(rank, r), q + (rank < r)


def layout(grid, count: int, group: Sequence[int] | None = None,
           algo: str = "ring") -> dict[int, tuple[int, int]]:
    """Each member's part, pid: (offset, count), after a reduce_scatter (or before an
    all_gather) of `count` elements with `algo`. `grid` is a `tl`, or `Grid(topology)`
    on the host side (to check a kernel's results)."""
    return dict(_layout(_shape(grid), count, ring_order(grid, group), algo))


@functools.lru_cache(maxsize=4096)  # a rack's stages and head groups: hundreds of groups
def _layout(shape: tuple, count: int, members: tuple[int, ...],
            algo: str) -> dict[int, tuple[int, int]]:
    if algo != "hier":
        return {p: part(count, len(members), r) for r, p in enumerate(members)}
    rings = _levels(shape, members)
    out = {}
    for p in members:
        span = (0, count)
        for ring in rings[p]:
            span = sub(span, len(ring), ring.index(p))
        out[p] = span
    return out


def _shape(grid) -> tuple:
    """What the group functions read of a grid (a `tl` or a `Grid`), as a cache key:
    (PEs, PEs a cube, cubes a SIP, the PE mesh, the cube mesh)."""
    return (grid.num_pes, grid.num_programs(0), grid.num_programs(1), grid.mesh(0),
            grid.mesh(1))


class Grid:
    """The grid as the group functions read it from a `tl`, made from a topology."""

    def __init__(self, topology):
        self._system = topology.system
        self.num_pes = topology.num_pes

    def num_programs(self, axis: int) -> int:
        s = self._system
        return (s.pes_per_cube, s.cubes_per_sip, s.racks * s.sips_per_rack)[axis]

    def mesh(self, axis: int) -> tuple[int, int]:
        s = self._system
        return (tuple(s.pe_mesh), tuple(s.cube_mesh), (s.racks * s.sips_per_rack, 1))[axis]


@dataclass
class Group:
    """One call's group, buffer and settings, as this PE sees them."""

    tl: Any
    ptr: int
    count: int
    dtype: str
    item: int
    ranks: tuple[int, ...]  # pids in ring order
    algo: str
    op: str
    piece: int  # elements per message (half a ring: two may be in flight)
    window: int  # messages a rank may have sent beyond what it has received
    me: int  # this PE's rank
    kept: dict = field(default_factory=dict)  # tensors kept for later messages, by key

    @property
    def n(self) -> int:
        return len(self.ranks)

    @property
    def whole(self) -> tuple[int, int]:
        return 0, self.count

    def mine(self) -> tuple[int, int]:
        """This rank's part after a reduce_scatter (nested per level, for hier)."""
        return _layout(_shape(self.tl), self.count, self.ranks, self.algo)[self.tl.pid]

    def load(self, at: int, n: int):
        return self.tl.load(self.ptr + at * self.item, shape=(n,), dtype=self.dtype)

    def store(self, at: int, x) -> None:
        self.tl.store(self.ptr + at * self.item, x)

    def combine(self, a, b):
        tl = self.tl
        return a + b if self.op == "sum" else tl.maximum(a, b) if self.op == "max" \
            else tl.minimum(a, b)

    def pieces(self, span: tuple[int, int]) -> list[tuple[int, int]]:
        """(offset, count) of the messages that carry `span` of the buffer."""
        at, n = span
        piece = self.piece
        whole = at + n // piece * piece  # where the whole pieces end
        out = [(o, piece) for o in range(at, whole, piece)]
        if n % piece:
            out.append((whole, n % piece))
        return out


def start(tl, call: str, ptr: int, count: int, dtype: str, group, algo: str, op: str,
           root: int | None = None) -> Group:
    """Check a call's arguments (ValueError with what is wrong) and make its `Group`."""
    if algo not in ALGOS[call]:
        raise ValueError(f"{call}: algo {algo!r} is not one of {', '.join(ALGOS[call])}")
    if op not in OPS:
        raise ValueError(f"{call}: op {op!r} is not one of {', '.join(OPS)}")
    if not isinstance(count, int) or count <= 0:
        raise ValueError(f"{call}: count must be a positive integer, got {count!r}")
    members = ring_order(tl, group)
    me = _ranks(members).get(tl.pid)
    if me is None:
        raise ValueError(f"{call}: PE {tl.pid} calls it but is not in the group")
    if root is not None and root not in _ranks(members):
        raise ValueError(f"{call}: root {root!r} is not in the group")
    item = tl.itemsize(dtype)
    _check_buffer(tl, call, ptr, count, dtype, item)
    slots, slot = tl.ring_capacity()
    if slot < item:
        raise ValueError(f"{call}: an IPCQ slot of {slot} B cannot hold one {dtype} element")
    per_message = max(1, slots // 2)  # slots a message takes: two fit a ring
    g = Group(tl, ptr, count, dtype, item, members, algo, op,
               per_message * slot // item, slots // per_message, me)
    if algo == "rhd" and call != "all_reduce" and g.n & (g.n - 1):
        raise ValueError(f"{call}: rhd needs a power-of-two group, this one has {g.n} PEs "
                         "(ring or hier work on any group)")
    if algo == "hier":
        levels(tl, members, tl.pid)  # checks the group is regular
    return g


def _check_buffer(tl, call: str, ptr: int, count: int, dtype: str, item: int) -> None:
    """ValueError unless the `count` elements at `ptr` are memory the kernel has (named with
    `tl.ref`, which moves nothing): checked before a message is cut, so a count far beyond
    the buffer fails at once, not after splitting it into millions of pieces."""
    from kernbench_cli.config.units import describe_size
    from kernbench_cli.errors import KernbenchError

    try:
        tl.ref(ptr, (1, count), dtype)
    except KernbenchError as exc:
        raise ValueError(f"{call}: count = {count:,} {dtype} elements "
                         f"({describe_size(count * item, exact_bytes=False)}) at {ptr:#x} is "
                         f"not a buffer of this PE's: {exc}") from None


def ring_order(tl, group) -> tuple[int, ...]:
    """The group's pids in ring order; every PE when `group` is None. Worked out once per
    grid and group (every PE of a group asks for the same order)."""
    key = None if group is None else tuple(group)
    if key is not None and not set(map(type, key)) <= {int}:  # before the cache: 1.0 == 1
        raise _not_a_group(tl.num_pes, key)
    return _ring_order(_shape(tl), key)


def _not_a_group(num_pes: int, pids) -> ValueError:
    return ValueError(f"a group is a non-empty list of PE indexes 0..{num_pes - 1}, "
                      f"got {list(pids)!r}"[:200])


@functools.lru_cache(maxsize=4096)
def _ring_order(shape: tuple, group: tuple[int, ...] | None) -> tuple[int, ...]:
    num_pes, pes, cubes, pe_mesh, cube_mesh = shape
    pids = list(range(num_pes)) if group is None else list(group)
    if not pids or any(not 0 <= p < num_pes for p in pids):
        raise _not_a_group(num_pes, pids)
    if len(set(pids)) != len(pids):
        raise ValueError("a group names a PE twice")
    pe_at, cube_at = _cycle(*pe_mesh), _cycle(*cube_mesh)
    return tuple(sorted(pids, key=lambda p: (p // (pes * cubes), cube_at[p // pes % cubes],
                                             pe_at[p % pes])))


@functools.lru_cache(maxsize=4096)
def _ranks(members: tuple[int, ...]) -> dict[int, int]:
    """Each member's rank."""
    return {p: r for r, p in enumerate(members)}


def _coord(shape: tuple, pid: int) -> tuple[int, int, int]:
    """(SIP in the system, cube in its SIP, PE in its cube) of global PE `pid`."""
    _, pes, cubes = shape[:3]
    return pid // (pes * cubes), pid // pes % cubes, pid % pes


@functools.lru_cache(maxsize=64)
def _cycle(cols: int, rows: int) -> dict[int, int]:
    """Position of each mesh index (row * cols + col) in a walk of the mesh that moves one
    hop at a time and, when a side is even, ends next to where it began (a Hamiltonian
    cycle: along row 0, snake back over columns 1.., up column 0)."""
    if rows % 2 and cols % 2 == 0 and rows > 1:  # walk the transpose
        order = [x * cols + y for x, y in _walk(rows, cols)]
    else:
        order = [y * cols + x for x, y in _walk(cols, rows)]
    return {index: at for at, index in enumerate(order)}


def _walk(cols: int, rows: int) -> list[tuple[int, int]]:
    """(x, y) cells of a cols x rows mesh in cycle order (rows even), else a snake."""
    if rows == 1 or cols == 1 or rows % 2:
        return [(x if y % 2 == 0 else cols - 1 - x, y) for y in range(rows) for x in range(cols)]
    cells = [(x, 0) for x in range(cols)]
    for y in range(1, rows):
        xs = range(cols - 1, 0, -1) if y % 2 else range(1, cols)
        cells += [(x, y) for x in xs]
    return cells + [(0, y) for y in range(rows - 1, 0, -1)]


def levels(tl, members: tuple[int, ...], me: int) -> list[tuple[int, ...]]:
    """For `hier`: this PE's ring at each level, innermost first, each in ring order: the
    group's PEs of its cube; those of the same rank in the other cubes of its SIP; those
    of the same two ranks in the other SIPs (over the SIP and rack links). Levels of one
    PE are left out. A ValueError unless every cube holds as many members, and every SIP
    as many cubes."""
    return _levels(_shape(tl), tuple(members))[me]


@functools.lru_cache(maxsize=1024)
def _levels(shape: tuple, members: tuple[int, ...]) -> dict[int, list[tuple[int, ...]]]:
    """`levels` of every member at once (one pass over the group)."""
    coord = {p: _coord(shape, p) for p in members}
    cubes: dict[tuple[int, int], list[int]] = {}
    for p in members:
        cubes.setdefault(coord[p][:2], []).append(p)
    sips: dict[int, list[tuple[int, int]]] = {}
    for cube in cubes:
        sips.setdefault(cube[0], []).append(cube)
    for what, units in (("cube", cubes), ("SIP", sips)):
        sizes = sorted({len(v) for v in units.values()})
        if len(sizes) > 1:
            held = "members" if what == "cube" else "cubes with members"
            raise ValueError(f"hier needs a regular group: its {what}s hold "
                             f"{' and '.join(map(str, sizes))} {held}")
    rank0 = {p: r for v in cubes.values() for r, p in enumerate(v)}
    rank1 = {p: sips[c[0]].index(c) for c, v in cubes.items() for p in v}
    keys = (lambda p: coord[p][:2], lambda p: (coord[p][0], rank0[p]),
            lambda p: (rank0[p], rank1[p]))
    rings: list[dict] = []
    for key in keys:  # the members in ring order, grouped by what they share at a level
        by: dict = {}
        for p in members:
            by.setdefault(key(p), []).append(p)
        rings.append({k: tuple(v) for k, v in by.items()})
    return {p: [ring for key, level in zip(keys, rings, strict=True)
                if len(ring := level[key(p)]) > 1] for p in members}


def sub(span: tuple[int, int], n: int, rank: int) -> tuple[int, int]:
    """Part `rank` of `n` of `span` (offset, count): `part`, placed in the span."""
    at, count = part(span[1], n, rank)
    return span[0] + at, count
