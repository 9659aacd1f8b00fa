"""How PE_SCHEDULER runs a composite GEMM: a tile plan, streamed.

`plan_gemm` picks tile sizes Mt x Kt x Nt and a prefetch depth D whose
buffers fit the TCM left free: D buffers each for the A and B tiles that
must be streamed from memory (operands already in TCM are used in place)
and two f32 accumulators, so loads of the next tiles and the store of the
last output tile overlap the GEMM of the current one. Among the plans that
fit, it takes the one with the smallest estimated time (`PlanCosts`): in
steady state the longest of

- the GEMM cycles (plus, where one A tile serves a row of tiles, the wait
  of each row's first tile for its A beyond D - 1 GEMMs);
- the DMA cycles: per transfer a setup (hidden under the streaming before
  it when setups overlap) and its bytes at the HBM stream rate or, if
  longer, the time to open its DRAM pages;
- the loads' round: tile i + D's loads are issued as tile i's GEMM ends
  and must land (setups, bytes, access latency) before tile i + D - 1's
  ends, so D tiles take at least one landing plus one GEMM;

plus what the pipeline cannot hide (loading the first tile, storing the
last, each with its latency). D runs from 2 to 8: as deep as the
bandwidth-delay product asks and the TCM allows. Ties go to larger tiles,
then to shallower prefetch.

Operands are stream formats (`kernbench_cli.formats`): a tile's bytes are
its format's, and a tile of a scaled format holds whole blocks (its columns
a multiple of 32, or the whole row). A narrow operand the array cannot take
(`formats.gemm_datapath`: a narrow weight against bf16 activations) is
dequantised on PE_MATH as each of its tiles lands, into a copy in the array's
format (bf16, or f32 against an f32 operand) beside it in the tile buffer; the
GEMM tile waits for that.

`tile_ops` runs the plan: tiles in m, n, k order; the first D tiles' loads
are issued at dispatch (before an operand already in TCM is ready: only the
GEMMs wait for it), the loads of tile i + D when tile i's GEMM frees its
buffers, and each output tile is stored once its last k-tile finishes. It
hands the PE a few tile operations at a time, with the time they are
issued, so the PE's DMA and GEMM engines serve the tiles and the kernel's
own commands in issue order (`hw.timing`).
"""

from __future__ import annotations

import functools
from collections.abc import Generator
from dataclasses import dataclass
from typing import NamedTuple

from kernbench_cli.formats import FORMATS, gemm_datapath, nbytes
from kernbench_cli.hw.gemm import gemm_cycles
from kernbench_cli.hw.network import pages_opened

ACC_BYTES = 4  # f32 accumulators


class Operand(NamedTuple):
    """A GEMM operand of stream format `code`: in TCM already (`resident`) or `rows` x
    `cols` at `addr`; `dequant` the format PE_MATH dequantises each of its tiles to (0:
    none)."""

    rows: int
    cols: int
    code: int
    resident: bool
    addr: int = 0
    row_stride: int = 0  # elements between rows in memory
    dequant: int = 0


class PlanCosts(NamedTuple):
    """What the planner's estimate needs of the PE and its memory, in PE cycles."""

    bytes_per_cycle: float  # the HBM stream rate
    setup_cycles: float  # a DMA transfer's setup
    latency_cycles: float  # a tile load's access latency
    page_bytes: int = 0  # DRAM page (0: no page cost)
    page_cycles: float = 0.0  # to open one page (tFAW / activates)
    passes: int = 1  # array passes per fold, by operand width
    overlap: bool = False  # a transfer's setup runs under the streaming of the one before
    per_cell: int = 1  # MACs per cell per cycle (a narrow datapath): K elements at a time
    dequant_cycles: float = 0.0  # PE_MATH cycles per element dequantised (cycles / lanes)


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
    estimate: float = 0.0  # the planner's estimate of the composite's time, in PE cycles
    depth: int = 2  # tile buffers per streamed operand: loads run depth - 1 tiles ahead


def _sizes(total: int, unit: int, block: int = 1) -> list[int]:
    """Candidate tile sizes: `unit` x powers of two, and `total` itself; only multiples of
    `block` but `total` (a tile of a scaled format's rows holds whole blocks)."""
    sizes, size = {total}, unit
    while size < total:
        if size % block == 0:
            sizes.add(size)
        size *= 2
    return sorted(sizes, reverse=True)


def _k_sizes(k: int, block: int = 1) -> list[int]:
    """K itself, then halvings down to 16 (a shorter K step would be mostly fill and drain);
    with a scaled format's `block`, whole blocks: each halving rounded up to them, and
    `block` x powers of two."""
    sizes, size = [k], k
    while size > 16:
        size = -(-size // 2)
        sizes.append(size)
    if block == 1:
        return sizes
    whole = {-(-size // block) * block for size in sizes} | {
        block << j for j in range(k.bit_length()) if block << j < k}
    return sorted((size for size in whole if size <= k), reverse=True)


@functools.lru_cache(maxsize=1024)
def plan_gemm(m: int, k: int, n: int, a_code: int, b_code: int, out_code: int,
              a_resident: bool, b_resident: bool, rows: int, cols: int, dataflow: str,
              tcm_free: int, costs: PlanCosts, a_stride: int = 0, b_stride: int = 0,
              trans_b: bool = False) -> GemmTiling | None:
    """The best tiling that fits `tcm_free` bytes, or None when none does. Operands and
    output are of stream formats `a_code`, `b_code`, `out_code`; operand rows lie
    `a_stride` / `b_stride` elements apart in memory (0: packed)."""
    best, best_key = None, None
    setup, lat = costs.setup_cycles, costs.latency_cycles
    fa, fb, fo = FORMATS[a_code], FORMATS[b_code], FORMATS[out_code]
    array, a_dq, b_dq = gemm_datapath(a_code, b_code)
    a_dq, b_dq = a_dq and not a_resident, b_dq and not b_resident
    wide = FORMATS[array]  # a dequantised copy's format
    a_row = fa.nbytes(a_stride or k)
    b_row = fb.nbytes(b_stride or (k if trans_b else n))
    streamed = (not a_resident) + (not b_resident)
    k_block = max(fa.block, fb.block if trans_b else 1)

    def transfer(stream: float) -> float:  # one transfer's share of PE_DMA's time
        return max(setup, stream) if costs.overlap else setup + stream

    for kt in _k_sizes(k, k_block):
        for mt in _sizes(m, rows):
            for nt in _sizes(n, cols, 1 if trans_b else fb.block):
                a_tile, b_tile = mt * kt, kt * nt  # elements
                tile = 0 if a_resident else fa.nbytes(a_tile) + a_dq * wide.nbytes(a_tile)
                tile += 0 if b_resident else fb.nbytes(b_tile) + b_dq * wide.nbytes(b_tile)
                tm, tn, tk = -(-m // mt), -(-n // nt), -(-k // kt)
                count = tm * tn * tk
                per_tile = gemm_cycles(mt, -(-kt // costs.per_cell), nt, rows, cols,
                                       dataflow) * costs.passes
                cycles = count * per_tile
                a_count = 0 if a_resident else (tm if tk == 1 else count)
                b_count = 0 if b_resident else count
                load_a = 0.0 if a_resident else _move_cycles(costs, mt, fa.nbytes(kt), a_row)
                load_b = 0.0 if b_resident else (
                    _move_cycles(costs, nt, fb.nbytes(kt), b_row) if trans_b else
                    _move_cycles(costs, kt, fb.nbytes(nt), b_row))
                store = _move_cycles(costs, mt, fo.nbytes(nt), fo.nbytes(n))
                dma = (a_count * transfer(load_a) + b_count * transfer(load_b)
                       + tm * tn * transfer(store))
                # PE_MATH dequantises each tile of a narrow operand as it lands
                fix_a, fix_b = (a_dq * a_tile * costs.dequant_cycles,
                                b_dq * b_tile * costs.dequant_cycles)
                math = a_count * fix_a + b_count * fix_b
                # a tile's loads, from issue to landing, on average over the tiles; when one
                # A tile serves a row of tiles, the row's first tile also waits for it
                rows_of_a = a_count == tm < count
                landing = ((b_count * (setup + load_b + fix_b) + (0 if rows_of_a else a_count * (
                    setup + load_a + fix_a))) / count
                           + (lat if b_count or not rows_of_a else 0.0)) if streamed else 0.0
                row_landing = landing + setup + load_a + fix_a + (0.0 if b_count else lat)
                first = ((setup if costs.overlap else streamed * setup) + load_a + load_b
                         + fix_a + fix_b + lat) if streamed else 0.0
                exposed = first + setup + store + lat
                for depth in range(2, 9 if streamed else 3):
                    need = 2 * mt * nt * ACC_BYTES + depth * tile
                    if need > tcm_free:
                        break
                    # the loads of tile i + depth are issued as tile i's GEMM ends and must
                    # land before tile i + depth - 1's ends: in steady state `depth` tiles
                    # take the longer of depth GEMMs and one landing plus one GEMM
                    ahead = count * (landing + per_tile) / depth if streamed else 0.0
                    stall = (tm - 1) * max(0.0, row_landing - (depth - 1) * per_tile) \
                        if rows_of_a else 0.0
                    estimate = max(cycles + stall, dma, ahead, math) + exposed
                    key = (estimate, -mt * nt, -kt, depth)
                    if best_key is None or key < best_key:
                        best = GemmTiling(mt, kt, nt, need, estimate, depth)
                        best_key = key
    return best


#: A tile operation `tile_ops` asks the PE for, and its arguments after (ready, after): the
#: time it may start and the operation that made it ready (for the critical path).
LOAD_TILE, GEMM_TILE, STORE_TILE, DEQUANT_TILE = range(4)
#: LOAD_TILE: (operand, first row, first column, rows, columns) of a tile of the operand;
#: GEMM_TILE: (m, k, n); STORE_TILE: (address, rows, row bytes, stride bytes) of an output
#: tile; DEQUANT_TILE: (elements) of a tile just loaded, on PE_MATH.
TileOp = tuple


def _loaded(tiling: GemmTiling, a: Operand, b: Operand, n: int) -> tuple[int, int]:
    """(A's, B's) elements the plan loads: A once per m-tile when one k-tile holds K, else
    once per tile; B once per tile (0 for an operand in TCM)."""
    m, k = a.rows, a.cols
    tm, tn = -(-m // tiling.mt), -(-n // tiling.nt)
    return (0 if a.resident else m * k * (1 if tiling.kt >= k else tn),
            0 if b.resident else k * n * tm)


def traffic(tiling: GemmTiling, a: Operand, b: Operand, n: int, out: bool,
            out_code: int) -> int:
    """Bytes the plan moves, by formula: operands read (`_loaded`) and the output written
    once. The invariant check compares it with what the DMA moved (`tile_ops` does the
    moving)."""
    a_loaded, b_loaded = _loaded(tiling, a, b, n)
    return (nbytes(a.code, a_loaded) + nbytes(b.code, b_loaded)
            + (nbytes(out_code, a.rows * n) if out else 0))


def dequantised(tiling: GemmTiling, a: Operand, b: Operand, n: int) -> int:
    """Elements PE_MATH dequantises, by formula: every one loaded of an operand it
    dequantises (`_loaded`). The invariants compare it with what PE_MATH did."""
    a_loaded, b_loaded = _loaded(tiling, a, b, n)
    return bool(a.dequant) * a_loaded + bool(b.dequant) * b_loaded


def _tile(i: int, tiling: GemmTiling, m: int, k: int, n: int, tn: int, tk: int) -> tuple:
    """Tile i of an m x k @ k x n GEMM (tiles in m, n, k order, k fastest; `tn`, `tk`
    tiles along n and k): its row of tiles, its first row, column and k, and its rows,
    k and columns (the last tile of a dimension may be short)."""
    mt, kt, nt = tiling.mt, tiling.kt, tiling.nt
    mi, rest = divmod(i, tn * tk)
    m0, n0, k0 = mi * mt, rest // tk * nt, rest % tk * kt
    return mi, m0, n0, k0, min(mt, m - m0), min(kt, k - k0), min(nt, n - n0)


def _landed(ready: int, after: int, done: list[tuple[int, int, int]]) -> tuple[int, int]:
    """When a tile's operands are in TCM, and what ended last: the latest of (`ready`,
    `after`) and its loads' (end, reference) in `done`."""
    last = (ready, after)
    for _, end, ref in done:
        if (end, ref) > last:
            last = (end, ref)
    return last


def tile_ops(t0: int, origin: int, tiling: GemmTiling, a: Operand, b: Operand, n: int,
             trans_b: bool, out_addr: int | None, out_code: int, out_row_stride: int,
             loads_from: tuple[int, int] | None = None,
             ) -> Generator[tuple[int, list[TileOp]], list[tuple[int, int, int]], tuple[int, int]]:
    """A composite ready at `t0` (`origin` refers to it), a few tile operations at a time:
    a tile's operand loads (issued together), the dequantisation of those that need it
    (each starting when its load lands), its GEMM, the store of an output tile. Yields
    (when the scheduler issues them, never before the ones before; the operations) and is
    sent back each one's (start, end, reference), so that the PE interleaves the tiles
    with its other commands in issue order. Returns when the last tile is done, and the
    reference of the operation that ended then. A tile operation's `after` is the one
    that set its start, or for the first streamed loads, which load from `loads_from`
    (the composite's dispatch and its why, cause and all; default `t0` and the
    composite) before the operand in TCM is ready, that why."""
    m, k = a.rows, a.cols
    mt, kt, nt = tiling.mt, tiling.kt, tiling.nt
    tn, tk = -(-n // nt), -(-k // kt)
    count = -(-m // mt) * tn * tk  # tiles in m, n, k order, k fastest
    a_reused = kt >= k  # one A row-tile serves every n tile of its row
    streams = not (a.resident and b.resident)
    loaded = [(t0, origin)] * count  # when tile i's operands are in TCM, and what ended last
    depth = tiling.depth  # tile i + depth loads as tile i's GEMM ends (its buffers free)
    start, early = (t0, origin) if loads_from is None else loads_from

    def loads(i: int, ready: int, after: int) -> list[TileOp]:
        mi, m0, n0, k0, mr, kr, nr = _tile(i, tiling, m, k, n, tn, tk)
        ops = []
        if not a.resident and not (a_reused and i > 0 and (i - 1) // (tn * tk) == mi):
            ops.append((LOAD_TILE, ready, after, a, m0, k0, mr, kr))
        if not b.resident:
            coords = (n0, k0, nr, kr) if trans_b else (k0, n0, kr, nr)
            ops.append((LOAD_TILE, ready, after, b, *coords))
        return ops

    def fetch(i: int, ready: int, after: int, at: int, cause: int | None = None):
        """Tile i's loads issued at `at` (set by `cause`, default `after`), then the
        dequantisation of those that need it."""
        ops = loads(i, ready, after if cause is None else cause)
        done = yield at, ops
        fixes = [(DEQUANT_TILE, end, ref, op[6] * op[7])
                 for op, (_, end, ref) in zip(ops, done, strict=True) if op[3].dequant]
        if fixes:
            done = [d for op, d in zip(ops, done, strict=True) if not op[3].dequant] + (
                yield at, fixes)
        loaded[i] = _landed(ready, after, done)

    fixed = a.dequant or b.dequant  # else the loads alone, inline (most composites)
    issued = start
    end = (t0, origin)
    for i in range(min(depth, count)):
        if streams and fixed:
            yield from fetch(i, start, origin, issued, early)
        elif streams:
            loaded[i] = _landed(start, origin, (yield issued, loads(i, start, early)))
    for i in range(count):
        _, m0, n0, k0, mr, kr, nr = _tile(i, tiling, m, k, n, tn, tk)
        ready, after = loaded[i] if loaded[i][0] > t0 else (t0, origin)
        if ready > issued:
            issued = ready
        (_, done, ref), = yield issued, [(GEMM_TILE, ready, after, mr, kr, nr)]
        if (done, ref) > end:
            end = (done, ref)
        if i + depth < count:
            if done > issued:
                issued = done
            if streams and fixed:
                yield from fetch(i + depth, done, ref, issued)
            elif streams:
                loaded[i + depth] = _landed(done, ref, (yield issued, loads(i + depth, done, ref)))
            else:
                loaded[i + depth] = (done, ref)
        if k0 + kt >= k and out_addr is not None:
            addr = out_addr + nbytes(out_code, m0 * out_row_stride + n0)
            issued = max(issued, done)
            (_, stored, sref), = yield issued, [(STORE_TILE, done, ref, addr, mr,
                                                nbytes(out_code, nr),
                                                nbytes(out_code, out_row_stride))]
            end = max(end, (stored, sref))
    return end
