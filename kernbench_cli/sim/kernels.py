"""Kernel modules: found by name in kernels/ or by path, and their parameters.

A kernel module defines:

``PARAMS``
    parameter names and defaults; a default's type is the parameter's type
    (int, float, bool or str).
``CHOICES`` (optional)
    allowed values of str parameters.
``PARAM_INFO`` (optional)
    ``{param: "description"}`` or ``{param: ("description", "unit")}``, shown by
    ``kernbench kernels NAME``.
``scaled_defaults(num_pes)`` (optional)
    defaults that depend on the grid (a size that must divide over the PEs),
    applied over ``PARAMS`` before presets and ``-p`` values, so the defaults
    run on any topology.
``PRESETS`` (optional)
    ``{param: {value: {other params}}}``: choosing the value sets the others
    (``-p model=llama3-8b``), unless given explicitly too.
``setup(host, p)``
    allocates and fills the inputs through `host` (seeded) and returns the
    kernel's keyword arguments; raise ``ValueError`` for parameters that
    cannot run (the message is shown to the user).
``kernel(tl, **args)``
    the `tl` kernel every PE runs.
``metrics(topology, p, run)`` (optional)
    figures of merit the kernel states of its run, ``{name: (value, how)}``
    (a collective's bus bandwidth, a decode step's time per token), shown in
    the summary and ``--json``; `run` has ``latency_ps`` and ``regions``
    (each named region's time on the critical path, in ps).
``reference(host, p)``
    the expected outputs, by name, computed with numpy from ``host.inputs``.
``TOLERANCE`` (optional)
    ``{output: (atol, rtol)}``: the verification tolerance of those outputs in place of
    their dtype's (`lang.dtypes.TOLERANCE`); checked when loaded (two finite numbers
    >= 0) and at verification (rtol at least the output dtype's unit roundoff).
``tolerances(topology, p)`` (optional)
    ``{output: (atol, rtol)}`` for this run, over `TOLERANCE`: a tolerance that depends
    on the parameters (a decoder's hidden states, whose rounding differences from the
    reference grow with depth); checked as `TOLERANCE` is.
``NEEDS`` (optional)
    ``{param: other}``: a parameter used only when `other` reads non-empty (not 0, "" or
    false), as a request's `new_tokens` needs a `prompt`: given while `other` is empty,
    it is refused, as it would change nothing the run reports.
``FILES`` (optional)
    ``(name, …)``: str parameters whose value is a file the kernel reads (a model's
    config.json); a run records each one's digest and reports no result if it changed
    during the run.
``ARGMAX`` (optional)
    ``{output: scores}``: outputs that are an argmax over the last axis of another
    output (a token chosen from logits). One is verified as any correct choice passes:
    each chosen index's reference score within twice the scores' tolerance of the
    largest, not equal to the reference's own choice, which a near-tie may flip.
``outputs(host, args, p)``
    the outputs the kernel wrote, read back from memory, by the same names.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import stat
import sys
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from kernbench_cli.config.units import read_integer
from kernbench_cli.errors import ParamError, clip, message_of
from kernbench_cli.fileio import (
    file_digest,
    is_a,
    json_number,
    note_input,
    plain_number,
    unchanged_files,
)
from kernbench_cli.lang.confine import (
    Interrupted,
    KernelMisuse,
    confined,
    printing_to_stderr,
)
from kernbench_cli.lang.watchdog import KernelTimeout, hook_watch, in_a_library
from kernbench_cli.shipped import data_dir

REQUIRED_NAMES = ("PARAMS", "setup", "kernel", "reference", "outputs")


@dataclass(frozen=True)
class KernelModule:
    name: str
    path: Path
    shown: str  # how messages name the file
    module: ModuleType
    #: `fileio.file_digest` of the file as it was loaded: which kernel made a result, not
    #: only its name (an edited kernel, or a file of a shipped kernel's name)
    digest: str = ""

    @property
    def params(self) -> dict[str, Any]:
        return self.module.PARAMS

    @property
    def choices(self) -> dict[str, tuple]:
        return getattr(self.module, "CHOICES", {})

    @property
    def presets(self) -> dict[str, dict[str, dict[str, Any]]]:
        return getattr(self.module, "PRESETS", {})

    @property
    def one_of(self) -> tuple[tuple[str, ...], ...]:
        """Groups of parameters of which a run is given at most one (`ONE_OF`: a shipped
        model or a config file); those of a group not given then read empty."""
        return getattr(self.module, "ONE_OF", ())

    @property
    def doc(self) -> str:
        """The kernel file's docstring, stripped: read from its source where `python -OO`
        dropped it from the module (every description was empty)."""
        doc = self.module.__doc__
        if doc is None and sys.flags.optimize >= 2:
            import ast

            try:
                doc = ast.get_docstring(ast.parse(self.path.read_bytes()))
            except (OSError, SyntaxError, ValueError):
                doc = None
        return (doc or "").strip()

    @property
    def needs(self) -> dict[str, str]:
        """The parameters used only when another reads non-empty, by parameter (`NEEDS`)."""
        return getattr(self.module, "NEEDS", {})

    @property
    def files(self) -> tuple[str, ...]:
        """The parameters whose value names a file the kernel reads (`FILES`), an input of
        the command: no output may go there, and a sweep's rows are of its bytes."""
        return getattr(self.module, "FILES", ())

    @property
    def tolerance(self) -> dict[str, tuple[float, float]]:
        """The tolerances the kernel declares, by output (`TOLERANCE`; none: ``{}``)."""
        return getattr(self.module, "TOLERANCE", {})

    @property
    def argmax(self) -> dict[str, str]:
        """The outputs that are an argmax of another's scores, by output (`ARGMAX`)."""
        return getattr(self.module, "ARGMAX", {})

    def info(self, param: str) -> tuple[str, str]:
        """(description, unit) of a parameter, as `PARAM_INFO` gives them ("" if not)."""
        entry = getattr(self.module, "PARAM_INFO", {}).get(param, "")
        return (entry, "") if isinstance(entry, str) else (str(entry[0]), str(entry[1]))

    def fn(self, name: str) -> Callable:
        return getattr(self.module, name)

    @property
    def shipped(self) -> bool:
        """Whether this is one of the kernels kernbench ships (`kernels/`)."""
        return self.path.parent == data_dir("kernels").resolve()


def shipped_kernels() -> list[str]:
    return sorted(p.stem for p in data_dir("kernels").glob("*.py") if not p.stem.startswith("_"))


def load_kernel(spec: str) -> KernelModule:
    """A shipped kernel by name, or a kernel file by path."""
    path, shown = kernel_file(spec)
    return _loaded(spec, path, shown, f"kernbench_kernel_{path.stem}")


def kernel_file(spec: str) -> tuple[Path, str]:
    """The file of a shipped kernel by name, or of a kernel file by path, and how reports
    show it."""
    path = Path(spec)
    if path.suffix == ".py" or len(path.parts) > 1:
        if path.suffix != ".py":
            raise ParamError(f"kernel file {clip(spec, 200)}: a kernel is a Python file "
                             "ending in .py")
        _check_kernel_file(path, clip(spec, 200))
        shown = spec
    else:
        path = data_dir("kernels") / f"{spec}.py"
        if not is_a(path, "file"):
            raise ParamError(f"unknown kernel {clip(spec, 200)} (shipped: "
                             f"{', '.join(shipped_kernels())}; or give a path to a .py file)")
        shown = f"kernels/{spec}.py"
    note_input(path)
    return path, shown


#: The largest kernel file read (a file of gigabytes, sparse, was read whole before Python
#: refused it, taking as much memory)
MOST_KERNEL_BYTES = 16 << 20


def _check_kernel_file(path: Path, shown: str) -> None:
    """Kernel file `path` (`shown` as given) a regular file, and not too large to read: a
    one-line ParamError saying what it is otherwise (a FIFO was "no kernel file")."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise ParamError(f"no kernel file {shown}") from None
    except (OSError, ValueError) as exc:  # a loop of symlinks, a name too long, a NUL
        raise ParamError(f"kernel file {shown}: cannot read: "
                         f"{getattr(exc, 'strerror', None) or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ParamError(f"kernel file {shown} is a folder")
    if not stat.S_ISREG(info.st_mode):
        raise ParamError(f"kernel file {shown}: is not a regular file (a FIFO, a device or a "
                         "socket), expected a Python file")
    if info.st_size > MOST_KERNEL_BYTES:
        raise ParamError(f"kernel file {shown}: {info.st_size:,} bytes is too large for a "
                         f"kernel (at most {MOST_KERNEL_BYTES:,})")


def _loaded(spec: str, path: Path, shown: str, module_name: str) -> KernelModule:
    """Kernel file `path` imported as `module_name`."""
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader_spec)
    digest = file_digest(path) or ""  # the bytes the loader reads next
    helpers: dict[str, str] = {}
    try:
        with _helpers_beside(str(path.parent), helpers), printing_to_stderr(), confined(), \
                hook_watch():
            loader_spec.loader.exec_module(module)
    except Interrupted:
        raise
    except OSError as exc:
        raise ParamError(f"{shown}: cannot read the kernel: {exc.strerror or exc}") from None
    except BaseException as exc:  # SyntaxError, ImportError, sys.exit() at import, …
        line = _line_in(exc, str(path))
        raise ParamError(f"{shown}:{line}: loading the kernel failed: {described(exc)}") \
            from None
    finally:
        sys.modules.pop(module_name, None)
    if digest and helpers:  # the helpers' code made the result too
        digest = _digest_of(digest, helpers)
    missing = [n for n in REQUIRED_NAMES if not hasattr(module, n)]
    if missing:
        raise ParamError(f"{shown}: a kernel module must define {', '.join(missing)}")
    _check_module(module, shown)
    return KernelModule(path.stem, path.resolve(), shown, module, digest)


@contextmanager
def _helpers_beside(folder: str, loaded: dict[str, str]):
    """A kernel's load, importing the helper modules beside it (in `folder`) afresh: the
    folder first on `sys.path`; modules already imported under a name the folder provides
    (a caller's own `utils`, or an earlier kernel's `helper`) set aside meanwhile and put
    back after; and the modules the load imported from the folder dropped after it, each
    put in `loaded` as {name: `file_digest`}, so that no later load or caller sees them
    (one process runs kernel after kernel: the API, a notebook). The standard library's,
    installed packages' and kernbench's own modules are never set aside or dropped. One
    load at a time in the process (threads calling the API take turns)."""
    with _LOADING:
        provided = _Provided(folder)
        aside = {name: module for name, module in list(sys.modules.items())
                 if provided(name) and not _kept(module)}
        for name in aside:
            del sys.modules[name]
        sys.path.insert(0, folder)
        try:
            yield
        finally:
            sys.path.remove(folder)
            for name, module in list(sys.modules.items()):
                file = getattr(module, "__file__", None)
                if provided(name) and isinstance(file, str) and _from(folder, name, file) \
                        and not _kept(module):
                    sys.modules.pop(name, None)
                    loaded[name] = file_digest(Path(file)) or ""
            sys.modules.update(aside)


#: held while a kernel module loads (`_helpers_beside`): reentrant, for a kernel that
#: loads another as it is imported
_LOADING = threading.RLock()


class _Provided(dict):
    """Whether a folder holds the module or package a module name starts with (`name.py`
    or `name/__init__.py`), asked of the file system once a name."""

    def __init__(self, folder: str):
        super().__init__()
        self.folder = folder

    def __call__(self, name: str) -> bool:
        return self[name.partition(".")[0]]

    def __missing__(self, top: str) -> bool:
        found = self[top] = (os.path.isfile(os.path.join(self.folder, f"{top}.py")) or
                             os.path.isfile(os.path.join(self.folder, top, "__init__.py")))
        return found


def _from(folder: str, name: str, file: str) -> bool:
    """Whether module `name`, from `file`, was found through `folder` on `sys.path`."""
    rel = os.path.relpath(file, folder)
    first = rel.split(os.sep, 1)[0]
    return not rel.startswith(os.pardir) and first.partition(".")[0] == name.partition(".")[0]


def _kept(module: ModuleType) -> bool:
    """The standard library's, installed packages' and kernbench's own modules."""
    file = getattr(module, "__file__", None)
    return module.__name__.partition(".")[0] == "kernbench_cli" or \
        not isinstance(file, str) or in_a_library(file)


def _digest_of(kernel: str, helpers: dict[str, str]) -> str:
    """8 hex digits naming the kernel file's digest with its helpers' (`_helpers_beside`)."""
    text = "\n".join([kernel, *(f"{name}={helpers[name]}" for name in sorted(helpers))])
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def described(exc: BaseException) -> str:
    """An exception from a kernel module's code, as its error message says it."""
    if isinstance(exc, SystemExit):
        return f"the kernel called sys.exit({exc.code!r})"
    if isinstance(exc, KernelMisuse | KernelTimeout):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "the kernel raised KeyboardInterrupt (Ctrl-C stops kernbench; a kernel may not)"
    if isinstance(exc, MemoryError):
        return f"this machine ran out of memory{f' ({exc})' if str(exc) else ''}"
    message = message_of(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def files_read(kernel: KernelModule, params: Mapping[str, Any]):
    """`fileio.unchanged_files` around a run of `kernel` with `params`: over the files the
    parameters name for it to read (its `FILES`; a blank value names none)."""
    return unchanged_files({name: str(params[name]) for name in kernel.files
                            if str(params.get(name, "")).strip()}, kernel.shown, "run")


def _check_module(module: ModuleType, shown: str) -> None:
    """The types of a kernel module's tables and functions (see the module docstring)."""
    def bad(what: str) -> ParamError:
        return ParamError(f"{shown}: {what}")

    optional = tuple(n for n in ("bounds", "metrics", "quality", "resolved",
                                 "scaled_defaults", "tolerances")
                     if hasattr(module, n))
    for name in REQUIRED_NAMES[1:] + optional:
        if not callable(getattr(module, name)):
            raise bad(f"{name} must be a function, not {type(getattr(module, name)).__name__}")
    params = module.PARAMS
    if not isinstance(params, dict):
        raise bad(f"PARAMS must be a dict of name: default, not {type(params).__name__}")
    for name, default in params.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise bad(f"PARAMS: parameter name {name!r} is not an identifier")
        if type(default) not in _KIND_NAMES and type(default) is not str:
            raise bad(f"PARAMS[{name!r}]: a default must be an int, float, bool or str, "
                      f"not {type(default).__name__}")
        if type(default) in (int, float) and not json_number(default):
            raise bad(f"PARAMS[{name!r}]: a default number must be finite, an integer "
                      f"within 64 bits, not {clip(default)}")
    def table(name: str, shape: str) -> dict:
        """An optional table keyed by parameters (CHOICES, PRESETS, PARAM_INFO)."""
        value = getattr(module, name, {})
        if not isinstance(value, dict):
            raise bad(f"{name} must be a dict of parameter: {shape}, not "
                      f"{type(value).__name__}")
        for key in value:
            if key not in params:
                raise bad(f"{name} names {key!r}, which is not in PARAMS")
        return value

    for name, allowed in table("CHOICES", "allowed values").items():
        if not isinstance(allowed, (tuple, list)) or params[name] not in allowed:
            raise bad(f"CHOICES[{name!r}] must be a tuple of values holding the default "
                      f"{params[name]!r}")
    for name, presets in table("PRESETS", "{value: {params}}").items():
        if not isinstance(presets, dict) or not all(isinstance(v, dict)
                                                    for v in presets.values()):
            raise bad(f"PRESETS[{name!r}] must be a dict of value: {{params}}")
        for value, sets in presets.items():
            for other, setting in sets.items():
                if other not in params or type(setting) is not type(params[other]):
                    raise bad(f"PRESETS[{name!r}][{value!r}]: {other!r} is not a parameter "
                              "or has the wrong type")
    for name, info in table("PARAM_INFO", "description or (description, unit)").items():
        if not isinstance(info, str) and not (isinstance(info, tuple) and len(info) == 2):
            raise bad(f"PARAM_INFO[{name!r}] must be a description or (description, unit)")
    for name, other in table("NEEDS", "the parameter it needs").items():
        if not isinstance(other, str) or other not in params or other == name:
            raise bad(f"NEEDS[{name!r}] must name another parameter in PARAMS, not "
                      f"{clip(other)}")
    files = getattr(module, "FILES", ())
    if not isinstance(files, (tuple, list)) or not all(
            isinstance(name, str) and isinstance(params.get(name), str) for name in files):
        raise bad(f"FILES must be a tuple of str parameters in PARAMS, not {clip(files)}")
    check_tolerance(getattr(module, "TOLERANCE", {}), bad)
    chosen = getattr(module, "ARGMAX", {})
    if not isinstance(chosen, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k != v for k, v in chosen.items()):
        raise bad("ARGMAX must be a dict of output: the output whose argmax it is (two "
                  f"names), not {clip(chosen)}")


def check_tolerance(declared: object, bad: Callable[[str], ParamError],
                    what: str = "TOLERANCE") -> None:
    """A kernel's `TOLERANCE` (or what `what` names: its `tolerances()`):
    ``{output: (atol, rtol)}``, each two finite numbers >= 0."""
    if declared == {}:  # the usual case: nothing to check, and ml_dtypes not loaded
        return
    from kernbench_cli.lang.dtypes import tolerance_problem

    if not isinstance(declared, dict):
        raise bad(f"{what} must be a dict of output: (atol, rtol), not "
                  f"{type(declared).__name__}")
    for name, value in declared.items():
        problem = tolerance_problem(value) if isinstance(name, str) else "names no output"
        if problem:
            raise bad(f"{what}[{name!r}] {problem}")


def _line_in(exc: BaseException, filename: str) -> int | str:
    tb, line = exc.__traceback__, "?"
    filename = os.path.abspath(filename)  # the import names the module by its absolute path
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    if isinstance(exc, SyntaxError) and exc.lineno:
        line = exc.lineno
    return line


def parse_params(kernel: KernelModule, overrides: list[str],
                 num_pes: int | None = None, varying: Collection[str] = ()) -> dict[str, Any]:
    """Defaults (scaled to `num_pes` PEs when the kernel says how), then presets, then
    ``name=value`` overrides, each checked against its type, and against `NEEDS` but where
    the parameter needed is among `varying` (a sweep's axis: `prompt` 0 and 16, with
    `new_tokens` for the points that have one)."""
    given: dict[str, Any] = {}
    for item in overrides:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ParamError(f"parameter {item!r} is not name=value")
        if name not in kernel.params:
            raise ParamError(f"{kernel.name} has no parameter {name!r} (parameters: "
                              f"{', '.join(kernel.params)})")
        if name in given:  # the last would win unseen (a sweep refuses it too)
            raise ParamError(f"parameter {name} is given twice; give it once")
        given[name] = _convert(name, text.strip(), kernel.params[name])
        allowed = kernel.choices.get(name)
        if allowed is not None and given[name] not in allowed:
            raise ParamError(f"parameter {name}: {given[name]!r} is not one of "
                              f"{', '.join(map(str, allowed))}")
    params = dict(kernel.params)
    if num_pes is not None and hasattr(kernel.module, "scaled_defaults"):
        params.update(_scaled(kernel, num_pes))
    for name, table in kernel.presets.items():
        choice = given.get(name, params[name])
        if choice not in table:
            raise ParamError(f"parameter {name}: unknown preset {choice!r} (presets: "
                              f"{', '.join(map(str, table))})")
        clash = [f"{k}={given[k]}" for k, v in table[choice].items()
                 if name in given and k in given and given[k] != v]
        if clash:
            raise ParamError(f"parameter {name}={choice} sets "
                             f"{', '.join(f'{k}={table[choice][k]}' for k in table[choice])}; "
                             f"-p {' -p '.join(clash)} contradicts it (give one or the other)")
        params.update(table[choice])
    params.update(given)
    for group in kernel.one_of:
        named = [name for name in group if name in given]
        if len(named) > 1:
            raise ParamError(f"parameters {' and '.join(named)}: alternatives (each names "
                             "what the run is of); give only one")
        if named:  # the others do not describe this run
            params.update({name: type(params[name])() for name in group if name != named[0]})
    for name, other in kernel.needs.items():
        if name in given and not params[other] and other not in varying:
            raise ParamError(f"parameter {name}: used only with {other} (here "
                             f"{params[other]!r}); given without it, it would change nothing")
    return params


def param_items(params: Mapping[str, Any] | Sequence[str] | None) -> list[str]:
    """The ``-p name=value`` items of the API's ``params=``: a mapping of parameter to value
    (a bool as ``true``/``false``, a number as its shortest text, a string or a path as
    given), or
    already a sequence of items (taken as they are). `parse_params` then reads and checks
    them as it does the command line's."""
    if params is None:
        return []
    if isinstance(params, str | bytes | bytearray) or not isinstance(params,
                                                                     Mapping | Sequence):
        raise ParamError(f"params={clip(params)}: expected a mapping of name: value (or a list "
                         "of name=value items)")
    if not isinstance(params, Mapping):
        bad = [item for item in params if not isinstance(item, str)]
        if bad:
            raise ParamError(f"parameter {clip(bad[0])} is not name=value")
        return list(params)
    items = []
    for name, value in params.items():
        if not isinstance(name, str) or not name.isidentifier():  # read as the text before
            raise ParamError(f"params: key {clip(name)} is not a parameter name")  # its `=`
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str):
            text = str(value)
        elif isinstance(value, os.PathLike) and isinstance(os.fspath(value), str):
            text = os.fspath(value)  # a file a parameter names (`FILES`): a config
        elif plain_number(value) is not None:  # a numpy scalar too: np.int64(8) is 8
            text = str(plain_number(value))
        else:
            raise ParamError(f"parameter {name}: {clip(value)} is not an int, float, bool, "
                             "str or path")
        items.append(f"{name}={text}")
    return items


def _scaled(kernel: KernelModule, num_pes: int) -> dict[str, Any]:
    try:
        with printing_to_stderr(), confined(), hook_watch():
            scaled = kernel.module.scaled_defaults(num_pes)
    except Interrupted:
        raise
    except BaseException as exc:  # sys.exit() too: the kernel's, not kernbench's
        raise ParamError(f"{kernel.shown}: scaled_defaults({num_pes}) failed: "
                         f"{described(exc)}") from None
    if not isinstance(scaled, dict) or not all(
            k in kernel.params and type(v) is type(kernel.params[k]) for k, v in scaled.items()):
        raise ParamError(f"{kernel.shown}: scaled_defaults must return a dict of parameters "
                         "with the types of their PARAMS defaults")
    return scaled


def _convert(name: str, text: str, default: Any) -> Any:
    kind = type(default)
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return text.lower() in ("true", "1", "yes")
        if kind is int:
            try:
                value = read_integer(text)
            except OverflowError:  # more digits than Python converts: out of range too
                value = None
            if value is None or not -2**63 <= value < 2**63:
                raise ParamError(f"parameter {name}: {clip(text)} is out of range (a 64-bit "
                                 "integer)")
            return value
        if kind is float:
            if not text.isascii():  # digits of other scripts (٣, full-width １), as an
                raise ValueError(text)  # integer's
            value = float(text)
            if not math.isfinite(value):
                raise ParamError(f"parameter {name}: expected a finite number, got "
                                 f"{clip(text)}")
            return value
    except ValueError:
        raise ParamError(f"parameter {name}: expected {_KIND_NAMES[kind]}, got "
                         f"{clip(text)}") from None
    return text


_KIND_NAMES = {bool: "true or false", int: "an integer", float: "a number"}
