"""`tl`'s grid (ADR-0022): where this PE is, and how many there are along each axis."""

from __future__ import annotations

from kernbench_cli.errors import KernelError
from kernbench_cli.lang.tl.core import Core


class Grid(Core):
    """`tl.program_id`, `tl.num_programs`, `tl.mesh`, `tl.pid`, `tl.num_pes`."""

    def program_id(self, axis: int = 0) -> int:
        """axis 0: PE in its cube; 1: cube in its SIP; 2: SIP in the system."""
        c, s = self._coord, self._launch.system.topology.system
        return (c.pe, c.cube, c.rack * s.sips_per_rack + c.sip)[self._axis(axis)]

    def num_programs(self, axis: int = 0) -> int:
        s = self._launch.system.topology.system
        return (s.pes_per_cube, s.cubes_per_sip, s.racks * s.sips_per_rack)[self._axis(axis)]

    @staticmethod
    def _axis(axis: int) -> int:
        if axis.__class__ is bool or axis not in (0, 1, 2):
            raise KernelError(f"axis must be 0 (PE in cube), 1 (cube in SIP) or 2 (SIP); "
                              f"got {axis!r}")
        return axis

    def mesh(self, axis: int = 0) -> tuple[int, int]:
        """(columns, rows) of the PE mesh of a cube (axis 0), of the cube mesh of a SIP
        (axis 1), or of the system's SIPs (axis 2: one row). Mesh neighbours are one hop
        apart (PE index = row * columns + column)."""
        s = self._launch.system.topology.system
        return (tuple(s.pe_mesh), tuple(s.cube_mesh),
                (s.racks * s.sips_per_rack, 1))[self._axis(axis)]

    @property
    def pid(self) -> int:
        """Global PE index: PEs of a cube fastest, then cubes, then SIPs."""
        return self._pid

    @property
    def num_pes(self) -> int:
        return len(self._launch.system.pes)
