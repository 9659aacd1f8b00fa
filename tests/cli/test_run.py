"""`kernbench run`: results, output formats and every bad-input path."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import memory_low_after, test_topology

KERNELS = Path(__file__).parents[1] / "kernels"
SMALL = ("-p", "M=32", "-p", "K=128", "-p", "N=512")


@pytest.mark.parametrize("mode", ["composite", "primitive"])
def test_sharded_gemm_verifies_on_the_default_topology(cli, mode):
    code, out, err = cli("run", "sharded_gemm", "-p", f"mode={mode}")
    assert (code, err) == (0, "")
    assert "PASS out: max |err|" in out
    assert re.search(r"topology       default #[0-9a-f]{8}: 16 PEs; costs default #[0-9a-f]{8}",
                     out)


def test_composite_keeps_gemm_busier_than_primitive(cli):
    util = {}
    for mode in ("composite", "primitive"):
        _, out, _ = cli("run", "sharded_gemm", "-p", f"mode={mode}", "--json")
        util[mode] = json.loads(out)["engines"]["gemm"]["utilization"]
    assert util["composite"] > 0.9 and util["composite"] > util["primitive"] + 0.1, util


def test_json_is_one_object_with_the_documented_keys(cli):
    code, out, _ = cli("run", "sharded_gemm", *SMALL, "--json")
    assert code == 0
    result = json.loads(out)
    for key in ("schema_version", "kernel", "topology", "params", "latency_ns", "verified",
                "max_abs_err", "engines", "commands"):
        assert key in result, key
    assert set(result["engines"]) == {"cpu", "scheduler", "dma", "gemm", "math", "hbm"}
    for stats in result["engines"].values():
        assert {"busy_ns", "idle_ns", "utilization", "ops"} <= set(stats)
    assert result["verified"] is True
    assert result["params"] == {"K": 128, "M": 32, "N": 512, "dtype": "f16", "mode": "composite",
                                "tile_k": 64, "tile_m": 16, "tile_n": 16}
    assert isinstance(result["latency_ps"], int)
    assert result["latency_ns"] == result["latency_ps"] / 1000


def test_json_is_byte_identical_across_runs(cli):
    assert cli("run", "sharded_gemm", *SMALL, "--json")[1] == \
        cli("run", "sharded_gemm", *SMALL, "--json")[1]


def test_per_pe_table_and_json(cli):
    code, out, _ = cli("run", "sharded_gemm", *SMALL, "--per-pe")
    assert code == 0 and "Per PE: busy time" in out and "0.0.1.7" in out
    per_pe = json.loads(cli("run", "sharded_gemm", *SMALL, "--per-pe", "--json")[1])["per_pe"]
    assert len(per_pe) == 16 and per_pe[15]["pe"] == "rack=0 sip=0 cube=1 pe=7"


def test_save_writes_inputs_and_outputs(cli, tmp_path):
    path = tmp_path / "run.npz"
    code, _, _ = cli("run", "sharded_gemm", *SMALL, "--save", str(path), "--seed", "3")
    assert code == 0
    data = np.load(path)
    assert sorted(data.files) == ["a", "b", "out"]
    np.testing.assert_allclose(data["out"].astype(np.float32),
                               (data["a"].astype(np.float32) @ data["b"].astype(np.float32)),
                               rtol=4e-3, atol=4e-3)
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*"))
    assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_seed_changes_the_data_not_the_timing(run):
    a = run("sharded_gemm", "default", ("M=32", "K=128", "N=512"), seed=1)
    b = run("sharded_gemm", "default", ("M=32", "K=128", "N=512"), seed=2)
    assert a.latency_ps == b.latency_ps
    assert not np.array_equal(a.inputs["a"], b.inputs["a"])


def test_timing_only_gives_the_same_time_without_values(cli, run):
    full = run("sharded_gemm", "default", ("M=32", "K=128", "N=512", "mode=primitive"))
    fast = run("sharded_gemm", "default", ("M=32", "K=128", "N=512", "mode=primitive"),
               timing_only=True)
    assert fast.latency_ps == full.latency_ps and fast.oplog == full.oplog
    assert fast.verified is None and fast.checks == []
    _, out, _ = cli("run", "sharded_gemm", *SMALL, "--timing-only")
    assert "not verified: timing only" in out


@pytest.mark.parametrize(("text", "value"), [
    ("256", 256), ("0256", 256), ("+256", 256), ("2_56", 256), ("0x100", 256),
    ("0o400", 256), ("0b1_0000_0000", 256), ("-0", 0),
    ("\u0663", None), ("2__56", None), ("256_", None), ("0x", None), ("2.56e2", None),
    ("0b12", None), ("256 x", None), ("0" * 60 + "256", 256),
])
def test_an_integer_parameter_is_ascii_digits_or_a_based_number(text, value):
    """Decimal with leading zeros as written (010 is ten, not Python's error), 0x/0o/0b, a
    sign and single `_` between digits; anything else (an Arabic-Indic digit, a doubled
    `_`, a float) is refused with the parameter's name."""
    from kernbench_cli.errors import ParamError
    from kernbench_cli.sim.kernels import load_kernel, parse_params

    kernel = load_kernel("sharded_gemm")
    if value is not None:
        assert parse_params(kernel, [f"tile_m={text}"])["tile_m"] == value
        return
    with pytest.raises(ParamError) as caught:
        parse_params(kernel, [f"tile_m={text}"])
    assert str(caught.value) == f"parameter tile_m: expected an integer, got {text!r}"


@pytest.mark.parametrize(("text", "message"), [
    ("abc" * 20, "expected an integer, got 'abcabcabcabcabcabca…cabcabc' (60 characters)"),
    ("9" * 60, "'9999999999999999999…9999999' (60 characters) is out of range (a 64-bit "
               "integer)"),
    ("9" * 6000, "'9999999999999999999…9999999' (6,000 characters) is out of range (a 64-bit "
                 "integer)"),  # past Python's 4,300-digit limit
])
def test_a_long_integer_parameter_is_named_for_what_it_is(text, message):
    """Past 40 characters every value was "out of range", a number or not, and counted
    with its quotes (62 for 60)."""
    from kernbench_cli.errors import ParamError
    from kernbench_cli.sim.kernels import load_kernel, parse_params

    with pytest.raises(ParamError) as caught:
        parse_params(load_kernel("sharded_gemm"), [f"tile_m={text}"])
    assert str(caught.value) == f"parameter tile_m: {message}"


@pytest.mark.parametrize("text", ["\u0663", "\uff11", "1.\u0665"])
def test_a_float_parameter_is_ascii_too(text):
    """Python's float() reads digits of every script; a parameter, as an integer's, reads
    ASCII only."""
    from kernbench_cli.errors import ParamError
    from kernbench_cli.sim.kernels import load_kernel, parse_params

    with pytest.raises(ParamError) as caught:
        parse_params(load_kernel("rmsnorm"), [f"eps={text}"])
    assert str(caught.value) == f"parameter eps: expected a number, got {text!r}"


@pytest.mark.parametrize(("args", "message"), [
    (["nope"], "unknown kernel 'nope' (shipped: all_reduce, gqa_attention, "
               "llama_decode, rmsnorm, "
               "sharded_gemm, softmax; or give a path to a .py file)"),
    (["sharded_gemm", "-p", "Q=1"], "sharded_gemm has no parameter 'Q' (parameters: M, K, N, "
                                    "dtype, mode, tile_m, tile_n, tile_k)"),
    (["sharded_gemm", "-p", "M=big"], "parameter M: expected an integer, got 'big'"),
    (["sharded_gemm", "-p", "M"], "parameter 'M' is not name=value"),
    (["sharded_gemm", "-p", "mode=fast"], "parameter mode: 'fast' is not one of composite, "
                                          "primitive"),
    (["sharded_gemm", "-p", "N=1000"], "b: 1000 along axis 1 does not divide over the 16 PEs of "
                                       "the grid (1000 % 16 = 8)"),
    (["sharded_gemm", "-p", "mode=primitive", "-p", "K=100"],
     "sharded_gemm: K = 100 is not a multiple of tile_k = 64"),
    (["sharded_gemm", "-t", test_topology("tiny_hbm"), "-p", "N=1024"],
     "inputs overflow an HBM slice: hbm of PE (rack=0 sip=0 cube=0 pe=0) is full: a needs "
     "64KiB (65536 B) at offset 0x100000, 0 B of 1MiB left"),
    (["sharded_gemm", "-p", "N=67108864"],
     "input 'b' [512, 67108864] f16 is 64GiB, more than the 32GiB of HBM in the system"),
    (["sharded_gemm", "--timing-only", "--save", "x.npz"],
     "--save needs values: it cannot go with --timing-only"),
    (["sharded_gemm", "-p", "N=1000000000000000"], "input 'b' [512, 1000000000000000] f16 is "
     "909PiB (1,024,000,000,000,000,000 B), more than the 32GiB of HBM in the system"),
    (["all_reduce", "-p", "bytes=1099511627776"], "all_reduce: bytes = 1TiB is more than a "
     "PE's HBM slice holds (2GiB, hbm.slice_size)"),
    (["all_reduce", "-p", "bytes=2147483652"], "all_reduce: bytes = 2GiB (2,147,483,652 B) is "
     "more than a PE's HBM slice holds (2GiB, hbm.slice_size)"),
])
def test_bad_input_is_one_line(cli, args, message):
    """Each is refused before anything runs, and before the host holds a byte of inputs too
    large for the machine (all_reduce checks `bytes` against the slice before drawing)."""
    code, _, err = cli("run", *args)
    assert code == 2
    assert err == f"error: {message}\n"


def _kernel_error(cli, name, topology="default"):
    path = KERNELS / f"{name}.py"
    code, out, err = cli("run", str(path), "-t", test_topology(topology))
    assert code == 1 and out == ""
    assert err.count("\n") == 1
    return err.removeprefix("error: ").rstrip("\n").replace(str(path), name)


def test_kernel_exception_names_line_pe_and_time(cli):
    assert _kernel_error(cli, "raises") == (
        "raises:8: PE (rack=0 sip=0 cube=0 pe=1) at t=104ns: ZeroDivisionError: division "
        "by zero")


def test_deadlock_names_the_waiting_pe_and_what_it_waits_for(cli):
    assert _kernel_error(cli, "deadlock") == (
        "deadlock: 1 of 16 PEs still wait and nothing is left to run: PE (rack=0 sip=0 cube=0 "
        "pe=0) at deadlock:6 waits: recv from PE (rack=0 sip=0 cube=0 pe=1) on its E ring "
        "(since t=4ns)")


@pytest.mark.parametrize(("name", "message"), [
    ("out_of_bounds", "out_of_bounds:5: PE (rack=0 sip=0 cube=0 pe=0) at t=0ns: tl.load of "
                      "256 B at 0x20000000e0 runs past the end of 'x' (256 B at 0x2000000000) "
                      "by 224 B"),
    ("tcm_overflow", "tcm_overflow:12: PE (rack=0 sip=0 cube=0 pe=0) at t=4ns: tensors "
                     "overflow TCM: TCM of PE (rack=0 sip=0 cube=0 pe=0) is full: tl.load needs "
                     "4MiB (4194304 B); 2097152 B of 2MiB free, the largest free block it may "
                     "take is 2097152 B"),
    ("bad_dot", "bad_dot:7: PE (rack=0 sip=0 cube=0 pe=0) at t=8ns: tl.dot: shapes [8, 8] "
                "and [4, 16] do not match (8 != 4)"),
    ("no_neighbour", "no_neighbour:6: PE (rack=0 sip=0 cube=0 pe=0) at t=4ns: tl.send: PE "
                     "(rack=0 sip=0 cube=0 pe=0) has no neighbour to the N"),
])
def test_kernel_mistakes(cli, name, message):
    assert _kernel_error(cli, name) == message


@pytest.mark.parametrize(("command", "option"), [
    ("run", "--save"), ("run", "--record"), ("run", "--oplog"), ("run", "--chrome-trace"),
    ("run", "--critical-path"), ("sweep", "--out"), ("sweep", "--plot"),
])
def test_an_output_ending_in_a_slash_names_a_folder_and_is_refused(cli, tmp_path, monkeypatch,
                                                                    command, option):
    """The slash is what the user typed: a folder. Path() drops it, and `--save x.npz/`
    wrote the file x.npz."""
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(command, "softmax", "-p", "rows=8", "--timing-only", option, "x.out/")
    assert (code, err) == (2, f"error: Invalid value for '{option}': x.out/: ends in '/', so "
                              f"it names a folder; give a file name (see 'kernbench {command} "
                              "--help')\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_seed_past_64_bits_is_refused_before_the_run(cli, tmp_path, command):
    """It ran, then its result (which holds the seed, and is read back as JSON) was
    refused: after the whole run, or a sweep's every point, with --out left unreadable."""
    code, _, err = cli(command, "softmax", "-p", "rows=8", "--seed", str(2**64), "--out",
                       str(tmp_path / "s.jsonl")) if command == "sweep" else \
        cli(command, "softmax", "-p", "rows=8", "--seed", str(2**64))
    assert (code, err) == (2, "error: Invalid value for '--seed': Input should be less than "
                              "or equal to 18446744073709551615 (see 'kernbench "
                              f"{command} --help')\n")
    assert list(tmp_path.iterdir()) == []
    assert cli("run", "softmax", "-p", "rows=16", "--seed", str(2**64 - 1), "--json")[0] == 0


def test_a_missing_save_folder_writes_nothing(cli, tmp_path):
    target = tmp_path / "no" / "such" / "out.npz"
    code, _, err = cli("run", "sharded_gemm", *SMALL, "--save", str(target))
    assert code == 2
    assert err == f"error: --save {target}: folder '{target.parent}' does not exist\n"
    assert not (tmp_path / "no").exists()


def test_an_endless_kernel_stops_at_the_command_limit(cli):
    """Reported at once, with no timing pass (it took minutes, and more memory than the
    functional pass, at the default 100 M): the PE that issued the one too many."""
    path = KERNELS / "endless.py"
    code, out, err = cli("run", str(path), "-t", test_topology("one"), "--max-commands", "5000")
    assert (code, out) == (1, "")
    assert err == (f"error: {path}:6: PE (rack=0 sip=0 cube=0 pe=0): the kernel issued more "
                   "than 5,000 commands; an endless loop? (--max-commands raises the limit)\n")


def test_a_command_limit_the_kernel_takes_is_its_error_still(cli, tmp_path):
    """A kernel that takes the limit's error and returns: the run does not pass, cut short
    at the limit; it fails at the command that crossed it (line 7)."""
    path = tmp_path / "taken.py"
    path.write_text((KERNELS / "endless.py").read_text().replace(
        "    while True:\n        tl.cycles(1)  # line 6",
        "    try:\n        while True:\n            tl.cycles(1)\n    except Exception:\n"
        "        pass"))
    (tmp_path / "_base.py").write_text((KERNELS / "_base.py").read_text())
    code, out, err = cli("run", str(path), "-t", test_topology("one"), "--max-commands", "5000")
    assert (code, out) == (1, "")
    assert err == (f"error: {path}:7: PE (rack=0 sip=0 cube=0 pe=0): the kernel issued more "
                   "than 5,000 commands; an endless loop? (--max-commands raises the limit)\n")


def test_an_endless_kernel_is_stopped_when_the_machine_runs_short_of_memory(cli, monkeypatch):
    """Commands cost memory: long before 100 M of them a loop without end fills the
    machine, and the kernel's out-of-memory killer would end kernbench with no word. The
    watchdog stops the whole pass (not the one PE it lands in: the next would fill the
    machine the same way) when the memory left falls below its floor (here: it reads 10
    GiB left of 24 at its first 20 reads, then 900 MiB, under the floor of 4%)."""
    reads = memory_low_after(monkeypatch, 20)
    path = KERNELS / "endless.py"
    code, out, err = cli("run", str(path), "-t", test_topology("pair"), "--timing-only",
                         "--kernel-timeout", "0.2")  # it ticks every 50 ms
    assert (code, out) == (1, "")
    assert re.fullmatch(
        rf"error: {re.escape(str(path))}:[56]: PE \(rack=0 sip=0 cube=0 pe=0\): this machine ran "
        r"out of memory after the kernel issued [1-9][0-9,]* commands, holding the command "
        r"streams; a loop without end\? --max-commands 100,000,000 stops it sooner\n", err), err
    assert reads.count(900 << 20) == 1  # stopped at the first low reading


@pytest.mark.parametrize(("kernel", "params"), [
    ("sharded_gemm", ("N=1152",)),
    ("sharded_gemm", ("N=1152", "mode=primitive")),
    ("gqa_attention", ("seq_len=4608",)),
])
def test_kernels_verify_on_a_topology_with_no_powers_of_two(run, kernel, params):
    """Guards against hidden power-of-two assumptions: routes, route caches, trees, tiles."""
    result = run(kernel, "odd", params)
    assert result.verified, result.checks
    assert result.num_pes == 18


def test_oplog_file_has_every_command_with_decoded_addresses(cli, run, tmp_path):
    path = tmp_path / "ops.jsonl"
    code, _, _ = cli("run", "sharded_gemm", *SMALL, "-p", "mode=primitive", "--oplog", str(path))
    assert code == 0
    records = [json.loads(line) for line in path.read_text().splitlines()]
    result = run("sharded_gemm", "default", ("M=32", "K=128", "N=512", "mode=primitive"))
    assert len(records) == len(result.oplog)
    first = records[0]
    assert set(first) == {"seq", "pid", "pe", "engine", "kind", "issue_ps", "start_ps", "end_ps",
                          "bytes", "flops", "src", "dst", "src_text", "dst_text", "line"}
    # each record carries the kernel line of its command (kernels/sharded_gemm.py: the
    # primitive loop loads at 85 and 86, stores at 89)
    assert {r["line"] for r in records if r["kind"] == "load"} == {85, 86}
    assert {r["line"] for r in records if r["kind"] == "store"} == {89}
    assert all(r["line"] > 0 for r in records)
    assert (first["kind"], first["pe"]) == ("load", "rack=0 sip=0 cube=0 pe=0")
    assert first["src_text"].startswith("HBM rack=0 sip=0 cube=0 pe=0 offset=")
    assert first["dst_text"] == "TCM rack=0 sip=0 cube=0 pe=0 offset=0x0"
    store = next(r for r in records if r["kind"] == "store")
    assert store["src_text"].startswith("TCM") and store["dst_text"].startswith("HBM")


def test_piped_output_has_no_trailing_padding(cli):
    code, out, _ = cli("run", "gqa_attention")
    assert code == 0
    assert out.count("\n") > 20 and not [line for line in out.splitlines() if line.endswith(" ")]
    assert max(len(line) for line in out.splitlines()) <= 80


def test_a_misaligned_load_names_the_alignment_its_dtype_needs(cli):
    path = Path(__file__).parents[1] / "kernels" / "misaligned.py"
    code, out, err = cli("run", str(path))
    assert (code, out) == (1, "")
    assert err == (f"error: {path}:12: PE (rack=0 sip=0 cube=0 pe=0) at t=0ns: tl.load: "
                   "address 0x2000000002 is not aligned for f32: it needs a multiple of 4 B "
                   "(2 B past one)\n")


def test_a_file_the_kernel_reads_changed_during_the_run_gives_no_result(cli, tmp_path):
    """A parameter naming a file the kernel reads (its FILES): a run during which the file
    changed reports no result (which bytes made it is unknown), in one line, exit 2."""
    data = tmp_path / "data.txt"
    data.write_text("first\n")
    kernel = _appending(tmp_path, "('data',)")
    code, out, err = cli("run", str(kernel), "-p", f"data={data}", "--json")
    assert (code, out) == (2, "")
    assert err.strip() == (f"error: {kernel}: -p data={data}: the file changed during the run, so "
                           "its result is not reported: run again")


def _appending(tmp_path, files: str, setup: str = "    open(p['data'], 'a').write('more')\n",
               reference: str = "    return {}\n") -> Path:
    """A kernel declaring `FILES = files` whose setup (by default) appends to -p data."""
    kernel = tmp_path / "k.py"
    kernel.write_text(
        f"import os\nimport numpy as np\nPARAMS = {{'data': '', 'n': 1}}\nFILES = {files}\n\n"
        f"def setup(host, p):\n{setup}"
        "    return {'x': host.replicate('x', np.zeros(16, np.float32))}\n\n"
        "def kernel(tl, **a):\n    tl.load(tl.shard(a['x']), (16,), 'f32')\n\n"
        f"def reference(host, p):\n{reference}\n"
        "def outputs(host, args, p):\n    return {}\n")
    return kernel


@pytest.mark.parametrize(("setup", "reference"), [
    # an edit that makes a later reader fail: the change is the error, not the failure
    ("    open(p['data'], 'a').write('more')\n",
     "    if 'more' in open(p['data']).read():\n        raise ValueError('cannot reshape')\n"
     "    return {}\n"),
    # the same size, its modification time put back: only its bytes tell
    ("    st = os.stat(p['data'])\n    open(p['data'], 'r+').write('FIRST')\n"
     "    os.utime(p['data'], ns=(st.st_atime_ns, st.st_mtime_ns))\n", "    return {}\n"),
])
def test_a_change_is_seen_however_it_is_made(cli, tmp_path, setup, reference):
    data = tmp_path / "data.txt"
    data.write_text("first\n")
    kernel = _appending(tmp_path, "('data',)", setup, reference)
    code, out, err = cli("run", str(kernel), "-p", f"data={data}", "--json")
    assert (code, out) == (2, "")
    assert err.strip() == (f"error: {kernel}: -p data={data}: the file changed during the run, "
                           "so its result is not reported: run again")


@pytest.mark.parametrize("files", ["'data'", "('n',)", "('nosuch',)", "{'data': 1}",
                                   "(['data'],)"])
def test_files_must_name_str_parameters(cli, tmp_path, files):
    """`FILES` is checked when the kernel loads: a tuple of its str parameters (a str alone
    would be read letter by letter)."""
    kernel = _appending(tmp_path, files)
    code, _, err = cli("run", str(kernel), "-p", f"data={tmp_path / 'd'}")
    assert (code, err) == (2, f"error: {kernel}: FILES must be a tuple of str parameters in "
                              f"PARAMS, not {files}\n")


def _on_pe_3(path: Path, imports: str, statement: str) -> Path:
    """A kernel at `path` (numpy and `imports` first) whose PE 3 runs `statement` after a
    load, on line 10 plus the lines of `imports`."""
    path.write_text(
        f"import numpy as np\n{imports}PARAMS = {{}}\n\n"
        "def setup(host, p):\n"
        "    return {'x': host.replicate('x', np.zeros(16, np.float32))}\n\n"
        "def kernel(tl, x):\n"
        "    tl.load(tl.shard(x), (16,), 'f32')\n"
        f"    if tl.pid == 3:\n        {statement}\n\n"
        "def reference(host, p):\n    return {}\n\n"
        "def outputs(host, args, p):\n    return {}\n")
    return path


def test_an_array_larger_than_the_machine_is_the_kernels_line_not_its_streams(cli, tmp_path):
    """numpy refusing one allocation in the kernel's code is that line's error, with
    numpy's reason, not the command streams filling the machine (no loop is to blame)."""
    kernel = _on_pe_3(tmp_path / "big.py", "", "np.zeros((10**7, 10**7))")
    code, _, err = cli("run", str(kernel))
    assert (code, err) == (1, f"error: {kernel}:10: PE (rack=0 sip=0 cube=0 pe=3): this "
                              "machine ran out of memory (Unable to allocate 728. TiB for an "
                              "array with shape (10000000, 10000000) and data type float64)\n")


def test_a_kernel_changing_folder_leaves_a_relative_file_its_own(cli, tmp_path, monkeypatch):
    """A relative -p data= is the file in the folder the run began in: a kernel's os.chdir
    (put back when the run ends) does not make it another file at the check."""
    import hashlib

    (tmp_path / "sub").mkdir()
    (tmp_path / "data.txt").write_text("first\n")
    (tmp_path / "sub" / "data.txt").write_text("first\n")  # the same bytes, another file
    kernel = _appending(tmp_path, "('data',)", "    os.chdir('sub')\n")
    monkeypatch.chdir(tmp_path)
    code, out, _ = cli("run", str(kernel), "-p", "data=data.txt", "--json")
    assert code == 0
    assert json.loads(out)["file_digests"] == {
        "data": hashlib.sha256(b"first\n").hexdigest()[:8]}
    assert Path.cwd() == tmp_path


def test_a_file_name_with_a_nul_is_a_one_line_error():
    """Only the API can pass a NUL (argv cannot): refused as a file that cannot be read."""
    import kernbench_cli as kb

    with pytest.raises(kb.ParamError) as err:
        kb.run("llama_decode", params={"config": "a\0b.json"}, timing_only=True)
    assert str(err.value) == ("llama_decode: config 'a\\x00b.json': cannot read: embedded null "
                              "byte")


def test_a_small_allocation_failing_is_the_run_filling_the_machine(cli, tmp_path):
    """numpy failing on a small array (the last straw of a run that filled the machine) is
    the run's growth, said as such, not that array's fault."""
    kernel = _on_pe_3(tmp_path / "straw.py",
                      "try:\n    from numpy._core._exceptions import _ArrayMemoryError\n"
                      "except ImportError:  # numpy 1\n"
                      "    from numpy.core._exceptions import _ArrayMemoryError\n",
                      "raise _ArrayMemoryError((4,), np.dtype('f8'))")
    code, _, err = cli("run", str(kernel))
    assert (code, err) == (1, f"error: {kernel}:14: PE (rack=0 sip=0 cube=0 pe=3): this machine "
                              "ran out of memory after the kernel issued 16 commands, holding the "
                              "command streams and the tensors' values (--timing-only keeps "
                              "none); a loop without end? --max-commands 100,000,000 stops it "
                              "sooner\n")
