"""Narrow dtypes in runs: each format stored, loaded and multiplied with the right values;
the bytes a load or a composite moves; a GEMM's time and energy per datapath and the
dequantisation a mixed one costs on PE_MATH, each against its formula; and misuse, each
an error naming the rule. Topology `one` (one PE, a 16 x 16 array at 1 GHz)."""

from __future__ import annotations

import pytest

from kernbench_cli.hw.engine import cycles_to_ps
from kernbench_cli.hw.gemm import gemm_cycles
from kernbench_cli.hw.network import hbm_stream_bandwidth, transfer_ps
from tests.conftest import test_topology

FORMATS = ("fp8", "fp8e5m2", "int8", "int4", "mxfp8", "mxfp4")
#: (bytes of 8192 elements, the narrow datapath's MACs per cell per cycle by default)
SIZE = {"bf16": (16384, 1), "fp8": (8192, 2), "fp8e5m2": (8192, 2), "int8": (8704, 2),
        "int4": (4608, 4), "mxfp8": (8448, 2), "mxfp4": (4352, 4)}


def result_topology(result):
    from kernbench_cli.config import load_topology

    return load_topology(test_topology(result.topology))


def _records(result, kind: str) -> list[tuple]:
    return [r for r in result.oplog if r[3] == kind]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("op", ["store", "dot", "composite", "composite_tcm", "native"])
def test_values_against_a_reference_in_the_narrow_dtype(run, fmt, op):
    """tests/kernels/narrow.py: every output equals its numpy reference (a stored weight's
    bytes unchanged, quantised activations, GEMMs of the dequantised values)."""
    result = run("narrow", params=(f"fmt={fmt}", f"op={op}"))
    assert result.checks and all(c.passed and c.max_abs_err == 0 for c in result.checks)


@pytest.mark.parametrize("fmt", ["bf16", *FORMATS])
def test_a_load_moves_the_packed_bytes_in_their_time(run, fmt):
    """A load of N = 8192 elements moves N x 2 B of bf16, N B of fp8, N/2 + N/32 B of mxfp4
    (elements two a byte, an E8M0 scale per 32), N + N/32 of mxfp8, N + 2N/32 of int8,
    N/2 + 2N/32 of int4; alone, it lands after setup + bytes at the HBM stream rate + the
    HBM latency."""
    result = run("narrow_load", params=(f"fmt={fmt}",))
    topo = result_topology(result)
    (load,) = [r for r in result.oplog if r[3] == "load"]
    nbytes = SIZE[fmt][0]
    assert load[7] == nbytes
    assert load[6] - load[5] == (topo.pe.dma.setup + transfer_ps(
        nbytes, hbm_stream_bandwidth(topo.hbm)) + topo.hbm.latency)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_native_gemm_streams_k_at_its_datapath_rate(run, fmt):
    """A tl.dot of two `fmt` operands (16 x 64 by 64 x 64) holds the array for the cycles of
    one with K / MACs per cell: fp8, mxfp8, int8 2, mxfp4, int4 4 (gemm_cycles(16, 32, 64)
    = 248, gemm_cycles(16, 16, 64) = 184 against bf16's 376); it pays energy.gemm_mac_<datapath>
    per MAC, and dequantises nothing."""
    result = run("narrow", params=(f"fmt={fmt}", "op=native"))
    (dot,) = _records(result, "dot")
    per_cell = SIZE[fmt][1]
    assert dot[6] - dot[5] == cycles_to_ps(gemm_cycles(16, 64 // per_cell, 64, 16, 16), 10**9)
    datapath = {"fp8": "fp8", "fp8e5m2": "fp8", "mxfp8": "fp8", "mxfp4": "fp4",
                "int8": "int8", "int4": "int4"}[fmt]
    table = result.energy.table
    assert result.energy.counts.macs == {datapath: 16 * 64 * 64}
    assert result.energy.dynamic["gemm"] == 16 * 64 * 64 * getattr(table, f"gemm_mac_{datapath}")
    assert result.energy.counts.elements["dequant"] == 0


def test_macs_per_cell_comes_from_the_topology(run):
    """pe.gemm.macs_per_cell.fp8 = 1: an fp8 GEMM takes a bf16 one's cycles."""
    result = run("narrow", params=("fmt=fp8", "op=native"),
                 sets=("pe.gemm.macs_per_cell.fp8=1",))
    (dot,) = _records(result, "dot")
    assert dot[6] - dot[5] == cycles_to_ps(gemm_cycles(16, 64, 64, 16, 16), 10**9)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_mixed_dot_dequantises_its_narrow_operand_on_pe_math_first(run, fmt):
    """bf16 A @ `fmt` W^T: PE_MATH dequantises W's 4096 elements (ceil(4096 / 32 lanes) x 1
    cycle, ready 2 cycles later), then the array runs at bf16's rate (376 cycles) from
    then on; energy: 4096 x energy.math.dequant and 65,536 MAC passes x energy.gemm_mac."""
    result = run("narrow", params=(f"fmt={fmt}", "op=dot"))
    (fix,), (dot,) = _records(result, "dequantize"), _records(result, "dot")
    assert (fix[6] - fix[5], fix[8]) == (cycles_to_ps(4096 // 32 + 2, 10**9), 4096)
    assert dot[5] == fix[6] and dot[6] - dot[5] == 376_000
    counts, table = result.energy.counts, result.energy.table
    assert counts.elements["dequant"] == 4096 and counts.mac_passes == 16 * 64 * 64
    assert result.energy.dynamic["math"] == 4096 * table.math.dequant
    assert result.energy.dynamic["gemm"] == 16 * 64 * 64 * table.gemm_mac


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_composite_streams_packed_weight_tiles_and_dequantises_each(run, fmt):
    """A composite of bf16 A (in TCM) by a `fmt` weight in memory: its tile loads move the
    weight's packed bytes once (64 x 64 elements: SIZE / 2), each tile then dequantised on
    PE_MATH before its GEMM tile; the DMA moved exactly the plan's bytes and PE_MATH the
    plan's elements (the invariants hold)."""
    result = run("narrow", params=(f"fmt={fmt}", "op=composite"))
    loads, fixes = _records(result, "load_tile"), _records(result, "dequant_tile")
    assert sum(r[7] for r in loads) == SIZE[fmt][0] // 2
    assert sum(r[8] for r in fixes) == 64 * 64 == result.energy.counts.elements["dequant"]
    gemms = sorted(_records(result, "gemm_tile"), key=lambda r: r[5])
    for fix, gemm in zip(sorted(fixes, key=lambda r: r[5]), gemms, strict=True):
        assert gemm[5] >= fix[6]  # each GEMM tile waits for its tile's dequantisation
    assert all(i.passed for i in result.invariants)


@pytest.mark.parametrize("fmt", ["mxfp4", "int8"])
def test_every_pe_streaming_its_weight_times_alike_with_dedup_or_without(run, fmt):
    """16 PEs each stream their copy of a 64 x 128 weight: dedup gives the full pass's
    latency and energy; the region holding the composites holds their dequantisation
    (16 x 8192 elements x energy.math.dequant)."""
    one = run("narrow_every_pe", "default", params=(f"fmt={fmt}",))
    every = run("narrow_every_pe", "default", params=(f"fmt={fmt}",), dedup=False)
    free = run("narrow_every_pe", "default", params=(f"fmt={fmt}",),
               sets=("energy.math.dequant=0pJ",))
    assert one.checks[0].passed and every.checks[0].passed
    assert (one.latency_ps, one.energy.total) == (every.latency_ps, every.energy.total)
    paid, unpaid = ({r.name: r.energy_aj for r in result.regions} for result in (one, free))
    assert paid["gemm"] - unpaid["gemm"] == 16 * 64 * 128 * one.energy.table.math.dequant
    assert paid["(outside)"] == unpaid["(outside)"]


def test_timing_only_moves_the_same_bytes(run):
    """Without values a narrow run times the same commands."""
    full = run("narrow", params=("fmt=mxfp4", "op=composite"))
    bare = run("narrow", params=("fmt=mxfp4", "op=composite"), timing_only=True)
    assert bare.latency_ps == full.latency_ps and bare.energy.total == full.energy.total


@pytest.mark.parametrize(("case", "message"), [
    ("load_shape", "tl.load: mxfp4 stores blocks of 32 elements along the last axis, and "
                   "shape [4, 48] has rows of 48 (not a multiple of 32)"),
    ("ref_shape", "tl.ref: mxfp4 stores blocks of 32 elements along the last axis, and "
                  "shape [8, 16] has rows of 16 (not a multiple of 32)"),
    ("stride", "row stride 48 is not a multiple of mxfp4's block of 32 elements"),
    ("itemsize", "tl.itemsize: mxfp4 has no whole bytes per element (a block of 32 and its "
                 "scale take 17 B): use tl.nbytes('mxfp4', n)"),
    ("nbytes", "tl.nbytes: 40 elements of int4 are not whole blocks of 32"),
    ("cast_shape", "Tensor.to: mxfp4 stores blocks of 32 elements along the last axis, and "
                   "shape [4, 16] has rows of 16 (not a multiple of 32)"),
    ("full_shape", "tl.full: int8 stores blocks of 32 elements along the last axis, and "
                   "shape [2, 40] has rows of 40 (not a multiple of 32)"),
    ("out_dtype", "tl.dot: out_dtype fp8 is not f16, bf16 or f32 (a GEMM accumulates in f32; "
                  "quantise its result with .to('fp8'))"),
    ("transpose", "Tensor.T: mxfp4's blocks run along the rows; a transposed view would split "
                  "them (.to('bf16') first, or trans_b=True in a GEMM)"),
    ("split_view", "tensor index (slice(None, None, None), slice(16, 48, None)) on shape "
                   "[4, 64]: the view splits mxfp4's blocks of 32 elements along the rows"),
])
def test_misuse_is_an_error_naming_the_rule(run, case, message):
    from kernbench_cli.errors import KernelError

    with pytest.raises(KernelError) as exc:
        run("narrow_misuse", params=(f"case={case}",))
    assert str(exc.value).endswith(f": {message}")


def test_an_input_of_partial_blocks_is_refused(tmp_path):
    import kernbench_cli as kb
    from kernbench_cli.errors import ParamError

    path = tmp_path / "k.py"
    path.write_text("PARAMS = {}\n\ndef setup(host, p):\n    host.random('w', (4, 48), "
                    "'int8')\n    return {}\n\ndef kernel(tl):\n    pass\n\n"
                    "def reference(host, p):\n    return {}\n\n"
                    "def outputs(host, args, p):\n    return {}\n")
    with pytest.raises(ParamError, match=r"input 'w' \[4, 48\] int8: rows of 48 are not whole "
                                         r"blocks of 32 elements"):
        kb.run(path, "default")


def _kernel(tmp_path, setup: str, body: str, reference: str = "{}", outputs: str = "{}"):
    path = tmp_path / "k.py"
    path.write_text("import numpy as np\nPARAMS = {}\n\ndef setup(host, p):\n" + setup
                    + "\n\ndef kernel(tl, w):\n" + body
                    + f"\n\ndef reference(host, p):\n    return {reference}\n\n"
                    f"def outputs(host, args, p):\n    return {outputs}\n")
    return path


def test_arithmetic_on_a_narrow_tensor_gives_f32_and_a_cast_from_it_dequantises(tmp_path):
    """`w * 2` of an fp8 tensor is an f32 tensor (a PE_MATH `mul`); `w.to("bf16")` a
    `dequant`; `w.to("mxfp4")` a `cast` that quantises."""
    import kernbench_cli as kb

    path = _kernel(tmp_path, "    w = host.random('w', (2, 64), 'fp8')\n"
                   "    return {'w': host.place('w', w, 0, dtype='fp8')}",
                   "    x = tl.load(w, (2, 64), 'fp8')\n"
                   "    assert (x * 2.0).dtype_name == 'f32' and x.to('bf16').dtype_name == "
                   "'bf16'\n    assert x.to('mxfp4').dtype_name == 'mxfp4'")
    result = kb.run(path, test_topology("one"), oplog=True)
    kinds = [r[3] for r in result.raw.oplog if r[2] == "math"]
    assert kinds == ["multiply", "dequantize", "cast"]


def test_a_message_carries_the_packed_bytes(tmp_path):
    """PE 0 sends a 4 x 64 mxfp4 tensor to PE 1: 4 x 2 blocks of 17 B = 136 B through the
    ring, its values unchanged."""
    import kernbench_cli as kb

    path = _kernel(tmp_path, "    w = host.random('w', (4, 64), 'mxfp4')\n"
                   "    return {'w': host.place('w', w, 0, dtype='mxfp4'), 'out': "
                   "host.place('out', np.zeros((4, 64), np.float32), 1, dtype='mxfp4')}",
                   "    if tl.pid == 0:\n        tl.send(tl.load(w, (4, 64), 'mxfp4'), to=1)\n"
                   "    else:\n        tl.store(out, tl.recv(frm=0, shape=(4, 64), "
                   "dtype='mxfp4'))", "{'out': host.inputs['w']}",
                   "{'out': host.read(args['out'], (4, 64), 'mxfp4')}")
    path.write_text(path.read_text().replace("def kernel(tl, w):", "def kernel(tl, w, out):"))
    result = kb.run(path, test_topology("pair"), oplog=True)
    assert result.verified
    assert [r[7] for r in result.raw.oplog if r[3] == "recv"] == [136]



def test_a_reserved_narrow_weight_times_without_values(tmp_path):
    """`host.reserve` takes a narrow weight's packed bytes (64 x 128 mxfp4: 4352 B) with no
    array; a timing-only composite streams exactly those bytes."""
    import kernbench_cli as kb

    path = _kernel(tmp_path, "    return {'w': host.reserve('w', (64, 128), 'mxfp4', 0)}",
                   "    x = tl.zeros((4, 128), 'bf16')\n"
                   "    tl.wait(tl.composite(op='gemm', a=x, b=tl.ref(w, (64, 128), 'mxfp4'), "
                   "trans_b=True, out_dtype='f32'))")
    result = kb.run(path, test_topology("one"), timing_only=True, oplog=True)
    assert sum(r[7] for r in result.raw.oplog if r[3] == "load_tile") == 64 * 128 * 17 // 32
