"""The host side of a launch: what a kernel's `setup` allocates and fills.

Its errors are `ParamError`s (exit 2): inputs that do not fit the system are
the parameters' fault, found before anything runs.

Inputs are drawn from a generator seeded by ``--seed``, so a run is
reproducible. With ``timing_only`` no value is drawn or stored: arrays are
zero-sized stand-ins of the right shape and dtype.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kernbench_cli.address.allocator import DEFAULT_ALIGN, Sharded, SystemAllocator
from kernbench_cli.address.physaddr import PeCoord
from kernbench_cli.config.units import format_size
from kernbench_cli.errors import AddressError, ParamError
from kernbench_cli.hw.system import System
from kernbench_cli.lang.dtypes import NAMES, dtype
from kernbench_cli.lang.memory import Memory

_DRAW = 1 << 22  # random numbers drawn at a time


class Host:
    """Allocation and data placement for one launch."""

    def __init__(self, system: System, memory: Memory, seed: int, timing_only: bool):
        self.system = system
        self.memory = memory
        self.topology = system.topology
        self.grid: list[PeCoord] = system.coords
        self.num_pes = len(self.grid)
        self.timing_only = timing_only
        self.rng = np.random.default_rng(seed)
        self.inputs: dict[str, np.ndarray] = {}
        self._alloc = SystemAllocator(system.amap)

    # ---------------------------------------------------------------- values

    def random(self, name: str, shape: tuple[int, ...], dtype_name: str,
               scale: float = 1.0) -> np.ndarray:
        """An input named `name`: normal(0, scale), rounded to the dtype; kept for --save."""
        dt = dtype(dtype_name)
        nbytes = math.prod(shape) * dt.itemsize
        capacity = self.num_pes * self.topology.hbm.slice_size
        if nbytes > capacity:
            raise ParamError(f"input {name!r} {list(shape)} {NAMES[dt]} is {format_size(nbytes)}, "
                              f"more than the {format_size(capacity)} of HBM in the system")
        if self.timing_only:
            value = np.broadcast_to(np.zeros((), dt), shape)
        else:  # drawn in pieces (the same numbers as one draw) to bound float32 scratch
            value = np.empty(shape, dt)
            flat = value.reshape(-1)
            for start in range(0, flat.size, _DRAW):
                part = self.rng.standard_normal(min(_DRAW, flat.size - start), np.float32)
                part *= np.float32(scale)
                flat[start:start + part.size] = part
        self.inputs[name] = value
        return value

    # ---------------------------------------------------------------- placement

    def place(self, name: str, array: np.ndarray, pid: int, align: int = DEFAULT_ALIGN) -> int:
        """Copy `array` into PE `pid`'s HBM slice, at an address aligned to `align` (a
        power of two: e.g. a DRAM page); returns its address."""
        coord = self.grid[pid]
        addr = self._hbm_alloc(coord, array.nbytes, name, align)
        self._add(addr, array, name)
        return addr

    def reserve(self, name: str, nbytes: int, pid: int, align: int = DEFAULT_ALIGN) -> int:
        """`nbytes` of PE `pid`'s HBM slice, aligned to `align`, zeros (space a kernel holds
        but does not fill from the host); returns its address."""
        addr = self._hbm_alloc(self.grid[pid], nbytes, name, align)
        self.memory.add(addr, nbytes, name)
        return addr

    def place_sram(self, name: str, array: np.ndarray, cube: int = 0) -> int:
        """Copy `array` into the shared SRAM of cube `cube` (counted over the grid, like PE
        indexes: cubes of a SIP fastest); returns its address. Any PE of that cube can
        load it, over the NoC to the SRAM's port."""
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

    def replicate(self, name: str, array: np.ndarray) -> Sharded:
        """A copy of `array` in every PE's slice, at one offset."""
        return self._symmetric(name, array.shape, array.dtype, lambda _pid: array)

    def scatter(self, name: str, array: np.ndarray, axis: int) -> Sharded:
        """Split `array` evenly along `axis`; PE k's slice holds part k."""
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

        return self._symmetric(name, shape, array.dtype, piece)

    def empty(self, name: str, shape: tuple[int, ...], dtype_name: str) -> Sharded:
        """Zeroed space of `shape` in every PE's slice (outputs)."""
        dt = dtype(dtype_name)
        return self._symmetric(name, shape, dt, None)

    def gather(self, sharded: Sharded, axis: int) -> np.ndarray:
        """Every PE's part of `sharded`, concatenated along `axis` in PE order."""
        return np.concatenate([self.read_shard(sharded, pid) for pid in range(self.num_pes)],
                              axis=axis)

    def read_shard(self, sharded: Sharded, pid: int) -> np.ndarray:
        addr = self.system.amap.pe_hbm_addr(*self.grid[pid], sharded.offset)
        return self.memory.read(addr, sharded.shape, dtype(sharded.dtype),
                                f"reading {sharded.name}")

    def read(self, addr: int, shape: tuple[int, ...], dtype_name: str) -> np.ndarray:
        return self.memory.read(addr, shape, dtype(dtype_name), "host read")

    # ---------------------------------------------------------------- internals

    def _symmetric(self, name: str, shape: tuple[int, ...], dt: np.dtype, piece: Any) -> Sharded:
        nbytes = math.prod(shape) * dt.itemsize
        pools = [self._alloc.pool("hbm", coord) for coord in self.grid]
        offset = -(-max(p.used for p in pools) // DEFAULT_ALIGN) * DEFAULT_ALIGN
        for pid, pool in enumerate(pools):
            try:
                addr = pool.alloc_at(pool.base + offset, nbytes, name)
            except AddressError as exc:
                raise ParamError(f"inputs overflow an HBM slice: {exc}") from None
            if piece is None:
                self.memory.add(addr, nbytes, name)
            else:
                self._add(addr, piece(pid), name)
        return Sharded(name, offset, tuple(shape), NAMES[dt], nbytes)

    def _add(self, addr: int, array: np.ndarray, name: str) -> None:
        """Memory at `addr` holding `array`'s values: read in place if it is (part of) an
        input this host drew, which nothing writes (the kernel's stores go to a copy);
        other arrays are copied, as the caller may change them afterwards."""
        owner = array if array.base is None else array.base
        self.memory.add(addr, array.nbytes, name, None if self.timing_only else array,
                        share=any(owner is x for x in self.inputs.values()))

    def _hbm_alloc(self, coord: PeCoord, nbytes: int, name: str,
                   align: int = DEFAULT_ALIGN) -> int:
        try:
            return self._alloc.alloc("hbm", coord, nbytes, name, align)
        except AddressError as exc:
            raise ParamError(f"inputs overflow an HBM slice: {exc}") from None
