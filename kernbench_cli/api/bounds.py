"""`kb.bounds`: a kernel's analytic lower bounds on a topology, with nothing simulated
(`kernbench run --bounds-only`): a frozen `Bounds`, the `--json` object with typed fields.

It loads the topology and the kernel, reads the parameters as `kb.run` does, makes the
kernel's setup shapes only (what the run refuses before its first command is refused, with
the run's message), and calls the kernel's `bounds(topology, p)`: no values, no run, so it
answers in a second or so where the run may take minutes. A kernel without `bounds()` is a
`ParamError`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernbench_cli.api.result import MADE, ReadOnly, check_fields, frozen, json_copy, sealed
from kernbench_cli.config.schema import Topology
from kernbench_cli.lang.watchdog import holds_caller_timer

if TYPE_CHECKING:
    from kernbench_cli.api.runs import Params, Sets
    from kernbench_cli.sim.kernels import KernelModule


@dataclass(frozen=True)
class Bounds:
    """The bounds a kernel states for one point, as `run --bounds-only --json` prints them:
    `bounds_ps` (name: ps) and `bounds_how` (name: how), and the largest of them,
    `lower_bound` (its name) and `lower_bound_ps`: a latency no run of these parameters on
    this topology can beat. None of them is a prediction of the latency; `analytic` says
    so."""

    kernel: str
    params: Mapping[str, Any]
    topology: str
    costs: str
    topology_digest: str
    costs_digest: str
    overrides: tuple[str, ...]
    pes: int
    bounds_ps: Mapping[str, int]
    bounds_how: Mapping[str, str]
    lower_bound: str | None
    lower_bound_ps: int | None
    analytic: bool = True
    #: per parameter naming a file the kernel read (a model's config.json), its digest
    file_digests: Mapping[str, str] = field(default_factory=lambda: ReadOnly({}))
    #: the kernbench that stated them (its model is in its code: empty before it was kept)
    kernbench_version: str = ""
    _json: str = field(default="{}", repr=False)
    _made: Any = field(default=None, repr=False, compare=False)  # `sealed`

    def __post_init__(self) -> None:
        sealed(self, "Bounds.from_dict(data)")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Bounds:
        """The bounds a `run --bounds-only --json` object (or a sweep row's) describes;
        `ArgumentError` naming the key if `data` is not one (a key missing or of another
        type)."""
        data, text = json_copy(data, "Bounds.from_dict")
        check_fields(cls, data, "", "Bounds.from_dict")
        names = {f.name for f in fields(cls)} - {"_json", "_made"}
        return cls(**{k: frozen(v) for k, v in data.items() if k in names}, _json=text,
                   _made=MADE)

    def __repr__(self) -> str:
        return (f"Bounds(kernel={self.kernel!r}, topology={self.topology!r}, "
                f"overrides={self.overrides!r}, lower_bound={self.lower_bound!r}, "
                f"lower_bound_ps={self.lower_bound_ps})")

    def to_dict(self) -> dict[str, Any]:
        """The `run --bounds-only --json` object (a fresh copy)."""
        return json.loads(self._json)


@holds_caller_timer
def bounds(kernel: str | Path | KernelModule, topology: str | Path | Topology | None = None,
           *, params: Params = None, set: Sets = None,  # `set`, as the CLI says it
           costs: str | Path | None = None) -> Bounds:
    """The analytic lower bounds `kernel` states on `topology` for `params`: `kernbench run
    KERNEL --bounds-only`. Arguments as `kb.run` takes them; the setup is made shapes only,
    nothing is run. ``to_dict()`` is what ``run --bounds-only --json`` prints. A kernel that
    declares no `bounds()`, or whose `bounds()` or setup rejects the parameters, raises
    `ParamError`."""
    from kernbench_cli.api.runs import compiled, load_kernel
    from kernbench_cli.report.bounds import stated
    from kernbench_cli.sim.kernels import KernelModule, param_items

    module = kernel if isinstance(kernel, KernelModule) else load_kernel(kernel)
    amap = compiled(topology, costs, set)
    return Bounds.from_dict(stated(module, amap, param_items(params)))
