"""`kernbench sweep`: points, rows equal to single runs, results files, resume, dead workers."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

import kernbench_cli as kb
from kernbench_cli.explore.sweep import Point, Spec, points, run_local, run_point, split_values
from tests.conftest import HANG_GUARD_S, ROOT, TESTS, test_topology

LOAD_DOT = str(TESTS / "kernels" / "load_dot.py")
AXES = ("--set", "hbm.bandwidth=102.4GB/s,204.8GB/s", "--set", "costs.issue.load=4ns,10ns")


def test_points_are_the_product_first_axis_slowest_or_zipped():
    got = points(["a.b=1,2", "c=[4,2],[8,1]"], ["n=7"])
    assert [(p.sets, p.params) for p in got] == [
        (("a.b=1", "c=[4,2]"), ("n=7",)), (("a.b=1", "c=[8,1]"), ("n=7",)),
        (("a.b=2", "c=[4,2]"), ("n=7",)), (("a.b=2", "c=[8,1]"), ("n=7",))]
    zipped = points(["a=1,2"], ["n=3,4"], zipped=True)
    assert [(p.sets, p.params) for p in zipped] == [(("a=1",), ("n=3",)), (("a=2",), ("n=4",))]
    assert split_values('"x,y",[1,2],3') == ['"x,y"', "[1,2]", "3"]


def test_paired_axes_go_together_crossed_with_the_rest():
    """--pair rows,cols: the i-th rows with the i-th cols, the pair crossed with the
    bandwidth (the bandwidth slowest: it is the first axis); -p names pair as well."""
    got = points(["hbm.bandwidth=1,2", "pe.gemm.rows=16,4", "pe.gemm.cols=16,64"], [],
                 pairs=["pe.gemm.rows,pe.gemm.cols"])
    assert [p.sets for p in got] == [
        ("hbm.bandwidth=1", "pe.gemm.rows=16", "pe.gemm.cols=16"),
        ("hbm.bandwidth=1", "pe.gemm.rows=4", "pe.gemm.cols=64"),
        ("hbm.bandwidth=2", "pe.gemm.rows=16", "pe.gemm.cols=16"),
        ("hbm.bandwidth=2", "pe.gemm.rows=4", "pe.gemm.cols=64")]
    got = points(["a=1,2", "b=3"], ["n=5,6", "m=7,8"], pairs=[("m", "a")])
    assert [(p.sets, p.params) for p in got] == [
        (("a=1", "b=3"), ("n=5", "m=7")), (("a=1", "b=3"), ("n=6", "m=7")),
        (("a=2", "b=3"), ("n=5", "m=8")), (("a=2", "b=3"), ("n=6", "m=8"))]


def test_a_paired_sweep_through_the_cli_and_the_api(cli):
    import kernbench_cli as kb

    axes = ("--set", "hbm.bandwidth=102.4GB/s,204.8GB/s", "--set", "costs.issue.load=4ns,10ns",
            "--set", "costs.issue.dot=4ns,8ns", "--pair", "costs.issue.load,costs.issue.dot")
    code, out, _ = cli("sweep", LOAD_DOT, *axes, "--json")
    rows = json.loads(out)
    keys = ("hbm.bandwidth", "costs.issue.load", "costs.issue.dot")
    assert code == 0 and [tuple(r["axes"][k] for k in keys) for r in rows] == [
        ("102.4GB/s", "4ns", "4ns"), ("102.4GB/s", "10ns", "8ns"),
        ("204.8GB/s", "4ns", "4ns"), ("204.8GB/s", "10ns", "8ns")]
    api = kb.sweep(LOAD_DOT, set={"hbm.bandwidth": ["102.4GB/s", "204.8GB/s"],
                                  "costs.issue.load": ["4ns", "10ns"],
                                  "costs.issue.dot": ["4ns", "8ns"]},
                   pair=[("costs.issue.load", "costs.issue.dot")], jobs=2)
    assert [p.result.latency_ps for p in api.points] == [r["result"]["latency_ps"]
                                                         for r in rows]


def test_each_row_is_the_run_of_its_point_alone(cli):
    code, out, _ = cli("sweep", LOAD_DOT, *AXES, "--jobs", "2", "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["axes"] for r in rows] == [
        {"hbm.bandwidth": bw, "costs.issue.load": cost}
        for bw in ("102.4GB/s", "204.8GB/s") for cost in ("4ns", "10ns")]
    for row in rows:
        code, alone, _ = cli("run", LOAD_DOT, "--json",
                             *(x for k, v in row["axes"].items() for x in ("--set", f"{k}={v}")))
        assert code == 0
        alone = json.loads(alone)
        for key in ("latency_ps", "engines", "checks", "critical_path", "topology_digest",
                    "costs_digest"):
            assert json.dumps(row["result"][key], sort_keys=True) == \
                json.dumps(alone[key], sort_keys=True)


def test_an_interrupted_sweep_resumes_without_rerunning_its_points(cli, tmp_path):
    out = tmp_path / "r.jsonl"
    code, _, _ = cli("sweep", LOAD_DOT, *AXES, "--jobs", "1", "--out", str(out))
    assert code == 0
    lines = out.read_text().splitlines()
    assert [json.loads(line)["point"] for line in lines] == [0, 1, 2, 3]
    # as if stopped while writing the third row; the first row's latency marked, to see
    # that --resume keeps it rather than running the point again
    first = json.loads(lines[0])
    first["result"]["latency_ps"] = 1
    out.write_text(json.dumps(first, sort_keys=True) + "\n" + lines[1] + "\n" + lines[2][:40])
    code, text, err = cli("sweep", LOAD_DOT, *AXES, "--jobs", "1", "--out", str(out),
                          "--resume", "--json")
    assert code == 0
    rows = json.loads(text)
    assert rows[0]["result"]["latency_ps"] == 1  # not run again
    assert [json.loads(line)["point"] for line in out.read_text().splitlines()] == [0, 1, 2, 3]
    assert err.count("point ") == 2  # only the two points that were missing ran


def test_a_results_file_another_sweep_is_writing_is_refused_untouched(cli, tmp_path):
    """Two sweeps appending to one --out (a job restarted while the first still runs)
    wrote each point twice, and the file was then refused by `plot`: the second is
    refused at once, naming the first's process, through a symlink to the file too. The
    lock file beside it goes with the sweep; one a killed sweep left is taken over."""
    import subprocess
    import sys

    out, link = tmp_path / "r.jsonl", tmp_path / "link.jsonl"
    link.symlink_to(out.name)
    holder = subprocess.Popen(  # holds the file's lock as a running sweep does
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
         "from kernbench_cli.fileio import claimed\n"
         f"with claimed(Path({str(out)!r}), '--out'):\n"
         "    print('held', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline() == "held\n"
        for given in (out, link):
            code, _, err = cli("sweep", LOAD_DOT, *AXES, "--jobs", "1", "--out", str(given),
                               "--resume")
            assert (code, err) == (2, f"error: --out {given}: another process is writing it "
                                      f"(pid {holder.pid}); wait for it to end, or give "
                                      "another file\n")
        assert not out.exists()
    finally:
        holder.communicate("", timeout=HANG_GUARD_S)
    assert not (tmp_path / ".r.jsonl.lock").exists()
    (tmp_path / ".r.jsonl.lock").write_text("12345\n")  # a killed sweep's
    code, _, err = cli("sweep", LOAD_DOT, *AXES, "--jobs", "1", "--out", str(out))
    assert code == 0, err
    assert len(out.read_text().splitlines()) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.jsonl", "r.jsonl"]


def test_a_sweep_runs_its_workers_under_a_umask_that_bars_the_owner(kernbench, tmp_path,
                                                                    short_tmp):
    """With umask 0777 multiprocessing made its fork server's folder (and semaphores) of
    mode 000, then could not use them: an internal error, and the folder left behind. As
    an ordinary user (no capability to override file modes; root has one, so the test
    drops it with setpriv) the sweep runs, and its --out keeps the umask."""
    import shutil

    drop = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv (util-linux) to drop root's file-mode override")
        drop = ["setpriv", "--inh-caps=-all",
                "--bounding-set=-dac_override,-dac_read_search,-fowner"]
    out, temp = tmp_path / "r.jsonl", short_tmp
    done = subprocess.run([*drop, *kernbench.argv, "sweep", LOAD_DOT, *AXES, "--jobs", "2",
                           "--out", str(out)], capture_output=True, text=True,
                          timeout=HANG_GUARD_S, preexec_fn=lambda: os.umask(0o777),
                          env={**os.environ, "TMPDIR": str(temp)})
    if "setpriv:" in done.stderr:
        pytest.skip(f"setpriv cannot drop capabilities here: {done.stderr.strip()}")
    assert (done.returncode, done.stderr.count("error")) == (0, 0), done.stderr
    assert out.stat().st_mode & 0o777 == 0o600  # the owner's, to append to: no more
    assert len(out.read_text().splitlines()) == 4
    assert list(temp.iterdir()) == []  # the fork server's folder went with it


def test_a_sweep_started_with_sigchld_blocked_runs_to_its_end(kernbench, tmp_path):
    """A launcher that blocks SIGCHLD hands its mask on through exec: the fork server,
    which learns of its workers' ends by it, never did, and the sweep hung after its first
    point (Ctrl-C and all)."""
    def blocked() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})

    done = subprocess.run([*kernbench.argv, "sweep", LOAD_DOT, *AXES, "--jobs", "2",
                           "--format", "csv"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=HANG_GUARD_S, preexec_fn=blocked)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 1 + 4


@pytest.mark.parametrize(("soft", "hard", "jobs"), [(16, 16, 2), (64, 64, 40), (16, None, 8)])
def test_a_sweep_under_a_low_open_files_limit(kernbench, tmp_path, soft, hard, jobs):
    """Each worker takes pipes: under a low `ulimit -n`, starting one failed as an internal
    error, or in the pool's own thread, which then died and left the sweep waiting for
    good. A soft limit below what the workers need is raised towards the hard one (as a
    process may); a hard one too low is one line, before any worker starts."""
    import resource

    if hard is None:  # the hard limit as it is
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        if hard != resource.RLIM_INFINITY and hard < 256:
            pytest.skip(f"a hard open-files limit of {hard}")

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    axis = "hbm.bandwidth=" + ",".join(f"{g}GB/s" for g in range(100, 100 + jobs))
    done = subprocess.run([*kernbench.argv, "sweep", LOAD_DOT, "--set", axis, "--jobs",
                           str(jobs), "--format", "csv"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=HANG_GUARD_S, preexec_fn=limited)
    if hard == resource.RLIM_INFINITY or hard >= 256:
        assert done.returncode == 0, done.stderr
        assert len(done.stdout.splitlines()) == 1 + jobs
        return
    assert done.returncode == 2 and re.fullmatch(
        rf"error: {jobs} workers need some \d+ open files, and the limit is {hard} "
        r"\(ulimit -Hn\): fewer --jobs, or a higher limit\n", done.stderr), done.stderr


def test_a_tmpdir_too_long_for_the_workers_socket_is_one_line(kernbench, tmp_path):
    """The fork server's socket goes in TMPDIR, and a socket's path is at most 107 bytes:
    a longer TMPDIR was an internal error."""
    temp = tmp_path / ("t" * 120)
    temp.mkdir()
    done = kernbench.run("sweep", LOAD_DOT, *AXES, "--jobs", "2", cwd=tmp_path,
                         env={**os.environ, "TMPDIR": str(temp)})
    assert (done.returncode, done.stderr) == (
        2, f"error: the sweep's workers cannot start: their fork server's socket in {temp}: "
           "AF_UNIX path too long (a socket's path is at most 107 bytes: a shorter "
           "TMPDIR)\n")
    assert list(temp.iterdir()) == []


def test_two_long_results_names_have_locks_of_their_own(tmp_path):
    """Names past 200 bytes shared one lock file (`.kernbench.lock`): two sweeps writing two
    files refused each other."""
    from kernbench_cli.fileio import claimed

    with claimed(tmp_path / ("a" * 210 + ".jsonl"), "--out"), \
            claimed(tmp_path / ("b" * 210 + ".jsonl"), "--out"):
        locks = sorted(p.name for p in tmp_path.iterdir())
    assert len(locks) == 2 and all(re.fullmatch(r"\.kernbench\.[0-9a-f]{16}\.lock", n)
                                   for n in locks)
    assert list(tmp_path.iterdir()) == []


def test_a_csv_results_file(cli, tmp_path):
    out = tmp_path / "r.csv"
    code, _, _ = cli("sweep", LOAD_DOT, *AXES, "--jobs", "2", "--out", str(out))
    assert code == 0
    lines = out.read_text().splitlines()
    assert lines[0] == ("point,hbm.bandwidth,costs.issue.load,latency_ps,bound,verified,"
                        "gemm_mac_utilization,hbm_gbps,energy_pj,lower_bound_ps,bound_gap,"
                        "pruned,error,sweep")
    assert lines[1].startswith("0,102.4GB/s,4ns,542858,gemm,True,")
    assert len(lines) == 5
    code, text, err = cli("sweep", LOAD_DOT, *AXES, "--out", str(out), "--resume", "--json")
    assert (code, err) == (0, "")  # nothing left to run; the rows come from the file
    rows = json.loads(text)
    assert [r["result"]["latency_ps"] for r in rows] == [542_858, 548_858, 521_429, 527_429]
    assert rows[0]["result"]["bound"] == {"engine": "gemm"}


def test_the_printed_table_in_other_formats(cli, monkeypatch):
    """--format csv prints the rows `--out r.csv` writes; md the table as Markdown, headed
    by the keys swept and titled with the ones held fixed."""
    import csv
    import io

    axes = ("--set", "hbm.bandwidth=102.4GB/s,204.8GB/s", "--set", "costs.issue.load=4ns")
    code, out, _ = cli("sweep", LOAD_DOT, *axes, "--format", "csv")
    records = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and [(r["hbm.bandwidth"], r["latency_ps"]) for r in records] == [
        ("102.4GB/s", "542858"), ("204.8GB/s", "521429")]
    code, out, _ = cli("sweep", LOAD_DOT, *axes, "--format", "md")
    assert out.splitlines() == [
        "Sweep: 2 points, PASS; costs.issue.load=4ns", "",
        "| # | hbm.bandwidth | latency | vs first | energy | power | bound by | GEMM MAC |",
        "|---:|---|---:|---:|---:|---:|---|---:|",
        "| 0 | 102.4GB/s | 542.858ns | +0.0% | 1.52uJ | 2.79 W | gemm | 2.9% |",
        "| 1 | 204.8GB/s | 521.429ns | -3.9% | 1.47uJ | 2.81 W | gemm | 3.1% |"], out
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli("sweep", LOAD_DOT, *axes)
    assert "Sweep: 2 points, PASS; costs.issue.load=4ns" in out
    assert "│ # │ hbm.      │" not in out and "┃   ┃ hbm.      ┃" in out


def _dies_once(spec: Spec, point: Point, delay: float = 0.0) -> dict:
    """A worker that SIGKILLs its own process the first time it meets point 1, `delay`
    seconds in."""
    marker = Path(spec.costs)  # (the test passes a marker path here)
    if point.index == 1 and not marker.exists():
        marker.write_text("killed")
        time.sleep(delay)
        os.kill(os.getpid(), signal.SIGKILL)
    return {"point": point.index, "axes": point.axes, "error": None, "result": {"pid": 0}}


def _always_dies(spec: Spec, point: Point) -> dict:
    if point.index == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"point": point.index, "axes": point.axes, "error": None, "result": {"pid": 0}}


def test_a_killed_worker_is_retried_and_the_sweep_completes(tmp_path):
    todo = points(["a=1,2,3,4"], [])
    rows = []
    run_local(Spec("k", costs=str(tmp_path / "marker")), todo, 2, rows.append,
              worker=_dies_once)
    assert [(r["point"], r["error"]) for r in rows] == [(0, None), (1, None), (2, None),
                                                        (3, None)]
    rows.clear()
    run_local(Spec("k"), todo, 2, rows.append, worker=_always_dies)
    assert [(r["point"], r["error"]) for r in rows] == [
        (0, None), (1, "its worker process died, and again when it ran alone (killed, or out "
                       "of memory)"),
        (2, None), (3, None)]


def test_a_sweep_from_a_script_without_a_main_guard_says_so(tmp_path):
    """Called at a script's top level, kb.sweep's workers import the script as they start,
    call it again and die: every point said "killed, or out of memory"."""
    import subprocess
    import sys

    script = tmp_path / "sweep_script.py"
    script.write_text("import kernbench_cli as kb\n"
                      "rows = kb.sweep('softmax', params={'rows': [16, 32]}, timing_only=True,"
                      " jobs=2).table()\nprint({r['error'] for r in rows})\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=HANG_GUARD_S)
    assert done.stdout.splitlines()[-1] == str({
        "its worker process died, and again when it ran alone (killed, or out of memory, or, "
        "from a script, kb.sweep called outside `if __name__ == '__main__':`, which worker "
        "processes need: they import the script as they start)"})


def test_a_sweep_leaves_the_callers_process_and_fork_server_as_they_were(tmp_path):
    """kb.sweep set the BLAS thread limits in the caller's environment for good, and the
    process's one fork server, started while the sweep blocked Ctrl-C and SIGTERM, kept
    them blocked: the caller's own forkserver pool then could not be terminated (`with
    Pool()` hung at its end)."""
    import subprocess
    import sys

    script = tmp_path / "caller.py"
    script.write_text(
        "import os, signal, multiprocessing as mp\nimport kernbench_cli as kb\n\n"
        "def blocked(_):\n    return sorted(int(s) for s in signal.pthread_sigmask("
        "signal.SIG_BLOCK, []))\n\nif __name__ == '__main__':\n"
        "    kb.sweep('softmax', params={'rows': [16, 32]}, timing_only=True, jobs=2)\n"
        "    print(os.environ.get('OMP_NUM_THREADS'))\n"
        "    with mp.get_context('forkserver').Pool(1) as pool:\n"
        "        print(pool.map(blocked, [0]))\n")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=HANG_GUARD_S)
    assert (done.returncode, done.stdout) == (0, "None\n[[]]\n"), done.stderr


#: point 1 kills its worker half a second in, after point 0 has returned
_dies_late = functools.partial(_dies_once, delay=0.5)


def test_a_pool_broken_between_results_and_the_next_point_is_replaced(tmp_path, monkeypatch):
    """Point 0 returns, point 1's worker dies, and only then is point 2 submitted (to the
    broken pool, which refuses it): point 1 runs alone, point 2 in a new pool."""
    from kernbench_cli.explore import sweep

    submit, held = sweep._submit, []

    def late(pool, worker, spec, point):
        if point.index == 2 and not held:  # the first time: once the pool has broken
            held.append(point)
            for _ in range(200):
                if pool._broken:
                    break
                time.sleep(0.05)
        return submit(pool, worker, spec, point)

    monkeypatch.setattr(sweep, "_submit", late)
    rows = []
    run_local(Spec("k", costs=str(tmp_path / "marker")), points(["a=1,2,3,4"], []), 2,
              rows.append, worker=_dies_late)
    assert [(r["point"], r["error"]) for r in rows] == [(0, None), (1, None), (2, None),
                                                        (3, None)]


def test_a_failing_point_is_a_row_not_a_crash(cli):
    code, out, err = cli("sweep", LOAD_DOT, "--set", "pe.gemm.rows=32,0", "--json")
    assert code == 1
    rows = json.loads(out)
    assert rows[0]["error"] is None
    assert rows[1]["error"] == "--set pe.gemm.rows=0: pe.gemm.rows: expected a positive " \
                               "integer, got 0"
    assert err.endswith("error: 1 of 2 points failed (their rows say why)\n")


@pytest.mark.parametrize(("args", "message"), [
    (("--set", "a=1,2", "-p", "n=1,2,3", "--zip"), "--zip needs axes of one length; got [2, 3] "
                                                    "values"),
    (("--out", "r.txt"), "--out 'r.txt': the results file must end in .jsonl or .csv"),
    (("--resume",), "--resume needs --out, the results file to resume"),
    (("--set", "a"), "--set 'a': expected KEY=V1,V2,…"),
    (("--set", "a=1,,2"), "--set 'a=1,,2': an empty value"),
    (("--set", "a=1,2", "--set", "b=1,2,3", "--pair", "a,b"),
     "--pair a,b: a has 2, b has 3 values; paired axes need as many values each"),
    (("--set", "a=1,2", "--pair", "a,c"), "--pair a,c: c is not an axis (axes: a)"),
    (("--set", "a=1,2", "--pair", "a"), "--pair a: name two axes or more (KEY,KEY,…)"),
    (("--set", "a=1,2", "-p", "n=1,2", "--set", "b=3,4", "--pair", "a,b", "--pair", "b,n"),
     "--pair b,n: b is in two pairs; an axis pairs once"),
    (("--set", "a=1,2", "--set", "b=1,2", "--pair", "a,b", "--zip"),
     "--zip pairs every axis already; give it or --pair, not both"),
    (("--set", "pe.gemm.rows=" + "9" * 100_000), "--set pe.gemm.rows=999999999999999999999999…: "
     "a value of 100,000 characters; an axis value is at most 256"),
    (("-p", "n=4," + "x" * 300), "-p n=xxxxxxxxxxxxxxxxxxxxxxxx…: a value of 300 characters; "
     "an axis value is at most 256"),
    (("--set", "a=" + ",".join(map(str, range(1000))), "--set", "b=" + ",".join(
        map(str, range(1000))), "-p", "n=" + ",".join(map(str, range(1000)))),
     "the axes make 1,000,000,000 points (1,000 x 1,000 x 1,000); a sweep runs at most "
     "100,000: fewer values, or --zip/--pair to pair axes"),
    (("--set", "a=1,2", "--dask", "tcp://localhost"),
     "--dask tcp://localhost: needs the scheduler's port, 1 to 65535 (tcp://HOST:8786)"),
    (("--set", "a=1,2", "--dask", "localhost"),
     "--dask localhost: needs the scheduler's port, 1 to 65535 (tcp://HOST:8786)"),
    (("--set", "a=1,2", "--dask", "foo://h:1"), "--dask foo://h:1: unknown scheme foo://; "
     "kernbench reaches a scheduler over tcp://, tls://, ws://, wss://"),
    (("--set", "a=1,2", "--dask", "inproc://x"), "--dask inproc://x: unknown scheme "
     "inproc://; kernbench reaches a scheduler over tcp://, tls://, ws://, wss://"),
    (("--set", "a=1,2", "--dask", "tls://h:8786"), "--dask tls://h:8786: TLS needs "
     "certificates, and Dask's configuration has no distributed.comm.tls.ca-file (set it, "
     "or DASK_DISTRIBUTED__COMM__TLS__CA_FILE and DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT)"),
    (("--set", "a=1,2", "--dask", "tcp://h:x"), "--dask tcp://h:x: not a scheduler address; "
     "give tcp://HOST:PORT"),
])
def test_bad_sweep_options_are_one_line(cli, args, message):
    code, out, err = cli("sweep", LOAD_DOT, *args)
    assert (code, out, err) == (2, "", f"error: {message}\n")


def test_a_dask_address_from_the_environment_says_so(cli, monkeypatch):
    """`--dask` takes DASK_SCHEDULER_ADDRESS when not given: an error about the address
    says which it was (a user who never typed `--dask` was told of "--dask")."""
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://h:x")
    assert cli("sweep", LOAD_DOT, "--set", "a=1,2") == (
        2, "", "error: --dask (from DASK_SCHEDULER_ADDRESS) tcp://h:x: not a scheduler "
               "address; give tcp://HOST:PORT\n")
    assert cli("sweep", LOAD_DOT, "--set", "a=1,2", "--dask", "tcp://h:y") == (
        2, "", "error: --dask tcp://h:y: not a scheduler address; give tcp://HOST:PORT\n")


@pytest.mark.parametrize(("args", "message"), [
    (("-t", "nosuch"), "no topology named 'nosuch' (shipped: default, rack, sip; or give a "
                       "path to a .toml file)"),
    (("--costs", "/nonexistent/costs.toml"), "/nonexistent/costs.toml: no such file"),
])
def test_a_topology_or_cost_table_no_point_reads_is_refused_before_any_runs(cli, args,
                                                                           message):
    """As `run` refuses it, exit 2, with or without --out: every point failed alike (exit 1,
    "2 of 2 points failed"), each in a worker of its own."""
    code, out, err = cli("sweep", "softmax", *args, "-p", "rows=16,32", "-j", "1")
    assert (code, out, err) == (2, "", f"error: {message}\n")


@pytest.mark.parametrize(("axis", "message"), [
    ("pe.nosuch=3,4", "--set pe.nosuch=3: pe.nosuch: unknown key (known: clock, scheduler, "
                      "dma, gemm, math, tcm, ipcq, resources)"),
    ("hbm.bandwith=1,2", "--set hbm.bandwith=1: hbm.bandwith: unknown key; did you mean "
                         "'bandwidth'?"),
    ("costs.issue.nosuch=1ns,2ns", "--set costs.issue.nosuch=1ns: costs.issue.nosuch: unknown "
                                   "key (known: composite, load, store, dot, math, send, "
                                   "recv, wait)"),
    ("pe.gemm.rows.x=1,2", "--set pe.gemm.rows.x=1: pe.gemm.rows is a value, not a table"),
    ("pe.gemm.rows.*=1,2", "--set pe.gemm.rows.*=1: pe.gemm.rows is a value, not a table"),
    ("costs.issue.load.x=1,2", "--set costs.issue.load.x=1: costs.issue.load is a value, not a "
                               "table"),
])
def test_a_set_key_no_topology_has_is_refused_before_any_runs(cli, axis, message):
    """In `run`'s words for the first point, exit 2: every point failed alike (exit 1),
    each in a worker of its own. (`run` named a cost table's value without `costs.`.)"""
    first = axis.split(",")[0]
    assert cli("run", "softmax", "--set", first) == (2, "", f"error: {message}\n")
    code, out, err = cli("sweep", "softmax", "--set", axis, "-j", "1")
    assert (code, out, err) == (2, "", f"error: {message}\n")
    with pytest.raises(kb.ConfigError, match="^" + re.escape(message) + "$"):
        kb.sweep("softmax", set=[axis], jobs=1)


def test_every_key_the_schema_has_passes_the_sweeps_key_check():
    """The check walks the schema's tables: no key a topology or cost table may set is
    refused (values are loading's to check)."""
    from dataclasses import fields

    from kernbench_cli.config.loader import check_set_keys
    from kernbench_cli.config.schema import CostTable, Topology

    def keys(cls, prefix=""):
        for f in fields(cls):
            if f.metadata.get("internal"):
                continue
            sub = f.metadata.get("section")
            yield from keys(sub, f"{prefix}{f.name}.") if sub else [f"{prefix}{f.name}"]
            if sub:
                yield f"{prefix}{f.name}.*"

    given = [*keys(Topology), *keys(CostTable, "costs.")]
    assert len(given) > 60 and "costs.issue.load" in given and "pe.gemm.*" in given
    check_set_keys([f"{key}=1" for key in given])


def test_a_sweep_from_a_deleted_working_folder_is_refused_before_any_worker(cli, tmp_path,
                                                                             monkeypatch):
    """The workers would start in the working folder (multiprocessing reads os.getcwd())."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    code, out, err = cli("sweep", LOAD_DOT, "--timing-only", "--set", "pe.gemm.rows=4,8")
    assert (code, out) == (2, "")
    assert err == ("error: the working folder cannot be read (No such file or directory: "
                   "deleted since the shell went there?); the sweep's workers start in it: cd "
                   "to a folder that exists\n")


def test_run_point_reports_a_verification_failure_as_its_error(tmp_path):
    row = run_point(Spec(LOAD_DOT, timing_only=True), points([], [])[0])
    assert (row["error"], row["result"]["verified"]) == (None, None)


def test_a_cost_only_sweep_records_once_and_replays_each_point(cli):
    """Only cost-table keys vary: one recording, replayed per point; each row equals the
    point's own timing-only run."""
    code, out, _ = cli("sweep", "gqa_attention", "--set", "costs.issue.math=4ns,8ns",
                       "--set", "costs.issue.composite=40ns,80ns", "--timing-only", "--json")
    assert code == 0
    rows = json.loads(out)
    assert all(row.get("replayed") for row in rows)
    for row in rows:
        code, alone, _ = cli("run", "gqa_attention", "--timing-only", "--json",
                             *(x for k, v in row["axes"].items() for x in ("--set", f"{k}={v}")))
        alone = json.loads(alone)
        for key in ("latency_ps", "engines", "critical_path", "costs_digest"):
            assert json.dumps(row["result"][key], sort_keys=True) == \
                json.dumps(alone[key], sort_keys=True), key
    latency = {(r["axes"]["costs.issue.math"], r["axes"]["costs.issue.composite"]):
               r["result"]["latency_ps"] for r in rows}
    assert latency["8ns", "40ns"] > latency["4ns", "40ns"]  # PE_CPU issues MATH on the path


def test_a_recording_the_points_cannot_read_is_refused_before_any_runs(cli, tmp_path):
    """A missing or foreign --replay file: exit 2 at once, not a failed row per point."""
    missing, foreign = tmp_path / "none.kbt", tmp_path / "foreign.kbt"
    foreign.write_bytes(b"PK\x03\x04 not a trace")
    axes = ("--set", "hbm.bandwidth=100GB/s,200GB/s", "-j", "1")
    assert cli("sweep", "softmax", "--replay", str(missing), *axes) == \
        (2, "", f"error: {missing}: no such file\n")
    code, out, err = cli("sweep", "softmax", "--replay", str(foreign), *axes)
    assert (code, out, err.startswith(f"error: {foreign}: not a kernbench trace")) == \
        (2, "", True)


def test_replay_sweeps_take_no_parameter_axes(cli, tmp_path):
    trace = tmp_path / "t.kbtrace"
    assert cli("run", LOAD_DOT, "--record", str(trace))[0] == 0
    assert cli("sweep", LOAD_DOT, "--replay", str(trace), "-p", "n=1,2") == (
        2, "", "error: --replay: -p cannot vary (the recording fixed the kernel's "
               "parameters)\n")


def test_a_replayed_sweep_is_of_the_recordings_kernel_and_parameters(cli, tmp_path):
    """A replay times the recorded run: a `-p` it did not run with, or another KERNEL,
    would label every point with a run that never was (softmax rows=8 timed, its table
    saying rows=64). Both are refused before any point runs; the recording's own values
    are taken."""
    trace = tmp_path / "sm.kbtrace"
    pair = ("-t", test_topology("pair"))
    assert cli("run", "softmax", *pair, "-p", "rows=8", "-p", "cols=64", "-p", "block=4",
               "--timing-only", "--record", str(trace))[0] == 0
    axes = (*pair, "--set", "hbm.bandwidth=51.2GB/s,102.4GB/s", "-j", "1")
    assert cli("sweep", "softmax", "--replay", str(trace), "-p", "rows=64", *axes) == (
        2, "", f"error: --replay {trace}: -p rows=64 is not the recording's (rows=8): a "
               "replay re-times the run recorded, whose parameters are fixed\n")
    assert cli("sweep", "rmsnorm", "--replay", str(trace), *axes) == (
        2, "", f"error: --replay {trace}: the recording is of kernel 'softmax', not "
               "'rmsnorm'\n")
    code, out, err = cli("sweep", "softmax", "--replay", str(trace), "-p", "rows=0x8",
                         "-p", "block=4", *axes, "--json")
    assert code == 0, err
    assert [row["result"]["params"]["rows"] for row in json.loads(out)] == [8, 8]


def test_a_replayed_sweep_keeps_the_recordings_set_items(cli, tmp_path):
    """`--replay TRACE` re-times the recording under its own `--set` items, then each
    point's: a point equals a run with both."""
    trace = tmp_path / "t.kbtrace"
    assert cli("run", "sharded_gemm", "--timing-only", "--set", "pe.gemm.rows=4",
               "--record", str(trace))[0] == 0
    code, out, _ = cli("sweep", "sharded_gemm", "--replay", str(trace), "--set",
                       "costs.issue.composite=40ns,400ns", "--json")
    assert code == 0
    for row in json.loads(out):
        composite = row["axes"]["costs.issue.composite"]
        _, alone, _ = cli("run", "sharded_gemm", "--timing-only", "--set", "pe.gemm.rows=4",
                          "--set", f"costs.issue.composite={composite}", "--json")
        assert row["result"]["latency_ps"] == json.loads(alone)["latency_ps"]
        assert row["result"]["overrides"] == ["pe.gemm.rows=4",
                                              f"costs.issue.composite={composite}"]


def test_plot_draws_the_sweep(cli, tmp_path):
    pytest.importorskip("matplotlib")
    png, svg, again = tmp_path / "s.png", tmp_path / "s.svg", tmp_path / "again.svg"
    for path in (png, svg, again):
        code, _, _ = cli("sweep", LOAD_DOT, *AXES, "--timing-only", "--plot", str(path),
                         "--x", "hbm.bandwidth")
        assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = svg.read_text()
    assert "hbm.bandwidth (GB/s)" in text and "latency (us)" in text
    assert "costs.issue.load=10ns" in text  # a line per value of the other axis
    assert again.read_bytes() == svg.read_bytes()  # deterministic


def test_plot_reads_no_settings_of_the_users_matplotlib(kernbench, tmp_path):
    """A FIFO named matplotlibrc in the working folder held matplotlib's import for good;
    a MPLBACKEND it does not know was an internal error (Agg draws anyway); a user's
    matplotlibrc changed the figure (a font it cannot find: hundreds of warnings). The
    figure is drawn in matplotlib's default style, the same bytes with or without one."""
    pytest.importorskip("matplotlib")
    results = tmp_path / "r.jsonl"
    assert kernbench.run("sweep", LOAD_DOT, *AXES, "--timing-only", "--out", str(results),
                         cwd=tmp_path).returncode == 0
    plain = {**os.environ, "MPLCONFIGDIR": str(tmp_path / "config")}
    (tmp_path / "config").mkdir()
    done = kernbench.run("plot", str(results), "-o", "plain.svg", cwd=tmp_path, env=plain)
    assert done.returncode == 0, done.stderr
    (tmp_path / "config" / "matplotlibrc").write_text("font.family: NoSuchFontXYZ\n"
                                                      "figure.figsize: 2, 2\n")
    done = kernbench.run("plot", str(results), "-o", "users.svg", cwd=tmp_path,
                         env={**plain, "MPLBACKEND": "nonexistent"})
    assert (done.returncode, done.stderr) == (0, "")
    assert (tmp_path / "users.svg").read_bytes() == (tmp_path / "plain.svg").read_bytes()
    os.mkfifo(tmp_path / "matplotlibrc")
    done = kernbench.run("plot", str(results), "-o", "fifo.svg", cwd=tmp_path, env=plain)
    assert (done.returncode, done.stderr) == (2, "error: --out: matplotlib would read its "
                                                 "settings from matplotlibrc, which is not a "
                                                 "regular file (a FIFO, a device, a socket)\n")
    assert not (tmp_path / "fifo.svg").exists()


def _row(point: int, cols: int, bandwidth: str, latency_ps: int) -> dict:
    """A sweep row whose run has the GEMM busy 80% and DMA 60% of the latency (overlapping)
    and a roofline bound half the latency."""
    engines = {"gemm": {"busy_ps": latency_ps * 8 // 10}, "dma": {"busy_ps": latency_ps * 6 // 10}}
    return {"point": point, "axes": {"pe.gemm.cols": str(cols), "hbm.bandwidth": bandwidth,
                                     "costs.issue.load": "4ns"}, "error": None,
            "result": {"latency_ps": latency_ps, "engines": engines,
                       "roofline": [{"resource": "gemm", "ps": latency_ps // 2}]}}


def test_runs_per_joule_leaves_out_a_run_that_took_no_energy():
    """A cost table of zero energies: that point has no runs per joule (it was a division
    by zero); the others are 1e12 / pJ."""
    pytest.importorskip("matplotlib")
    from kernbench_cli.report.plot import figure

    rows = [_row(n, cols, "102.4GB/s", 1_000_000) for n, cols in enumerate((8, 16, 32))]
    for row, pj in zip(rows, (0, 2e6, 4e6), strict=True):
        row["result"]["energy_pj"] = {"total": pj}
    (line,) = figure(rows, "pe.gemm.cols", "perf_per_watt", "k").axes[0].get_lines()
    assert line.get_xydata().tolist() == [[16, 5e5], [32, 2.5e5]]


def test_the_plots_panels_hold_the_sweeps_numbers():
    """The figure's data, not its pixels: the latency per line, its tightest bound dashed,
    a log2 axis for powers of two labelled by the key and its values, busy bars side by side
    (each its engine's own busy time, not stacked), the latency over them, legends outside
    the axes, the fixed key in the title."""
    pytest.importorskip("matplotlib")
    from kernbench_cli.report.plot import figure

    rows = [_row(n, cols, bw, lat) for n, (cols, bw, lat) in enumerate(
        [(8, "102.4GB/s", 8_000_000), (16, "102.4GB/s", 5_000_000), (32, "102.4GB/s", 4_000_000),
         (8, "204.8GB/s", 7_000_000), (16, "204.8GB/s", 4_000_000), (32, "204.8GB/s", 3_000_000)])]
    fig = figure(rows, None, "latency", "k on sip")
    top, bottom = fig.axes
    assert fig._suptitle.get_text() == "k on sip\nfixed: costs.issue.load=4ns"
    lines = {line.get_label(): line.get_xydata().tolist() for line in top.get_lines()}
    assert lines["hbm.bandwidth=102.4GB/s"] == [[8, 8.0], [16, 5.0], [32, 4.0]]
    assert lines["hbm.bandwidth=204.8GB/s: tightest bound (gemm)"] == [[8, 3.5], [16, 2.0],
                                                                       [32, 1.5]]
    assert top.get_xscale() == "log" and top.get_xlabel() == "pe.gemm.cols"
    assert [t.get_text() for t in top.get_xticklabels()] == ["8", "16", "32"]
    bars = {c.get_label(): [(b.get_y(), b.get_height()) for b in c] for c in bottom.containers}
    assert bars["GEMM"] == [(0, lat * 0.8 / 1e6) for lat in (8e6, 5e6, 4e6, 7e6, 4e6, 3e6)]
    assert bars["DMA"][0] == (0, 4.8)  # beside GEMM's 6.4, not on top of it
    (latency,) = [line for line in bottom.get_lines() if line.get_label() == "latency"]
    assert latency.get_ydata().tolist() == [8.0, 5.0, 4.0, 7.0, 4.0, 3.0]
    assert [t.get_text() for t in bottom.get_xticklabels()][:2] == ["8, 102.4GB/s",
                                                                   "16, 102.4GB/s"]
    fig.canvas.draw()
    for ax in (top, bottom):
        assert ax.get_legend().get_window_extent().x0 >= ax.get_window_extent().x1
    fig = figure(rows, "hbm.bandwidth", "latency", "k")
    assert fig.axes[0].get_xscale() == "linear"  # two values: not worth a log axis
    assert fig.axes[0].get_xlabel() == "hbm.bandwidth (GB/s)"


@pytest.mark.parametrize(("args", "message"), [
    (("--plot", "s.gif"), "--plot 's.gif': the figure must end in .png, .svg, .pdf"),
    (("--plot", "s.png", "--y", "speed"), "--y 'speed': one of latency, "
                                          "gemm_mac_utilization, hbm_gbps, energy, power, "
                                          "perf_per_watt (the kernel states no metrics "
                                          "of its own)"),
    (("--plot", "s.png", "--x", "hbm.latency"), "--x 'hbm.latency': not a swept axis (axes: "
                                                "hbm.bandwidth, costs.issue.load)"),
])
def test_bad_plot_options_are_one_line(cli, args, message):
    assert cli("sweep", LOAD_DOT, *AXES, *args) == (2, "", f"error: {message}\n")


def test_plot_without_matplotlib_says_how_to_install_it(cli, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    assert cli("sweep", LOAD_DOT, "--plot", "s.png") == (
        2, "", "error: --plot needs matplotlib: pip install 'kernbench[plot]'\n")


def test_a_dask_cluster_gives_the_local_pools_rows(cli):
    """A real distributed.LocalCluster with 2 worker processes: the same rows, field for
    field, as the local pool."""
    distributed = pytest.importorskip("distributed")
    code, local, _ = cli("sweep", LOAD_DOT, *AXES, "--jobs", "2", "--json")
    assert code == 0
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        code, remote, err = cli("sweep", LOAD_DOT, *AXES, "--dask", cluster.scheduler_address,
                                "--json")
    assert code == 0, err
    assert json.loads(remote) == json.loads(local)


def test_a_points_files_travel_with_it(tmp_path):
    """The kernel and topology files go with the task: the worker needs none of the client's
    disk (here they are gone before the point runs)."""
    from kernbench_cli.explore.sweep import bundle, run_bundled
    from kernbench_cli.shipped import resolve_topology

    kernel = tmp_path / "mine.py"
    kernel.write_text(Path(LOAD_DOT).read_text())
    topo = tmp_path / "t.toml"
    topo.write_text(Path(resolve_topology("default")).read_text().replace(
        'costs = "costs/default.toml"', 'costs = "c.toml"'))
    (tmp_path / "c.toml").write_text('name = "mine"\n[issue]\nload = "10ns"\n')
    spec = Spec(str(kernel), str(topo))
    files = bundle(spec)
    assert sorted(files) == ["kernel/mine.py", "topology/c.toml", "topology/t.toml"]
    for path in (kernel, topo, tmp_path / "c.toml"):
        path.unlink()
    row = run_bundled(spec, files, points([], [])[0])
    assert row["error"] is None
    assert row["result"]["costs"] == "mine" and row["result"]["latency_ps"] == 548_858


def test_a_file_changed_while_the_sweeps_one_recording_was_made_fails_the_sweep(
        tmp_path, monkeypatch):
    """A timing-only sweep over cost-table keys records once and replays that recording at
    every point: a topology edited while it was made would time every point on it. The
    sweep fails, saying what to do (the point's advice, "run the point again", fits no
    point here)."""
    from kernbench_cli.explore import sweep as sw

    topology = tmp_path / "t.toml"
    shipped = (ROOT / "topologies" / "default.toml").read_text()
    topology.write_text(shipped)
    record = sw.record

    def record_then_edit(*args):
        record(*args)
        topology.write_text(shipped.replace('"102.4GB/s"', '"25.6GB/s"'))

    monkeypatch.setattr(sw, "record", record_then_edit)
    with pytest.raises(kb.KernbenchError) as err:
        kb.sweep(LOAD_DOT, topology=str(topology), timing_only=True, jobs=1,
                 set={"costs.issue.load": ["5ns", "6ns"]})
    assert str(err.value) == ("the recording every point replays: the kernel, topology, cost "
                              "table, recording or a parameter's file changed after the sweep "
                              "began; restore it and run the sweep again")


def test_a_dask_point_checks_the_files_the_sweep_began_with(tmp_path):
    """A point on a Dask worker runs on the bundled copies and still checks, once run, the
    files the sweep began with: a parameter's file (a model's config) edited since fails
    it (`CHANGED`). The worker's spec once dropped what the check needs, and such points
    ran on the edited file, exit 0."""
    from kernbench_cli.explore.sweep import CHANGED, bundle, fingerprint, run_bundled

    kernel, config = tmp_path / "mine.py", tmp_path / "config.json"
    kernel.write_text(Path(LOAD_DOT).read_text())
    config.write_text('{"num_hidden_layers": 4}')
    spec = Spec(str(kernel), read=(str(config),))
    spec.begun = fingerprint(spec)
    files = bundle(spec)
    point = points([], [])[0]
    assert run_bundled(spec, files, point)["error"] is None
    config.write_text('{"num_hidden_layers": 2}')
    assert run_bundled(spec, files, point)["error"] == CHANGED


def test_a_record_once_point_replays_on_the_files_sent_with_it(tmp_path):
    """A record-once sweep's recording names the client's cost table; a worker without the
    client's disk failed every point ("the run used the cost table …, which is not there").
    The sweep's own recording is re-timed on the spec's files as sent."""
    from kernbench_cli.explore.sweep import bundle, fingerprint, record, run_bundled
    from kernbench_cli.shipped import resolve_topology

    client = tmp_path / "client"
    client.mkdir()
    topo = client / "t.toml"
    topo.write_text(Path(resolve_topology("default")).read_text().replace(
        'costs = "costs/default.toml"', 'costs = "c.toml"'))
    (client / "c.toml").write_text('name = "mine"\n[issue]\nload = "10ns"\n')
    kernel = client / "k.py"
    kernel.write_text(Path(LOAD_DOT).read_text())
    spec = Spec(str(kernel), str(topo), timing_only=True)
    spec.begun = fingerprint(spec)
    point = points(["costs.issue.load=8ns"], [])[0]
    record(spec, point, client / "sweep.kbtrace")
    spec.trace, spec.recorded = str(client / "sweep.kbtrace"), True
    here = run_bundled(spec, bundle(spec), point)
    files = bundle(spec)
    client.rename(tmp_path / "gone")  # the worker has none of the client's disk
    row = run_bundled(spec, files, point)
    assert row["error"] is None and row["replayed"]
    assert row["result"]["latency_ps"] == here["result"]["latency_ps"]
    assert row["result"]["costs"] == "mine"


@pytest.mark.parametrize(("answer", "message"), [
    (None, "the scheduler did not answer within 2 s (something there accepts connections: "
           "not a Dask scheduler?)"),
    (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
     "what answers there is not a Dask scheduler (its first bytes are no message of "
     "Dask's)")])
def test_a_dask_address_that_is_no_scheduler_is_one_line(cli, monkeypatch, answer, message):
    """A peer that accepts the connection and says nothing held the sweep for good (Dask's
    connect timeout ends at the connection, before the handshake); an HTTP server's
    answer, read as a Dask frame's length, came out as "this machine ran out of
    memory"."""
    pytest.importorskip("distributed")
    import socket
    import threading

    from kernbench_cli.explore import sweep

    monkeypatch.setattr(sweep, "DASK_ANSWER_S", 2.0)
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    port, held, done = server.getsockname()[1], [], threading.Event()

    def serve() -> None:
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                peer, _ = server.accept()
                held.append(peer)
                if answer:
                    peer.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        code, _, err = cli("sweep", LOAD_DOT, *AXES, "--dask", f"tcp://127.0.0.1:{port}")
    finally:
        done.set()
        thread.join()
        for peer in held:
            peer.close()
        server.close()
    assert (code, err) == (2, f"error: --dask tcp://127.0.0.1:{port}: {message}\n")


def test_dask_without_the_extra_says_how_to_install_it(cli, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed
    assert cli("sweep", LOAD_DOT, "--dask", "tcp://127.0.0.1:8786") == (
        2, "", "error: --dask needs Dask: pip install 'kernbench[dask]'\n")


HELD = str(TESTS / "kernels" / "held.py")


def _holding(tmp_path: Path, *steps: int) -> dict[str, str]:
    """The environment of a sweep of held.py whose points `steps` hold until released."""
    folder = tmp_path / "hold"
    folder.mkdir()
    for step in steps:
        (folder / f"hold.{step}").touch()
    return dict(os.environ, KERNBENCH_TEST_HOLD=str(folder))


def _wait_until(ready, proc, what: str) -> None:
    """Poll `ready()` while the sweep `proc` runs; the limit only guards against a hang."""
    import time

    from tests.conftest import HANG_GUARD_S

    deadline = time.monotonic() + HANG_GUARD_S
    while not ready():
        assert proc.poll() is None, f"the sweep ended before {what}"
        assert time.monotonic() < deadline, f"still waiting for {what} after {HANG_GUARD_S} s"
        time.sleep(0.02)


def test_a_sweep_killed_mid_way_leaves_a_valid_file_that_resumes(tmp_path, kernbench):
    """A real sweep process SIGKILLed (with its workers) while its third point runs, the
    first two rows written: every line of the file is a whole row, and --resume runs the
    other three points only."""
    import subprocess

    out = tmp_path / "r.jsonl"
    env = _holding(tmp_path, 2)
    args = ["sweep", HELD, "-t", test_topology("one"), "-p", "step=0,1,2,3,4", "--timing-only",
            "--jobs", "1", "--out", str(out)]
    proc = kernbench.start(*args, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        started = Path(env["KERNBENCH_TEST_HOLD"]) / "started.2"
        _wait_until(lambda: started.exists() and out.is_file()
                    and out.read_text().count("\n") == 2, proc, "point 2 and two rows")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the sweep and its workers
        proc.wait()
    lines = out.read_text().splitlines()
    assert [json.loads(line)["point"] for line in lines] == [0, 1]  # each a whole row
    (Path(env["KERNBENCH_TEST_HOLD"]) / "hold.2").unlink()
    done = kernbench.run(*args, "--resume", env=env, check=True)
    assert done.stderr.count("point ") == 3  # only the missing points ran
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["point"] for r in rows] == [0, 1, 2, 3, 4]


def test_no_state_survives_from_one_point_to_the_next(cli):
    """Three identical points on one worker: a kernel that counts its runs on the `tl`
    class sees each as its first (a worker per point)."""
    kernel = str(TESTS / "kernels" / "leaky.py")
    code, out, _ = cli("sweep", kernel, "-t", test_topology("one"), "--timing-only", "--jobs", "1",
                       "--set", "costs.issue.load=4ns,4ns,4ns", "--no-replay", "--json")
    assert code == 0
    assert {row["result"]["latency_ps"] for row in json.loads(out)} == {1_000_000}


@pytest.mark.parametrize("other", [
    ("softmax", "--timing-only"),  # another kernel
    ("sharded_gemm",),  # with values, the file's rows timing-only
    ("sharded_gemm", "--timing-only", "--seed", "1"),
    ("sharded_gemm", "--timing-only", "-t", "sip"),
], ids=["kernel", "values", "seed", "topology"])
def test_resume_refuses_another_sweeps_rows_and_leaves_them(cli, tmp_path, other):
    out = tmp_path / "r.jsonl"
    axes = ("--set", "pe.gemm.rows=4,8")
    assert cli("sweep", "sharded_gemm", "--timing-only", *axes, "--out", str(out))[0] == 0
    before = out.read_bytes()
    code, _, err = cli("sweep", *other, *axes, "--out", str(out), "--resume")
    assert (code, err) == (2, f"error: {out}: its rows are results of another sweep (another "
                              "kernbench version, kernel, topology, cost table, file a "
                              "parameter names, --timing-only, seed or recording); --resume "
                              "needs the file this sweep wrote\n")
    assert out.read_bytes() == before


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_resume_renumbers_the_points_an_axis_kept_and_refuses_those_it_lost(cli, tmp_path,
                                                                            suffix):
    """An axis given one more value first: the file's points keep their results under
    this sweep's numbers (they kept their old ones, so two rows were point 0 and `plot`
    refused the file); an axis that lost a value is refused, the file as it was."""
    out = tmp_path / f"r{suffix}"
    base = ("sharded_gemm", "--timing-only", "-j", "1", "--out", str(out))
    assert cli("sweep", *base, "--set", "pe.gemm.rows=4,8")[0] == 0
    code, _, err = cli("sweep", *base, "--set", "pe.gemm.rows=16,4,8", "--resume")
    assert code == 0, err
    assert err.count("point") == 1  # only the new one ran
    if suffix == ".jsonl":
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert sorted((r["point"], r["axes"]["pe.gemm.rows"]) for r in rows) == [
            (0, "16"), (1, "4"), (2, "8")]
        assert cli("plot", str(out), "-o", str(tmp_path / "r.svg"))[0] == 0
    else:
        lines = out.read_text().splitlines()[1:]
        assert sorted(line.split(",")[:2] for line in lines) == [
            ["0", "16"], ["1", "4"], ["2", "8"]]
    before = out.read_bytes()
    code, _, err = cli("sweep", *base, "--set", "pe.gemm.rows=16,4", "--resume")
    assert (code, err) == (2, f"error: {out}: its point 2 (pe.gemm.rows=8) is not a point of "
                              "this sweep (its axes changed since); --resume takes the file "
                              "of these points, or write a new --out\n")
    assert out.read_bytes() == before


def test_resume_refuses_rows_of_a_model_config_since_changed(cli, tmp_path):
    """The rows are of the config's bytes, not its name: a config changed since is another
    sweep's, and its rows are left as they were."""
    config, out = tmp_path / "model.json", tmp_path / "r.jsonl"
    config.write_text((TESTS / "configs" / "hf" / "llama.json").read_text())
    axes = ("-p", f"config={config}", "-p", "layers=1", "-p", "batch=1,2")
    assert cli("sweep", "llama_decode", "--timing-only", "-j", "1", *axes,
               "--out", str(out))[0] == 0
    out.write_text(out.read_text().splitlines(keepends=True)[0])  # one point done
    before = out.read_bytes()
    data = json.loads(config.read_text())
    config.write_text(json.dumps({**data, "intermediate_size": 2 * data["intermediate_size"]}))
    code, _, err = cli("sweep", "llama_decode", "--timing-only", "-j", "1", *axes,
                       "--out", str(out), "--resume")
    assert (code, err.startswith(f"error: {out}: its rows are results of another sweep")) == \
        (2, True)
    assert out.read_bytes() == before


def test_resume_refuses_rows_of_a_kernel_whose_helper_changed_since(cli, tmp_path):
    """A helper module beside the kernel is the kernel's code too: rows made before it
    changed were resumed as this sweep's (100 ns a point, then 999 ns)."""
    (tmp_path / "k").mkdir()
    helper, kernel, out = tmp_path / "k" / "_h.py", tmp_path / "k" / "k.py", tmp_path / "r.jsonl"
    helper.write_text("FACTOR = 100\n")
    kernel.write_text("from _h import FACTOR\nPARAMS = {'c': 1}\n\n"
                      "def setup(host, p):\n    return {'c': p['c']}\n\n"
                      "def kernel(tl, c):\n    tl.cycles(FACTOR * c)\n\n"
                      "def reference(host, p):\n    return {}\n\n"
                      "def outputs(host, args, p):\n    return {}\n")
    axes = ("-t", test_topology("one"), "-j", "1", "--out", str(out))
    assert cli("sweep", str(kernel), "-p", "c=1,2", *axes)[0] == 0
    before = out.read_bytes()
    helper.write_text("FACTOR = 999\n")
    code, _, err = cli("sweep", str(kernel), "-p", "c=1,2,3", *axes, "--resume")
    assert (code, err.startswith(f"error: {out}: its rows are results of another sweep")) == \
        (2, True)
    assert out.read_bytes() == before


@pytest.mark.parametrize("option", ["--out", "--plot"])
def test_an_output_over_a_config_the_points_read_is_refused_before_any_runs(cli, tmp_path,
                                                                               option):
    config = tmp_path / "model.jsonl"
    config.write_text((TESTS / "configs" / "hf" / "llama.json").read_text())
    before = config.read_bytes()
    code, _, err = cli("sweep", "llama_decode", "--timing-only", "-j", "1",
                       "-p", f"config={config}", "-p", "layers=1", "-p", "batch=1,2",
                       option, str(config))
    assert (code, err) == (2, f"error: {option} {config}: is an input of this command; "
                              "write the output elsewhere\n")
    assert config.read_bytes() == before


def test_an_axis_value_that_looks_like_markup_is_shown_as_it_is(cli):
    """A config path "[/b]none.json" closed no Rich tag: the table was an internal error."""
    code, out, err = cli("sweep", "llama_decode", "--timing-only", "-j", "1",
                         "-p", "config=[/b]none.json", "-p", "layers=1,2")
    assert code == 1 and "internal error" not in err
    assert "config=[/b]none.json" in out.replace("\n", "")


def test_a_points_bad_parameters_are_refused_before_any_point_runs(cli):
    code, out, err = cli("sweep", "softmax", "--timing-only", "-j", "1", "-p", "rows=16",
                         "-p", "foo=1,2")
    assert (code, out, err) == (2, "", "error: -p rows=16 foo=1: softmax has no parameter "
                                       "'foo' (parameters: rows, cols, block, dtype)\n")


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_resume_into_an_empty_file_runs_every_point(cli, tmp_path, suffix):
    """An empty results file has nothing to resume and nothing to lose: every point runs
    into it (it was refused as an input of the command)."""
    out = tmp_path / f"r{suffix}"
    out.write_bytes(b"")
    code, _, err = cli("sweep", "sharded_gemm", "--timing-only", "-j", "1", "--set",
                       "pe.gemm.rows=4,8", "--out", str(out), "--resume")
    assert code == 0, err
    assert len(out.read_text().splitlines()) == (2 if suffix == ".jsonl" else 3)


def test_an_empty_x_or_y_is_named_as_the_option(cli, tmp_path):
    code, _, err = cli("sweep", "sharded_gemm", "--timing-only", "--set", "pe.gemm.rows=4,8",
                       "--y", "", "--plot", str(tmp_path / "p.svg"))
    assert (code, err) == (2, "error: --y is empty: name a metric (latency, energy, …, or one "
                              "the kernel states)\n")
    code, _, err = cli("plot", str(tmp_path / "none.jsonl"), "--x", "")
    assert (code, err) == (2, "error: --x is empty: name an axis, or leave --x out\n")


def test_resume_runs_failed_points_again(cli, tmp_path):
    """A point that failed (here: its row marked so) is run again, and the file keeps one
    row per point."""
    out = tmp_path / "r.jsonl"
    axes = ("--set", "pe.gemm.rows=4,8")
    assert cli("sweep", "sharded_gemm", "--timing-only", *axes, "--out", str(out))[0] == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    good = rows[1]["result"]["latency_ps"]
    rows[1] = {**rows[1], "error": "its worker process died", "result": None}
    out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    code, text, err = cli("sweep", "sharded_gemm", "--timing-only", *axes, "--out", str(out),
                          "--resume", "--json")
    assert code == 0 and err.count("point ") == 1
    assert json.loads(text)[1]["result"]["latency_ps"] == good
    again = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["point"] for r in again] == [0, 1] and again[1]["error"] is None


def test_a_sigkilled_sweep_leaves_no_worker_holding_its_pipes(tmp_path, kernbench):
    """SIGKILL of the sweep while both workers run points that would never end (held.py,
    held): the workers end, so a reader of the sweep's output (`| tee log`) sees it end.
    Waiting for that end is the check; its time limit only guards against a hang."""
    import subprocess

    from tests.conftest import HANG_GUARD_S

    env = _holding(tmp_path, 0, 1)
    proc = kernbench.start("sweep", HELD, "-t", test_topology("one"), "-p", "step=0,1",
                           "--timing-only", "-j", "2", env=env, start_new_session=True)
    try:
        started = [Path(env["KERNBENCH_TEST_HOLD"]) / f"started.{i}" for i in (0, 1)]
        _wait_until(lambda: all(s.exists() for s in started), proc, "both points to start")
        proc.kill()  # the sweep alone: its workers must see it gone and end
        try:
            proc.communicate(timeout=HANG_GUARD_S)  # EOF: every holder of the pipes is gone
        except subprocess.TimeoutExpired:
            pytest.fail("a worker still holds the pipes of the killed sweep")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the sweep's session
        proc.wait()


@pytest.mark.parametrize("edited", ["kernel", "topology"])
def test_a_file_changed_during_a_sweep_fails_the_points_after_and_resume_runs_them(
        tmp_path, edited):
    """Each point reads the kernel and topology afresh: one edited once the first row was
    in ran the later points on the new file under the sweep's first identity, and
    --resume kept the mixture. A point now checks, once run, that the files are still
    those the sweep began with; those that are not fail (`CHANGED`), and --resume with
    the file restored runs them again, giving a fresh sweep's rows."""
    from kernbench_cli.explore.sweep import CHANGED

    kernel, topology = tmp_path / "k.py", tmp_path / "t.toml"
    kernel.write_text(Path(LOAD_DOT).read_text())
    topology.write_text((ROOT / "topologies" / "default.toml").read_text())
    target = {"kernel": kernel, "topology": topology}[edited]
    original = target.read_text()
    new = {"kernel": original.replace("tl.dot(t, t, trans_b=True)",
                                      "tl.dot(t, t, trans_b=True)\n        tl.cycles(1000)"),
           "topology": original.replace('"102.4GB/s"', '"25.6GB/s"')}[edited]
    assert new != original
    sweep = functools.partial(kb.sweep, str(kernel), topology=str(topology), jobs=1,
                              set={"pe.gemm.rows": [16, 8, 4]}, out=tmp_path / "r.jsonl")

    def edit(row):
        if row["point"] == 0:
            target.write_text(new)

    first = sweep(on_row=edit)
    assert [p.error for p in first.points] == [None, CHANGED, CHANGED]
    target.write_text(original)
    again = sweep(resume=True)
    fresh = kb.sweep(str(kernel), topology=str(topology), jobs=1,
                     set={"pe.gemm.rows": [16, 8, 4]})
    assert [p.error for p in again.points] == [None, None, None]
    assert [p.result.latency_ps for p in again.points] == \
        [p.result.latency_ps for p in fresh.points]
