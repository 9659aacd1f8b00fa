"""Simulated memory's contents: blocks cut from shared slabs, released before the timing pass."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

from kernbench_cli.address import load_address_map
from kernbench_cli.errors import AddressError
from kernbench_cli.lang.memory import SLAB_BYTES, Memory
from kernbench_cli.sim.kernels import load_kernel, parse_params
from kernbench_cli.sim.run import run_kernel
from kernbench_cli.sim.watch import Watch


def test_blocks_cut_from_one_slab_are_zeroed_and_apart():
    memory = Memory()
    sizes = [100, 64, 1, 4096, SLAB_BYTES // 4 + 1]  # the last is a block of its own
    addrs = [0x1000 * (i + 1) for i in range(len(sizes) - 1)] + [0x100_0000]
    for addr, size in zip(addrs, sizes, strict=True):
        memory.add(addr, size, f"b{size}")
    for i, (addr, size) in enumerate(zip(addrs, sizes, strict=True)):
        assert not memory.read(addr, (size,), np.dtype(np.uint8)).any()
        memory.write(addr, np.full(size, i + 1, np.uint8))
    for i, (addr, size) in enumerate(zip(addrs, sizes, strict=True)):
        got = memory.read(addr, (size,), np.dtype(np.uint8))
        assert (got == i + 1).all(), f"block {i} was overwritten"
    small = [memory.view(addr, (1,), np.dtype(np.uint8)) for addr in addrs]
    assert all(view.base is small[0].base for view in small[:-1])  # one slab
    assert small[-1].base is not small[0].base


def test_released_memory_keeps_its_allocations_and_refuses_reads():
    memory = Memory()
    memory.add(0x40, 256, "x")
    memory.release()
    assert memory.allocations() == [(0x40, 256, "x")]
    assert memory.check(0x80, 16, "tl.load") == "x"
    with pytest.raises(RuntimeError) as info:
        memory.read(0x40, (4,), np.dtype(np.float32), "reading out")
    assert str(info.value) == "reading out at 0x40: simulated memory was released"


def _kv(seed: int = 3) -> np.ndarray:
    """A KV cache shaped [batch, heads, seq, dim], f16."""
    return np.random.default_rng(seed).standard_normal((2, 3, 64, 8)).astype(np.float16)


def test_a_shared_input_is_read_in_place_and_copied_before_a_write():
    kv = _kv()
    part = kv[:, :, 16:32]  # one PE's shard: 6 runs of 16 x 8 elements
    memory = Memory()
    memory.add(0x1000, part.nbytes, "k", part, share=True)
    f16 = np.dtype(np.float16)
    row = memory.view(0x1000 + 3 * 8 * 2, (2, 8), f16)  # rows 3 and 4 of the first run
    np.testing.assert_array_equal(row, part[0, 0, 3:5])
    assert np.shares_memory(row, kv) and not row.flags.writeable
    across = memory.read(0x1000 + 15 * 8 * 2, (2, 8), f16)  # the last row of run 0, the first
    np.testing.assert_array_equal(across, np.stack([part[0, 0, 15], part[0, 1, 0]]))
    before = kv.copy()
    memory.write(0x1000, np.ones((1, 8), f16))
    np.testing.assert_array_equal(kv, before)  # the host's array is never written
    got = memory.read(0x1000, (2, 3, 16, 8), f16)
    np.testing.assert_array_equal(got[0, 0, 0], np.ones(8, f16))
    np.testing.assert_array_equal(got.reshape(-1)[8:], np.ascontiguousarray(part).reshape(-1)[8:])
    assert not np.shares_memory(memory.view(0x1000, (4,), f16), kv)


@pytest.mark.parametrize(("array", "share"), [
    (_kv()[:, :, :, 2:4], True),  # 384 runs of two elements: copied
    (_kv(), False),  # not the host's input: copied, the caller may change it
])
def test_other_arrays_are_copied_in(array, share):
    memory = Memory()
    memory.add(0x40, array.nbytes, "x", array, share=share)
    got = memory.view(0x40, array.shape, array.dtype)
    np.testing.assert_array_equal(got, array)
    assert not np.shares_memory(got, array)


def test_the_host_places_its_inputs_in_place_and_other_arrays_by_copy(amap):
    from kernbench_cli.hw.system import System
    from kernbench_cli.sim.host import Host

    memory = Memory()
    host = Host(System(amap), memory, 0, timing_only=False)
    k = host.random("k", (1, 2, 4 * host.num_pes, 8), "f16")
    scale = np.full((4, 8), 2.0, np.float16)
    sharded, placed = host.scatter("k", k, axis=2), host.place("scale", scale, 0)
    scale[:] = 0  # after placing: memory keeps the values placed
    np.testing.assert_array_equal(memory.read(placed, (4, 8), scale.dtype), np.full((4, 8), 2))
    addr = amap.pe_hbm_addr(*host.grid[1], sharded.offset)
    assert np.shares_memory(memory.view(addr, (4, 8), k.dtype), k)  # head 0 of PE 1's shard
    np.testing.assert_array_equal(host.read_shard(sharded, 1), k[:, :, 4:8])  # both heads


class _Passes(Watch):
    """Whether the functional pass's memory still holds bytes when the timing pass begins."""

    def begin(self, phase, what) -> None:
        if phase == "timing pass":
            self.released_before_timing = self.launch.memory.released
        super().begin(phase, what)


@pytest.mark.parametrize("timing_only", [False, True])
def test_a_run_reads_its_outputs_then_releases_memory_before_timing(timing_only):
    amap = load_address_map("sip")
    kernel = load_kernel("rmsnorm")
    watch = _Passes()
    result = run_kernel(kernel, amap, parse_params(kernel, [], amap.topology.num_pes),
                        timing_only=timing_only, watch=watch)
    assert watch.released_before_timing is not timing_only  # timing-only holds no bytes
    assert result.verified is not timing_only or result.checks == []


def _plain_reference(q, k, v):
    """The attention reference in one piece: float64 over the whole KV cache."""
    b, hq, d = q.shape
    g = hq // k.shape[1]
    out = np.empty((b, k.shape[1], g, d))
    for bi in range(b):
        for h in range(k.shape[1]):
            scores = (q[bi, h * g:(h + 1) * g].astype(np.float64)
                      @ k[bi, h].astype(np.float64).T / math.sqrt(d))
            w = np.exp(scores - scores.max(axis=1, keepdims=True))
            w /= w.sum(axis=1, keepdims=True)
            out[bi, h] = w @ v[bi, h].astype(np.float64)
    return out.reshape(b, hq, d).astype(q.dtype)


@pytest.mark.parametrize(("shape", "dtype"), [((1, 8, 2, 10_000, 64), np.float16),
                                              ((2, 4, 1, 4096, 32), np.float32)])
def test_the_attention_reference_by_chunks_equals_it_in_one_piece(shape, dtype):
    b, hq, hkv, s, d = shape  # 10,000 positions: two whole chunks and a part
    rng = np.random.default_rng(7)
    inputs = {"q": rng.standard_normal((b, hq, d)).astype(dtype),
              "k": (3 * rng.standard_normal((b, hkv, s, d))).astype(dtype),
              "v": rng.standard_normal((b, hkv, s, d)).astype(dtype)}
    module = load_kernel("gqa_attention").module
    got = module.reference(types.SimpleNamespace(inputs=inputs), {})["out"]
    np.testing.assert_array_equal(got, _plain_reference(inputs["q"], inputs["k"], inputs["v"]))


def test_copies_read_one_block_until_each_is_written():
    """`add_copies`: every address reads the value (copied in once: changing the source
    afterwards changes nothing), a write to one copy leaves the others, and a shared
    input is read in place."""
    value = np.arange(16, dtype=np.float32)
    memory = Memory()
    memory.add_copies([0x1000, 0x2000, 0x3000], value.nbytes, "w", value)
    value[:] = -1  # after placing
    f32 = np.dtype(np.float32)
    views = [memory.view(addr, (16,), f32) for addr in (0x1000, 0x2000, 0x3000)]
    assert all(np.shares_memory(v, views[0]) for v in views)  # one block
    memory.write(0x2004, np.float32([99]))
    np.testing.assert_array_equal(memory.read(0x1000, (16,), f32), np.arange(16))
    np.testing.assert_array_equal(memory.read(0x2000, (3,), f32), [0, 99, 2])
    np.testing.assert_array_equal(memory.read(0x3000, (16,), f32), np.arange(16))
    memory.add_copies([0x4000, 0x5000], 64, "zeros")
    assert not memory.read(0x5000, (16,), f32).any()
    kv = _kv()
    memory.add_copies([0x6000, 0x8000], kv.nbytes, "kv", kv, share=True)
    assert np.shares_memory(memory.view(0x8000, kv.shape, kv.dtype), kv)
    assert [name for _, _, name in memory.allocations()] == [
        "w", "w", "w", "zeros", "zeros", "kv", "kv"]


def test_the_index_is_by_address_whatever_the_order_of_adding():
    """Allocations added out of address order (as a symmetric one lands in every slice) are
    found by address and listed by it; at one address the newest comes first (a zero-sized
    one, then what was placed there after it), as inserting in order did; a look-up
    between additions sees them all."""
    memory = Memory(backed=False)
    memory.add_copies([0x3000, 0x1000], 0x100, "sym")
    memory.add(0x2000, 0x10, "empty")
    assert memory.check(0x1010, 4, "tl.load") == "sym"
    memory.add(0x2000, 0x0, "zero")
    memory.add(0x2000, 0x40, "after")
    assert memory.allocations() == [(0x1000, 0x100, "sym"), (0x2000, 0x40, "after"),
                                    (0x2000, 0x0, "zero"), (0x2000, 0x10, "empty"),
                                    (0x3000, 0x100, "sym")]
    assert memory.check(0x3010, 4, "tl.load") == "sym"
    with pytest.raises(AddressError, match=r"^tl.load at 0x1100: no allocation holds"):
        memory.check(0x1100, 4, "tl.load")
    with pytest.raises(AddressError, match=r"runs past the end of 'sym' \(256 B at 0x3000\)"):
        memory.check(0x30f0, 32, "tl.load")


def test_the_host_s_inputs_know_their_arrays(amap):
    """`Host.inputs` is a dict that answers "is this array one of mine" at once, through
    every way of changing it; a copy of it is a plain dict."""
    import copy

    from kernbench_cli.sim.host import Inputs

    a, b, c = np.zeros(2), np.ones(2), np.full(2, 2.0)
    inputs = Inputs()
    inputs["a"] = a
    inputs.setdefault("b", b)
    inputs.setdefault("b", c)  # kept b
    assert inputs.holds(a) and inputs.holds(b) and not inputs.holds(c)
    inputs["a"] = c
    assert not inputs.holds(a) and inputs.holds(c)
    inputs.update(x=a)
    inputs |= {"y": a}
    del inputs["x"]
    assert inputs.holds(a)
    inputs.pop("y")
    assert not inputs.holds(a)
    assert inputs.popitem() == ("b", b) and not inputs.holds(b)
    inputs.clear()
    assert not inputs.holds(c) and inputs == {}
    inputs["a"] = a
    assert type(copy.copy(inputs)) is dict and copy.deepcopy(inputs)["a"] is not a


def test_reserve_is_place_without_an_array(amap):
    """`Host.reserve` takes the room `place` takes for an array of zeros of that shape, and
    its bytes read as zeros; the host counts what it placed, as the progress line shows."""
    from kernbench_cli.hw.system import System
    from kernbench_cli.sim.host import Host

    hosts = [Host(System(amap), Memory(), 0, timing_only=False) for _ in range(2)]
    first = [hosts[0].place("w", np.zeros((3, 5), np.float16), pid) for pid in (0, 1, 0)]
    second = [hosts[1].reserve("w", (3, 5), "f16", pid) for pid in (0, 1, 0)]
    assert first == second
    assert hosts[0].memory.allocations() == hosts[1].memory.allocations()
    assert not hosts[1].read(second[2], (3, 5), "f16").any()
    host = hosts[1]
    host.empty("out", (4,), "f32")
    assert (host.placements, host.placed_bytes) == (3 + host.num_pes,
                                                    3 * 30 + host.num_pes * 16)
    assert len(host.memory.allocations()) == host.placements
