"""Reading input files safely; writing output files whole or not at all."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from kernbench_cli.errors import KernbenchError


def atomic_write(path: Path, write: Callable[[BinaryIO], None], what: str) -> None:
    """Call `write` on a temporary file beside `path`, then move it into place.

    A failure or an interrupt leaves no partial file and no temporary one (a
    SIGKILL can leave a ``.NAME.XXXX.tmp``, which nothing reads as an output);
    the file gets the usual mode (0666 less the umask). `what` names the option
    or command in errors (``--save``).
    """
    import tempfile  # here: the light commands (decode) read inputs but write nothing

    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise KernbenchError(f"{what} {path}: folder {str(folder)!r} does not exist")
    if path.is_dir():
        raise KernbenchError(f"{what} {path}: is a folder, not a file")
    try:
        handle, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise KernbenchError(f"{what} {path}: cannot write in {str(folder)!r}: "
                             f"{exc.strerror or exc}") from None
    try:
        with os.fdopen(handle, "wb") as out:
            write(out)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise KernbenchError(f"{what} {path}: {exc.strerror or exc}") from None
    except BaseException:  # an interrupt, or a writer's bug: no temporary file stays behind
        Path(tmp).unlink(missing_ok=True)
        raise


def read_input(path: Path, limit: int, what: str) -> bytes:
    """The bytes of input file `path`: a regular file of at most `limit` bytes.

    A folder, a FIFO or device (which could block or never end), a symlink
    loop, a file too large or one that cannot be read is a one-line
    `KernbenchError` naming the file; `what` says what was expected there.
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        raise KernbenchError(f"{path}: no such file") from None
    except OSError as exc:  # a symlink loop, a name too long, no permission on a folder
        raise KernbenchError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise KernbenchError(f"{path}: is a directory, expected {what}")
    if not stat.S_ISREG(info.st_mode):
        raise KernbenchError(f"{path}: is not a regular file, expected {what}")
    if info.st_size > limit:
        raise KernbenchError(f"{path}: {info.st_size:,} bytes is too large for {what} "
                             f"(at most {limit:,})")
    try:
        with path.open("rb") as handle:
            return handle.read(limit + 1)
    except OSError as exc:
        raise KernbenchError(f"{path}: cannot read: {exc.strerror or exc}") from None
