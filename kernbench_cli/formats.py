"""Storage formats as the command stream names them: bytes, blocks and the GEMM datapath.

A composite's operands and a DOT's array format are stream format codes
(`stream.Composite`, `Program.gemm_shapes`): what `hw` needs of a dtype is
how many bytes its elements take and at what rate the GEMM array multiplies
it, not its numbers (those are `lang.dtypes`'). The codes of the 16- and
32-bit floats are their element sizes, as streams held them before narrow
formats existed, so older traces keep their meaning.

======== ===== ====== ======= ======= ============== ===========================
code     bits  block  scale   bytes   array          dtypes (`lang.dtypes`)
======== ===== ====== ======= ======= ============== ===========================
2        16    1      -       2 / 1   16-bit         f16, bf16
4        32    1      -       4 / 1   f32            f32
8        8     1      -       1 / 1   fp8            fp8, fp8e5m2
9        8     32     1 B     33 / 32 fp8            mxfp8
10       4     32     1 B     17 / 32 fp4            mxfp4
11       8     32     2 B     34 / 32 int8           int8
12       4     32     2 B     18 / 32 int4           int4
======== ===== ====== ======= ======= ============== ===========================

A scaled format stores each block of 32 consecutive elements of a row as its
scale then its elements (4-bit elements two to a byte), so a row of ``n``
elements takes ``n / 32 * block bytes`` and every block starts on a byte.

The array multiplies two operands natively when both are narrow and of one
family (floats: fp8, mxfp8, mxfp4; integers: int8, int4), at the rate of the
wider (`gemm_datapath`). Otherwise each narrow operand is first dequantised
on PE_MATH to the format the array then runs in: f32 if the other operand is
f32, else bf16 (the 16-bit datapath).
"""

from __future__ import annotations

import functools
from typing import NamedTuple


class Format(NamedTuple):
    """A stream format: element bits, elements per scale block (1: no scale), the scale's
    bytes, the GEMM array's datapath for it and the family native GEMMs pair within."""

    name: str
    bits: int
    block: int
    scale_bytes: int
    array: str  # "16-bit", "f32", "fp8", "fp4", "int8", "int4"
    family: str  # "" for the 16- and 32-bit floats, "float" or "int" for narrow formats

    @property
    def block_bytes(self) -> int:
        """Bytes of one block: its elements and its scale."""
        return self.block * self.bits // 8 + self.scale_bytes

    @property
    def narrow(self) -> bool:
        return bool(self.family)

    def nbytes(self, count: int) -> int:
        """Bytes of `count` elements (a whole number of blocks, or of bytes for 4 bits)."""
        return count * self.block_bytes // self.block

    def whole(self, count: int) -> bool:
        """Whether `count` elements are a whole number of blocks (and of bytes)."""
        return count * self.bits % 8 == 0 if self.block == 1 else count % self.block == 0


F16, F32, FP8, MXFP8, MXFP4, INT8, INT4 = 2, 4, 8, 9, 10, 11, 12
FORMATS: dict[int, Format] = {
    F16: Format("16-bit", 16, 1, 0, "16-bit", ""),
    F32: Format("f32", 32, 1, 0, "f32", ""),
    FP8: Format("fp8", 8, 1, 0, "fp8", "float"),
    MXFP8: Format("mxfp8", 8, 32, 1, "fp8", "float"),
    MXFP4: Format("mxfp4", 4, 32, 1, "fp4", "float"),
    INT8: Format("int8", 8, 32, 2, "int8", "int"),
    INT4: Format("int4", 4, 32, 2, "int4", "int"),
}
#: The array datapaths of narrow formats, widest first: a native GEMM of two runs at the
#: first of theirs in this order.
NARROW_ARRAYS = ("fp8", "int8", "fp4", "int4")
DEQUANTISED = F16  # the array's format for two narrow operands it cannot pair: bf16


#: Per stream format: (bytes of a block, elements of a block): `count` elements take
#: ``count * bytes // elements`` bytes (`Format.nbytes`), for loops that cannot afford a call
SIZES: dict[int, tuple[int, int]] = {code: (f.block_bytes, f.block) for code, f in FORMATS.items()}


def nbytes(code: int, count: int) -> int:
    """Bytes of `count` elements of stream format `code`."""
    return FORMATS[code].nbytes(count)


@functools.lru_cache(maxsize=64)
def gemm_datapath(a: int, b: int) -> tuple[int, bool, bool]:
    """(the format the array multiplies in, whether `a` and whether `b` are dequantised to
    it on PE_MATH first) for a GEMM of operands of stream formats `a` and `b`."""
    fa, fb = FORMATS[a], FORMATS[b]
    if fa.narrow and fb.narrow and fa.family == fb.family:
        wider = a if NARROW_ARRAYS.index(fa.array) <= NARROW_ARRAYS.index(fb.array) else b
        return wider, False, False
    plain = [code for code, f in ((a, fa), (b, fb)) if not f.narrow]
    return max(plain, default=DEQUANTISED), fa.narrow, fb.narrow
