"""Hostile conditions around `run`, through the installed CLI: one case or more per class
(the section titles), each a shell command line run in a fresh folder with the
installed `kernbench` (`K`), so that devices, FIFOs, pipes, file-size limits, signals and
killed parents are real. Each case states its exit code and what stderr says; every case
must also end within its time limit, print no traceback and no internal error, leave every
file it was given as it was (unless the case says which one it writes), and leave no
temporary file behind. Marked `slow` (about a minute; with test_signals_and_pipes.py's signal
tests, the slow part takes about 2 min): `.ci/run` runs it after the suite.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kernbench_cli.sim.trace_file import MAGIC
from tests.conftest import ROOT, TESTS
from tests.hostile.cases import ONE, Case, kernel_source, run_case

pytestmark = pytest.mark.slow

PAIR = str(TESTS / "topologies" / "pair.toml")
BIG = 2**62 - 1


CASES: list[Case] = []


def case(*args, **kwargs) -> None:
    CASES.append(Case(*args, **kwargs))


def _kept(name: str, text: str) -> Callable[[Path, str], None]:
    def check(folder: Path, _out: str) -> None:
        assert (folder / name).read_text() == text
    return check


# ---------------------------------------------------- outputs over non-regular files

case("save-to-a-char-device", "mknod dev c 1 3 && K run softmax -t ONE --save dev; "
     "r=$?; stat -c %F dev >&2; exit $r", 2,
     r"error: --save dev: is not a regular file .*\ncharacter special file", root=True)
case("record-to-a-fifo", "mkfifo f && K run softmax -t ONE --timing-only --record f", 2,
     r"^error: --record f: is not a regular file \(a device, FIFO or socket\)", timeout=30)
case("save-into-a-folder", "mkdir d && K run softmax -t ONE --save d", 2,
     r"^error: --save d: is a folder, not a file")
case("record-through-a-symlink", "echo old > target && ln -s target link && "
     "K run softmax -t ONE --timing-only --record link >/dev/null && test -L link && "
     "K replay target >/dev/null", 0, writes=("target", "link"))
case("save-over-its-own-kernel", "K run ./k.py -t ONE --save ./k.py", 2,
     r"^error: --save k\.py: is an input of this command", files={"k.py": kernel_source(
         "    pass")})
case("two-outputs-to-one-file", "K run softmax -t ONE --save o.json --oplog o.json", 2,
     r"^error: --oplog o\.json: --save goes there too")
case("an-output-name-near-the-limit", f"K run softmax -t ONE --timing-only --record "
     f"{'n' * 250}", 0, writes=("n" * 250,))

# --------------------------------------------------------- resume another sweep's rows

SWEEP = "K sweep softmax -t ONE --timing-only --jobs 1 --set pe.gemm.rows=4,8"
case("resume-another-kernels-rows", f"{SWEEP} --out r.jsonl >/dev/null 2>&1 && "
     f"cp r.jsonl keep && K sweep rmsnorm -t ONE --timing-only --jobs 1 --set "
     "pe.gemm.rows=4,8 --out r.jsonl --resume; r=$?; cmp r.jsonl keep && exit $r", 2,
     r"^error: r\.jsonl: its rows are results of another sweep", writes=("r.jsonl", "keep"))
for name, text in [("notes.csv", "a,b\n1,2"), ("notes.jsonl", '{"a": 1'), ("empty.csv", "\n")]:
    case(f"resume-a-foreign-{name}", f"{SWEEP} --out {name} --resume", 2,
         rf"^error: {name}: not a sweep results file", files={name: text})
case("resume-reruns-a-failed-point", f"{SWEEP} --out r.jsonl >/dev/null 2>&1 && "
     "python3 -c \"import json; rows = [json.loads(l) for l in open('r.jsonl')]; "
     "rows[1]['error'] = 'worker died'; rows[1]['result'] = None; "
     "open('r.jsonl', 'w').write(''.join(json.dumps(r) + '\\n' for r in rows))\" && "
     f"{SWEEP} --out r.jsonl --resume", 0, r"point 1/1 \(pe\.gemm\.rows=8\): latency",
     writes=("r.jsonl",))

# --------------------------------------------------------- state between sweep points

case("no-state-leaks-between-points", f"K sweep {TESTS / 'kernels' / 'leaky.py'} -t ONE "
     "--timing-only --no-replay --jobs 1 -p n=1,2,3 --json", 0,
     then=lambda _f, out: _same_latency(out))


def _same_latency(out: str) -> None:
    rows = json.loads(out)
    assert len(rows) == 3 and len({r["result"]["latency_ps"] for r in rows}) == 1


# --------------------------------------------------------------- replay keeps --set

case("replay-keeps-the-recorded-set", "K run softmax -t ONE --timing-only --set "
     "pe.math.lanes=4 --record t.trace --json > a.json && K replay t.trace --json > b.json "
     "&& python3 -c \"import json; a, b = (json.load(open(n)) for n in ('a.json', 'b.json'));"
     " assert a['latency_ps'] == b['latency_ps'], (a['latency_ps'], b['latency_ps'])\"", 0,
     writes=("t.trace", "a.json", "b.json"))

# ------------------------------------------------------ failed commands destroy nothing

case("failed-cost-only-sweep-keeps-old-results", "K sweep ./k.py -t ONE --timing-only "
     "--set costs.issue.math=1ns,2ns --out r.jsonl", 1, r"^error: \./k\.py:8: ",
     files={"r.jsonl": '{"old": "results"}\n', "k.py": kernel_source("    1 / 0")})
case("out-equal-to-replay", "K run softmax -t ONE --timing-only --record t.trace >/dev/null "
     "&& cp t.trace keep && K sweep --replay t.trace softmax --set pe.gemm.rows=4,8 "
     "--out t.jsonl && cmp t.trace keep", 0, writes=("t.trace", "keep", "t.jsonl"))
case("out-is-the-replayed-trace", "K run softmax -t ONE --timing-only --record t.jsonl "
     ">/dev/null && cp t.jsonl keep && K sweep softmax --replay t.jsonl --set "
     "pe.gemm.rows=4,8 --out t.jsonl; r=$?; cmp t.jsonl keep && exit $r", 2,
     r"^error: --out t\.jsonl: is an input of this command", writes=("t.jsonl", "keep"))
case("golden-regen-keeps-other-json", "mkdir g && echo '{\"mine\": 1}' > g/notes.json && "
     "K golden regen --only softmax.default --dir g >/dev/null && cat g/notes.json", 0,
     then=lambda f, out: _has(f / "g" / "notes.json", '{"mine": 1}\n'), writes=("g",),
     timeout=120)

# ------------------------------------------------------------------ huge accepted numbers

case("a-huge-latency-is-a-clean-error", f"K run softmax --timing-only --set "
     f"hbm.latency={BIG}ps", 2, r"the simulated time passed 2\^63 ps")
case("huge-gemm-rows", f"K run sharded_gemm --timing-only --set pe.gemm.rows={BIG}", 2,
     r"too large for the model")

# ------------------------------------------------------------------------- sweep --out

case("sweep-out-to-a-fifo", f"mkfifo f.jsonl && {SWEEP} --out f.jsonl", 2,
     r"^error: --out f\.jsonl: is not a regular file", timeout=30)
case("sweep-out-in-a-missing-folder", f"{SWEEP} --out nowhere/r.jsonl", 2,
     r"^error: --out nowhere/r\.jsonl: folder 'nowhere' does not exist")
case("sweep-out-is-a-folder", f"mkdir r.jsonl && {SWEEP} --out r.jsonl", 2,
     r"^error: --out r\.jsonl: is a folder, not a file")
case("sweep-out-on-a-full-disk", "K sweep softmax -t ONE --timing-only --jobs 1 --set "
     "pe.gemm.rows=4 --out one.jsonl >/dev/null 2>&1 && ulimit -f $(( $(wc -c < one.jsonl) "
     "* 3 / 2048 + 1 )) && K sweep softmax -t ONE --timing-only --no-replay --jobs 1 --set "
     "pe.gemm.rows=4,8,16 --out r.jsonl", 1,  # limit of about 1.5 rows
     r"error: --out r\.jsonl: cannot write: File too large \(the rows before are kept",
     writes=("r.jsonl", "one.jsonl"), then=lambda f, _o: _whole_rows(f / "r.jsonl"))
case("sweep-first-row-on-a-full-disk", "ulimit -f 1 && K sweep softmax -t ONE --timing-only "
     "--no-replay --jobs 1 --set pe.gemm.rows=4,8 --out r.jsonl", 1,
     r"error: --out r\.jsonl: cannot write: File too large\n", files={"r.jsonl": "old\n"})


def _whole_rows(path: Path) -> None:
    lines = path.read_text().splitlines(keepends=True)
    assert 1 <= len(lines) < 3 and all(json.loads(line)["error"] is None for line in lines)


def _has(path: Path, text: str) -> None:
    assert path.read_text() == text


# ---------------------------------------------------------- orphans; signals in a run

MANY = ",".join(str(n) for n in range(64, 64 + 40))
case("sweep-killed-leaves-no-orphans", "(bash -c 'echo $$ > pid; exec K sweep softmax -t ONE "
     f"--timing-only --no-replay -j 2 --set pe.math.lanes={MANY}' 2>&1 | cat > log) & "
     # killed once a point is done (polled, not a fixed sleep: a busy machine is slower)
     "for _ in $(seq 250); do grep -q 'point 1/40' log && break; sleep 0.1; done; "
     "kill -9 $(cat pid); wait; grep -q 'point 1/40' log", 0, timeout=45,
     writes=("pid", "log"))
#: a run of some 15 s CPU (0.6 GiB): the signal comes 2 s in, mid-run on any machine (a
#: 2 s run here once ended before it on a fast one)
LONG_RUN = "K run gqa_attention -t rack -p model=llama3-8b -p seq_len=131072 --timing-only"
case("ctrl-c-in-a-run", f"set -m; {LONG_RUN} & sleep 2; kill -INT $!; wait $!", 130,
     r"^interrupted\n\[1\]")
case("sigterm-in-a-run", f"set -m; {LONG_RUN} & sleep 2; kill -TERM $!; wait $!", 130,
     r"^interrupted\n\[1\]")

# ------------------------------------------------------------------- closed, full stdout

case("decode-to-a-closed-stdout", "K decode 0x0 >&-", 141)
case("run-to-a-full-stdout", "K run softmax -t ONE --timing-only > /dev/full", 1,
     r"^error: cannot write to stdout: No space left on device\n$")
case("help-to-a-reader-gone", "K --help | true; exit ${PIPESTATUS[0]}", 141)
case("version-to-a-closed-stdout", "K --version >&-", 141)
case("sweep-table-to-a-reader-gone", SWEEP + " 2>/dev/null | true; exit ${PIPESTATUS[0]}",
     141)

# ------------------------------------------------------------------- kernels, options

# a kernel file or a cost table that is there but no regular file was "no such file"; a
# kernel file of gigabytes (sparse) was read whole before Python refused it
case("a-kernel-file-that-is-a-fifo", "mkfifo k.py && K run ./k.py -t ONE", 2,
     r"^error: kernel file '\./k\.py': is not a regular file \(a FIFO, a device or a "
     r"socket\), expected a Python file$", timeout=30)
case("a-kernel-file-of-gigabytes", "truncate -s 3G k.py && K run ./k.py -t ONE", 2,
     r"^error: kernel file '\./k\.py': 3,221,225,472 bytes is too large for a kernel \(at "
     r"most 16,777,216\)$", timeout=30, writes=("k.py",))
case("a-cost-table-that-is-a-fifo", f"mkfifo fifo && sed 's/^costs = .*/costs = \"fifo\"/' "
     f"{ROOT / 'topologies' / 'default.toml'} > t.toml && K run softmax -t t.toml", 2,
     r"^error: fifo: is not a regular file, expected a TOML file$", timeout=30,
     writes=("t.toml",))

for name, body, says in [
    ("a-thread", "    threading.Thread(target=time.sleep, args=(600,)).start()",
     r"k\.py:8: PE \(.*\) at t=0ns: a kernel may not start a thread"),
    ("os-exit", "    os._exit(0)", r"k\.py:8: .*the kernel called os\._exit\(0\)"),
    ("keyboard-interrupt", "    raise KeyboardInterrupt",
     r"k\.py:8: .*the kernel raised KeyboardInterrupt"),
    ("a-generator", "    yield", r"k\.py:7: kernel\(\) is a generator"),
    ("sys-exit", "    raise SystemExit(3)", r"k\.py:8: .*the kernel called sys\.exit\(3\)"),
]:
    case(f"kernel-{name}", "K run ./k.py -t ONE", 1, "^error: ./" + says,
         files={"k.py": kernel_source(body)}, timeout=30)
# a kernel that takes each stop and issues a command: each one started the clock again, and
# it ran for ever (663 s, then a second SIGTERM)
case("kernel-takes-the-stop-and-issues", "K run ./k.py -t ONE --kernel-timeout 0.5", 1,
     r"^error: .*k\.py:\d+: no progress for 0\.5 s of wall-clock time, and the code took every "
     r"stop", files={"k.py": kernel_source(
         "    while True:\n        try:\n            while True:\n                pass\n"
         "        except BaseException:\n            tl.cycles(1)")}, timeout=60)
case("kernel-thread-at-import", "K run ./k.py -t ONE", 2,
     r"^error: \./k\.py:3: loading the kernel failed: a kernel may not start a thread",
     files={"k.py": kernel_source("    pass").replace(
         "PARAMS = {}", "PARAMS = {}\nthreading.Thread(target=time.sleep, args=(600,)).start()"
     )}, timeout=30)
case("kernel-print-keeps-json", "K run ./k.py -t ONE --json | python3 -c "
     "\"import json, sys; json.load(sys.stdin)\"", 0, r"^hello\n$",
     files={"k.py": kernel_source("    print('hello')")})
case("a-tiny-kernel-timeout", "K run softmax -t ONE --timing-only --kernel-timeout 1e-9", 2,
     r"^error: --kernel-timeout 1e-09: needs 0 \(no limit\) or at least 0\.001 s")
case("sweep-jobs-out-of-range", f"{SWEEP} --jobs 999999999999", 2,
     r"^error: --jobs 999999999999: needs 1 to 1024 workers\n$")
case("sweep-a-malformed-dask-address", f"{SWEEP} --dask 'tcp://[::1'", 2,
     r"^error: --dask tcp://\[::1: not a scheduler address")
case("sweep-an-unknown-kernel", "K sweep nope --set pe.gemm.rows=4,8", 2,
     r"^error: unknown kernel 'nope'")
case("sweep-one-key-twice", f"{SWEEP} --set pe.gemm.rows=16", 2,
     r"^error: --set pe\.gemm\.rows is given twice")
case("nan-outputs-verify", "K run ./k.py -t ONE", 0, r"^$", files={"k.py": (
    "import numpy as np\nPARAMS = {}\nWANT = np.array([np.nan, np.inf, 1.0] * 8, np.float32)"
    "\n\ndef setup(host, p):\n    return {'x': host.replicate('x', WANT)}\n\n"
    "def kernel(tl, x):\n    t = tl.load(tl.shard(x), (24,), 'f32')\n"
    "    tl.store(tl.shard(x), t)\n\ndef reference(host, p):\n    return {'x': WANT}\n\n"
    "def outputs(host, args, p):\n    return {'x': host.read_shard(args['x'], 0)}\n")})

# ------------------------------------------------------- compare, golden, replay inputs

case("compare-nan", "K run softmax -t ONE --timing-only --json > a.json && sed "
     "'s/\"latency_ps\": [0-9]*/\"latency_ps\": NaN/' a.json > b.json && K compare a.json "
     "b.json --json", 2, r"^error: b\.json: latency_ps: NaN is not a number kernbench reads",
     writes=("a.json", "b.json"))
case("golden-5000-digits", "mkdir g && sed 's/\"latency_ps\": [0-9]*/\"latency_ps\": "
     f"{'9' * 5000}/' {ROOT / 'goldens' / 'softmax.default.json'} > g/softmax.default.json && "
     "K golden check --only softmax.default --dir g", 2,
     r"^error: g/softmax\.default\.json: latency_ps: 99999999…9999 \(5,000 digits\)",
     writes=("g",))
case("golden-schema-version-true", "mkdir g && sed 's/\"schema_version\": 1/"
     f"\"schema_version\": true/' {ROOT / 'goldens' / 'softmax.default.json'} > "
     "g/softmax.default.json && K golden check --only softmax.default --dir g", 2,
     r"schema_version True is not one this kernbench reads", writes=("g",))
case("golden-a-2mb-field", "mkdir g && python3 -c \"import json; d = json.load(open("
     f"'{ROOT / 'goldens' / 'softmax.default.json'}')); d['kernel'] = 'x' * 2000000; "
     "json.dump(d, open('g/softmax.default.json', 'w'))\" && K golden check --only "
     "softmax.default --dir g > o.txt; r=$?; test $(wc -c < o.txt) -lt 20000 && exit $r", 1,
     writes=("g", "o.txt"), timeout=120)
case("a-gzip-bomb-trace", "K replay bomb.trace", 2,
     r"^error: bomb\.trace: damaged trace: 1 bytes after the last column\n$",
     files={"bomb.trace": b""}, timeout=30)
case("terminal-escapes-in-a-trace", "K replay esc.trace", 2,
     r"^error: esc\.trace: damaged trace: a string with a control character "
     r"\('\\x1b\[31mred'\)\n$", files={"esc.trace": b""})


# ------------------------------------------------------------------------------ running


@pytest.fixture(scope="module")
def traces(tmp_path_factory, kernbench) -> dict[str, bytes]:
    """The hostile traces, made from a real recording: a gzip bomb (a good trace followed
    by 256 MiB of zeros, 256 KiB compressed) and one whose kernel name holds an escape."""
    import zlib

    folder = tmp_path_factory.mktemp("traces")
    kernbench.run("run", "softmax", "-t", ONE, "--timing-only", "--record", "t.trace",
                  cwd=folder, check=True)
    data = gzip.decompress((folder / "t.trace").read_bytes())
    bomb = zlib.compressobj(6, zlib.DEFLATED, 31)
    parts = [bomb.compress(data)]
    zeros = bytes(1 << 20)
    parts += [bomb.compress(zeros) for _ in range(256)]
    size = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "little")
    head = json.loads(data[len(MAGIC) + 8:len(MAGIC) + 8 + size])
    head["kernel"] = "\x1b[31mred"
    text = json.dumps(head).encode()
    escaped = gzip.compress(MAGIC + len(text).to_bytes(8, "little") + text
                            + data[len(MAGIC) + 8 + size:], mtime=0)
    return {"bomb.trace": b"".join(parts) + bomb.flush(), "esc.trace": escaped}


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_hostile_cli(tmp_path, c: Case, kernbench, traces):
    run_case(tmp_path, c, kernbench, traces)
