"""One PE: its engines, its HBM slice and its IPCQ rings."""

from __future__ import annotations

from kernbench_cli.address.physaddr import PeCoord
from kernbench_cli.config.schema import Topology
from kernbench_cli.hw.cpu import PeCpu
from kernbench_cli.hw.dma import DmaEngine
from kernbench_cli.hw.gemm import GemmEngine
from kernbench_cli.hw.ipcq import DIRECTIONS, Ring
from kernbench_cli.hw.network import Network
from kernbench_cli.hw.pe_math import MathEngine
from kernbench_cli.hw.scheduler import Scheduler


class Pe:
    """PE_CPU, PE_SCHEDULER, PE_DMA, PE_GEMM and PE_MATH of one PE."""

    def __init__(self, coord: PeCoord, pid: int, topology: Topology, network: Network):
        pe = topology.pe
        self.coord = coord
        self.pid = pid
        self.cpu = PeCpu()
        self.scheduler = Scheduler(pe.scheduler)
        self.dma = DmaEngine(pe.dma, topology.noc.bandwidth)
        self.gemm = GemmEngine(pe.gemm, pe.clock)
        self.math = MathEngine(pe.math, pe.clock)
        self.hbm = network.hbm(coord)
        self.rings = {d: Ring(pe.ipcq.slots, pe.ipcq.slot_size) for d in DIRECTIONS}

    def engine(self, name: str):
        return getattr(self, name)

    @property
    def finish(self) -> int:
        """When this PE's last engine went idle."""
        return max(self.cpu.time, self.scheduler.free_at, self.dma.free_at, self.gemm.free_at,
                   self.math.free_at)
