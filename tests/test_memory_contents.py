"""Simulated memory's contents: blocks cut from shared slabs, released before the timing pass."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

from kernbench_cli.address import load_address_map
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
