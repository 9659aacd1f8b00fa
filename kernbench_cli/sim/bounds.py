"""A kernel's analytic lower bounds: what its `bounds(topology, p)` states, with nothing
simulated (`kernbench run --bounds-only`), the largest of them (the run's lower bound), and
the check every run makes that its latency is at least each one.

A kernel module may define ``bounds(topology, p) -> {name: (picoseconds, how)}``: `p` is
its parameters as the run takes them (defaults, presets and ``-p`` items), `topology` the
loaded configuration (`config.schema.Topology`, ``--set`` items applied). Each value is a
latency no run of those parameters on that topology can beat, worked out from the
configuration alone (`lang.bounds` has the terms); `how` says how, in a line.
"""

from __future__ import annotations

from typing import Any

from kernbench_cli.errors import KernbenchError, KernelError, ParamError, clip
from kernbench_cli.fileio import MOST_NAME, json_number, named_numbers
from kernbench_cli.lang.confine import Interrupted, confined, printing_to_stderr
from kernbench_cli.lang.watchdog import hook_watch
from kernbench_cli.sim.kernels import KernelModule, files_read


def declares(kernel: KernelModule) -> bool:
    """Whether the kernel module defines `bounds()`."""
    return hasattr(kernel.module, "bounds")


def stated(kernel: KernelModule, topology, params: dict[str, Any]) -> dict[str, tuple[int, str]]:
    """The kernel's `bounds()` for `params` on `topology`, checked. ParamError (bad input,
    exit 2) if it declares none, or if it rejects the parameters with a ValueError as a
    setup does; a KernelError for anything else it raises or a malformed answer."""
    if not declares(kernel):
        raise ParamError(f"{kernel.name} declares no bounds(): it states no lower bound to "
                         "show (docs/kernels.md says how a kernel states one)")
    try:  # what it prints goes to stderr (--json on stdout stays JSON), its code confined
        with printing_to_stderr(), confined(), hook_watch():
            found = kernel.fn("bounds")(topology, dict(params))
    except (KernbenchError, Interrupted):
        raise
    except ValueError as exc:
        raise ParamError(f"{kernel.name}: {exc}") from None
    except BaseException as exc:
        from kernbench_cli.sim.hooks import located

        raise located(kernel, exc, "bounds") from exc
    return checked(kernel, found)


def stated_for(kernel: KernelModule, amap, params: dict[str, Any]
               ) -> tuple[dict[str, tuple[int, str]], dict[str, str]]:
    """`stated` for `--bounds-only` (and `kb.bounds`, a bounds-only sweep's points): only
    for a configuration the run would set up. The kernel's setup is made first, shapes
    only (`Host` of a timing-only run: nothing drawn, nothing run), so what the run
    refuses before its first command (inputs that overflow an HBM slice, a model that
    does not fit) is refused here, with the run's message, not given a bound. With the
    digests of the files the parameters name (`kernels.files_read`), as a run has them."""
    from kernbench_cli.hw.system import System
    from kernbench_cli.lang.memory import Memory
    from kernbench_cli.sim import hooks
    from kernbench_cli.sim.host import Host

    with files_read(kernel, params) as digests:
        if declares(kernel):  # one that declares none is refused by `stated`, setup or not
            with printing_to_stderr(), confined():
                hooks.setup(kernel, Host(System(amap), Memory(backed=False), 0, True,
                                                 bounds_only=True), params)
        found = stated(kernel, amap.topology, params)
    return found, digests


def checked(kernel: KernelModule, bounds: Any) -> dict[str, tuple[int, str]]:
    """`bounds`, a `bounds()` answer, each time a Python int (a numpy integer taken as its
    value): KernelError unless a dict of name: (ps, how)."""
    found = named_numbers(bounds, lambda ps: isinstance(ps, int) and json_number(ps)
                          and ps >= 0)
    if found is None:
        raise KernelError(f"{kernel.shown}: bounds() must return a dict of name (1 to "
                          f"{MOST_NAME} printable characters): (picoseconds within 64 bits, "
                          "how), not " + clip(bounds))
    return found


def largest(bounds: dict[str, tuple[int, str]]) -> tuple[str, int] | None:
    """(name, ps) of the largest bound (the first name of equal ones), or None if none."""
    if not bounds:
        return None
    name = min(bounds, key=lambda n: (-bounds[n][0], n))
    return name, bounds[name][0]


def check_latency(kernel: str, latency_ps: int, bounds: dict[str, tuple[int, str]]) -> None:
    """KernelError if `latency_ps` is below a bound the kernel states: then the bound is not
    one (a bug in the kernel's `bounds()`, or in kernbench's model)."""
    for name, (ps, how) in sorted(bounds.items()):
        if latency_ps < ps:
            raise KernelError(f"{kernel}: the latency, {latency_ps:,} ps, is below the {name} "
                              f"bound bounds() states, {ps:,} ps ({how}): that bound is not a "
                              "lower bound (a bug in the kernel's bounds() or in kernbench's "
                              "model, please report it)")
