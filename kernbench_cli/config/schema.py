"""What the hardware IS: the topology and cost-table schema.

Each section of a TOML file is a frozen dataclass below; each key is a field
declared with `key()`, which records its kind (and so its unit), its default,
what it means and where the default comes from. The loader
(`config.loader`) walks these declarations, and `config.reference` renders
them into docs/configuration.md, so the code, the validation and the
documentation cannot drift apart.

Keys without a default (the `[system]` shape) are required. Everything
else may be omitted and takes the documented default.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass, field, fields
from pathlib import Path
from typing import Any

from kernbench_cli.config import units
from kernbench_cli.errors import clip

REQUIRED = object()


class Frozen:
    """Base of the config classes: write-once fields, equality and repr by field.

    Not ``@dataclass(frozen=True)``: creating the ~25 classes of this module
    that way costs ~30 ms at import, a tenth of `kernbench decode`'s start-up
    (benchmarks/decode_startup.py); plain dataclasses on this base cost a
    quarter of that and behave the same: assigning a set field raises
    FrozenInstanceError, ``dataclasses.replace`` makes a changed copy.
    """

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def _values(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self))

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        inner = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return f"{type(self).__name__}({inner})"


config = dataclass(repr=False, eq=False)

# kind -> (parser of a TOML value, what the documentation calls its unit)
# Parsers raise ValueError with a message that says what was expected.


def _count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"expected a positive integer, got {clip(value)}")
    return _in_range(value)


def _offset(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError("expected a non-negative integer (hex allowed: 0x10_0000), "
                         f"got {clip(value)}")
    return _in_range(value)


def _in_range(value: int) -> int:
    if value >= units.LIMIT:
        raise ValueError(f"{clip(value)} is out of range: it must be below 2^62")
    return value


def _cycles(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"expected a non-negative integer, got {clip(value)}")
    return _in_range(value)


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {clip(value)}")
    return value


#: Characters of a TOML string (a name, a description, a path) worth holding: reports print
#: names and descriptions, and a path longer than the system's is no path.
MAX_STRING_CHARS = 4096


def _string(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {clip(value)}")
    if len(value) > MAX_STRING_CHARS:
        raise ValueError(f"a string of {len(value):,} characters; at most "
                         f"{MAX_STRING_CHARS:,}")
    if not value.isprintable():
        raise ValueError(f"{clip(value)} holds a control character (a terminal escape, a "
                         "newline)")
    return value


#: Characters of a name shown in reports (a topology's, a cost table's): a file name's.
MAX_NAME_CHARS = 255


def _name(value: object) -> str:
    value = _string(value)
    if len(value) > MAX_NAME_CHARS:
        raise ValueError(f"a name of {len(value):,} characters; at most {MAX_NAME_CHARS}")
    return value


def _dataflow(value: object) -> str:
    if value not in ("os", "ws", "is"):
        raise ValueError(f"expected \"os\", \"ws\" or \"is\" (output, weight or input "
                         f"stationary), got {clip(value)}")
    return value


def _sharing(value: object) -> str:
    if value not in ("fair", "circuit"):
        raise ValueError(f"expected \"fair\" (max-min fair sharing) or \"circuit\" (a "
                         f"transfer holds its whole path), got {clip(value)}")
    return value


def _mesh(value: object) -> tuple[int, int]:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v < 2**31
                   for v in value)
    ):
        raise ValueError(f"expected [columns, rows], two positive integers, got {clip(value)}")
    return (value[0], value[1])


def _positive(parse):
    def check(value: object) -> int:
        parsed = parse(value)
        if parsed <= 0:
            raise ValueError(f"must be greater than zero, got {clip(value)}")
        return parsed

    return check


KINDS: dict[str, tuple[Any, str]] = {
    "count": (_count, "integer >= 1"),
    "offset": (_offset, "byte offset (integer, hex allowed)"),
    "cycles": (_cycles, "integer >= 0 (cycles)"),
    "bool": (_bool, "true or false"),
    "string": (_string, "string"),
    "name": (_name, "string, at most 255 characters"),
    "path": (_string, "path, relative to this file"),
    "mesh": (_mesh, "[columns, rows]"),
    "dataflow": (_dataflow, '"os", "ws" or "is"'),
    "sharing": (_sharing, '"fair" or "circuit"'),
    "size": (_positive(units.parse_size), "size: B, KiB, MiB, GiB (or KB, MB, GB)"),
    "time": (units.parse_time_ps, "time: ps, ns, us, ms, s"),
    "frequency": (_positive(units.parse_frequency), "frequency: Hz, kHz, MHz, GHz"),
    "bandwidth": (_positive(units.parse_bandwidth), "bandwidth: B/s … TB/s, KiB/s … TiB/s"),
    "energy": (units.parse_energy, "energy: aJ, fJ, pJ, nJ, uJ"),
    "power": (units.parse_power, "power: uW, mW, W"),
}


def key(kind: str, default: Any = REQUIRED, doc: str = "", source: str = "",
        late: bool = False) -> Any:
    """Declare one TOML key: `default` is written as in the TOML file. A `late` key came after
    configurations' digests were published (in docs, saved results): `loader.config_digest`
    leaves it out while it holds its default, so those digests stay what they were."""
    parse = KINDS[kind][0]
    meta = {"kind": kind, "default": default, "doc": doc, "source": source, "late": late}
    if default is REQUIRED:
        return field(default=None, metadata=meta)
    value = parse(default)
    return field(default=value, metadata=meta)


def section(cls: type, doc: str, late: bool = False) -> Any:
    """Declare a sub-table whose keys are the fields of `cls` (`late`: as `key`'s)."""
    return field(default_factory=cls, metadata={"section": cls, "doc": doc, "late": late})


# ---------------------------------------------------------------------------
# Topology


@config
class SystemConfig(Frozen):
    racks: int = key("count", doc="Racks in the system.")
    sips_per_rack: int = key("count", doc="SIPs (system-in-package) per rack.")
    cubes_per_sip: int = key("count", doc="HBM cubes per SIP.")
    cube_mesh: tuple[int, int] = key(
        "mesh", doc="Cubes of a SIP as a 2D mesh [columns, rows]; UCIe links join neighbours.")
    pes_per_cube: int = key("count", doc="Processing elements per cube.")
    pe_mesh: tuple[int, int] = key(
        "mesh", doc="PEs of a cube as a 2D mesh [columns, rows]; NoC links join neighbours.")


@config
class SchedulerConfig(Frozen):
    queue_depth: int = key(
        "count", 8, "Commands the PE_SCHEDULER queue holds; a full queue stalls PE_CPU.",
        "A small in-order command FIFO, as in DMA/accelerator command queues.")


@config
class DmaConfig(Frozen):
    setup: int = key(
        "time", "20ns", "Fixed cost of one DMA transfer before its first byte moves.",
        "About 20 cycles of descriptor fetch and address translation at 1 GHz.")
    setup_overlap: bool = key(
        "bool", True, "A transfer's setup overlaps the streaming of the one before it (a "
        "two-stage pipeline: the next descriptor is prepared while the current one streams); "
        "false: setup starts only when the engine is idle.",
        "DMA engines fetch and translate the next descriptor while one streams.")
    outstanding: int = key(
        "size", "64KiB", "Bytes one transfer may have in flight (requests sent, not yet "
        "answered). A window of W bytes over a path with round trip R streams at most W bytes "
        "per R: the first W bytes at the path's bandwidth, each next W one round trip (or, if "
        "longer, W at the bandwidth) after the W before.",
        "64 outstanding requests of one 1 KiB HBM page each: the read-request limit of a PCIe-"
        "class DMA channel (AMD PG195 XDMA: 2-64 per channel).")


@config
class GemmPasses(Frozen):
    """How many times the array runs a GEMM's folds, by the wider operand's dtype."""

    f16: int = key("count", 1, "16-bit operands (f16, bf16): the array's native rate.",
                   "A bf16/f16 systolic array does one MAC per cell per cycle.")
    f32: int = key("count", 3, "32-bit operands (f32): each fold runs this many times.",
                   "f32 as three bf16 passes (bf16x3, as TPUs do for f32 at 'high' precision).")


@config
class GemmNarrow(Frozen):
    """MACs one array cell does per cycle on narrow operands, by the array's datapath."""

    fp8: int = key("count", 2, "fp8, fp8e5m2 and mxfp8 operands (mxfp8 x mxfp4 too).",
                   "NVIDIA H100 SXM datasheet: FP8 at twice BF16's tensor rate (3,958 against "
                   "1,979 TFLOPS, with sparsity).")
    int8: int = key("count", 2, "int8 operands (int8 x int4 too).",
                    "NVIDIA H100 SXM datasheet: INT8 at twice BF16's tensor rate (3,958 TOPS "
                    "against 1,979 TFLOPS, with sparsity).")
    fp4: int = key("count", 4, "mxfp4 operands.",
                   "NVIDIA DGX B200: FP4 at twice FP8's rate (144 against 72 PFLOPS), so four "
                   "times BF16's.")
    int4: int = key("count", 4, "int4 operands.",
                    "NVIDIA A100 datasheet: INT4 1,248 TOPS against BF16 312 TFLOPS (dense).")


@config
class GemmConfig(Frozen):
    rows: int = key("count", 16, "Systolic array rows (R).",
                    "A 16x16 bf16 array: 256 MAC/cycle, 0.5 TFLOP/s per PE at 1 GHz.")
    cols: int = key("count", 16, "Systolic array columns (C).", "As rows.")
    dataflow: str = key(
        "dataflow", "os", "What stays in the array: outputs (os), weights, i.e. B (ws), or "
        "inputs, i.e. A (is). Sets the GEMM cycle count (equal to SCALE-Sim 3.0.0's + 1).",
        "Output stationary, as the TPU-style arrays SCALE-Sim models by default.")
    passes: GemmPasses = section(GemmPasses, "Array passes per GEMM, by operand width.")
    macs_per_cell: GemmNarrow = section(
        GemmNarrow, "MACs per cell per cycle on narrow operands: each cell multiplies this "
        "many K elements at a time, so a GEMM takes the cycles of one with K divided by it "
        "(rounded up). Narrow operands of one family only (docs/model.md).", late=True)


@config
class MathOpCycles(Frozen):
    """Cycles one lane spends per element, by operation class."""

    add: int = key("count", 1, "add, sub, neg, abs, fill.", "One-cycle FP adder.")
    mul: int = key("count", 1, "mul.", "One-cycle pipelined FP multiplier.")
    div: int = key("count", 4, "div, reciprocal.", "Iterative divider, about 4x a multiply.")
    cmp: int = key("count", 1, "maximum, minimum, where.", "One-cycle comparator.")
    exp: int = key("count", 4, "exp, tanh, erf.", "Special-function unit, about 4x a multiply.")
    log: int = key("count", 4, "log.", "Special-function unit.")
    sqrt: int = key("count", 4, "sqrt, rsqrt.", "Special-function unit.")
    reduce: int = key("count", 1, "max and sum reductions, per input element.",
                      "A reduction tree consumes one element per lane per cycle.")
    cast: int = key("count", 1, "dtype conversion (quantising to a narrow format too).",
                    "One-cycle converter.")
    dequant: int = key("count", 1, "dequantising a narrow element (fp8, int8, int4, MX) to "
                       "bf16 or f32, its scale applied.", "One-cycle converter, as cast.",
                       late=True)


@config
class MathLatency(Frozen):
    """Pipeline depth by operation class: cycles from a command's last element entering the
    pipeline to its result being ready for a dependent command."""

    add: int = key("cycles", 4, "add, sub, neg, abs, fill.", "A 4-stage FP32 adder.")
    mul: int = key("cycles", 4, "mul.", "A 4-stage FP32 multiplier (FMA-class pipeline).")
    div: int = key("cycles", 12, "div, reciprocal.", "Iterative divider: about 3x a multiply.")
    cmp: int = key("cycles", 2, "maximum, minimum, where.", "A 2-stage comparator.")
    exp: int = key("cycles", 8, "exp, tanh, erf.", "Special-function unit: table lookup and a "
                   "polynomial, about 2x a multiply.")
    log: int = key("cycles", 8, "log.", "Special-function unit.")
    sqrt: int = key("cycles", 8, "sqrt, rsqrt.", "Special-function unit.")
    reduce: int = key("cycles", 8, "max and sum reductions.", "A 32-lane tree: 5 levels of "
                      "adders plus the final lane merge.")
    cast: int = key("cycles", 2, "dtype conversion.", "A 2-stage converter.")
    dequant: int = key("cycles", 2, "dequantisation.", "A 2-stage converter, as cast.",
                       late=True)


@config
class MathConfig(Frozen):
    lanes: int = key("count", 32, "Vector lanes of PE_MATH (elements per cycle).",
                     "A 32-lane FP32 vector unit (1 KiB/cycle of operands).")
    op_cycles: MathOpCycles = section(MathOpCycles, "Cycles per element per lane, by op class.")
    latency: MathLatency = section(MathLatency, "Pipeline latency by op class (cycles).")


@config
class TcmConfig(Frozen):
    size: int = key("size", "2MiB", "Tightly coupled memory of one PE (GEMM tiles live here).",
                    "A few MiB of SRAM on the HBM base die per PE.")


@config
class IpcqConfig(Frozen):
    slots: int = key("count", 4, "Ring slots per direction (E, W, N, S); also the credits.",
                     "Small rings: enough to pipeline a tree reduction.")
    slot_size: int = key("size", "4KiB", "Bytes per slot; a larger message uses several slots.",
                         "One 4 KiB page per slot.")


@config
class RangeSpec(Frozen):
    """One PE component's address range inside the PE resource window."""

    start: int = key("offset", 0, "Offset of the range in the PE's 1 GiB resource window.")
    size: int = key("size", "4KiB", "Bytes in the range.")


def _range(start: int, size: str, doc: str) -> Any:
    spec = RangeSpec(start=start, size=units.parse_size(size))
    meta = {"section": RangeSpec, "doc": doc, "default": {"start": start, "size": size}}
    return field(default=spec, metadata=meta)


@config
class ResourcesConfig(Frozen):
    """ADR-0031 D2: the PE component ranges, answered by configuration.

    Offsets are within one PE's resource window (the 30 bits ext:sub_offset
    of a PE-unit address). Gaps between ranges are reserved.
    """

    tcm: RangeSpec = _range(0x0000_0000, "16MiB", "TCM; starts at 0 so pe_tcm_addr keeps its "
                            "pre-ADR-0031 bits too (D4 keeps its signature and meaning). "
                            "Must hold pe.tcm.size.")
    ipcq: RangeSpec = _range(0x0100_0000, "16MiB", "IPCQ rings: 4 directions x slots x "
                             "slot_size. Must hold them.")
    scratchpad: RangeSpec = _range(0x0200_0000, "1MiB", "PE scratchpad.")
    regfile: RangeSpec = _range(0x0300_0000, "64KiB", "Register file, memory-mapped.")
    status: RangeSpec = _range(0x0301_0000, "4KiB", "Status and sideband registers.")


@config
class PeConfig(Frozen):
    clock: int = key("frequency", "1GHz", "Clock of every PE engine.",
                     "Logic on an HBM base die runs near 1 GHz.")
    scheduler: SchedulerConfig = section(SchedulerConfig, "PE_SCHEDULER.")
    dma: DmaConfig = section(DmaConfig, "PE_DMA.")
    gemm: GemmConfig = section(GemmConfig, "PE_GEMM, a systolic array.")
    math: MathConfig = section(MathConfig, "PE_MATH, the vector unit.")
    tcm: TcmConfig = section(TcmConfig, "Tightly coupled memory.")
    ipcq: IpcqConfig = section(IpcqConfig, "Inter-PE command queues (rings).")
    resources: ResourcesConfig = section(ResourcesConfig, "PE resource ranges (ADR-0031).")


@config
class HbmConfig(Frozen):
    slice_size: int = key(
        "size", "1GiB", "HBM bytes owned by one PE (its slice of the cube).",
        "A 16 GiB HBM3 stack shared by 16 PEs.")
    bandwidth: int = key(
        "bandwidth", "51.2GB/s", "Peak bandwidth of one PE's slice.",
        "One HBM3 channel: 64 bits x 6.4 Gb/s = 51.2 GB/s (JESD238; 16 per stack = 819 GB/s).")
    latency: int = key("time", "100ns", "Access latency of an HBM read or write.",
                       "Typical loaded HBM access latency, about 100 ns.")
    refresh_interval: int = key(
        "time", "3.9us", "tREFI: time between all-bank refreshes.",
        "JESD238 HBM3 tREFI = 3.9 us (Ramulator2 HBM3 preset: nREFI 6240 at 0.625 ns).")
    refresh_time: int = key(
        "time", "260ns", "tRFC: time a refresh takes the slice away; streams run at "
        "1 - refresh_time / refresh_interval of the bandwidth (0ns: no refresh).",
        "JESD238 tRFCab for an 8 Gb HBM3 die (Table 84, as Ramulator2 derives it): 260 ns, "
        "so streams get 93.3% of the pin rate.")
    page_size: int = key(
        "size", "1KiB", "DRAM row (page) of one channel: an access opens every page it "
        "touches.", "HBM3 pseudo-channel row: 256 columns x 32 bits (Ramulator2 HBM3).")
    activate_window: int = key(
        "time", "15ns", "tFAW: a channel opens at most 4 rows per window, so a transfer "
        "that opens P pages takes at least P x tFAW / (4 x channels).",
        "Ramulator2 HBM3_6400Mbps: nFAW 24 x 0.625 ns = 15 ns.")
    channels: int = key(
        "count", 1, "HBM channels in one PE's slice (each has its own activate window).",
        "One HBM3 channel of 51.2 GB/s per PE, as hbm.bandwidth.")


@config
class SramConfig(Frozen):
    size: int = key("size", "8MiB", "Cube-shared SRAM (unit_type SRAM), reached over the "
                    "cube's NoC at PE 0's router.", "A few MiB of shared buffer on the base die.")
    bandwidth: int = key("bandwidth", "256GB/s", "Peak bandwidth of the SRAM's port, shared by "
                         "every PE of the cube.", "A 256 B/cycle port at 1 GHz.")
    latency: int = key("time", "20ns", "Access latency of an SRAM read or write.",
                       "About 20 cycles for a large on-die SRAM.")


@config
class LinkConfig(Frozen):
    bandwidth: int = key("bandwidth", "64GB/s", "Bandwidth of one link, each direction.")
    latency: int = key("time", "2ns", "Latency of one traversal (per hop on a mesh).")


def _link(bandwidth: str, latency: str, doc: str, source: str) -> Any:
    spec = LinkConfig(bandwidth=units.parse_bandwidth(bandwidth),
                      latency=units.parse_time_ps(latency))
    meta = {"section": LinkConfig, "doc": doc, "source": source,
            "default": {"bandwidth": bandwidth, "latency": latency}}
    return field(default=spec, metadata=meta)


@config
class NetworkConfig(Frozen):
    sharing: str = key(
        "sharing", "fair", "How concurrent transfers share an HBM slice, the SRAM port and the "
        "links: \"fair\", max-min fair shares re-solved whenever a transfer starts or ends; "
        "\"circuit\", each transfer holds every resource of its path for its whole duration "
        "(the first-round model, kept for comparison).",
        "Max-min fairness (progressive filling): the rule of flow-level network simulators "
        "(ASTRA-sim's analytical backend, SimGrid).")


# ---------------------------------------------------------------------------
# Energy

_FGDRAM = ("FGDRAM (O'Connor et al., MICRO 2017) HBM energy breakdown, as AttAcc's "
           "src/config.py tabulates it: ")
_HOROWITZ = "Horowitz, 'Computing's energy problem' (ISSCC 2014), 45 nm figures, not scaled"
_OPERANDS = ("; plus its operands read from and result written to TCM: 3 x 32 bits at "
             "energy.tcm (0.31 pJ/bit) = 29.8 pJ")


@config
class MathEnergy(Frozen):
    """Energy of one PE_MATH element, by op class: the operation and its operands' TCM
    accesses (a vector unit reads its inputs from TCM and writes its result back)."""

    add: int = key("energy", "30.7pJ", "add, sub, neg, abs, fill.",
                   f"{_HOROWITZ}: f32 add 0.9 pJ{_OPERANDS}.")
    mul: int = key("energy", "33.5pJ", "mul.", f"{_HOROWITZ}: f32 multiply 3.7 pJ{_OPERANDS}.")
    div: int = key("energy", "44.8pJ", "div, reciprocal.",
                   f"Estimate: an iterative divider, 4 f32 multiplies (15 pJ){_OPERANDS}.")
    cmp: int = key("energy", "30.7pJ", "maximum, minimum, where.", f"As an f32 add{_OPERANDS}.")
    exp: int = key("energy", "44.8pJ", "exp, tanh, erf.",
                   f"Estimate: a special-function unit, 4 f32 multiplies{_OPERANDS}.")
    log: int = key("energy", "44.8pJ", "log.", "As exp.")
    sqrt: int = key("energy", "44.8pJ", "sqrt, rsqrt.", "As exp.")
    reduce: int = key("energy", "10.8pJ", "max and sum reductions, per input element.",
                      f"{_HOROWITZ}: an f32 add 0.9 pJ and one 32-bit TCM read (9.9 pJ).")
    cast: int = key("energy", "20.7pJ", "dtype conversion.",
                    "Estimate: an add-class converter 0.9 pJ, a 32-bit TCM read and write.")
    dequant: int = key("energy", "8.5pJ", "dequantising a narrow element.",
                       f"Estimate: {_HOROWITZ}: an f16 multiply by the scale 1.1 pJ, an 8-bit "
                       "TCM read and a 16-bit TCM write at energy.tcm (7.4 pJ).", late=True)


@config
class EnergyConfig(Frozen):
    """What each counted action costs (docs: the energy model). A run's energy is each
    count times its entry, plus static power times the latency, exactly (integer
    attojoules)."""

    hbm_activate: int = key(
        "energy", "0.11pJ", "Per bit of every DRAM page an HBM access opens (ACT and PRE): "
        "an activate of a 1 KiB page costs 8192 x this; a stream that reads whole pages pays "
        "it once per bit, 64 B rows 8 KiB apart pay a page each.",
        _FGDRAM + "cell ACT/PRE 0.11 pJ/bit.")
    hbm_cell: int = key("energy", "0.44pJ", "Per bit read or written: the cell array.",
                        _FGDRAM + "cell RD/WR 0.44 pJ/bit.")
    hbm_column: int = key(
        "energy", "1.01pJ", "Per bit: column decoder to the bank-group multiplexer.",
        _FGDRAM + "1.01 pJ/bit.")
    hbm_bank_group: int = key(
        "energy", "1.23pJ", "Per bit: bank-group multiplexer to the global I/O.",
        _FGDRAM + "1.23 pJ/bit.")
    hbm_tsv: int = key(
        "energy", "0.5pJ", "Per bit: the TSVs down to the logic die, where the PEs sit (so "
        "every HBM access pays it; a transfer to another cube then pays its UCIe links).",
        _FGDRAM + "TSV 0.5 pJ/bit (AttAcc's buffer-die PIM pays the first five terms).")
    tcm: int = key(
        "energy", "0.31pJ", "Per bit PE_DMA writes into or reads out of a PE's TCM (every "
        "byte a load, store, send or receive moves touches TCM once).",
        _HOROWITZ + ": a 32 KB SRAM, 20 pJ per 64-bit access (a TCM is built of such banks). "
        "By the size of the bank an access reaches: 8 KB 0.16, 32 KB 0.31, 1 MB 1.56 "
        "pJ/bit.")
    sram: int = key("energy", "1.56pJ", "Per bit through the cube-shared SRAM's port.",
                    _HOROWITZ + ": a 1 MB SRAM, 100 pJ per 64-bit access (size classes as "
                    "energy.tcm's).")
    ipcq: int = key(
        "energy", "0.62pJ", "Per bit of an IPCQ message: written into a ring slot and read "
        "out of it.", "Two accesses of a 32 KB-class SRAM (energy.tcm) per bit.")
    noc: int = key("energy", "0.15pJ", "Per bit per NoC link crossed (each hop).",
                   "Estimate: about 1 mm of on-die wire at ~0.1 pJ/bit/mm plus a router.")
    ucie: int = key("energy", "0.3pJ", "Per bit per UCIe link crossed (between cubes).",
                    _FGDRAM + "silicon interposer I/O 0.3 pJ/bit.")
    sip_link: int = key(
        "energy", "1.3pJ", "Per bit over a SIP's link to the rack switch.",
        "AttAcc's src/config.py figure for a device's off-package link (1.3 pJ/bit).")
    rack_link: int = key(
        "energy", "30pJ", "Per bit over a rack's link to the system network.",
        "Estimate: a 400 Gb/s optical port draws about 12 W: 12 W / 400 Gb/s = 30 pJ/bit.")
    gemm_mac: int = key(
        "energy", "2.1pJ", "Per MAC of one array pass on the 16-bit datapath (an f32 GEMM runs "
        "pe.gemm.passes.f32 passes, and pays for each), operand delivery from TCM included; "
        "narrow datapaths: the gemm_mac_* keys.",
        _HOROWITZ + ": f16 multiply 1.1 pJ + add 0.4 pJ, plus each 16-bit operand read "
        "from TCM (0.31 pJ/bit) shared by the 16 cells of a row or column: ~0.6 pJ.")
    gemm_mac_fp8: int = key(
        "energy", "0.91pJ", "Per MAC of a GEMM the array runs on its fp8 datapath "
        "(pe.gemm.macs_per_cell.fp8).",
        f"Estimate: {_HOROWITZ}: an 8-bit multiply 0.2 pJ, an f16 add 0.4 pJ, and each 8-bit "
        "operand from TCM shared by 16 cells (0.31 pJ).", late=True)
    gemm_mac_int8: int = key(
        "energy", "0.61pJ", "Per MAC of a GEMM on the array's int8 datapath.",
        f"{_HOROWITZ}: 8-bit multiply 0.2 pJ, 32-bit add 0.1 pJ, plus 8-bit operands from "
        "TCM shared by 16 cells (0.31 pJ).", late=True)
    gemm_mac_fp4: int = key(
        "energy", "0.6pJ", "Per MAC of a GEMM on the array's fp4 datapath (mxfp4).",
        f"Estimate: {_HOROWITZ}: a 4-bit multiply a quarter of an 8-bit one (0.05 pJ), an "
        "f16 add 0.4 pJ, 4-bit operands from TCM shared by 16 cells (0.16 pJ).", late=True)
    gemm_mac_int4: int = key(
        "energy", "0.31pJ", "Per MAC of a GEMM on the array's int4 datapath.",
        f"Estimate: {_HOROWITZ}: a 4-bit multiply 0.05 pJ, a 32-bit add 0.1 pJ, 4-bit operands "
        "from TCM shared by 16 cells (0.16 pJ).", late=True)
    math: MathEnergy = section(MathEnergy, "PE_MATH, per element, by op class.")
    cpu_command: int = key(
        "energy", "100pJ", "Per command PE_CPU issues.",
        "Estimate: 4 cycles (the default issue cost) of a small in-order core at ~25 pJ per "
        "instruction.")
    scheduler_command: int = key(
        "energy", "20pJ", "Per command PE_SCHEDULER queues and dispatches.",
        "Estimate: a queue write, a read and a dispatch: a few small-SRAM accesses.")
    pe_static: int = key(
        "power", "20mW", "Static (leakage) power of one PE (its engines and TCM), for the "
        "whole latency.", "Estimate: leakage of a few mm^2 of logic and 2 MiB of SRAM.")
    cube_static: int = key(
        "power", "1W", "Static power of one HBM cube (standby and refresh), for the whole "
        "latency.", "Estimate: an HBM stack's background power is of the order of 1 W "
        "(JESD238 IDD2N and refresh currents at 1.1 V).")


# ---------------------------------------------------------------------------
# Cost table (ADR-0064)


@config
class IssueCosts(Frozen):
    """PE_CPU time to construct a command and push it to the scheduler (ADR-0064 D1)."""

    composite: int = key("time", "40ns", "tl.composite: build a GEMM descriptor and push it.",
                         "ADR-0064 Q1 estimate (~40 ns).")
    load: int = key("time", "4ns", "tl.load: a DMA descriptor.",
                    "ADR-0064 D1: a few ns (4 ns: kernbench's pick).")
    store: int = key("time", "4ns", "tl.store: a DMA descriptor.", "ADR-0064 D1.")
    dot: int = key("time", "4ns", "tl.dot: one GEMM command.", "ADR-0064 D1.")
    math: int = key("time", "4ns", "One PE_MATH command (exp, max, sum, +, …).", "ADR-0064 D1.")
    send: int = key("time", "4ns", "tl.send: one IPCQ message.", "ADR-0064 D1.")
    recv: int = key("time", "4ns", "tl.recv: one IPCQ receive.", "ADR-0064 D1.")
    wait: int = key("time", "4ns", "tl.wait: a completion check.",
                    "kernbench's, as ADR-0064 D1's primitives (its table has no tl.wait).")


@config
class SchedulerCosts(Frozen):
    plan: int = key("time", "0ns", "PE_SCHEDULER time to plan one composite's tiles.",
                    "ADR-0064 D3: zero until a workload shows it matters.")


@config
class CostTable(Frozen):
    name: str = key("name", "", "Name shown in reports; defaults to the file name.")
    issue: IssueCosts = section(IssueCosts, "PE_CPU issue cost per op kind.")
    scheduler: SchedulerCosts = section(SchedulerCosts, "PE_SCHEDULER costs.")
    source: Path | None = field(default=None, metadata={"internal": True})


@config
class Topology(Frozen):
    """A whole system: its shape, its engines, its links and its cost table."""

    name: str = key("name", "", "Name shown in reports; defaults to the file name.")
    description: str = key("string", "", "One line about this configuration.")
    costs: str = key("path", "", "Cost table (ADR-0064 issue costs); empty means the shipped "
                     "topologies/costs/default.toml. `--costs` overrides.")
    system: SystemConfig = section(SystemConfig, "Shape of the system (all keys required).")
    pe: PeConfig = section(PeConfig, "One processing element.")
    hbm: HbmConfig = section(HbmConfig, "HBM, per PE slice.")
    sram: SramConfig = section(SramConfig, "Cube-shared SRAM.")
    noc: LinkConfig = _link("64GB/s", "2ns", "Intra-cube NoC, one mesh link between neighbour PEs.",
                            "64 B/cycle at 1 GHz; 2 cycles per hop.")
    ucie: LinkConfig = _link("256GB/s", "10ns", "UCIe link between neighbour cubes of a SIP.",
                             "UCIe 1.0 advanced package, x64 at 32 GT/s = 256 GB/s.")
    sip_link: LinkConfig = _link("100GB/s", "500ns", "Link from a SIP to its rack's switch.",
                                 "A scale-up serdes link of 800 Gb/s.")
    rack_link: LinkConfig = _link("50GB/s", "2us", "Link from a rack to the system network.",
                                  "One 400 Gb/s Ethernet port.")
    network: NetworkConfig = section(NetworkConfig, "How transfers share memories and links.")
    energy: EnergyConfig = section(EnergyConfig, "What each counted action costs in energy.")
    # Filled by the loader, not read from TOML:
    source: Path | None = field(default=None, metadata={"internal": True})
    cost_table: CostTable = field(default_factory=CostTable, metadata={"internal": True})
    overrides: tuple[str, ...] = field(default=(), metadata={"internal": True})  # --set items

    @property
    def num_pes(self) -> int:
        s = self.system
        return s.racks * s.sips_per_rack * s.cubes_per_sip * s.pes_per_cube

    @property
    def num_cubes(self) -> int:
        s = self.system
        return s.racks * s.sips_per_rack * s.cubes_per_sip
