"""Writing files whole or not at all."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from kernbench_cli.errors import KernbenchError


def atomic_write(path: Path, write: Callable[[BinaryIO], None], what: str) -> None:
    """Call `write` on a temporary file beside `path`, then move it into place.

    A failure leaves no partial file; the file gets the usual mode (0666 less
    the umask). `what` names the option or command in errors (``--save``).
    """
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise KernbenchError(f"{what} {path}: folder {str(folder)!r} does not exist")
    handle, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            write(out)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise KernbenchError(f"{what} {path}: {exc.strerror}") from None
