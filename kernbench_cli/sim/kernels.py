"""Kernel modules: found by name in kernels/ or by path, and their parameters.

A kernel module defines:

``PARAMS``
    parameter names and defaults; a default's type is the parameter's type
    (int, float, bool or str).
``CHOICES`` (optional)
    allowed values of str parameters.
``PRESETS`` (optional)
    ``{param: {value: {other params}}}``: choosing the value sets the others
    (``-p model=llama3-8b``), unless given explicitly too.
``setup(host, p)``
    allocates and fills the inputs through `host` (seeded) and returns the
    kernel's keyword arguments; raise ``ValueError`` for parameters that
    cannot run (the message is shown to the user).
``kernel(tl, **args)``
    the `tl` kernel every PE runs.
``reference(host, p)``
    the expected outputs, by name, computed with numpy from ``host.inputs``.
``outputs(host, args, p)``
    the outputs the kernel wrote, read back from memory, by the same names.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from kernbench_cli.errors import ParamError
from kernbench_cli.resources import data_dir

REQUIRED_NAMES = ("PARAMS", "setup", "kernel", "reference", "outputs")


@dataclass(frozen=True)
class KernelModule:
    name: str
    path: Path
    shown: str  # how messages name the file
    module: ModuleType

    @property
    def params(self) -> dict[str, Any]:
        return self.module.PARAMS

    @property
    def choices(self) -> dict[str, tuple]:
        return getattr(self.module, "CHOICES", {})

    @property
    def presets(self) -> dict[str, dict[str, dict[str, Any]]]:
        return getattr(self.module, "PRESETS", {})

    def fn(self, name: str) -> Callable:
        return getattr(self.module, name)


def shipped_kernels() -> list[str]:
    return sorted(p.stem for p in data_dir("kernels").glob("*.py") if not p.stem.startswith("_"))


def load_kernel(spec: str) -> KernelModule:
    """A shipped kernel by name, or a kernel file by path."""
    path = Path(spec)
    if path.suffix == ".py" or len(path.parts) > 1:
        if not path.is_file():
            raise ParamError(f"no kernel file {spec!r}")
        shown = spec
    else:
        path = data_dir("kernels") / f"{spec}.py"
        if not path.is_file():
            raise ParamError(f"unknown kernel {spec!r} (shipped: {', '.join(shipped_kernels())};"
                              " or give a path to a .py file)")
        shown = f"kernels/{spec}.py"
    module_name = f"kernbench_kernel_{path.stem}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader_spec)
    sys.path.insert(0, str(path.parent))  # a kernel may import helpers beside it
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:
        line = _line_in(exc, str(path))
        raise ParamError(f"{shown}:{line}: loading the kernel failed: "
                          f"{type(exc).__name__}: {exc}") from None
    finally:
        sys.path.remove(str(path.parent))
    missing = [n for n in REQUIRED_NAMES if not hasattr(module, n)]
    if missing:
        raise ParamError(f"{shown}: a kernel module must define {', '.join(missing)}")
    sys.modules.pop(module_name, None)
    return KernelModule(path.stem, path.resolve(), shown, module)


def _line_in(exc: BaseException, filename: str) -> int | str:
    tb, line = exc.__traceback__, "?"
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    if isinstance(exc, SyntaxError) and exc.lineno:
        line = exc.lineno
    return line


def parse_params(kernel: KernelModule, overrides: list[str]) -> dict[str, Any]:
    """Defaults, then presets, then ``name=value`` overrides, each checked against its type."""
    given: dict[str, Any] = {}
    for item in overrides:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ParamError(f"parameter {item!r} is not name=value")
        if name not in kernel.params:
            raise ParamError(f"{kernel.name} has no parameter {name!r} (parameters: "
                              f"{', '.join(kernel.params)})")
        given[name] = _convert(name, text.strip(), kernel.params[name])
        allowed = kernel.choices.get(name)
        if allowed is not None and given[name] not in allowed:
            raise ParamError(f"parameter {name}: {given[name]!r} is not one of "
                              f"{', '.join(map(str, allowed))}")
    params = dict(kernel.params)
    for name, table in kernel.presets.items():
        choice = given.get(name, params[name])
        if choice not in table:
            raise ParamError(f"parameter {name}: unknown preset {choice!r} (presets: "
                              f"{', '.join(map(str, table))})")
        params.update(table[choice])
    params.update(given)
    return params


def _convert(name: str, text: str, default: Any) -> Any:
    kind = type(default)
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return text.lower() in ("true", "1", "yes")
        if kind is int:
            return int(text, 0)
        if kind is float:
            return float(text)
    except ValueError:
        raise ParamError(f"parameter {name}: expected {_KIND_NAMES[kind]}, got {text!r}") from None
    return text


_KIND_NAMES = {bool: "true or false", int: "an integer", float: "a number"}
