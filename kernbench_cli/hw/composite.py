"""How PE_SCHEDULER runs a composite GEMM: a tile plan, streamed.

`plan_gemm` picks tile sizes Mt x Kt x Nt whose buffers fit the TCM left
free: two buffers each for the A and B tiles that must be streamed from
memory (operands already in TCM are used in place) and two f32 accumulators,
so loads of the next tiles and the store of the last output tile overlap the
GEMM of the current one. Among the plans that fit, it takes the one with the
smallest estimated time (`PlanCosts`): in steady state the longest of the
GEMM cycles, the DMA cycles (a setup per transfer, and each tile's bytes at
the HBM stream rate or, if longer, the time to open its DRAM pages), and
half of a tile's load round (its loads plus the access latency: with
prefetch distance two a tile's operands have two GEMMs' time to arrive);
plus what the pipeline cannot hide (loading the first tile, storing the
last, each with its latency). Ties go to larger tiles.

`tile_ops` runs the plan: tiles in m, n, k order; operands of tile i+2
load when tile i's buffers free (prefetch distance two), each output tile is
stored once its last k-tile finishes. It hands the PE one tile operation at
a time, with the time it is issued, so the PE's DMA and GEMM engines serve
the tiles and the kernel's own commands in issue order (`hw.timing`).
"""

from __future__ import annotations

import functools
from collections.abc import Generator
from dataclasses import dataclass
from typing import NamedTuple

from kernbench_cli.hw.gemm import gemm_cycles
from kernbench_cli.hw.network import pages_opened

ACC_BYTES = 4  # f32 accumulators


class Operand(NamedTuple):
    """A GEMM operand: in TCM already (`resident`) or `rows` x `cols` at `addr`."""

    rows: int
    cols: int
    itemsize: int
    resident: bool
    addr: int = 0
    row_stride: int = 0  # elements between rows in memory


class PlanCosts(NamedTuple):
    """What the planner's estimate needs of the PE and its memory, in PE cycles."""

    bytes_per_cycle: float  # the HBM stream rate
    setup_cycles: float  # a DMA transfer's setup
    latency_cycles: float  # a tile load's access latency
    page_bytes: int = 0  # DRAM page (0: no page cost)
    page_cycles: float = 0.0  # to open one page (tFAW / activates)
    passes: int = 1  # array passes per fold, by operand width


def _move_cycles(costs: PlanCosts, rows: int, row_bytes: int, stride_bytes: int) -> float:
    """Estimated streaming cycles of a block: its bytes at the stream rate, or its pages."""
    stream = rows * row_bytes / costs.bytes_per_cycle
    if not costs.page_bytes:
        return stream
    pages = pages_opened(0, rows, row_bytes, max(stride_bytes, row_bytes), costs.page_bytes)
    return max(stream, pages * costs.page_cycles)


@dataclass(frozen=True)
class GemmTiling:
    mt: int
    kt: int
    nt: int
    tcm_bytes: int


def _sizes(total: int, unit: int) -> list[int]:
    """Candidate tile sizes: `unit` x powers of two, and `total` itself."""
    sizes, size = {total}, unit
    while size < total:
        sizes.add(size)
        size *= 2
    return sorted(sizes, reverse=True)


def _k_sizes(k: int) -> list[int]:
    """K itself, then halvings down to 16 (a shorter K step would be mostly fill and drain)."""
    sizes, size = [k], k
    while size > 16:
        size = -(-size // 2)
        sizes.append(size)
    return sizes


@functools.lru_cache(maxsize=1024)
def plan_gemm(m: int, k: int, n: int, a_bytes: int, b_bytes: int, out_bytes: int,
              a_resident: bool, b_resident: bool, rows: int, cols: int, dataflow: str,
              tcm_free: int, costs: PlanCosts, a_stride: int = 0, b_stride: int = 0,
              trans_b: bool = False) -> GemmTiling | None:
    """The best tiling that fits `tcm_free` bytes, or None when none does. Operand rows lie
    `a_stride` / `b_stride` elements apart in memory (0: packed)."""
    best, best_key = None, None
    setup, lat = costs.setup_cycles, costs.latency_cycles
    a_row = (a_stride or k) * a_bytes
    b_row = (b_stride or (k if trans_b else n)) * b_bytes
    for kt in _k_sizes(k):
        for mt in _sizes(m, rows):
            for nt in _sizes(n, cols):
                need = 2 * mt * nt * ACC_BYTES
                need += 0 if a_resident else 2 * mt * kt * a_bytes
                need += 0 if b_resident else 2 * kt * nt * b_bytes
                if need > tcm_free:
                    continue
                tm, tn, tk = -(-m // mt), -(-n // nt), -(-k // kt)
                count = tm * tn * tk
                cycles = count * gemm_cycles(mt, kt, nt, rows, cols, dataflow) * costs.passes
                a_count = 0 if a_resident else (tm if tk == 1 else count)
                b_count = 0 if b_resident else count
                load_a = 0.0 if a_resident else _move_cycles(costs, mt, kt * a_bytes, a_row)
                load_b = 0.0 if b_resident else (
                    _move_cycles(costs, nt, kt * b_bytes, b_row) if trans_b else
                    _move_cycles(costs, kt, nt * b_bytes, b_row))
                store = _move_cycles(costs, mt, nt * out_bytes, n * out_bytes)
                transfers = a_count + b_count + tm * tn
                dma = transfers * setup + a_count * load_a + b_count * load_b + tm * tn * store
                first = load_a + load_b + 2 * setup + lat
                # prefetch distance two: a tile's loads have two GEMMs' time to land
                round_trip = count * first / 2 if a_count or b_count else 0.0
                exposed = first + setup + store + lat
                key = (max(cycles, dma, round_trip) + exposed, -mt * nt, -kt)
                if best_key is None or key < best_key:
                    best, best_key = GemmTiling(mt, kt, nt, need), key
    return best


#: A tile operation `tile_ops` asks the PE for, and its arguments after (ready, after): the
#: time it may start and the operation that made it ready (for the critical path).
LOAD_TILE, GEMM_TILE, STORE_TILE = range(3)
#: LOAD_TILE: (operand, first row, first column, rows, columns) of a tile of the operand;
#: GEMM_TILE: (m, k, n); STORE_TILE: (address, rows, row bytes, stride bytes) of an output tile.
TileOp = tuple


def traffic(tiling: GemmTiling, a: Operand, b: Operand, n: int, out: bool,
            out_itemsize: int) -> int:
    """Bytes the plan moves, by formula: operands read (A once per m-tile when one k-tile
    holds K, else once per tile; B once per tile) and the output written once. The
    invariant check compares it with what the DMA moved (`tile_ops` does the moving)."""
    m, k = a.rows, a.cols
    tm, tn = -(-m // tiling.mt), -(-n // tiling.nt)
    a_bytes = 0 if a.resident else m * k * a.itemsize * (1 if tiling.kt >= k else tn)
    b_bytes = 0 if b.resident else k * n * b.itemsize * tm
    return a_bytes + b_bytes + (m * n * out_itemsize if out else 0)


def tile_ops(t0: int, origin: int, tiling: GemmTiling, a: Operand, b: Operand, n: int,
             trans_b: bool, out_addr: int | None, out_itemsize: int, out_row_stride: int,
             ) -> Generator[tuple[int, list[TileOp]], list[tuple[int, int, int]], tuple[int, int]]:
    """A composite ready at `t0` (`origin` refers to it), a few tile operations at a time.

    The operations are a tile's operand loads (issued together), its GEMM, and
    the store of an output tile. It yields (the time the scheduler issues them
    to their engine, never earlier than the ones before; the operations) and
    is sent back each one's (start, end, reference), so that the PE can
    interleave the tiles with its other commands in issue order and take the
    time it must to know when a transfer ends. Returns when the last tile is
    done, and the reference of the operation that ended then.
    """
    m, k = a.rows, a.cols
    mt, kt, nt = tiling.mt, tiling.kt, tiling.nt
    tn, tk = -(-n // nt), -(-k // kt)
    count = -(-m // mt) * tn * tk  # tiles in m, n, k order, k fastest
    a_reused = kt >= k  # one A row-tile serves every n tile of its row
    streams = not (a.resident and b.resident)
    loaded = [(t0, origin)] * count  # when tile i's operands are in TCM, and what ended last

    def loads(i: int, ready: int, after: int) -> list[TileOp]:
        mi, rest = divmod(i, tn * tk)
        m0, n0, k0 = mi * mt, rest // tk * nt, rest % tk * kt
        mr, kr, nr = min(mt, m - m0), min(kt, k - k0), min(nt, n - n0)
        ops = []
        if not a.resident and not (a_reused and i > 0 and (i - 1) // (tn * tk) == mi):
            ops.append((LOAD_TILE, ready, after, a, m0, k0, mr, kr))
        if not b.resident:
            coords = (n0, k0, nr, kr) if trans_b else (k0, n0, kr, nr)
            ops.append((LOAD_TILE, ready, after, b, *coords))
        return ops

    def landed(i: int, ready: int, after: int, done: list[tuple[int, int, int]]) -> None:
        loaded[i] = max([(ready, after)] + [(end, ref) for _, end, ref in done])

    issued = t0
    end = (t0, origin)
    for i in range(min(2, count)):
        if streams:
            landed(i, t0, origin, (yield issued, loads(i, t0, origin)))
    for i in range(count):
        mi, rest = divmod(i, tn * tk)
        m0, n0, k0 = mi * mt, rest // tk * nt, rest % tk * kt
        ready, after = loaded[i] if loaded[i][0] > t0 else (t0, origin)
        issued = max(issued, ready)
        (_, done, ref), = yield issued, [(GEMM_TILE, ready, after, min(mt, m - m0),
                                         min(kt, k - k0), min(nt, n - n0))]
        end = max(end, (done, ref))
        if i + 2 < count:
            issued = max(issued, done)
            if streams:
                landed(i + 2, done, ref, (yield issued, loads(i + 2, done, ref)))
            else:
                loaded[i + 2] = (done, ref)
        if k0 + kt >= k and out_addr is not None:
            addr = out_addr + (m0 * out_row_stride + n0) * out_itemsize
            issued = max(issued, done)
            (_, stored, sref), = yield issued, [(STORE_TILE, done, ref, addr, min(mt, m - m0),
                                                min(nt, n - n0) * out_itemsize,
                                                out_row_stride * out_itemsize)]
            end = max(end, (stored, sref))
    return end
