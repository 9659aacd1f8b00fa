"""The allocators (`address.allocator`): pools that align and bump, clear errors when full
or asked wrongly, each PE's pools in its own ranges, first fit in the TCM, and the slice
allocator laid out as a pool per slice."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernbench_cli.address import PeCoord
from kernbench_cli.address.allocator import FreeListPool, Pool, SystemAllocator
from kernbench_cli.config.units import format_size
from kernbench_cli.errors import AddressError


def test_pool_aligns_and_bumps():
    pool = Pool("tcm", 0x1000, 4096)
    assert pool.alloc(10, "a") == 0x1000
    assert pool.alloc(100, "b", align=64) == 0x1040
    assert pool.alloc(1, "c", align=1024) == 0x1400
    assert pool.used == 0x401
    assert pool.find(0x1045).name == "b"
    assert pool.find(0x10A4) is None  # past b, before c
    assert pool.find(0x1400).name == "c"


def test_exhaustion_is_a_clear_error():
    pool = Pool("tcm of PE (rack=0 sip=0 cube=0 pe=0)", 0, 4096)
    pool.alloc(4000, "a")
    with pytest.raises(AddressError) as info:
        pool.alloc(128, "tile of B")
    assert str(info.value) == ("tcm of PE (rack=0 sip=0 cube=0 pe=0) is full: tile of B needs "
                               "128B (128 B) aligned to 64, 64 B of 4KiB left")


@pytest.mark.parametrize(("nbytes", "align", "message"), [
    (0, 64, "p: cannot allocate 0 bytes for x"),
    (8, 48, "p: alignment 48 is not a power of two"),
])
def test_bad_requests(nbytes, align, message):
    with pytest.raises(AddressError) as info:
        Pool("p", 0, 4096).alloc(nbytes, "x", align)
    assert str(info.value) == message


def test_system_allocator_pools_live_in_each_pes_own_ranges(amap):
    alloc = SystemAllocator(amap)
    pe = PeCoord(0, 0, 1, 6)
    hbm = alloc.alloc("hbm", pe, 1 << 20, "K")
    tcm = alloc.alloc("tcm", pe, 4096, "tile")
    assert amap.decode(hbm).text.startswith("HBM rack=0 sip=0 cube=1 pe=6 offset=0x0")
    assert (amap.decode(tcm).component, amap.decode(tcm).pe) == ("tcm", 6)
    assert alloc.find(hbm + 100).name == "K"
    assert alloc.find(tcm + 4096) is None
    # the TCM pool is the configured TCM size, not the whole 16 MiB range
    assert alloc.pool("tcm", pe).size == amap.topology.pe.tcm.size
    with pytest.raises(AddressError, match=r"^tcm of PE \(rack=0 sip=0 cube=1 pe=6\) is full"):
        alloc.alloc("tcm", pe, amap.topology.pe.tcm.size, "big")


class FirstFit:
    """The TCM allocator's rule written plainly, to check `FreeListPool` against: a freed
    block waits in a cache by its exact size (the one nearest the end it was placed from
    first: the lowest address from the bottom, the highest from the top, one from the top
    of two as near); a request takes
    from that cache, else the lowest-addressed free block where it fits at an aligned
    address (one of `large` bytes or more: the highest-addressed, as high as it fits
    aligned, and named by its address less the top), else returns the cache to the free
    list, joining touching blocks, and tries once more (while a block from the top is in
    use, it returns the cache before the first try). A small block never ends above a
    large block in use, nor a large one starts below a small one in use. The peak: after
    each request, the highest end of a small block in use plus the deepest start of a
    large one."""

    def __init__(self, base: int, size: int, large: int):
        self.free_blocks = [(base, base + size)]  # (start, end), by address
        self.cached: dict[int, list[int]] = {}
        self.sizes: dict[int, int] = {}  # handle -> bytes
        self.peak = 0
        self.base, self.top, self.large = base, base + size, large

    def low(self) -> int:
        """Where the blocks from the bottom in use end (the start if none)."""
        return max([h + n for h, n in self.sizes.items() if h >= 0], default=self.base)

    def high(self) -> int:
        """Where the blocks from the top in use start (the top if none)."""
        return min([self.at(h) for h in self.sizes if h < 0], default=self.top)

    def alloc(self, nbytes: int, align: int) -> int | None:
        nbytes = max(nbytes, 1)
        cached = self.cached.get(nbytes)
        nearest = min(cached, key=lambda h: 2 * (h - self.base) + 1 if h >= 0 else -2 * h) \
            if cached else None
        if cached and (nearest + nbytes <= self.high() if nearest >= 0
                       else self.at(nearest) >= self.low()):
            handle = nearest
            cached.remove(handle)
        else:
            if any(h < 0 for h in self.sizes):  # blocks from the top in use: join first
                self.flush()
            handle = self.fit(nbytes, align)
            if handle is None:
                self.flush()
                handle = self.fit(nbytes, align)
            if handle is None:
                return None
        self.sizes[handle] = nbytes
        low = self.low() - self.base
        deep = self.top - self.high()
        self.peak = max(self.peak, low + deep)
        return handle

    def fit(self, nbytes: int, align: int) -> int | None:
        """From the bottom, first fit below the blocks from the top; from the top, the
        highest fit above those from the bottom; a large request tries the top first."""
        sides = [True, False] if nbytes < self.large else [False, True]
        for bottom in sides:
            if not bottom and nbytes < 2:
                continue
            blocks = self.free_blocks
            order = range(len(blocks)) if bottom else range(len(blocks) - 1, -1, -1)
            lo, hi = (self.base, self.high()) if bottom else (self.low(), self.top)
            for i in order:
                start, end = blocks[i]
                addr = (start + align - 1) // align * align if bottom else \
                    (end - nbytes) // align * align
                if start <= addr and addr + nbytes <= end and lo <= addr and addr + nbytes <= hi:
                    blocks[i:i + 1] = [(a, b) for a, b in ((start, addr), (addr + nbytes, end))
                                       if b > a]
                    return addr if bottom else addr - self.top
        return None

    def room(self) -> int:
        """The largest free block, clipped to either side."""
        self.flush()
        return max([max(min(end, hi) - max(start, lo), 0) for start, end in self.free_blocks
                    for lo, hi in ((self.base, self.high()), (self.low(), self.top))],
                   default=0)

    def free(self, handle: int) -> None:
        nbytes = self.sizes.pop(handle)
        self.cached.setdefault(nbytes, []).append(handle)

    def flush(self) -> None:
        blocks = sorted([*self.free_blocks, *((self.at(h), self.at(h) + n)
                                              for n, handles in self.cached.items()
                                              for h in handles)])
        self.cached = {}
        self.free_blocks = []
        for start, end in blocks:
            if self.free_blocks and self.free_blocks[-1][1] == start:
                self.free_blocks[-1] = (self.free_blocks[-1][0], end)
            else:
                self.free_blocks.append((start, end))

    def at(self, handle: int) -> int:
        return handle if handle >= 0 else self.top + handle

    def largest_free(self) -> int:
        self.flush()
        return max((end - start for start, end in self.free_blocks), default=0)


#: request sizes as tensors make them: a few bytes (a row's maximum), odd sizes, tiles
_SIZES = st.one_of(st.sampled_from([1, 2, 16, 48, 64, 100, 512, 1000, 2048, 4096, 16384]),
                   st.integers(1, 6000))
_STEPS = st.lists(st.one_of(
    st.tuples(st.just("alloc"), _SIZES, st.sampled_from([64, 64, 64, 1, 16, 256])),
    st.tuples(st.just("free"), st.integers(0, 10**6), st.just(0)),
    st.tuples(st.just("largest"), st.just(0), st.just(0))), max_size=300)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from([(0, 64 * 1024), (0, 5000), (0x4000_0000, 20_000), (0, 20_000)]),
       st.sampled_from([64, 1000, 4096, 1 << 40]), _STEPS)
def test_tcm_allocator_gives_the_addresses_plain_first_fit_gives(pool_range, large, steps):
    base, size = pool_range
    pool, ref = FreeListPool("tcm", base, size, large), FirstFit(base, size, large)
    live: list[int] = []
    for op, n, align in steps:
        if op == "alloc":
            expected = ref.alloc(n, align)
            if expected is None:
                with pytest.raises(AddressError) as info:
                    pool.alloc(n, "t", align)
                assert str(info.value) == (
                    f"tcm is full: t needs {format_size(n)} ({n} B); "
                    f"{size - sum(ref.sizes.values())} B of {format_size(size)} free, the "
                    f"largest free block it may take is {ref.room()} B")
                continue
            assert pool.alloc(n, "t", align) == expected
            live.append(expected)
        elif op == "free" and live:
            addr = live.pop(n % len(live))
            pool.free(addr)
            ref.free(addr)
        elif op == "largest":
            assert pool.largest_free() == ref.largest_free()
        assert pool.allocations() == ref.sizes
        assert pool.used == sum(ref.sizes.values())
        assert pool.peak == ref.peak


def test_tcm_fragmented_by_small_tensors_freed_out_of_order():
    """32 tensors of 16 B, one per 64 B slot, leave a 48 B sliver after each: long enough
    for a 48 B request, but with no aligned address in it. Every other one is freed,
    backwards: the cache serves their size, lowest first; other sizes skip the
    slivers; a request nothing fits merges the cache back, each freed 16 B joining the
    slivers on both sides of it (112 B from 128j + 16), and fails when even that is short."""
    pool = FreeListPool("TCM of PE (rack=0 sip=0 cube=0 pe=0)", 0, 4096)
    assert [pool.alloc(16, "row max") for _ in range(32)] == list(range(0, 2048, 64))
    for addr in range(31 * 64, 0, -128):  # 1984, 1856, ..., 64
        pool.free(addr)
    assert pool.alloc(48, "a") == 2048  # past every sliver, after the last tensor's
    assert pool.alloc(16, "b") == 64  # the cache: the lowest freed 16 B block
    assert pool.alloc(1984, "c") == 2112  # the rest of TCM, from 2048 + 64
    assert (pool.used, pool.peak) == (16 * 16 + 48 + 16 + 1984, 4096)
    with pytest.raises(AddressError) as info:
        pool.alloc(128, "scores")
    assert str(info.value) == ("TCM of PE (rack=0 sip=0 cube=0 pe=0) is full: scores needs "
                               "128B (128 B); 1792 B of 4KiB free, the largest free block it "
                               "may take is 112 B")
    # after that merge: [16, 64), [80, 128), then [128j + 16, 128j + 128) for j = 1..15
    assert pool.alloc(64, "d") == 192  # [144, 256) is the first with an aligned 64 B
    assert pool.alloc(64, "e") == 320  # [144, 192) is left, too short
    assert pool.alloc(40, "f", align=16) == 16  # other alignments: the first sliver fits
    assert pool.alloc(48, "g", align=16) == 80
    pool.free(2112)
    assert pool.largest_free() == 4096 - 2096  # c's block joins the 16 B before it
    assert pool.allocations()[2048] == 48


def _pool_layout(requests, slices: int, size: int):
    """The host's first layout, written with one `Pool` per slice: a symmetric request at
    the first aligned offset above every slice's allocations, `alloc_at` in each slice.
    Yields each request's addresses (or its error's message) in turn."""
    pools = [Pool(f"hbm of PE {pid}", pid * size, size) for pid in range(slices)]
    for pid, nbytes in requests:
        try:
            if pid is None:
                offset = -(-max(p.used for p in pools) // 64) * 64
                yield [pool.alloc_at(pool.base + offset, nbytes, "s") for pool in pools]
            else:
                yield pools[pid].alloc(nbytes, "p")
        except AddressError as exc:
            yield str(exc)
            return


@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 3)), st.integers(0, 700)),
                max_size=40))
@settings(max_examples=200, deadline=None)
def test_the_slice_allocator_lays_out_as_a_pool_per_slice(requests):
    """A `SliceAllocator` (symmetric allocations kept once, as a floor) gives the addresses
    and the errors that a `Pool` per slice gave, for any mix of per-slice and symmetric
    requests (None: symmetric), zero bytes and a full slice included."""
    from kernbench_cli.address.allocator import SliceAllocator

    size = 4096
    slices = SliceAllocator([pid * size for pid in range(4)], size,
                            lambda pid: f"hbm of PE {pid}")
    expected = list(_pool_layout(requests, 4, size))
    got = []
    for pid, nbytes in requests[:len(expected)]:
        try:
            if pid is None:
                offset = slices.alloc_symmetric(nbytes, "s")
                got.append([base + offset for base in slices.bases])
            else:
                got.append(slices.alloc(pid, nbytes, "p"))
        except AddressError as exc:
            got.append(str(exc))
    assert got == expected


def test_a_small_tensor_does_not_split_the_room_large_ones_leave():
    """A large tensor, then a small one, then the large one dropped: under plain first fit
    the small one sits just past the large one's block, so a request for the whole free
    room finds it in two pieces; with large tensors from the top, the small one is at the
    bottom and the room is one block (what a [rows, hidden] residual add of a big batch
    needs)."""
    big, size = 1024, 2 * 1024 + 64
    plain = FreeListPool("TCM", 0, size, large=1 << 40)
    x = plain.alloc(big, "x")
    assert (x, plain.alloc(64, "row max")) == (0, 1024)
    plain.free(x)
    with pytest.raises(AddressError, match=r"^TCM is full: sum needs 2KiB \(2048 B\); 2048 B "
                                           r"of 2112B free, the largest free block it may take is "
                                           r"1024 B$"):
        plain.alloc(2 * big, "sum")
    pool = FreeListPool("TCM", 0, size, large=big)
    x = pool.alloc(big, "x")
    assert (x, pool.alloc(64, "row max")) == (1088 - size, 0)  # [1088, 2112): from the top
    pool.free(x)
    assert pool.alloc(2 * big, "sum") == 64 - size  # [64, 2112)
    assert (pool.used, pool.peak) == (2 * big + 64, size)


def test_the_peak_is_what_blocks_in_use_at_once_need_each_at_its_end():
    """The peak is the TCM a stream that keeps small blocks' offsets from the bottom and
    large ones' from the top needs: a small block's end plus a large block's depth only
    for blocks in use at the same time."""
    pool = FreeListPool("TCM", 0, 8192, large=2048)
    top = pool.alloc(2048, "large")
    assert (top, pool.alloc(100, "small"), pool.peak) == (-2048, 0, 100 + 2048)
    pool.free(top)
    assert pool.alloc(2040, "later") == 128  # ends at 2168, with no large block in use
    assert pool.peak == 2168
    assert pool.alloc(2048, "large again") == -2048  # the freed one, from the cache
    assert pool.peak == 2168 + 2048


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([(0, 5000), (0x4000_0000, 20_000)]), st.sampled_from([64, 1000, 4096]),
       _STEPS, _STEPS)
def test_a_restored_state_places_every_later_block_alike(pool_range, large, before, after):
    """`state` holds all that decides the next placements: a pool given another's state
    by `restore` places every later request where that one does, frees and flushes
    included (what `tl.repeat` relies on when it sets the state after a copied layer)."""
    base, size = pool_range
    pool = FreeListPool("tcm", base, size, large)
    live: list[int] = []

    def step(pools, op, n, align):
        if op == "alloc":
            got = set()
            for p in pools:
                try:
                    got.add(p.alloc(n, "t", align))
                except AddressError as exc:
                    got.add(str(exc))
            assert len(got) == 1
            handle = got.pop()
            if isinstance(handle, int):
                live.append(handle)
        elif op == "free" and live:
            handle = live.pop(n % len(live))
            for p in pools:
                p.free(handle)
        elif op == "largest":
            assert len({p.largest_free() for p in pools}) == 1

    for op, n, align in before:
        step([pool], op, n, align)
    copy = FreeListPool("tcm", base, size, large)
    copy.restore(pool.state())
    assert (copy.state(), copy.used, copy.allocations()) == \
        (pool.state(), pool.used, pool.allocations())
    for op, n, align in after:
        step([pool, copy], op, n, align)
        assert copy.state() == pool.state()
