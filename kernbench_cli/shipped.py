"""Where the shipped kernels, topologies and goldens are.

From a source checkout (or an editable install) they sit at the top of the
repository; a wheel carries copies under ``kernbench_cli/_data/`` (see
pyproject.toml). Names resolve against whichever exists, the wheel's first.
"""

from __future__ import annotations

from pathlib import Path

from kernbench_cli.errors import ConfigError, clip
from kernbench_cli.fileio import is_a

_PACKAGE = Path(__file__).resolve().parent


def installed() -> bool:
    """Whether the shipped files are the wheel's copies (an installed package), not a
    checkout's."""
    return (_PACKAGE / "_data").is_dir()


def data_dir(kind: str) -> Path:
    """The directory of shipped `kind` files: "kernels", "topologies" or "goldens"."""
    installed = _PACKAGE / "_data" / kind
    return installed if installed.is_dir() else _PACKAGE.parent / kind


def costs_dir() -> Path:
    """The folder of the shipped cost tables."""
    return data_dir("topologies") / "costs"


def shipped_costs_name(path: Path | None) -> str | None:
    """The name of the shipped cost table at `path` ("default"), or None if it is not one."""
    if path is not None and path.resolve().parent == costs_dir().resolve():
        return path.stem
    return None


def shipped_topologies() -> list[str]:
    return sorted(p.stem for p in data_dir("topologies").glob("*.toml"))


def resolve_topology(spec: str | None) -> Path:
    """A topology path from a name (``sip``), a path, or None for the default."""
    if spec is None:
        spec = "default"
    path = Path(spec)
    if path.suffix == ".toml" or is_a(path, "any") or len(path.parts) > 1:
        return path
    shipped = data_dir("topologies") / f"{spec}.toml"
    if is_a(shipped, "file"):
        return shipped
    raise ConfigError([f"no topology named {clip(spec, 200)} (shipped: "
                       f"{', '.join(shipped_topologies())}; or give a path to a .toml file)"])
