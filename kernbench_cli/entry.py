"""The `kernbench` console script: the CLI (`cli.app.main`), with a Ctrl-C that lands while
it is still being imported (typer, the command modules) ending as any other does:
`interrupted`, exit 130, no traceback; and a package kernbench depends on that a file or
folder in the working folder shadows (``python -m kernbench_cli`` puts that folder first on
the path: a ``simpy.py`` there) named in one line, exit 2, not taken for a bug in kernbench
or in the kernel that imports it."""

import os
import sys

#: the packages kernbench imports (pyproject's dependencies), by module
DEPENDENCIES = ("typer", "rich", "simpy", "greenlet", "numpy", "tomli_w", "ml_dtypes", "click")


def shadowed() -> str | None:
    """The first of `DEPENDENCIES` that would be imported (or was) from the working folder,
    as a one-line message; None if none is."""
    import sysconfig
    from importlib.util import find_spec

    try:
        here = os.path.realpath(os.getcwd())
    except OSError:  # the working folder was deleted: nothing in it shadows anything
        return None
    if here not in {os.path.realpath(p or ".") for p in sys.path}:
        return None  # not on the path (the console script): nothing there is imported
    if here in {os.path.realpath(p) for p in sysconfig.get_paths().values()}:
        return None  # run from where the packages are installed: they are the installed ones
    for name in DEPENDENCIES:
        module = sys.modules.get(name)
        try:
            origin = getattr(module, "__file__", None) if module else find_spec(name).origin
        except (ImportError, AttributeError, ValueError):  # not installed: its import says so
            continue
        if origin and os.path.realpath(origin).startswith(here + os.sep) and \
                os.path.dirname(os.path.realpath(origin)) in (here, os.path.join(here, name)):
            return (f"error: {origin}: a file in the working folder shadows the installed "
                    f"{name} (python -m puts this folder first on the path): rename it, or "
                    "run kernbench from another folder")
    return None


def main() -> None:
    found = shadowed()
    if found is not None:
        sys.stderr.write(found + "\n")
        sys.exit(2)
    try:
        from kernbench_cli.cli.app import main as cli_main
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
    cli_main()
