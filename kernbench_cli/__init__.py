"""kernbench: run Triton-like kernels on a discrete-event model of an HBM near-memory
accelerator (rack > SIP > cube > PE) and report where the time went.

The package is also the Python API (docs/api.md), under the CLI::

    import kernbench_cli as kb

    result = kb.run("gqa_attention", topology="sip", params={"seq_len": 8192},
                    set={"pe.gemm.rows": 8}, timing_only=True)
    result.latency_ps, result.engines["gemm"].utilization, result.to_dict()  # = run --json

`run`, `replay`, `bounds`, `sweep`, `load_sweep`, `compare`, `sensitivity`, `load_kernel`,
`load_topology`, `load_trace` and the result types are looked up here on first use (module
`__getattr__`), so ``import kernbench_cli`` loads nothing heavy: `kernbench decode` starts
as fast as before.
"""

__version__ = "0.2.0"

#: Public name -> the module that defines it, imported when the name is first used.
_LAZY = {
    "run": "kernbench_cli.api.runs",
    "replay": "kernbench_cli.api.runs",
    "bounds": "kernbench_cli.api.bounds",
    "Bounds": "kernbench_cli.api.bounds",
    "load_kernel": "kernbench_cli.api.runs",
    "load_topology": "kernbench_cli.api.runs",
    "load_trace": "kernbench_cli.api.runs",
    "sweep": "kernbench_cli.api.sweeps",
    "load_sweep": "kernbench_cli.api.sweeps",
    "compare": "kernbench_cli.api.comparison",
    "sensitivity": "kernbench_cli.api.sensitivity",
    "Sensitivity": "kernbench_cli.api.sensitivity",
    "Change": "kernbench_cli.api.sensitivity",
    "Result": "kernbench_cli.api.result",
    "Engine": "kernbench_cli.api.result",
    "Check": "kernbench_cli.api.result",
    "Bound": "kernbench_cli.api.result",
    "CriticalPath": "kernbench_cli.api.result",
    "TcmHighWater": "kernbench_cli.api.result",
    "Energy": "kernbench_cli.api.result",
    "SweepResult": "kernbench_cli.api.sweeps",
    "SweepPoint": "kernbench_cli.api.sweeps",
    "Comparison": "kernbench_cli.api.comparison",
    "PandasMissing": "kernbench_cli.api.tables",
    # the exceptions the calls raise (docs/api.md, "Errors"): the root, then its subclasses
    "KernbenchError": "kernbench_cli.errors",
    "ArgumentError": "kernbench_cli.errors",
    "ConfigError": "kernbench_cli.errors",
    "AddressError": "kernbench_cli.errors",
    "ParamError": "kernbench_cli.errors",
    "KernelError": "kernbench_cli.errors",
    "DeadlockError": "kernbench_cli.errors",
    "VerificationError": "kernbench_cli.errors",
    "RaceError": "kernbench_cli.errors",
    "OutputError": "kernbench_cli.errors",
    "SweepError": "kernbench_cli.errors",
    "TraceError": "kernbench_cli.sim.trace_file",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    """A public name, imported from its module on first use and kept here."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kernbench_cli' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
