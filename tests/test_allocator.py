import pytest

from kernbench_cli.address import PeCoord
from kernbench_cli.address.allocator import Pool, SystemAllocator
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
