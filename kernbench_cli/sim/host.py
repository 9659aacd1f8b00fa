"""The host side of a launch: what a kernel's `setup` allocates and fills.

Its errors are `ParamError`s (exit 2): inputs that do not fit the system are
the parameters' fault, found before anything runs.

Inputs are drawn from a generator seeded by ``--seed``, so a run is
reproducible. With ``timing_only`` no value is drawn or stored: arrays are
zero-sized stand-ins of the right shape and dtype.

A narrow dtype (`lang.narrow`: fp8, int8, int4, mxfp8, mxfp4) is drawn as
float32 values each exact in it (`random`), and placed as its bytes when a
placement says so (``dtype=``: `place`, `replicate`, `scatter`,
`place_sram`); `read` and `read_shard` give its values back as float32.

Setup is linear in placements: HBM is bump-allocated per slice, a symmetric
allocation (`replicate`, `scatter`, `empty`) is one offset for every slice,
memory records each placement as (address, bytes, name) in the order made,
and whether an array is one of `inputs` (read in place, not copied) is a
look-up, not a scan. `placements`, `placed_bytes` and `drawn_bytes` count as
setup goes, for `--progress`; a kernel may say how many placements it will
make (`expect`).
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from kernbench_cli.address.allocator import (
    DEFAULT_ALIGN,
    Sharded,
    SliceAllocator,
    SystemAllocator,
)
from kernbench_cli.address.physaddr import PeCoord
from kernbench_cli.config.units import describe_size
from kernbench_cli.errors import AddressError, ParamError, clip
from kernbench_cli.hw.system import System
from kernbench_cli.lang.dtypes import NAMES, Narrow, dtype, nbytes, rounded
from kernbench_cli.lang.memory import Memory
from kernbench_cli.lang.narrow import to_bytes

_DRAW = 1 << 22  # random numbers drawn at a time


class Inputs(dict):
    """The host's inputs by name (a dict), that also knows which arrays it holds, by
    identity, in constant time (`holds`): every way of setting or removing an item keeps
    the count. A copy or pickle of it is a plain dict."""

    def __init__(self) -> None:
        super().__init__()
        self._ids: Counter[int] = Counter()

    def holds(self, array: Any) -> bool:
        """Whether `array` itself (not an equal array) is one of the values."""
        return self._ids[id(array)] > 0

    def _drop(self, value: Any) -> None:
        self._ids[id(value)] -= 1

    def __setitem__(self, key: str, value: Any) -> None:
        if key in self:
            self._drop(self[key])
        super().__setitem__(key, value)
        self._ids[id(value)] += 1

    def __delitem__(self, key: str) -> None:
        self._drop(self[key])
        super().__delitem__(key)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other: Any) -> Inputs:
        self.update(other)
        return self

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            self._drop(self[key])
        return super().pop(key, *default)

    def popitem(self) -> tuple[str, Any]:
        key, value = super().popitem()
        self._drop(value)
        return key, value

    def clear(self) -> None:
        super().clear()
        self._ids.clear()

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (dict(self),)


class Host:
    """Allocation and data placement for one launch.

    `timing_only`: no values (inputs are shapes, placements hold zeros). `bounds_only`: a
    setup made only to refuse what a run would refuse before its bounds are stated
    (`sim.bounds.stated_for`: nothing will run and its arguments are not used), so a
    setup may return once nothing it does after can be refused."""

    def __init__(self, system: System, memory: Memory, seed: int, timing_only: bool,
                 bounds_only: bool = False):
        self.system = system
        self.memory = memory
        self.topology = system.topology
        self.grid: list[PeCoord] = system.coords
        self.num_pes = len(self.grid)
        self.timing_only = timing_only or bounds_only
        self.bounds_only = bounds_only
        self.rng = np.random.default_rng(seed)
        self.inputs: Inputs = Inputs()
        grid = self.grid
        self._hbm = SliceAllocator(system.slice_bases, system.amap.slice_bytes,
                                   lambda pid: f"hbm of PE ({grid[pid]})")
        self._alloc = SystemAllocator(system.amap)  # the cubes' SRAM
        self.placements = 0  # allocations made so far (a symmetric one counts once per PE)
        self.placed_bytes = 0
        self.drawn_bytes = 0  # of the inputs `random` made (shapes only: timing only)
        self.expected: int | None = None  # placements the kernel said it makes (`expect`)

    def expect(self, placements: int) -> None:
        """Say how many placements setup makes (a symmetric one counts once per PE): the
        progress line shows how far it got. Optional, and only a guide."""
        self.expected = placements

    # ---------------------------------------------------------------- values

    def random(self, name: str, shape: tuple[int, ...], dtype_name: str,
               scale: float = 1.0) -> np.ndarray:
        """An input named `name`: normal(0, scale), rounded to the dtype; kept for --save.
        A narrow dtype's is float32, each value exact in it (place it with ``dtype=``)."""
        dt = dtype(dtype_name)
        shape = _shape(name, shape)
        if name in self.inputs:  # the first would be verified against, saved, as the second
            raise ParamError(f"input {clip(name)} is drawn twice: each input needs a name of "
                             "its own")
        size = _nbytes(name, shape, dt)
        capacity = self.num_pes * self.topology.hbm.slice_size
        if size > capacity:  # checked before the host draws (or tries to hold) a byte
            raise ParamError(f"input {name!r} {clip(list(shape))} {NAMES[dt]} is "
                             f"{describe_size(size)}, more than the "
                             f"{describe_size(capacity)} of HBM in the system")
        self.drawn_bytes += size
        held = np.dtype(np.float32) if dt.__class__ is Narrow else dt
        if self.timing_only:
            value = np.broadcast_to(np.zeros((), held), shape)
        else:  # drawn in pieces (the same numbers as one draw) to bound float32 scratch
            value = np.empty(shape, held)
            flat = value.reshape(-1)
            for start in range(0, flat.size, _DRAW):
                part = self.rng.standard_normal(min(_DRAW, flat.size - start), np.float32)
                part *= np.float32(scale)
                flat[start:start + part.size] = part
            if dt.__class__ is Narrow:
                value = rounded(value, dt)
        self.inputs[name] = value
        return value

    # ---------------------------------------------------------------- placement

    def place(self, name: str, array: np.ndarray, pid: int, align: int = DEFAULT_ALIGN, *,
              dtype: str | None = None) -> int:
        """Copy `array` into PE `pid`'s HBM slice, at an address aligned to `align` (a
        power of two: e.g. a DRAM page), as `dtype` if given (a narrow one: its bytes);
        returns its address."""
        array = self._as(name, array, dtype)
        addr = self._slice_alloc(self._pe(name, pid), array.nbytes, name, align)
        self._add(addr, array, name)
        return addr

    def reserve(self, name: str, shape: tuple[int, ...], dtype_name: Any, pid: int,
                align: int = DEFAULT_ALIGN) -> int:
        """Room for `shape` of `dtype_name` in PE `pid`'s HBM slice, aligned to `align`,
        holding zeros: what `place` does with an array of zeros, without making one (a
        timing-only run's weights need no values). Returns its address."""
        dt = dtype_name if isinstance(dtype_name, np.dtype) else dtype(dtype_name)
        size = _nbytes(name, _shape(name, shape), dt)
        addr = self._slice_alloc(self._pe(name, pid), size, name, align)
        self.memory.add(addr, size, name)
        self.placements += 1
        self.placed_bytes += size
        return addr

    def place_sram(self, name: str, array: np.ndarray, cube: int = 0, *,
                   dtype: str | None = None) -> int:
        """Copy `array` (as `dtype` if given) into the shared SRAM of cube `cube` (counted
        over the grid, like PE indexes: cubes of a SIP fastest); returns its address. Any PE
        of that cube can load it, over the NoC to the SRAM's port."""
        array = self._as(name, array, dtype)
        s = self.topology.system
        if not 0 <= cube < self.topology.num_cubes:
            raise ParamError(f"{name}: cube {cube} does not exist "
                             f"(0..{self.topology.num_cubes - 1})")
        coord = self.grid[cube * s.pes_per_cube]
        try:
            addr = self._alloc.alloc("sram", coord._replace(pe=0), array.nbytes, name)
        except AddressError as exc:
            raise ParamError(f"inputs overflow a cube's SRAM: {exc}") from None
        self._add(addr, array, name)
        return addr

    def replicate(self, name: str, array: np.ndarray, *, dtype: str | None = None) -> Sharded:
        """A copy of `array` (as `dtype` if given) in every PE's slice, at one offset."""
        array, dt = _placed_as(name, array, dtype)
        return self._symmetric(name, array.shape, dt, array)

    def scatter(self, name: str, array: np.ndarray, axis: int, *,
                dtype: str | None = None) -> Sharded:
        """Split `array` evenly along `axis` (as `dtype` if given); PE k's slice holds part
        k."""
        array, dt = _placed_as(name, array, dtype)
        if not isinstance(axis, int | np.integer) or isinstance(axis, bool) or \
                not -array.ndim <= axis < array.ndim:
            raise ParamError(f"{clip(name)}: axis {clip(axis)} is not one of the array's "
                             f"{array.ndim} (0..{array.ndim - 1})")
        axis = int(axis) % array.ndim
        size = array.shape[axis]
        if size % self.num_pes:
            raise ParamError(f"{name}: {size} along axis {axis} does not divide over the "
                              f"{self.num_pes} PEs of the grid ({size} % {self.num_pes} = "
                              f"{size % self.num_pes})")
        part = size // self.num_pes
        shape = tuple(part if i == axis else n for i, n in enumerate(array.shape))

        def piece(pid: int) -> np.ndarray:
            index = [slice(None)] * array.ndim
            index[axis] = slice(pid * part, (pid + 1) * part)
            return array[tuple(index)]

        return self._symmetric(name, shape, dt, piece)

    def distribute(self, name: str, shape: tuple[int, ...], dtype_name: str,
                   part: Callable[[int], np.ndarray]) -> Sharded:
        """`shape` of `dtype_name` at one offset in every PE's slice, PE k's holding
        `part(k)` (an array of that shape and dtype; not called in a timing-only run)."""
        return self._symmetric(name, _shape(name, shape), dtype(dtype_name), part)

    def empty(self, name: str, shape: tuple[int, ...], dtype_name: str) -> Sharded:
        """Zeroed space of `shape` in every PE's slice (outputs)."""
        dt = dtype(dtype_name)
        return self._symmetric(name, _shape(name, shape), dt, None)

    def gather(self, sharded: Sharded, axis: int) -> np.ndarray:
        """Every PE's part of `sharded`, concatenated along `axis` in PE order."""
        return np.concatenate([self.read_shard(sharded, pid) for pid in range(self.num_pes)],
                              axis=axis)

    def read_shard(self, sharded: Sharded, pid: int) -> np.ndarray:
        """PE `pid`'s part of `sharded` (a narrow dtype's values as float32)."""
        pid = self._pe(sharded.name, pid)
        addr = self.system.amap.pe_hbm_addr(*self.grid[pid], sharded.offset)
        return self._read(addr, sharded.shape, dtype(sharded.dtype), f"reading {sharded.name}")

    def read(self, addr: int, shape: tuple[int, ...], dtype_name: str) -> np.ndarray:
        """`shape` of `dtype_name` at `addr` (a narrow dtype's values as float32)."""
        return self._read(addr, shape, dtype(dtype_name), "host read")

    def _read(self, addr: int, shape: tuple[int, ...], dt: np.dtype | Narrow,
              what: str) -> np.ndarray:
        if dt.__class__ is Narrow:
            return self.memory.read_f32(addr, shape, dt, what)
        return self.memory.read(addr, shape, dt, what)

    # ---------------------------------------------------------------- internals

    def _symmetric(self, name: str, shape: tuple[int, ...], dt: np.dtype | Narrow,
                   piece: Any) -> Sharded:
        """`shape` of `dt` at one offset in every PE's slice, holding `piece(pid)` (None:
        zeros; an array: the same value in every slice; a narrow dtype's: its bytes)."""
        size = _nbytes(name, shape, dt)
        if dt.__class__ is Narrow and piece is not None and not self.timing_only:
            piece = to_bytes(piece, dt) if isinstance(piece, np.ndarray) else (
                lambda pid, part=piece: to_bytes(part(pid), dt))
        try:
            offset = self._hbm.alloc_symmetric(size, name)
        except AddressError as exc:
            raise ParamError(f"inputs overflow an HBM slice: {exc}") from None
        addrs = [base + offset for base in self._hbm.bases]
        if self.timing_only or piece is None or isinstance(piece, np.ndarray):
            source = None if self.timing_only else piece
            self.memory.add_copies(addrs, size, name, source, share=self._is_input(source))
        else:
            share = self._is_input(piece(0))
            for pid, addr in enumerate(addrs):
                self.memory.add(addr, size, name, piece(pid), share=share)
        self._count(len(addrs), size)
        return Sharded(name, offset, tuple(shape), NAMES[dt], size)

    def _as(self, name: str, array: np.ndarray, dtype_name: str | None) -> np.ndarray:
        """`array` as placed as `dtype_name`: cast to a plain dtype, a narrow dtype's bytes
        (a stand-in of their size in a timing-only run), or itself (None)."""
        if dtype_name is None:
            return _held(name, array)
        dt, array = dtype(dtype_name), _an_array(name, array)
        if dt.__class__ is not Narrow:
            return array.astype(dt, copy=False)
        size = _nbytes(name, array.shape, dt)
        if self.timing_only:
            return np.broadcast_to(np.zeros((), np.uint8), (size,))
        return to_bytes(array, dt)

    def _add(self, addr: int, array: np.ndarray, name: str) -> None:
        """Memory at `addr` holding `array`'s values: read in place if it is (part of) an
        input, which nothing writes (the kernel's stores go to a copy); other arrays are
        copied, as the caller may change them afterwards."""
        if self.timing_only:
            self.memory.add(addr, array.nbytes, name)
        else:
            self.memory.add(addr, array.nbytes, name, array, share=self._is_input(array))
        self._count(1, array.nbytes)

    def _pe(self, name: str, pid: Any) -> int:
        """`pid`, a PE of the grid; a ParamError naming allocation `name` otherwise."""
        if not isinstance(pid, int | np.integer) or isinstance(pid, bool) or \
                not 0 <= pid < self.num_pes:
            raise ParamError(f"{clip(name)}: PE {clip(pid)} does not exist: the grid has "
                             f"{self.num_pes:,} (0..{self.num_pes - 1})")
        return int(pid)

    def _slice_alloc(self, pid: int, nbytes: int, name: str,
                     align: int = DEFAULT_ALIGN) -> int:
        try:
            return self._hbm.alloc(pid, nbytes, name, align)
        except AddressError as exc:
            raise ParamError(f"inputs overflow an HBM slice: {exc}") from None

    def _is_input(self, array: np.ndarray | None) -> bool:
        """Whether `array` is (a view of) one of `inputs`."""
        if array is None:
            return False
        return self.inputs.holds(array if array.base is None else array.base)

    def _count(self, placements: int, nbytes: int) -> None:
        self.placements += placements
        self.placed_bytes += placements * nbytes


def _an_array(name: str, array: Any) -> np.ndarray:
    """`array`, if it is a numpy array; a ParamError naming allocation `name` if not."""
    if not isinstance(array, np.ndarray):
        raise ParamError(f"{clip(name)}: a {type(array).__name__} is not a numpy array")
    return array


def _held(name: str, array: Any) -> np.ndarray:
    """`array`, placed as it is as allocation `name`: an array of a dtype kernbench holds
    (f32, f16, bf16); another (float64, strings, objects) is refused, as its bytes would
    be read as another dtype's (``dtype=`` casts it)."""
    if _an_array(name, array).dtype not in NAMES:
        plain = ", ".join(v for k, v in NAMES.items() if k.__class__ is not Narrow)
        raise ParamError(f"{clip(name)}: an array of {array.dtype} is not one kernbench "
                         f"holds ({plain}; dtype= casts it)")
    return array


def _placed_as(name: str, array: Any, dtype_name: str | None
               ) -> tuple[np.ndarray, np.dtype | Narrow]:
    """(`array` as its values are placed as allocation `name`, the dtype it is placed as):
    `dtype_name`'s (a plain one cast to; a narrow one's bytes made where it is placed), or
    its own."""
    if dtype_name is None:
        return array, _held(name, array).dtype
    dt = dtype(dtype_name)
    array = _an_array(name, array)
    return (array, dt) if dt.__class__ is Narrow else (array.astype(dt, copy=False), dt)


def _shape(name: str, shape: Any) -> tuple[int, ...]:
    """`shape` (a sequence of sizes, or one size) as a tuple of non-negative integers;
    ParamError naming input `name` otherwise."""
    sizes = (shape,) if isinstance(shape, int | np.integer) else shape
    try:
        out = tuple(operator.index(n) for n in sizes)
    except TypeError:
        raise ParamError(f"input {name!r}: shape {clip(shape)} is not a sequence of "
                         "integers") from None
    if any(n < 0 for n in out):
        raise ParamError(f"input {name!r}: shape {clip(list(out))} has a negative size")
    return out


def _nbytes(name: str, shape: tuple[int, ...], dt: np.dtype | Narrow) -> int:
    """Bytes of `shape` of `dt`; a ParamError naming `name` for a scaled dtype whose rows are
    not whole blocks."""
    if dt.__class__ is Narrow and shape and shape[-1] % dt.block:
        raise ParamError(f"input {name!r} {list(shape)} {dt.name}: rows of {shape[-1]} are not "
                         f"whole blocks of {dt.block} elements")
    return nbytes(dt, math.prod(shape))
