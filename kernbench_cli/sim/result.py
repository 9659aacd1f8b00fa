"""What a run produced: plain data for `report/` and `golden/`, no live model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from kernbench_cli.hw.oplog import OpLog
    from kernbench_cli.sim.critical import CriticalPath
    from kernbench_cli.sim.energy import Energy
    from kernbench_cli.sim.invariants import Invariant
    from kernbench_cli.sim.races import Race
    from kernbench_cli.sim.roofline import Roof
    from kernbench_cli.sim.trace_file import Trace


@dataclass(frozen=True)
class EngineStats:
    """One engine class (a per-PE engine, or a link level) over its instances.

    `busy_ps[i]` and `ops[i]` belong to `labels[i]` (a PE, or one link).
    `wait_ps[i]` is time the instance was held but did no work (PE_CPU: stalled;
    PE_DMA: waiting for a link or HBM slice); empty for engines that never wait.
    """

    name: str
    labels: tuple[str, ...]
    busy_ps: tuple[int, ...]
    ops: tuple[int, ...]
    wait_ps: tuple[int, ...] = ()

    @property
    def instances(self) -> int:
        return len(self.busy_ps)


@dataclass(frozen=True)
class Verification:
    """Verification of one output against its numpy reference."""

    name: str
    dtype: str
    max_abs_err: float
    atol: float
    rtol: float
    passed: bool
    declared: bool = False  # the kernel's TOLERANCE set atol and rtol, not the dtype's
    scores: str = ""  # an argmax of this output (`ARGMAX`): twice its tolerance, `dtype` its
    #: what the check could not measure (`hooks.vacuous`): values NaN or infinite in both
    #: the output and the reference (equal, so passed, with no error of their own), or none
    note: str = ""


@dataclass
class RunResult:
    kernel: str
    topology: str
    costs: str
    num_pes: int
    params: dict[str, Any]
    seed: int
    timing_only: bool
    latency_ps: int
    commands: int
    engines: dict[str, EngineStats]
    pe_labels: tuple[str, ...]
    cpu_stall_ps: tuple[int, ...]
    checks: list[Verification]
    oplog: OpLog | None  # with run_kernel(oplog=True): every engine occupation
    wall_s: float = 0.0
    topology_digest: str = ""  # `config.loader.config_digest` of the resolved configurations
    costs_digest: str = ""
    overrides: tuple[str, ...] = ()  # the --set items, as given
    #: per parameter naming a file the kernel read (its `FILES`), the file's digest
    #: (`fileio.file_digest`): which config.json made the result, not only its path
    file_digests: dict[str, str] = field(default_factory=dict)
    #: the digest of the kernel file as loaded (a replay's: as the recorded run loaded it,
    #: where the trace keeps it)
    kernel_digest: str = ""
    #: a replay's: the topology its streams were recorded on (name, digest when the trace
    #: has it, PEs); empty for a run
    recorded_on: dict[str, Any] = field(default_factory=dict)
    switches: int = 0
    events: int = 0
    peak_flops_per_ps: float = 0.0
    clock_hz: int = 1
    flops: int = 0
    #: the flops at the 16-bit datapath's rate: a narrow datapath's MACs over the MACs a cell
    #: does on it per cycle (what the utilisations count against the array's peak)
    array_flops: float = 0.0
    #: the array's cell-cycles of work: MAC passes (an f32 MAC takes `pe.gemm.passes.f32`),
    #: a narrow datapath's MACs over its MACs a cell
    array_cycles: float = 0.0
    hbm_bytes: int = 0
    hbm_peak_bytes_per_ps: float = 0.0
    bounds: dict[str, tuple[int, str]] = field(default_factory=dict)  # name: (ps, how)
    #: what the kernel states of its run (`metrics()`): name: (value, how)
    metrics: dict[str, tuple[float, str]] = field(default_factory=dict)
    regions: list = field(default_factory=list)  # `sim.regions.Region`s, if named
    #: (pid, region, start, end) of each stretch of a PE's commands in a region
    region_spans: list[tuple[int, str, int, int]] = field(default_factory=list)
    trace: Trace | None = None  # what `run --record` writes (sim.trace_file)
    invariants: list[Invariant] = field(default_factory=list)  # physical checks (all held)
    critical_path: CriticalPath | None = None
    #: per PE, the most TCM its tensors and tile buffers held: (bytes, when in ps, kernel line)
    tcm_high_water: tuple[tuple[int, int, int], ...] = ()
    tcm_bytes: int = 0  # a PE's TCM
    #: `tl.repeat`'s repetitions: recorded, proven alike, copied, run (`Launch.repeats`)
    repeats: dict[str, int] = field(default_factory=dict)
    races: list[Race] | None = None  # data races between PEs, when looked for
    lines: list = field(default_factory=list)  # per PE, the kernel line of each command
    energy: Energy | None = None  # attojoules, by part (sim.energy)
    roofline: list[Roof] = field(default_factory=list)  # tightest first (sim.roofline)
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    outputs: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def verified(self) -> bool | None:
        """True/False after verification; None for a timing-only run."""
        if self.timing_only:
            return None
        return all(c.passed for c in self.checks)

    @property
    def max_abs_err(self) -> float | None:
        if self.timing_only or not self.checks:
            return None
        errors = [c.max_abs_err for c in self.checks]
        return float("nan") if any(e != e for e in errors) else max(errors)  # NaN: the worst
