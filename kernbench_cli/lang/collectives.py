"""Collectives for kernels, written on `tl.send` and `tl.recv` (read them, copy them).

    from kernbench_cli.lang import collectives as coll

    coll.all_reduce(tl, ptr, count, "f32")                   # every PE of the grid, ring
    coll.all_reduce(tl, ptr, count, "f16", group=tp, algo="hier")
    mine = coll.reduce_scatter(tl, ptr, count, "f32")        # -> (offset, count) of mine

Every PE of the group calls the same collective with the same arguments (its
own `ptr`). A buffer is `count` elements of `dtype` at `ptr` in the calling
PE's memory (its HBM slice, usually), worked on in place as NCCL's in-place
calls are: the result is where the input was. Data moves through TCM in
pieces of half an IPCQ ring (`tl.ring_capacity()`: 8 KiB of 4 x 4 KiB slots;
one slot if the ring has only one), loaded, combined by PE_MATH
(`op`: "sum", "max" or "min"), sent, received and stored as the algorithm
says, so every cost is the model's own: the DMA's loads, stores, sends and
receive copies, the links, the credits. Values are combined in the buffer's
dtype (an f16 sum rounds at each step, as on the hardware).

Groups (`group=`): any PEs, as global indexes; the default is every PE. A
group's ranks follow the mesh: PEs of a cube in a cycle of its PE mesh
(neighbours one hop apart, the cycle closed where the mesh allows), cubes in
a cycle of the SIP's cube mesh, then SIPs. `ranks(tl, group)` shows it.

Algorithms (`algo=`):

``ring``
    Reduce-scatter then all-gather around the ring (Patarasuk & Yuan): each
    step moves 1/n of the buffer to the next rank. Bandwidth-optimal; 2(n-1)
    steps of latency. broadcast/reduce: a pipelined chain from the root.
``direct``
    One step: every rank sends each part straight to its owner (reduce-
    scatter), then each owner to every rank (all-gather). n-1 messages per
    part, latency of one (long) hop each.
``tree``
    A binomial tree (ceil(log2 n) levels) to the root and back, piece by
    piece: reduce, broadcast, and all_reduce as reduce + broadcast.
``rhd``
    Recursive halving then doubling (Rabenseifner): log2 n exchanges with
    partners 2^k apart; a group that is not a power of two folds its extra
    ranks into partners first (all_reduce only).
``hier``
    Hierarchical, one ring per level (the cube's NoC, the SIP's UCIe, the
    SIP links, the rack links), as ASTRA-sim composes dimensions:
    reduce-scatter up the levels, all-reduce at the top, all-gather back
    down. Needs a regular group: as many members in each cube, cubes in each
    SIP, SIPs in each rack.

No message size or ring depth deadlocks them. A message is at most half a
ring; in a ring a rank is never more messages ahead of what it has received
than the ring holds (`_exchange`), so a rank waits only on one that is
further behind and no cycle of waits can form; pairs exchange half-duplex
(`_pairwise`), so a sender's receiver is receiving on that ring; trees,
chains and stars wait only towards the root or away from it. A
reduce_scatter/all_gather result is a part of a balanced split of the buffer
in rank order (`part`); hierarchical ones nest the split per level.
"""

from __future__ import annotations

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


# ---------------------------------------------------------------------- the public calls


def all_reduce(tl, ptr: int, count: int, dtype: str, group: Sequence[int] | None = None,
               algo: str = "ring", op: str = "sum") -> None:
    """Every rank's buffer becomes the element-wise `op` of all of them."""
    g = _start(tl, "all_reduce", ptr, count, dtype, group, algo, op)
    if g.n == 1:
        return
    if algo == "ring":
        _ring(g, g.ranks, g.whole, rs=True, ag=True)
    elif algo == "direct":
        _direct(g, g.ranks, g.whole, rs=True, ag=True)
    elif algo == "tree":
        _tree_reduce(g, g.ranks[0])
        _tree_bcast(g, g.ranks[0])
    elif algo == "rhd":
        _rhd_all_reduce(g)
    else:
        _hier(g, top="all_reduce")


def reduce_scatter(tl, ptr: int, count: int, dtype: str, group: Sequence[int] | None = None,
                   algo: str = "ring", op: str = "sum") -> tuple[int, int]:
    """Each rank's part of the buffer (`part`) becomes the `op` of that part over every rank;
    the rest of its buffer is left as scratch. Returns the part: (offset, count) in
    elements."""
    g = _start(tl, "reduce_scatter", ptr, count, dtype, group, algo, op)
    if g.n > 1:
        if algo == "ring":
            _ring(g, g.ranks, g.whole, rs=True, ag=False)
        elif algo == "direct":
            _direct(g, g.ranks, g.whole, rs=True, ag=False)
        elif algo == "rhd":
            _rhd(g, g.whole, halving=True)
        else:
            _hier(g, top="reduce_scatter")
    return g.mine()


def all_gather(tl, ptr: int, count: int, dtype: str, group: Sequence[int] | None = None,
               algo: str = "ring") -> tuple[int, int]:
    """Each rank contributes its part of the buffer (`part`, already in place); afterwards
    every rank's buffer holds every part. Returns this rank's part."""
    g = _start(tl, "all_gather", ptr, count, dtype, group, algo, "sum")
    if g.n > 1:
        if algo == "ring":
            _ring(g, g.ranks, g.whole, rs=False, ag=True)
        elif algo == "direct":
            _direct(g, g.ranks, g.whole, rs=False, ag=True)
        elif algo == "rhd":
            _rhd(g, g.whole, halving=False)
        else:
            _hier(g, top="all_gather")
    return g.mine()


def broadcast(tl, ptr: int, count: int, dtype: str, root: int,
              group: Sequence[int] | None = None, algo: str = "tree") -> None:
    """Every rank's buffer becomes PE `root`'s (a global PE index in the group)."""
    g = _start(tl, "broadcast", ptr, count, dtype, group, algo, "sum", root)
    if g.n == 1:
        return
    if algo == "tree":
        _tree_bcast(g, root)
    elif algo == "ring":
        _chain(g, root, reduce=False)
    else:
        _star(g, root, reduce=False)


def reduce(tl, ptr: int, count: int, dtype: str, root: int,
           group: Sequence[int] | None = None, algo: str = "tree", op: str = "sum") -> None:
    """PE `root`'s buffer becomes the `op` of every rank's; the others' are left as they
    were (tree and ring use them as scratch)."""
    g = _start(tl, "reduce", ptr, count, dtype, group, algo, op, root)
    if g.n == 1:
        return
    if algo == "tree":
        _tree_reduce(g, root)
    elif algo == "ring":
        _chain(g, root, reduce=True)
    else:
        _star(g, root, reduce=True)


def ranks(tl, group: Sequence[int] | None = None) -> tuple[int, ...]:
    """The group's PEs in ring order (the order its ranks take): see the module's text."""
    return _members(tl, group)


def layout(grid, count: int, group: Sequence[int] | None = None,
           algo: str = "ring") -> dict[int, tuple[int, int]]:
    """Each member's part, pid: (offset, count), after a reduce_scatter (or before an
    all_gather) of `count` elements with `algo`. `grid` is a `tl`, or `Grid(topology)`
    on the host side (to check a kernel's results)."""
    members = _members(grid, group)
    if algo != "hier":
        return {p: part(count, len(members), r) for r, p in enumerate(members)}
    out = {}
    for p in members:
        span = (0, count)
        for ring in _levels(grid, members, p):
            span = _sub(span, len(ring), ring.index(p))
        out[p] = span
    return out


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


def part(count: int, n: int, rank: int) -> tuple[int, int]:
    """(offset, count) of part `rank` of a balanced split of `count` elements into `n`
    parts in rank order: the first `count % n` parts have one element more."""
    q, r = divmod(count, n)
    return rank * q + min(rank, r), q + (rank < r)


# ---------------------------------------------------------------------- groups


@dataclass
class _Group:
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
    kept: dict = field(default_factory=dict)  # tensors kept for later messages, by key

    @property
    def n(self) -> int:
        return len(self.ranks)

    @property
    def me(self) -> int:
        return self.ranks.index(self.tl.pid)

    @property
    def whole(self) -> tuple[int, int]:
        return 0, self.count

    def mine(self) -> tuple[int, int]:
        """This rank's part after a reduce_scatter (nested per level, for hier)."""
        return layout(self.tl, self.count, self.ranks, self.algo)[self.tl.pid]

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
        return [(o, min(self.piece, at + n - o)) for o in range(at, at + n, self.piece)]


def _start(tl, call: str, ptr: int, count: int, dtype: str, group, algo: str, op: str,
           root: int | None = None) -> _Group:
    """Check a call's arguments (ValueError with what is wrong) and make its `_Group`."""
    if algo not in ALGOS[call]:
        raise ValueError(f"{call}: algo {algo!r} is not one of {', '.join(ALGOS[call])}")
    if op not in OPS:
        raise ValueError(f"{call}: op {op!r} is not one of {', '.join(OPS)}")
    if not isinstance(count, int) or count <= 0:
        raise ValueError(f"{call}: count must be a positive integer, got {count!r}")
    members = _members(tl, group)
    if tl.pid not in members:
        raise ValueError(f"{call}: PE {tl.pid} calls it but is not in the group")
    if root is not None and root not in members:
        raise ValueError(f"{call}: root {root!r} is not in the group")
    item = tl.itemsize(dtype)
    slots, slot = tl.ring_capacity()
    if slot < item:
        raise ValueError(f"{call}: an IPCQ slot of {slot} B cannot hold one {dtype} element")
    per_message = max(1, slots // 2)  # slots a message takes: two fit a ring
    g = _Group(tl, ptr, count, dtype, item, members, algo, op,
               per_message * slot // item, slots // per_message)
    if algo == "rhd" and call != "all_reduce" and g.n & (g.n - 1):
        raise ValueError(f"{call}: rhd needs a power-of-two group, this one has {g.n} PEs "
                         "(ring or hier work on any group)")
    if algo == "hier":
        _levels(tl, members, tl.pid)  # checks the group is regular
    return g


def _members(tl, group) -> tuple[int, ...]:
    """The group's pids in ring order; every PE when `group` is None."""
    pids = list(range(tl.num_pes)) if group is None else list(group)
    if not pids or any(not isinstance(p, int) or not 0 <= p < tl.num_pes for p in pids):
        raise ValueError(f"a group is a non-empty list of PE indexes 0..{tl.num_pes - 1}, "
                         f"got {list(group)!r}"[:200])
    if len(set(pids)) != len(pids):
        raise ValueError("a group names a PE twice")
    return tuple(sorted(pids, key=lambda p: _ring_key(tl, p)))


def _coord(tl, pid: int) -> tuple[int, int, int]:
    """(SIP in the system, cube in its SIP, PE in its cube) of global PE `pid`."""
    pes, cubes = tl.num_programs(0), tl.num_programs(1)
    return pid // (pes * cubes), pid // pes % cubes, pid % pes


def _ring_key(tl, pid: int) -> tuple[int, int, int]:
    sip, cube, pe = _coord(tl, pid)
    return sip, _cycle(*tl.mesh(1))[cube], _cycle(*tl.mesh(0))[pe]


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


def _levels(tl, members: tuple[int, ...], me: int) -> list[tuple[int, ...]]:
    """For `hier`: this PE's ring at each level, innermost first, each in ring order: the
    group's PEs of its cube; those of the same rank in the other cubes of its SIP; those
    of the same two ranks in the other SIPs (over the SIP and rack links). Levels of one
    PE are left out. A ValueError unless every cube holds as many members, and every SIP
    as many cubes."""
    cubes: dict[tuple[int, int], list[int]] = {}
    for p in members:
        cubes.setdefault(_coord(tl, p)[:2], []).append(p)
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
    sip, cube, _ = _coord(tl, me)
    rings = (
        [p for p in members if _coord(tl, p)[:2] == (sip, cube)],
        [p for p in members if _coord(tl, p)[0] == sip and rank0[p] == rank0[me]],
        [p for p in members if rank0[p] == rank0[me] and rank1[p] == rank1[me]],
    )
    return [tuple(ring) for ring in rings if len(ring) > 1]


def _sub(span: tuple[int, int], n: int, rank: int) -> tuple[int, int]:
    """Part `rank` of `n` of `span` (offset, count): `part`, placed in the span."""
    at, count = part(span[1], n, rank)
    return span[0] + at, count


# ---------------------------------------------------------------------- the exchange


@dataclass(frozen=True)
class _Out:
    """A message this rank sends: a piece `load`ed from the buffer, or a tensor it keeps
    (`needs`, forgotten after if `drop`), or the two combined; `keep` keeps what it sent."""

    peer: int
    load: tuple[int, int] | None = None
    needs: object = None
    drop: bool = True
    keep: object = None


@dataclass(frozen=True)
class _In:
    """A message this rank receives (`count` elements), combined with a kept tensor
    (`needs`) and/or a piece `load`ed from the buffer, then `store`d at a buffer offset
    and/or kept under `keep` for a later message."""

    peer: int
    count: int
    load: tuple[int, int] | None = None
    needs: object = None
    store: int | None = None
    keep: object = None


def _exchange(g: _Group, outs: list[_Out], ins: list[_In], window: int | None = None) -> None:
    """Send `outs` and receive `ins`, each in order, interleaved so that no wait can close
    a cycle: a message goes out once what it carries is here and this rank has sent at
    most `g.window` messages beyond those it has received (a ring's slots); otherwise the
    next message is received. The buffer pieces the messages need are loaded ahead, as
    many as the window, so that their HBM latency hides under the exchange."""
    tl, kept = g.tl, g.kept
    window = g.window if window is None else window
    loads = _Loads(g, [o.load for o in outs]), _Loads(g, [i.load for i in ins])
    sent = taken = 0
    while sent < len(outs) or taken < len(ins):
        out = outs[sent] if sent < len(outs) else None
        if out is not None and (sent - taken < window or taken == len(ins)) and (
                out.needs is None or out.needs in kept):
            parts = [kept[out.needs] if out.needs is not None else None, loads[0].take(sent)]
            if out.needs is not None and out.drop:
                del kept[out.needs]
            x = _fold(g, parts)
            tl.send(x, to=out.peer)
            if out.keep is not None:
                kept[out.keep] = x
            sent += 1
            continue
        if taken == len(ins):
            raise AssertionError(f"collective schedule: message {sent} waits for "
                                 f"{out.needs!r}, which no message brings")
        into = ins[taken]
        x = tl.recv(frm=into.peer, shape=(into.count,), dtype=g.dtype)
        x = _fold(g, [x, kept.pop(into.needs) if into.needs is not None else None,
                      loads[1].take(taken)])
        if into.store is not None:
            g.store(into.store, x)
        if into.keep is not None:
            kept[into.keep] = x
        taken += 1


def _fold(g: _Group, parts: list) -> Any:
    """The `op` of the tensors in `parts` (None entries left out)."""
    parts = [p for p in parts if p is not None]
    out = parts[0]
    for p in parts[1:]:
        out = g.combine(out, p)
    return out


class _Loads:
    """Loads of buffer pieces for a list of messages, issued `g.window` messages ahead."""

    def __init__(self, g: _Group, pieces: list[tuple[int, int] | None]):
        self.g, self.pieces, self.issued, self.ahead = g, pieces, 0, {}

    def take(self, k: int) -> Any:
        """The loaded piece of message `k` (None if it loads none); loads up to
        `k + window`."""
        end = min(len(self.pieces), k + 1 + self.g.window)
        while self.issued < end:
            piece = self.pieces[self.issued]
            if piece is not None:
                self.ahead[self.issued] = self.g.load(*piece)
            self.issued += 1
        return self.ahead.pop(k, None)


# ---------------------------------------------------------------------- algorithms


def _segments(g: _Group, parts: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """`parts` (one span per rank) cut into segments of at most `window` messages per part:
    segment k holds the k-th such slice of every part (empty where a part is shorter), so
    that a part's received pieces wait in TCM for at most a window's worth of messages."""
    size = g.window * g.piece
    count = max(-(-n // size) for _, n in parts)
    return [[(at + k * size, max(0, min(size, n - k * size))) for at, n in parts]
            for k in range(count)]


def _ring(g: _Group, ring: Sequence[int], span: tuple[int, int], rs: bool, ag: bool) -> None:
    """Ring reduce-scatter (`rs`) and/or all-gather (`ag`) of `span` over `ring`: rank i
    ends holding part i (reduced), or every part. Step s of the reduce-scatter sends part
    i-s-1 (what came in at step s-1, plus this rank's own) and takes part i-s-2; step s of
    the all-gather passes part i-s on."""
    n, me = len(ring), ring.index(g.tl.pid)
    right, left = ring[(me + 1) % n], ring[(me - 1) % n]
    outs: list[_Out] = []
    ins: list[_In] = []
    parts = [_sub(span, n, r) for r in range(n)]
    for k, seg in enumerate(_segments(g, parts)):
        if rs:
            for s in range(n - 1):
                last = s == n - 2
                for j, piece in enumerate(g.pieces(seg[(me - s - 1) % n])):
                    outs.append(_Out(right, load=piece, needs=("rs", k, s - 1, j) if s else None))
                for j, piece in enumerate(g.pieces(seg[(me - s - 2) % n])):
                    ins.append(_In(left, piece[1], load=piece if last else None,
                                   store=piece[0] if last else None,
                                   keep=("rs", k, s, j) if not last or ag else None))
        if ag:
            for s in range(n - 1):
                for j, piece in enumerate(g.pieces(seg[(me - s) % n])):
                    if s:
                        outs.append(_Out(right, needs=("ag", k, s - 1, j)))
                    else:
                        outs.append(_Out(right, needs=("rs", k, n - 2, j)) if rs
                                    else _Out(right, load=piece))
                for j, piece in enumerate(g.pieces(seg[(me - s - 1) % n])):
                    ins.append(_In(left, piece[1], store=piece[0],
                                   keep=("ag", k, s, j) if s < n - 2 else None))
    _exchange(g, outs, ins)


def _direct(g: _Group, ring: Sequence[int], span: tuple[int, int], rs: bool,
            ag: bool) -> None:
    """One-shot reduce-scatter (each part straight to its owner, who combines the n-1 that
    come) and/or all-gather (each owner's part straight to every rank), as pairwise
    exchanges: at step s rank i pairs with rank s - i (mod n), so that each pair meets
    once in n steps (a rank paired with itself sits the step out), half-duplex
    (`_pairwise`). An owner's partial sum waits in its buffer between steps."""
    n, me = len(ring), ring.index(g.tl.pid)
    parts = [_sub(span, n, r) for r in range(n)]
    segments = _segments(g, parts)
    for phase in ("rs",) * rs + ("ag",) * ag:
        for s in range(n):
            peer = (s - me) % n
            if peer == me:
                continue
            outs: list[_Out] = []
            ins: list[_In] = []
            for seg in segments:
                if phase == "rs":  # the partial sum of my part goes through the buffer
                    outs += [_Out(ring[peer], load=piece) for piece in g.pieces(seg[peer])]
                    ins += [_In(ring[peer], c, load=(at, c), store=at)
                            for at, c in g.pieces(seg[me])]
                else:
                    outs += [_Out(ring[peer], load=piece) for piece in g.pieces(seg[me])]
                    ins += [_In(ring[peer], c, store=at) for at, c in g.pieces(seg[peer])]
            _pairwise(g, me < peer, outs, ins)


def _pairwise(g: _Group, first: bool, outs: list[_Out], ins: list[_In]) -> None:
    """One exchange with a partner, half-duplex: the rank that goes `first` sends all its
    messages, then receives the partner's; the partner the other way round. Whatever
    else is in flight, the rank a sender waits on is then receiving on that very ring,
    which takes (or sets aside) every chunk in it, so no wait can last."""
    if first:
        _exchange(g, outs, [])
        _exchange(g, [], ins)
    else:
        _exchange(g, [], ins)
        _exchange(g, outs, [])


def _binomial(n: int, v: int) -> tuple[int | None, list[int]]:
    """(parent, children) of relative rank `v` in a binomial tree of `n` rooted at 0."""
    low = v & -v if v else 1 << n.bit_length()
    children = [v + (1 << k) for k in range(n.bit_length())
                if (1 << k) < low and v + (1 << k) < n]
    return (v - low if v else None), children


def _tree_reduce(g: _Group, root: int) -> None:
    """Binomial-tree reduce to `root`, piece by piece: each rank combines its children's
    pieces with its own and passes the result to its parent."""
    n, ring = g.n, g.ranks
    base = ring.index(root)
    v = (g.me - base) % n
    parent, children = _binomial(n, v)
    outs: list[_Out] = []
    ins: list[_In] = []
    for j, piece in enumerate(g.pieces(g.whole)):
        for c, child in enumerate(children):
            last = c == len(children) - 1
            ins.append(_In(ring[(child + base) % n], piece[1], load=piece if c == 0 else None,
                           needs=("acc", j, c - 1) if c else None,
                           store=piece[0] if last and parent is None else None,
                           keep=None if last and parent is None else ("acc", j, c)))
        if parent is not None:  # what it sends is ready once the last child's piece is in
            outs.append(_Out(ring[(parent + base) % n], load=None if children else piece,
                             needs=("acc", j, len(children) - 1) if children else None))
    _exchange(g, outs, ins)


def _tree_bcast(g: _Group, root: int) -> None:
    """Binomial-tree broadcast from `root`, piece by piece: each rank stores what its parent
    sends and passes it to its children."""
    n, ring = g.n, g.ranks
    base = ring.index(root)
    parent, children = _binomial(n, (g.me - base) % n)
    outs: list[_Out] = []
    ins: list[_In] = []
    for j, piece in enumerate(g.pieces(g.whole)):
        if parent is not None:
            ins.append(_In(ring[(parent + base) % n], piece[1], store=piece[0],
                           keep=("b", j) if children else None))
        outs += _fanout([ring[(c + base) % n] for c in children], piece, ("b", j),
                        loaded=parent is None)
    _exchange(g, outs, ins)


def _fanout(peers: list[int], piece: tuple[int, int], key: object,
            loaded: bool) -> list[_Out]:
    """Messages carrying one piece to each of `peers`: loaded by the first if `loaded`
    (else a tensor kept under `key`), kept under `key` until the last has gone."""
    outs = []
    for c, peer in enumerate(peers):
        first, last = c == 0, c == len(peers) - 1
        if first and loaded:
            outs.append(_Out(peer, load=piece, keep=None if last else key))
        else:
            outs.append(_Out(peer, needs=key, drop=last))
    return outs


def _chain(g: _Group, root: int, reduce: bool) -> None:
    """Pipelined chain through the ring from `root`: broadcast passes each piece on down
    the chain (stored on the way); reduce combines up it, the far end first."""
    n = g.n
    chain = [g.ranks[(g.ranks.index(root) + i) % n] for i in range(n)]
    at = chain.index(g.tl.pid)
    up, down = (chain[at - 1] if at else None), (chain[at + 1] if at < n - 1 else None)
    outs: list[_Out] = []
    ins: list[_In] = []
    for j, piece in enumerate(g.pieces(g.whole)):
        if reduce:  # pieces flow from the far end (no `down`) towards the root (no `up`)
            if down is not None:
                ins.append(_In(down, piece[1], load=piece,
                               store=piece[0] if up is None else None,
                               keep=("r", j) if up is not None else None))
            if up is not None:
                outs.append(_Out(up, needs=("r", j)) if down is not None
                            else _Out(up, load=piece))
        else:
            if up is not None:
                ins.append(_In(up, piece[1], store=piece[0],
                               keep=("b", j) if down is not None else None))
            if down is not None:
                outs.append(_Out(down, needs=("b", j)) if up is not None
                            else _Out(down, load=piece))
    _exchange(g, outs, ins)


def _star(g: _Group, root: int, reduce: bool) -> None:
    """Direct broadcast (the root sends each piece to every rank) or reduce (every rank
    sends its pieces to the root, which combines them in rank order)."""
    others = [p for p in g.ranks if p != root]
    outs: list[_Out] = []
    ins: list[_In] = []
    for j, piece in enumerate(g.pieces(g.whole)):
        if g.tl.pid != root:
            if reduce:
                outs.append(_Out(root, load=piece))
            else:
                ins.append(_In(root, piece[1], store=piece[0]))
        elif reduce:
            for c, peer in enumerate(others):
                last = c == len(others) - 1
                ins.append(_In(peer, piece[1], load=piece if c == 0 else None,
                               needs=("acc", j) if c else None,
                               store=piece[0] if last else None,
                               keep=None if last else ("acc", j)))
        else:
            outs += _fanout(others, piece, ("b", j), loaded=True)
    _exchange(g, outs, ins)


def _rhd(g: _Group, span: tuple[int, int], halving: bool,
         ranks: Sequence[int] | None = None) -> None:
    """Recursive halving (a reduce-scatter: log2 n exchanges, each of half the range still
    held, with the partner whose rank differs in one bit, highest first) or doubling (an
    all-gather: the same partners, lowest bit first, each exchange doubling the range held).
    `ranks` (a power of two of them) defaults to the group's."""
    ranks = g.ranks if ranks is None else ranks
    n, me = len(ranks), ranks.index(g.tl.pid)
    parts = [_sub(span, n, r) for r in range(n)]

    def spans(lo: int, hi: int) -> tuple[int, int]:
        return parts[lo][0], sum(c for _, c in parts[lo:hi])

    bits = [1 << b for b in range(n.bit_length() - 1)]
    lo, hi = (0, n) if halving else (me, me + 1)
    for d in (reversed(bits) if halving else bits):
        peer = ranks[me ^ d]
        if halving:
            mid = (lo + hi) // 2
            (keep, give) = ((mid, hi), (lo, mid)) if me & d else ((lo, mid), (mid, hi))
            outs = [_Out(peer, load=p) for p in g.pieces(spans(*give))]
            ins = [_In(peer, p[1], load=p, store=p[0]) for p in g.pieces(spans(*keep))]
            lo, hi = keep
        else:
            other = (lo ^ d, (lo ^ d) + hi - lo)  # the partner's block: ranges are aligned
            outs = [_Out(peer, load=p) for p in g.pieces(spans(lo, hi))]
            ins = [_In(peer, p[1], store=p[0]) for p in g.pieces(spans(*other))]
            lo, hi = min(lo, other[0]), max(hi, other[1])
        _pairwise(g, me < (me ^ d), outs, ins)


def _rhd_all_reduce(g: _Group) -> None:
    """Rabenseifner's all-reduce: recursive halving, then doubling. A group of n that is
    not a power of two first folds ranks 0, 2, .., 2e-2 (e = n - 2^k) into their right
    neighbours and, at the end, gets the result back from them."""
    n, me = g.n, g.me
    e = n - (1 << (n.bit_length() - 1))
    pieces = g.pieces(g.whole)
    if me < 2 * e:
        peer = g.ranks[me ^ 1]
        if me % 2 == 0:  # folded: hands its buffer over, waits for the result
            _exchange(g, [_Out(peer, load=p) for p in pieces], [])
            _exchange(g, [], [_In(peer, p[1], store=p[0]) for p in pieces])
            return
        _exchange(g, [], [_In(peer, p[1], load=p, store=p[0]) for p in pieces])
    active = [p for r, p in enumerate(g.ranks) if r >= 2 * e or r % 2]
    _rhd(g, g.whole, halving=True, ranks=active)
    _rhd(g, g.whole, halving=False, ranks=active)
    if me < 2 * e:
        _exchange(g, [_Out(g.ranks[me ^ 1], load=p) for p in pieces], [])


def _hier(g: _Group, top: str) -> None:
    """Rings per level (innermost first): a reduce-scatter on each level but the top's,
    the top level's all-reduce (or reduce-scatter, or nothing for all_gather), then
    all-gathers back down. For all_gather, the reduce-scatters only find the spans."""
    rings = _levels(g.tl, g.ranks, g.tl.pid)
    span, spans = g.whole, []
    for level, ring in enumerate(rings):
        spans.append(span)
        at_top = level == len(rings) - 1
        if top == "all_reduce" and at_top:
            _ring(g, ring, span, rs=True, ag=True)
            break
        if top != "all_gather":
            _ring(g, ring, span, rs=True, ag=False)
        span = _sub(span, len(ring), ring.index(g.tl.pid))
    if top == "reduce_scatter":
        return
    downs = list(zip(rings, spans, strict=True))
    if top == "all_reduce":
        downs = downs[:-1]
    for ring, outer in reversed(downs):
        _ring(g, ring, outer, rs=False, ag=True)
