"""Outputs never replace anything but a regular file they may overwrite, and never an
input of the same command; a closed or full stdout or stderr is handled."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import HANG_GUARD_S

KERNEL = Path(__file__).parents[1] / "kernels" / "load_dot.py"
OUTPUTS = ("--record", "--oplog", "--chrome-trace", "--critical-path")


def _special(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    else:  # a character device like /dev/null, made here (needs root)
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("making a device node needs root")
    return path


@pytest.mark.parametrize("kind", ["fifo", "socket", "device"])
@pytest.mark.parametrize("option", OUTPUTS)
def test_an_output_to_a_special_file_is_refused_and_leaves_it(cli, tmp_path, kind, option):
    path = _special(tmp_path, kind)
    before = path.lstat()
    code, _, err = cli("run", str(KERNEL), "--timing-only", option, str(path))
    assert (code, err) == (2, f"error: {option} {path}: is not a regular file (a device, "
                              "FIFO or socket); outputs go to regular files only\n")
    after = path.lstat()
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)


def test_an_output_through_a_symlink_writes_its_target(cli, tmp_path):
    target, link = tmp_path / "real.trace", tmp_path / "link.trace"
    link.symlink_to(target.name)
    code, _, _ = cli("run", str(KERNEL), "--timing-only", "--record", str(link))
    assert code == 0
    assert link.is_symlink() and target.is_file() and target.stat().st_size > 0
    assert cli("replay", str(link))[0] == 0


@pytest.mark.parametrize("option", [*OUTPUTS, "--save"])
def test_an_output_to_a_loop_of_symlinks_is_one_line(cli, tmp_path, option):
    """Python 3.11's `Path.resolve` raises RuntimeError (not OSError) on a loop: it was an
    internal error on every output option."""
    one, two = tmp_path / "one.out", tmp_path / "two.out"
    one.symlink_to(two.name)
    two.symlink_to(one.name)
    code, _, err = cli("run", str(KERNEL), option, str(one))
    assert (code, err) == (2, f"error: {option} {one}: cannot write: a loop of symbolic "
                              "links\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.out", "two.out"]


def test_an_output_over_an_input_is_refused_before_the_run(cli, tmp_path):
    kernel = tmp_path / "k.py"
    shutil.copy(KERNEL, kernel)
    text = kernel.read_bytes()
    code, _, err = cli("run", str(kernel), "--timing-only", "--critical-path", str(kernel))
    assert (code, err) == (2, f"error: --critical-path {kernel}: is an input of this "
                              "command; write the output elsewhere\n")
    assert kernel.read_bytes() == text
    topo = tmp_path / "t.toml"
    shutil.copy(Path(__file__).parents[1] / "topologies" / "pair.toml", topo)
    code, _, err = cli("run", str(KERNEL), "-t", str(topo), "--timing-only", "--oplog",
                       str(topo))
    assert (code, err) == (2, f"error: --oplog {topo}: is an input of this command; write "
                              "the output elsewhere\n")


@pytest.mark.parametrize("option", OUTPUTS)
def test_a_dash_is_not_standard_output_and_writes_no_file(kernbench, tmp_path, option):
    """`-` by custom means stdout; an output of a run goes to a file, and a file named `-`
    in the working folder would surprise: refused, nothing written."""
    done = kernbench.run("run", str(KERNEL), "--timing-only", option, "-", cwd=tmp_path)
    assert (done.returncode, done.stderr) == (
        2, f"error: {option} -: outputs go to files, not standard output; give a file "
           "name\n")
    assert list(tmp_path.iterdir()) == []


def test_two_outputs_to_one_file_are_refused_before_the_run(cli, tmp_path):
    out = tmp_path / "x"
    code, _, err = cli("run", str(KERNEL), "--timing-only", "--record", str(out), "--oplog",
                       str(out))
    assert (code, err) == (2, f"error: --oplog {out}: --record goes there too; give each "
                              "output its own file\n")
    assert not out.exists()


def test_an_output_name_near_the_length_limit_works(cli, tmp_path):
    out = tmp_path / ("t" * 240 + ".jsonl")  # 246 bytes of the 255 a name may have
    code, _, _ = cli("run", str(KERNEL), "--timing-only", "--critical-path", str(out))
    assert code == 0 and out.is_file()
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary left


def test_a_sweep_out_to_a_fifo_is_refused_without_waiting(cli, tmp_path):
    fifo = tmp_path / "r.jsonl"
    os.mkfifo(fifo)
    code, _, err = cli("sweep", str(KERNEL), "--timing-only", "--set", "pe.gemm.rows=4,8",
                       "--out", str(fifo))
    assert (code, err) == (2, f"error: --out {fifo}: is not a regular file (a device, FIFO "
                              "or socket); outputs go to regular files only\n")


def test_resume_never_changes_a_file_it_refuses(cli, tmp_path):
    foreign = tmp_path / "r.jsonl"
    foreign.write_text('{"foo": 1}\n{"torn')
    code, _, err = cli("sweep", str(KERNEL), "--timing-only", "--set", "pe.gemm.rows=4,8",
                       "--out", str(foreign), "--resume")
    assert (code, err) == (2, f"error: {foreign}: not a sweep results file of these axes; "
                              "--resume needs one\n")
    assert foreign.read_text() == '{"foo": 1}\n{"torn'
    code, _, err = cli("sweep", str(KERNEL), "--timing-only", "--set", "pe.gemm.rows=4,8",
                       "--out", str(KERNEL))
    assert (code, err) == (2, f"error: --out {str(KERNEL)!r}: the results file must end in "
                              ".jsonl or .csv\n")


# ---------------------------------------------------------------- stdout that cannot take it

@pytest.mark.parametrize("args", [["decode", "0x0"], ["--version"], ["--help"],
                                  ["run", str(KERNEL), "--timing-only"]])
def test_a_closed_stdout_is_exit_141_and_quiet(kernbench, args):
    read, write = os.pipe()
    os.close(read)  # the reader is gone before kernbench writes a byte
    try:
        proc = kernbench.run(*args, stdout=write, stderr=subprocess.PIPE)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, "")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["decode", "0x0"], ["--version"],
                                  ["run", str(KERNEL), "--timing-only"]])
def test_a_full_stdout_is_a_one_line_error(kernbench, args):
    with open("/dev/full", "w") as full:
        proc = kernbench.run(*args, stdout=full, stderr=subprocess.PIPE)
    assert (proc.returncode, proc.stderr) == (
        1, "error: cannot write to stdout: No space left on device\n")


def test_library_calls_are_not_held_to_one_command(cli, run, tmp_path):
    """The checks are a CLI command's: after one, Python code may write where it wrote."""
    from kernbench_cli.sim.trace_file import write_trace

    trace = tmp_path / "t.trace"
    assert cli("run", str(KERNEL), "--timing-only", "--record", str(trace))[0] == 0
    result = run("load_dot", "one", timing_only=True)
    write_trace(trace, result.trace)
    write_trace(trace, result.trace)


# ---------------------------------------------------------------- closed streams, odd names

@pytest.mark.parametrize(("args", "code"), [
    (["run", str(KERNEL), "--timing-only", "--progress"], 0),
    (["sweep", str(KERNEL), "--timing-only", "--no-replay", "-j", "2", "--set",
      "pe.gemm.rows=4,8", "--format", "csv"], 0),
    (["run", str(KERNEL), "--set", "hbm.bandwidth=fast"], 2)])
def test_a_closed_stderr_changes_nothing_but_what_is_seen(tmp_path, kernbench, args, code):
    """Progress, a sweep's workers and error lines with stderr closed: the exit code and
    stdout are as ever (stderr is /dev/null), and no output file took descriptor 2."""
    proc = kernbench.run(*args, cwd=tmp_path, stdout=subprocess.PIPE,
                         preexec_fn=lambda: os.close(2))  # started as with `2>&-`
    got, out = proc.returncode, proc.stdout
    assert got == code
    assert ("latency" in out or "point," in out) if code == 0 else out == ""
    assert list(tmp_path.iterdir()) == []


def test_a_non_blocking_stdout_gets_the_whole_report_and_its_flag_back(kernbench, tmp_path):
    """A parent sharing a non-blocking pipe with a slow reader: the report's writes past the
    pipe's room failed (EAGAIN), leaving a truncated JSON, an internal error and a chained
    traceback. The run writes it whole, and the pipe is non-blocking again after."""
    import fcntl
    import json
    import time

    read, write = os.pipe()
    if hasattr(fcntl, "F_SETPIPE_SZ"):
        fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 4096)  # the 50 KB report overflows it
    os.set_blocking(write, False)
    try:
        proc = kernbench.start("run", "gqa_attention", "-t", "sip", "--timing-only",
                               "--per-pe", "--json", stdout=write, cwd=tmp_path)
        time.sleep(0.5)  # a slow reader
        os.set_blocking(read, False)  # the write end stays open here: no end of file
        chunks, guard = [], time.monotonic() + HANG_GUARD_S
        while time.monotonic() < guard:
            done = proc.poll() is not None
            try:
                chunks.append(os.read(read, 1 << 16))
            except BlockingIOError:
                if done:
                    break
                time.sleep(0.01)
        _, err = proc.communicate(timeout=HANG_GUARD_S)
        assert proc.returncode == 0, err
        assert len(json.loads(b"".join(chunks))["per_pe"]) == 128
        assert not os.get_blocking(write)
    finally:
        os.close(read)
        os.close(write)


def test_an_output_name_that_is_not_utf8_is_written(cli, tmp_path):
    """A file name with a Latin-1 byte (from a shell) is a name like any other."""
    name = os.fsdecode(b"caf\xe9.trace")
    code, _, err = cli("run", str(KERNEL), "--timing-only", "--record", str(tmp_path / name))
    assert (code, err) == (0, "")
    assert os.listdir(os.fsencode(tmp_path)) == [b"caf\xe9.trace"]


def test_a_later_write_removes_stale_temporaries_of_its_own_output_only(cli, tmp_path):
    """A SIGKILL mid-write leaves `.NAME.XXXXXXXX.tmp`: the next write of NAME removes it,
    but not one a live writer holds (locked), one of another name or pattern, nor a
    symlink."""
    import fcntl

    out = tmp_path / "r.trace"
    stale = tmp_path / ".r.trace.k1ll3d_x.tmp"
    held = tmp_path / ".r.trace.wr1t1ng_.tmp"
    kept = [tmp_path / ".r.trace.abcd12345.tmp", tmp_path / ".other.trace.abcd1234.tmp",
            tmp_path / "r.trace.abcd1234.tmp", held]
    for path in (stale, *kept):
        path.write_text("half a trace")
    link = tmp_path / ".r.trace.l1nk3d__.tmp"
    link.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_text("not a temporary")
    fd = os.open(held, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another open file: as another process's lock
    try:
        code, _, err = cli("run", str(KERNEL), "--timing-only", "--record", str(out))
    finally:
        os.close(fd)
    assert (code, err) == (0, "")
    assert not stale.exists()
    assert all(path.read_text() == "half a trace" for path in kept)
    assert link.is_symlink() and (tmp_path / "elsewhere").read_text() == "not a temporary"


@pytest.mark.parametrize(("args", "message"), [
    (("run", "softmax", "--timing-only", "--record", "r.trace"),
     "--record r.trace: the working folder no longer exists; cd to a folder that exists"),
    (("run", "softmax", "--save", "s.npz"),
     "--save s.npz: the working folder no longer exists; cd to a folder that exists"),
])
def test_a_relative_output_in_a_deleted_working_folder_is_one_line(tmp_path, kernbench, args,
                                                                   message):
    """The shell's folder was removed under it: a relative output cannot be placed (it was
    an internal error, exit 70, from resolving the path)."""
    proc = subprocess.run(f"mkdir gone && cd gone && rmdir ../gone && "
                          f"{kernbench.shell} {' '.join(args)}", shell=True, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (2, f"error: {message}\n")


@pytest.mark.parametrize("command", ["regen", "check"])
def test_a_goldens_folder_name_too_long_is_one_line(cli, tmp_path, command):
    name = tmp_path / ("a" * 300)
    code, _, err = cli("golden", command, "--only", "softmax.default", "--dir", str(name))
    assert code == 2 and "Traceback" not in err and len(err.splitlines()) == 1
    assert err.startswith(f"error: --dir {name}: cannot create the folder: File name too "
                          "long" if command == "regen" else
                          f"error: goldens folder '{name}' does not exist")


def test_an_output_folder_that_takes_no_file_is_refused_before_the_work(cli, tmp_path,
                                                                       monkeypatch):
    """A read-only file system (here the probe's file refused as one would be) is said
    before the run or the goldens' cases, not after them."""
    import errno
    import tempfile

    made = tempfile.mkstemp

    def read_only(*args, **kwargs):
        if kwargs.get("prefix") == ".kernbench-probe-":
            raise OSError(errno.EROFS, "Read-only file system")
        return made(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    code, out, err = cli("run", "softmax", "--timing-only", "--record", str(tmp_path / "r.tr"))
    assert (code, out, err) == (2, "", f"error: --record {tmp_path / 'r.tr'}: cannot write in "
                                       f"'{tmp_path}': Read-only file system\n")
    (tmp_path / "gd").mkdir()
    code, out, err = cli("golden", "regen", "--only", "softmax.default", "--dir",
                         str(tmp_path / "gd"))
    assert (code, err) == (2, f"error: --dir {tmp_path / 'gd'}: cannot write in "
                              f"'{tmp_path / 'gd'}': Read-only file system\n")
    assert list((tmp_path / "gd").iterdir()) == []


def test_outputs_written_together_take_their_place_as_the_block_ends(tmp_path):
    """`fileio.written_together`: an OSError of the block's own is its own (it was blamed on
    an output, or an IndexError); a block inside another places its outputs as it ends,
    and the outer one its own after (blocks were told apart by equality: the wrong one
    left, and every later write in the process was deferred for good); another thread's
    write takes its place at once; a failed block leaves no temporary file."""
    import threading

    from kernbench_cli.fileio import atomic_write, written_together

    def write(name: str) -> None:
        atomic_write(tmp_path / name, lambda out: out.write(name.encode()), "--x")

    with pytest.raises(OSError, match="its own"), written_together():
        write("a.json")
        raise OSError(5, "its own")
    assert list(tmp_path.iterdir()) == []
    with written_together():
        with written_together():
            write("b.json")
        assert (tmp_path / "b.json").read_text() == "b.json"
        write("c.json")
        thread = threading.Thread(target=write, args=("d.json",))
        thread.start()
        thread.join()
        assert not (tmp_path / "c.json").exists() and (tmp_path / "d.json").exists()
    write("e.json")  # no block open: at once
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "c.json", "d.json",
                                                          "e.json"]


def test_owner_access_blocks_in_any_order_put_the_umask_back():
    """The umask is the process's: two sweeps' blocks (threads) ending in another order
    than they began left it changed for good (0o277 became 0o077)."""
    from kernbench_cli.fileio import _umask, owner_access

    was = os.umask(0o277)
    try:
        first, second = owner_access(), owner_access()
        first.__enter__()
        second.__enter__()
        assert _umask() == 0o077  # the owner's bits alone unmasked
        first.__exit__(None, None, None)
        assert _umask() == 0o077  # the second block still runs
        second.__exit__(None, None, None)
        assert _umask() == 0o277
    finally:
        os.umask(was)
