"""A whole system built from a compiled topology."""

from __future__ import annotations

from functools import cached_property

from kernbench_cli import gc_control
from kernbench_cli.address.physaddr import AddressMap, PeCoord, pe_coords
from kernbench_cli.errors import KernelError
from kernbench_cli.hw.network import Network, mesh_xy
from kernbench_cli.hw.pe import Pe

_STEP = {"E": (1, 0), "W": (-1, 0), "N": (0, -1), "S": (0, 1)}


class System:
    """Every PE, in global program order, and the shared network.

    The global PE index (pid) counts PEs in a cube fastest, then cubes in a
    SIP, then SIPs across racks: ``((rack * sips + sip) * cubes + cube) * pes + pe``.
    """

    def __init__(self, amap: AddressMap):
        with gc_control.paused():  # some 300,000 objects on a rack, none of them garbage:
            # collections while they were made walked them over and over (0.3 s of 0.4)
            self._build(amap)

    def _build(self, amap: AddressMap) -> None:
        self.amap = amap
        self.topology = topo = amap.topology
        self.network = Network(topo)
        self.coords = pe_coords(topo)
        self.pid_of = {coord: i for i, coord in enumerate(self.coords)}
        self.pes = [Pe(coord, i, topo, self.network) for i, coord in enumerate(self.coords)]

    @cached_property
    def slice_bases(self) -> list[int]:
        """Each PE's HBM slice base address, by pid (what relocation is relative to)."""
        return [self.amap.pe_hbm_addr(*c, 0) for c in self.coords]

    def neighbour(self, coord: PeCoord, direction: str) -> PeCoord | None:
        """The PE next to `coord` in `direction` (E, W, N, S), across a cube edge if needed.

        Crossing to the next cube of the SIP's cube mesh lands on the PE at
        the mirrored edge position; None at the edge of the SIP.
        """
        s = self.topology.system
        dx, dy = _STEP[direction]
        x, y = mesh_xy(coord.pe, s.pe_mesh[0])
        nx, ny = x + dx, y + dy
        cols, rows = s.pe_mesh
        if 0 <= nx < cols and 0 <= ny < rows:
            return coord._replace(pe=ny * cols + nx)
        cx, cy = mesh_xy(coord.cube, s.cube_mesh[0])
        ncx, ncy = cx + dx, cy + dy
        if not (0 <= ncx < s.cube_mesh[0] and 0 <= ncy < s.cube_mesh[1]):
            return None
        return coord._replace(cube=ncy * s.cube_mesh[0] + ncx,
                              pe=(ny % rows) * cols + (nx % cols))

    def arrival_direction(self, src: PeCoord, dst: PeCoord) -> str:
        """The ring of `dst` a message from `src` lands in: the side it comes from."""
        s = self.topology.system
        if src[:3] == dst[:3]:
            (sx, sy), (dx, dy) = mesh_xy(src.pe, s.pe_mesh[0]), mesh_xy(dst.pe, s.pe_mesh[0])
        elif src[:2] == dst[:2]:
            (sx, sy) = mesh_xy(src.cube, s.cube_mesh[0])
            (dx, dy) = mesh_xy(dst.cube, s.cube_mesh[0])
        else:
            return "W" if self.pid_of[src] < self.pid_of[dst] else "E"
        if sx != dx:
            return "W" if sx < dx else "E"
        if sy == dy:
            raise KernelError(f"PE ({src}) cannot send to itself")
        return "N" if sy < dy else "S"
