"""Reading input files safely; writing output files whole or not at all."""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import os
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from kernbench_cli import gc_control
from kernbench_cli.errors import KernbenchError, OutputError, clip

#: Files the CLI command running has read as inputs, and written as outputs (resolved):
#: an output may be neither (a command never overwrites what it reads, or what it just
#: wrote). Kept only while a command runs (`begin_command`), not for library calls.
_INPUTS: set[Path] = set()
_OUTPUTS: set[Path] = set()
_COMMAND = [False]


def is_a(path: Path, kind: str) -> bool:
    """Whether `path` is a "file", a "dir" or "any" entry; False where it cannot be looked
    at (a name too long for the file system, a folder not to be entered), which
    `Path.is_file` and `Path.exists` raise as OSError."""
    try:
        return {"file": path.is_file, "dir": path.is_dir, "any": path.exists}[kind]()
    except OSError:
        return False


def begin_command() -> None:
    """A CLI command starts: forget the inputs and outputs of the one before (tests run
    many commands in one process)."""
    _INPUTS.clear()
    _OUTPUTS.clear()
    _COMMAND[0] = True


def end_command() -> None:
    """The CLI command has ended: library calls from here on are not checked."""
    _INPUTS.clear()
    _OUTPUTS.clear()
    _COMMAND[0] = False


def note_input(path: Path) -> None:
    """`path` is an input of this command: no output of it may go there."""
    if _COMMAND[0]:
        with contextlib.suppress(OSError):  # a loop, a name too long: reading it says so
            _INPUTS.add(path.resolve())


def stamp(path: Path) -> tuple[int, int, int, int] | None:
    """What tells a regular file's contents changed without reading it: (device, inode,
    size, modification time in ns); None if `path` is not a regular file."""
    try:
        info = path.stat()
    except (OSError, ValueError):  # ValueError: a NUL in the name
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


#: The largest file `file_digest` reads (a model's config.json is some kilobytes; a reader
#: refuses far less than this): a larger one is known by its `stamp` alone
DIGESTED_BYTES = 64 << 20


def file_digest(path: Path) -> str | None:
    """8 hex digits of the SHA-256 of regular file `path`'s bytes (as `config_digest` names
    a configuration); None if it is not a regular file that can be read, or is larger than
    `DIGESTED_BYTES`."""
    import hashlib

    found = stamp(path)  # a FIFO or device could block or never end
    if found is None or found[2] > DIGESTED_BYTES:
        return None
    digest, total = hashlib.sha256(), 0
    try:
        with _opened(path) as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
                total += len(chunk)
    except OSError:
        return None
    if chunk is None or total != found[2]:  # it waits for bytes, or its size is not its
        return None  # bytes' (a pseudo-file, or a file being written)
    return digest.hexdigest()[:8]


@contextmanager
def _opened(path: Path) -> Iterator[BinaryIO]:
    """Regular file `path` opened to read, not blocking: a pseudo-file that waits for data
    (/proc/kmsg) reads None or raises at once, not blocking (OSError also if it was
    swapped for a FIFO or device since its `stat`)."""
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        yield handle


@contextmanager
def unchanged_files(named: dict[str, str], shown: str, what: str) -> Iterator[dict[str, str]]:
    """Around what reads the files `named` (by parameter, as given): a dict of each one's
    digest (`file_digest`; none for what is not a regular file) as the block begins, each
    file checked, as the block ends, to be what it was then (its `stamp` and its bytes).
    One that changed is a one-line error naming it (`shown`: whose; `what`: "run" or
    "replay"), also where the block failed meanwhile (the change may be why): nothing is
    reported of what may have read either. A relative path is the working folder's as the
    block begins (a kernel's `os.chdir` inside it is put back only after the check)."""
    paths = {name: Path(os.path.abspath(text)) for name, text in named.items()}
    before = {name: (stamp(path), file_digest(path)) for name, path in paths.items()}

    def check(cause: BaseException | None) -> None:
        for name, path in paths.items():
            if (stamp(path), file_digest(path)) != before[name]:
                raise KernbenchError(f"{shown}: -p {name}={named[name]}: the file changed during "
                                     f"the {what}, so its result is not reported: {what} "
                                     "again") from cause

    try:
        yield {name: digest for name, (_, digest) in before.items() if digest is not None}
    except Exception as exc:
        check(exc)
        raise
    check(None)


def file_name(text: str, what: str) -> Path:
    """An output's path as typed: one that ends in a separator names a folder, and is
    refused (`Path` drops the separator, so the file would be written without it:
    ``--save x.npz/`` wrote ``x.npz``). `what` names the option in the error (Click
    names it itself: "")."""
    if text.endswith(("/", os.sep)):
        raise KernbenchError(f"{what} " * bool(what) + f"{text}: ends in '/', so it names a "
                             "folder; give a file name")
    return Path(text)


def output_target(path: Path, what: str, rewrites_input: bool = False,
                  rewrites_output: bool = False) -> Path:
    """The regular file an output to `path` replaces: `path`, or the file a symlink there
    points at (outputs write through symlinks, never over them). A one-line error for a
    folder, a device, FIFO or socket, a missing folder, or a file this command reads or
    already wrote (`rewrites_input`: an input it may rewrite, e.g. results it resumes).
    A bare ``-`` is refused: by custom it means standard output, which these outputs do
    not go to (stdout has the run's summary or JSON); a file of that name is ``$PWD/-``."""
    if str(path) == "-":
        raise KernbenchError(f"{what} -: outputs go to files, not standard output; give a "
                             "file name")
    if "\0" in str(path):
        raise KernbenchError(f"{what} {clip(str(path))}: a file name has no NUL character")
    try:
        target = path.resolve() if path.is_symlink() else path
    except OSError as exc:
        raise KernbenchError(f"{what} {path}: {exc.strerror or exc}") from None
    except RuntimeError:  # Python 3.11's resolve() of a loop of symlinks
        raise KernbenchError(f"{what} {path}: cannot write: a loop of symbolic links") from None
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise KernbenchError(f"{what} {path}: folder {str(folder)!r} does not exist")
    try:
        info = target.stat()
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise KernbenchError(f"{what} {path}: {exc.strerror or exc}") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise KernbenchError(f"{what} {path}: is a folder, not a file")
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise KernbenchError(f"{what} {path}: is not a regular file (a device, FIFO or "
                             "socket); outputs go to regular files only")
    resolved = _resolved(target, f"{what} {path}")
    if resolved in _INPUTS and not rewrites_input:
        raise KernbenchError(f"{what} {path}: is an input of this command; write the output "
                             "elsewhere")
    if resolved in _OUTPUTS and not rewrites_output:
        raise KernbenchError(f"{what} {path}: another output of this command went there")
    return target


def _resolved(path: Path, shown: str) -> Path:
    """`path` made absolute, symlinks followed; a relative one whose working folder was
    deleted is a one-line error (`shown`: the option and path as given)."""
    try:
        return path.resolve()
    except FileNotFoundError:
        raise KernbenchError(f"{shown}: the working folder no longer exists; cd to a folder "
                             "that exists") from None


def check_outputs(outputs: dict[str, Path | None], rewrites: tuple[str, ...] = ()) -> None:
    """Before a command does its work: every output it was given (option -> path) may be
    written (`output_target`; those named in `rewrites` may rewrite an input; its folder
    takes a new file), and no two go to one file."""
    seen: dict[Path, str] = {}
    probed: set[Path] = set()  # folders `check_writable` made a file in
    for what, path in outputs.items():
        if path is None:
            continue
        target = _resolved(output_target(path, what, what in rewrites), f"{what} {path}")
        if target in seen:
            raise KernbenchError(f"{what} {path}: {seen[target]} goes there too; give each "
                                 "output its own file")
        seen[target] = what
        if target.parent not in probed:
            check_writable(target.parent, f"{what} {path}")
            probed.add(target.parent)


def check_writable(folder: Path, shown: str) -> None:
    """A file can be made in `folder` (a read-only file system, a folder not to be written
    says so before the work, not after it): one made and removed at once."""
    import tempfile

    try:
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".kernbench-probe-")
    except OSError as exc:
        raise KernbenchError(f"{shown}: cannot write in {str(folder)!r}: "
                             f"{exc.strerror or exc}") from None
    try:
        os.close(handle)
    finally:  # an interrupt between: the probe still goes
        try:
            os.unlink(probe)
        except OSError as exc:  # an append-only folder: an output could not replace a file
            raise KernbenchError(f"{shown}: cannot write in {str(folder)!r}: a file made "
                                 f"there cannot be removed ({exc.strerror or exc}; "
                                 f"{Path(probe).name} is left there)") from None


def atomic_write(path: Path, write: Callable[[BinaryIO], None], what: str,
                 rewrites_input: bool = False, rewrites_output: bool = False) -> None:
    """Call `write` on a temporary file beside `path`, then move it into place.

    A failure or an interrupt leaves no partial file and no temporary one; a
    SIGKILL can leave a ``.NAME.XXXXXXXX.tmp``, which nothing reads as an output
    and the next write of the same output removes (`remove_stale`: only those
    of its name, whose writer is gone). The file gets the usual mode (0666 less
    the umask). Only a regular file is replaced: a symlink's target is written
    (the link stays); a device, FIFO, socket or folder is refused, and so is a
    file the command reads or already wrote (`output_target`; `rewrites_input`
    lets it replace an input it was read from; `rewrites_output`, a file it
    wrote and now writes again, whole). `what` names the option or command in
    errors (``--save``). Any name the OS takes will do, UTF-8 or not.
    """
    target = output_target(path, what, rewrites_input, rewrites_output)
    folder = target.parent if str(target.parent) else Path(".")
    prefix = temporary_prefix(target)
    remove_stale(folder, prefix)
    try:
        handle, tmp, lock = _temporary(folder, prefix)
    except OSError as exc:
        raise KernbenchError(f"{what} {path}: cannot write in {str(folder)!r}: "
                             f"{exc.strerror or exc}") from None
    deferred = False
    try:
        with os.fdopen(handle, "wb") as out:
            write(out)
        os.chmod(tmp, 0o666 & ~_umask())
        batches = getattr(_TOGETHER, "stack", None)
        if batches:  # placed with the others as the block ends (`written_together`)
            batches[-1].append((tmp, target, lock))
            deferred = True
        else:
            os.replace(tmp, target)
    except OSError as exc:  # a full disk or quota: not the input's fault
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"{what} {path}: cannot write: {exc.strerror or exc}") from None
    except BaseException:  # an interrupt, or a writer's bug: no temporary file stays behind
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        if not deferred:
            os.close(lock)
    if _COMMAND[0]:
        _OUTPUTS.add(target.resolve())


#: the umask's changes (`owner_access`), and its readings where they change it (`_umask`)
_UMASK_LOCK = threading.Lock()
_OWNER = {"blocks": 0, "umask": 0}  # `owner_access` blocks open, and the umask before them


@contextmanager
def owner_access() -> Iterator[None]:
    """The block with a umask that leaves the owner's own bits alone (the rest of it as it
    was): multiprocessing makes its folder for the fork server's socket and its
    semaphores under the umask, and with a umask of 0777 (no access even for the owner)
    could then use neither (an internal error, and a folder of mode 000 left in the temp
    folder); and a sweep appends to its `--out` after writing it, so that file keeps its
    owner's read and write too (group and others as the umask has them). The umask is
    the process's: blocks in several threads share one change, undone as the last ends
    (ended in another order, two blocks left it changed for good)."""
    with _UMASK_LOCK:
        if not _OWNER["blocks"]:
            _OWNER["umask"] = os.umask(0o077)
            os.umask(_OWNER["umask"] & 0o077)
        _OWNER["blocks"] += 1
    try:
        yield
    finally:
        with _UMASK_LOCK:
            _OWNER["blocks"] -= 1
            if not _OWNER["blocks"]:
                os.umask(_OWNER["umask"])


def _umask() -> int:
    """The process's umask: read from /proc where it can be (setting it to read it, as
    `os.umask` must, leaves it 0 for an instant, in which another thread's files would
    take any mode), else set and put back under `_UMASK_LOCK`."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0)
        os.umask(mask)
    return mask


#: this thread's open `written_together` blocks (`stack`), each a list of its outputs as
#: (temporary, target, its lock)
_TOGETHER = threading.local()


@contextmanager
def written_together() -> Iterator[None]:
    """The block's `atomic_write`s (this thread's) take their place together: each is
    written to its temporary file, and they are moved into place as the block ends, one
    after another (microseconds). A failure or an interrupt in the block (a full disk at
    the third of four outputs, Ctrl-C while the op log is written) leaves every output as
    it was before the command, not some of them new and the rest old (one landing while
    they are moved, in those microseconds, leaves the first moved). A block inside another
    places its outputs as it ends."""
    batch: list[tuple[str, Path, int]] = []
    stack = _TOGETHER.__dict__.setdefault("stack", [])
    stack.append(batch)
    placed = 0
    try:
        yield
    except BaseException:
        _dropped(batch, 0)
        raise
    finally:
        del stack[next(i for i in range(len(stack) - 1, -1, -1) if stack[i] is batch)]
    try:
        for tmp, target, _ in batch:
            os.replace(tmp, target)
            placed += 1
    except OSError as exc:
        raise OutputError(f"{batch[placed][1]}: cannot write: {exc.strerror or exc}") from None
    finally:
        _dropped(batch, placed)


def _dropped(batch: list[tuple[str, Path, int]], placed: int) -> None:
    """A `written_together` block's outputs done with: the temporary files of those past
    the first `placed` removed, every lock given up."""
    for tmp, _, _ in batch[placed:]:
        Path(tmp).unlink(missing_ok=True)
    for _, _, lock in batch:
        os.close(lock)


def temporary_prefix(target: Path) -> str:
    """How the temporary files of an output to `target` begin: ``.NAME.`` (a shared
    ``.kernbench.`` past 200 bytes, so the name stays within the file system's 255)."""
    return f".{target.name}." if len(os.fsencode(target.name)) <= 200 else ".kernbench."


@contextmanager
def claimed(target: Path, what: str) -> Iterator[None]:
    """Hold `target` (an output a command appends to for its whole life: a sweep's
    results) against another process doing the same: a lock file beside it,
    ``.NAME.lock`` (`flock`ed; removed as the block ends), whose holder is refused with
    one line naming its process. A lock file left by a process killed is free (the system
    drops its lock), and taken over. Where the file system has no locks, nothing is
    claimed. A symlink to the file shares its lock."""
    real = Path(os.path.realpath(target))
    path = real.parent / _lock_name(real)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except OSError as exc:
            raise KernbenchError(f"{what} {target}: cannot make its lock file {path.name}: "
                                 f"{exc.strerror or exc}") from None
        if _held_elsewhere(fd):
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            raise KernbenchError(f"{what} {target}: another process is writing it"
                                 + (f" (pid {holder})" if holder.isdigit() else "")
                                 + "; wait for it to end, or give another file")
        if _still_there(path, fd):
            break
        os.close(fd)  # its holder removed it as we opened it: take a fresh one
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # while still locked: a process waiting on it sees it gone
        os.close(fd)


def _lock_name(target: Path) -> str:
    """The name of `target`'s lock file (`claimed`): ``.NAME.lock``, or past 200 bytes
    ``.kernbench.HASH.lock`` (16 hex digits of the name's SHA-256), a file of its own."""
    import hashlib

    name = os.fsencode(target.name)
    if len(name) <= 200:
        return f".{target.name}.lock"
    return f".kernbench.{hashlib.sha256(name).hexdigest()[:16]}.lock"


def _held_elsewhere(fd: int) -> bool:
    """Take `fd`'s exclusive `flock` if it is free: whether another process holds it (no
    locks on this system or file system: False, nothing held)."""
    try:
        import fcntl
    except ImportError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


#: The random part `tempfile.mkstemp` puts in a name: 8 of these characters.
_RANDOM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


def _temporary(folder: Path, prefix: str) -> tuple[int, str, int]:
    """(descriptor, path, lock) of a fresh temporary file in `folder`, locked (`flock`) by
    `lock`, a second descriptor kept until the file has its place: an unlocked temporary
    is one whose writer is gone. A file another write's `remove_stale` took away in the
    instant before the lock is given up for a new one."""
    import tempfile  # here: the light commands (decode) read inputs but write nothing

    while True:
        handle, tmp = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".tmp")
        lock = os.dup(handle)
        _lock(lock, block=True)
        if _still_there(tmp, handle):
            return handle, tmp, lock
        os.close(lock)
        os.close(handle)


def _still_there(path: str | Path, fd: int) -> bool:
    """Whether `path` is still the file open as `fd` (not removed, nor replaced, by another
    process between the open and a lock taken on it)."""
    try:
        here = os.lstat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)


def _lock(fd: int, block: bool) -> bool:
    """Take the exclusive `flock` of `fd`; False if another process holds it (`block`:
    wait for it). Where there are no such locks, `block`: a writer goes on, and nothing is
    taken for stale."""
    try:
        import fcntl
    except ImportError:  # no flock here: every temporary is taken to be in use
        return block
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    except OSError:  # a file system without locks: treat every temporary as in use
        return block
    return True


def remove_stale(folder: Path, prefix: str) -> None:
    """Remove the temporary files of earlier writes of this output whose writer is gone (a
    SIGKILL, a power cut): named ``PREFIX`` + mkstemp's 8 random characters + ``.tmp``,
    regular files of this user, and not locked by a writer (`_temporary` holds its lock
    until the file is in place). Anything else, or anything that cannot be looked at, is
    left alone."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    raw = os.fsencode(prefix)
    for entry in entries:
        name = os.fsencode(entry.name)
        middle = name[len(raw):-4]
        if not (name.startswith(raw) and name.endswith(b".tmp") and len(middle) == 8
                and set(middle.decode("ascii", "replace")) <= _RANDOM):
            continue
        with contextlib.suppress(OSError):
            _remove_if_stale(folder / entry.name)


def _remove_if_stale(path: Path) -> None:
    """`remove_stale` for one candidate file."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            return
        if _lock(fd, block=False) and _still_there(path, fd):
            path.unlink()
    finally:
        os.close(fd)


def gzipped_if_named(path: Path, write: Callable[[BinaryIO], None]) -> Callable[[BinaryIO], None]:
    """`write`, through gzip when `path`'s name ends in ``.gz`` (Perfetto, ``zcat`` and
    ``jq`` read it as it is). The gzip header holds no file name and no time, so equal
    runs still give equal files; level 6 (gzip's own default) packs a timeline about as
    small as 9 does, in a fraction of the time."""
    if not path.name.endswith(".gz"):
        return write

    def packed(out: BinaryIO) -> None:
        import gzip

        with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=6,
                           mtime=0) as stream:
            write(stream)

    return packed


def read_input(path: Path, limit: int, what: str,
               check: Callable[[bytes], None] | None = None) -> bytes:
    """The bytes of input file `path`: a regular file of at most `limit` bytes; `check`,
    if given, is called on its first bytes (up to 64) before the rest is read, and raises
    for a file that cannot be what is expected (gigabytes of another file are not read
    to find out).

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
    except ValueError as exc:  # a NUL in the name (the API can pass one; argv cannot)
        raise KernbenchError(f"{clip(str(path))}: cannot read: {exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise KernbenchError(f"{path}: is a directory, expected {what}")
    if not stat.S_ISREG(info.st_mode):
        raise KernbenchError(f"{path}: is not a regular file, expected {what}")
    if info.st_size > limit:
        raise KernbenchError(f"{path}: {info.st_size:,} bytes is too large for {what} "
                             f"(at most {limit:,})")
    note_input(path)
    try:
        with _opened(path) as handle:
            data = handle.read(64 if check is not None else limit + 1)
            if check is not None and data is not None:  # None: it waits (see below)
                check(data)
                data += handle.read(limit + 1 - len(data)) or b""
    except OSError as exc:
        raise KernbenchError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if data is None:  # nothing yet: it waits for bytes (/proc/kmsg)
        raise KernbenchError(f"{path}: a pseudo-file that waits for data, expected {what}")
    if data and not info.st_size:
        raise KernbenchError(f"{path}: a pseudo-file (its size, 0, is not its bytes': /proc, "
                             f"/sys), expected {what}: copy it to a file")
    return data


class _Unheld:
    """A number in a JSON input that kernbench cannot hold, kept to name it in the error."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text


#: The largest integer kernbench reads back from JSON (and so may write into a result: a
#: `--seed` is at most this).
MAX_JSON_INT = 2**64 - 1


def json_number(value: Any) -> bool:
    """Whether `value` is a number a `--json` file holds as kernbench reads it back (see
    `parse_json`): a finite float, or an int within 64 bits; not a bool."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return -2**63 <= value <= MAX_JSON_INT
    return isinstance(value, float) and math.isfinite(value)


def plain_number(value: Any) -> int | float | None:
    """`value` as a Python int or float if it is a number (a numpy scalar too: ``np.int64``,
    ``np.float32``, as a kernel's arithmetic makes them), else None (a bool is not one)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return None


#: the longest name of a metric or bound (a label in the report's left column)
MOST_NAME = 100


def named_numbers(value: Any, ok: Callable[[int | float], bool]
                  ) -> dict[str, tuple[int | float, str]] | None:
    """`value` (a kernel's `metrics()` or `bounds()` answer) as {name: (number, how)}, each
    name 1 to `MOST_NAME` printable characters (a report's label), each number a Python
    one (`plain_number`) that is `ok`; None unless it is a dict of such pairs."""
    if not isinstance(value, dict):
        return None
    out = {}
    for name, pair in value.items():
        if not (isinstance(name, str) and 0 < len(name) <= MOST_NAME and name.isprintable()
                and isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[1], str)):
            return None
        number = plain_number(pair[0])
        if number is None or not ok(number):
            return None
        out[name] = (number, pair[1])
    return out


def _json_int(text: str) -> int | _Unheld:
    if len(text) > 21:  # past 64 bits, and before int() meets Python's 4,300-digit limit
        return _Unheld(text)
    value = int(text)
    return value if json_number(value) else _Unheld(text)


def _json_float(text: str) -> float | _Unheld:
    value = float(text)
    return value if json_number(value) else _Unheld(text)  # 1e400 is inf: not a number


def may_be_json_object(head: bytes) -> bool:
    """Whether a file whose first bytes are `head` may hold a JSON object (or JSON lines of
    them): its first byte past white space is ``{``, or there is none yet. A `read_input`
    check reads no further in a file that cannot be one (a trace, a binary, a log)."""
    return head.lstrip()[:1] in (b"{", b"")


def parse_json(text: str, where: str):
    """`json.loads(text)` taking only numbers kernbench can hold: NaN, Infinity, a float past
    its range (1e400) or an integer past 64 bits is a `KernbenchError` naming `where` and the
    key. Malformed JSON is json's ValueError (and deep nesting a RecursionError), for the
    caller to word. A key given twice in one object is refused too (json keeps the last,
    other readers the first: which one the file means is not known)."""
    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        value = dict(pairs)
        if len(value) < len(pairs):
            seen: set[str] = set()
            twice = next(k for k, _ in pairs if k in seen or seen.add(k))
            raise KernbenchError(f"{where}: key {clip(twice)} is given twice in one object")
        return value

    with gc_control.paused(collect=False):  # deep nesting: the error alone (gc_control)
        value = json.loads(text, parse_constant=_Unheld, parse_int=_json_int,
                           parse_float=_json_float, object_pairs_hook=unique)
    todo = [(value, "")]
    while todo:
        item, key = todo.pop()
        if isinstance(item, _Unheld):
            text = item.text
            shown = text if len(text) <= 24 else f"{text[:8]}…{text[-4:]} ({len(text):,} digits)"
            raise KernbenchError(f"{where}: {key or 'the value'}: {shown} is not a number "
                                 "kernbench reads (finite, integers within 64 bits; JSON has "
                                 "no NaN or Infinity)")
        if isinstance(item, dict):
            todo.extend((v, f"{key}.{k}" if key else str(k)) for k, v in item.items())
        elif isinstance(item, list):
            todo.extend((v, f"{key}[{i}]") for i, v in enumerate(item))
    return value
