"""Hostile workload inputs, Python API calls and would-be hangs, one or more cases per class
(the section titles), through the installed CLI and the API.

Each case is a shell command line run in a fresh folder (`cases.run_case`):
it must end with its exit code within its time limit, say what its pattern says on
stderr, print no traceback and no internal error, leave every file it was given as it
was and no temporary file behind. The API cases run a script with the installed package
(``PY api.py``): it prints the exception's class and message and exits with its code.
Marked `slow`, as the other subprocess corpora (`pytest -m slow`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.hostile.cases import ONE, Case, kernel_source, run_case

pytestmark = pytest.mark.slow

CASES: list[Case] = []


def case(*args, **kwargs) -> None:
    CASES.append(Case(*args, **kwargs))


#: Edits one key of a trace's JSON header: edit.py SRC DST KEY PYTHON-EXPRESSION (stdlib only,
#: so the system's python3 runs it).
EDIT_TRACE = '''import gzip, json, sys
MAGIC = b"kernbench-trace\\n"
src, dst, key, value = sys.argv[1:5]
data = gzip.decompress(open(src, "rb").read())
n = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "little")
head = json.loads(data[len(MAGIC) + 8:len(MAGIC) + 8 + n])
head[key] = eval(value)
text = json.dumps(head).encode()
rest = data[len(MAGIC) + 8 + n:]
open(dst, "wb").write(gzip.compress(MAGIC + len(text).to_bytes(8, "little") + text + rest))
'''
RECORD = "K run softmax -t ONE --timing-only --record t.trace >/dev/null && "
SWEEP = "K sweep softmax -t ONE --timing-only --no-replay -j 2 --set pe.gemm.rows=4,8"


def _json_overrides(expected: list[str]):
    def check(_folder: Path, out: str) -> None:
        assert json.loads(out)["overrides"] == expected
    return check


def _prints(text: str):
    def check(_folder: Path, out: str) -> None:
        assert text in out, out[-2000:]
    return check


# ------------------------------------------------ hangs: fail in seconds, naming the input

case("collective-count-far-beyond-its-buffer", "K run ./k.py -t ONE", 1,
     r"^error: \./k\.py:10: PE \(rack=0 sip=0 cube=0 pe=0\) at t=0ns: ValueError: all_reduce: "
     r"count = 1,000,000,000,000,000 f32 elements \(3\.55PiB\) at 0x[0-9a-f]+ is not a buffer "
     r"of this PE's: .* runs past the end of 'x'", timeout=30,
     files={"k.py": kernel_source("    coll.all_reduce(tl, tl.shard(x), 10**15, 'f32')").replace(
         "import os, threading, time\nPARAMS = {}\n\ndef setup(host, p):\n    return {}\n\n"
         "def kernel(tl):",
         "from kernbench_cli.lang import collectives as coll\nimport numpy as np\nPARAMS = {}\n"
         "\ndef setup(host, p):\n    return {'x': host.empty('x', (256,), 'f32')}\n\n\n"
         "def kernel(tl, x):")})
case("trace-kernel-name-of-a-million-characters", RECORD + "PY edit.py t.trace long.trace "
     "kernel '\"k\" * 10**6' && K replay long.trace", 2,
     r"^error: long\.trace: damaged trace: a string of 1,000,000 characters \('kkkkkkkkkkkk"
     r"kkkkkkkk'…\); at most 4,096\n$", files={"edit.py": EDIT_TRACE},
     writes=("t.trace", "long.trace"), timeout=30)
case("trace-kernel-name-of-300-characters", RECORD + "PY edit.py t.trace long.trace "
     "kernel '\"k\" * 300' && K replay long.trace", 2,
     r"^error: long\.trace: damaged trace: kernel is a name of 300 characters", timeout=30,
     files={"edit.py": EDIT_TRACE}, writes=("t.trace", "long.trace"))
case("topology-name-of-20000-characters", "K run softmax -t big.toml --timing-only", 2,
     r"^error: big\.toml: name: a string of 20,000 characters; at most 4,096\n$", timeout=20,
     files={"big.toml": f'name = "{"t" * 20_000}"\n[system]\nracks = 1\nsips_per_rack = 1\n'
                        "cubes_per_sip = 1\ncube_mesh = [1, 1]\npes_per_cube = 1\n"
                        "pe_mesh = [1, 1]\n"})
case("sweep-axis-of-one-100000-digit-value", "K sweep softmax -t ONE --timing-only --set "
     f"pe.gemm.rows={'9' * 100_000}", 2, r"^error: --set pe\.gemm\.rows=9{24}…: a value of "
     r"100,000 characters; an axis value is at most 256\n$", timeout=20)
THOUSAND = ",".join(str(n) for n in range(1000))
case("sweep-of-a-billion-points-under-a-memory-limit", "ulimit -v 1500000; K sweep softmax "
     f"-t ONE --timing-only --set pe.gemm.rows={THOUSAND} --set pe.gemm.cols={THOUSAND} "
     f"--set pe.math.lanes={THOUSAND}", 2, r"^error: the axes make 1,000,000,000 points "
     r"\(1,000 x 1,000 x 1,000\); a sweep runs at most 100,000", timeout=20)

# ------------------------------ odd inputs, closed streams: exit 2, or 0 where they run

case("set-factor-of-5000-digits", "K run softmax -t ONE --timing-only --set "
     f"pe.gemm.rows=x{'9' * 5000}", 2, r"a factor of 5,000 characters; a factor is a plain "
     "number such as x2, x0.5 or x1e3\n$", timeout=20)
case("set-factor-out-of-range", "K run softmax -t ONE --timing-only --set "
     "pe.tcm.size=x1e999999999", 2, r"^error: --set pe\.tcm\.size=x1e999999999: pe\.tcm\.size "
     r"= 2MiB x 1e999999999 is out of range", timeout=20)
case("progress-with-stderr-closed", "K run softmax -t ONE --timing-only --progress 2>&-", 0,
     r"^$", then=_prints("latency"), timeout=30)
case("sweep-with-stderr-closed", SWEEP + " --format csv 2>&-", 0, r"^$",
     then=_prints("point,pe.gemm.rows"), timeout=90)
case("sweep-from-a-deleted-working-folder", "mkdir gone && cd gone && rmdir ../gone && "
     + SWEEP, 2, r"^error: the working folder cannot be read \(No such file or directory: "
     r"deleted since the shell went there\?\); the sweep's workers start in it", timeout=30)
for address, says in [
        ("tcp://localhost", r"needs the scheduler's port, 1 to 65535 \(tcp://HOST:8786\)"),
        ("foo://host:8786", r"unknown scheme foo://; kernbench reaches a scheduler over "),
        ("inproc://x", r"unknown scheme inproc://"),
        ("tls://localhost:8786", r"TLS needs certificates, and Dask's configuration has no "
                                 r"distributed\.comm\.tls\.ca-file")]:
    case(f"sweep-dask-{address.split(':')[0]}-{address.rsplit(':', 1)[-1][:6]}",
         f"{SWEEP} --dask {address}", 2, rf"^error: --dask {address}: {says}", timeout=30)
case("save-name-not-utf8", "K run softmax -t ONE --save $'caf\\xe9.npz' >/dev/null", 0, r"^$",
     writes=(os.fsdecode(b"caf\xe9.npz"),), timeout=60)
case("hbm-bandwidth-1Bps-by-set", "K run softmax -t ONE --timing-only --set "
     "hbm.bandwidth=1B/s", 2, r"^error: --set hbm\.bandwidth=1B/s: hbm\.bandwidth: 1 B/s "
     r"streams less than 1 B/s once refresh takes its share", timeout=20)
case("hbm-bandwidth-1Bps-in-a-topology", "K run softmax -t slow.toml --timing-only", 2,
     r"^error: slow\.toml: hbm\.bandwidth: 1 B/s streams less than 1 B/s .* it needs at least "
     r"2 B/s\n$", timeout=20,
     files={"slow.toml": "[system]\nracks = 1\nsips_per_rack = 1\ncubes_per_sip = 1\n"
                         "cube_mesh = [1, 1]\npes_per_cube = 1\npe_mesh = [1, 1]\n[hbm]\n"
                         'bandwidth = "1B/s"\n'})

# ------------------------------------------------------- messages that say where and what

case("trace-recorded-set-is-the-traces", RECORD + "PY edit.py t.trace bad.trace sets "
     "'[\"pe.gemm.rows=-5\"]' && K replay bad.trace", 2,
     r"^error: bad\.trace: the run's recorded --set pe\.gemm\.rows=-5: pe\.gemm\.rows: "
     r"expected a positive integer, got -5 \(--no-recorded-sets leaves them out\)\n$",
     files={"edit.py": EDIT_TRACE}, writes=("t.trace", "bad.trace"), timeout=30)
case("trace-topology-file-is-the-traces", RECORD + "PY edit.py t.trace bad.trace "
     "topology_file \"'$PWD/junk.toml'\" && K replay bad.trace", 2,
     r"^error: .*junk\.toml: invalid TOML: .* \(read because bad\.trace names it; --topology "
     r"or --costs gives another\)\n$", files={"edit.py": EDIT_TRACE, "junk.toml": "not TOML"},
     writes=("t.trace", "bad.trace"), timeout=30)
case("region-named-like-the-reports-outside-row", "K run ./k.py -t ONE", 1,
     r"tl\.region: names in parentheses, such as \(outside\), are the report's own rows",
     files={"k.py": kernel_source("    with tl.region('(outside)'):\n        tl.cycles(1)")},
     timeout=30)
case("one-key-twice-with-factors-composes", "K run softmax -t ONE --timing-only --json --set "
     "hbm.bandwidth=x2 --set hbm.bandwidth=x3", 0, r"^$",
     then=_json_overrides(["hbm.bandwidth=307.2GB/s"]), timeout=30)
case("toml-of-800000-unknown-keys", "PY -c \"open('flood.toml', 'w').write('[pe]\\n' + "
     "''.join(f'k{i} = 1\\n' for i in range(800000)))\" && K topology validate flood.toml",
     2, r"^error: flood\.toml: system: missing required table \[system\]\n(error: flood\.toml: "
     r"pe\.k\d+: unknown key.*\n){19}error: flood\.toml: and 799,981 more problems \(the first "
     r"20 are above\)\n$", writes=("flood.toml",), timeout=90)
case("out-of-memory-in-a-loop-names-the-command-streams", "ulimit -v 300000; K run ./k.py -t "
     "ONE --timing-only", 1, r"^error: \./k\.py: this machine ran out of memory after the "
     r"kernel issued [\d,]+ commands, holding the command streams; a loop without end\? "
     r"--max-commands 100,000,000 stops it sooner\n$", timeout=180,
     files={"k.py": kernel_source("    while True:\n        tl.cycles(1)")})
case("out-of-memory-drawing-an-input-names-setup", "ulimit -v 700000; K run ./k.py -t ONE", 1,
     r"^error: \./k\.py:5: in setup: this machine ran out of memory \(Unable to allocate "
     r"1\.00 GiB", timeout=60, files={"k.py": kernel_source("    pass").replace(
         "    return {}\n\ndef kernel", "    host.random('x', (2**28,), 'f32')\n    return {}\n"
                                       "\ndef kernel")})
case("all-reduce-bytes-beyond-the-slice-before-any-allocation", "ulimit -v 1500000; K run "
     "all_reduce -t ONE -p bytes=1099511627776", 2, r"^error: all_reduce: bytes = 1TiB is "
     r"more than a PE's HBM slice holds \(1GiB, hbm\.slice_size\)\n$", timeout=30)
case("host-random-of-petabytes", "K run ./k.py -t ONE", 2, r"^error: \./k\.py:5: in setup: "
     r"input 'x' \[1000000000000000\] f32 is 3\.55PiB \(4,000,000,000,000,000 B\), more than "
     r"the 1GiB of HBM in the system\n$", timeout=30,
     files={"k.py": kernel_source("    pass").replace(
         "    return {}\n\ndef kernel", "    host.random('x', (10**15,), 'f32')\n    return {}\n"
                                       "\ndef kernel")})

# ------------------------------------------------------------ processes and leftovers

case("a-kernel-that-forks", "K run ./k.py -t ONE", 1,
     r"^error: \./k\.py:8: PE \(rack=0 sip=0 cube=0 pe=0\) at t=0ns: the kernel called "
     r"os\.fork\(\): the child would carry on with the run \(and print its report again\)\n$",
     files={"k.py": kernel_source("    os.fork()")}, then=lambda _f, out: _nothing(out),
     timeout=30)
case("a-stale-temporary-of-a-killed-write-is-removed", "printf half > .r.trace.k1ll3dxx.tmp "
     "&& printf other > .x.trace.k1ll3dxx.tmp.keep && K run softmax -t ONE --timing-only "
     "--record r.trace && test ! -e .r.trace.k1ll3dxx.tmp && test -e .x.trace.k1ll3dxx.tmp.keep",
     0, r"^$", writes=("r.trace", ".x.trace.k1ll3dxx.tmp.keep"), timeout=30)


def _nothing(out: str) -> None:
    assert out == "", out[-2000:]


# -------------------------------------------------------------------- the Python API

API = '''import sys
import kernbench_cli as kb
try:
    result = {call}
except kb.KernbenchError as exc:
    print(type(exc).__name__, *exc.lines(), file=sys.stderr)
    sys.exit(exc.exit_code)
print("returned", type(result).__name__)
'''
THREADS = '''import os, sys, threading
import kernbench_cli as kb
before = (sys.stdout, threading.Thread.start, os._exit, os.fork)
threads = [threading.Thread(target=kb.run, args=("softmax", {one!r}),
                            kwargs={{"timing_only": True}}) for _ in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("as it was" if (sys.stdout, threading.Thread.start, os._exit, os.fork) == before
      else "changed")
'''


def api_case(id_: str, call: str, code: int, says: str, **kwargs) -> None:
    case(f"api-{id_}", "PY api.py", code, says, files={"api.py": API.format(call=call)},
         timeout=kwargs.pop("timeout", 60), **kwargs)


api_case("replay-of-a-number", "kb.replay(5)", 2, r"^ArgumentError trace=5: expected a trace "
         r"file, a kb\.load_trace trace or a Result of kb\.run, got int\n$")
api_case("load-trace-of-none", "kb.load_trace(None)", 2,
         r"^ArgumentError path=None: expected a path")
api_case("run-with-costs-a-number", "kb.run('softmax', costs=5)", 2,
         r"^ArgumentError costs=5: expected a path \(a str or pathlib\.Path\), got int\n$")
api_case("sensitivity-of-a-dict", "kb.sensitivity({})", 2,
         r"^ArgumentError result=\{\}: expected a Result of kb\.run or kb\.replay, got dict\n$")
api_case("load-topology-trace-a-number", "kb.load_topology(trace=5)", 2,
         r"^ArgumentError trace=5: expected a trace file")
api_case("result-from-an-empty-dict", "kb.Result.from_dict({})", 2,
         r"^ArgumentError Result\.from_dict: no key kernel: not a `run --json` object\n$")
api_case("sweep-of-a-100000-digit-value",
         "kb.sweep('softmax', set={'pe.gemm.rows': ['9' * 100_000]})", 2,
         r"^ParamError --set pe\.gemm\.rows=9{24}…: a value of 100,000 characters", timeout=30)
case("api-replay-of-a-long-named-trace", "PY api.py", 2,
     r"^TraceError long\.trace: damaged trace: a string of 1,000,000 characters",
     files={"api.py": API.format(call="kb.replay('long.trace')"), "long.trace": b""},
     timeout=30)
case("api-run-from-threads-leaves-the-process-as-it-was", "PY threads.py", 0, r"^$",
     files={"threads.py": THREADS.format(one=ONE)}, then=_prints("as it was"), timeout=120)


@pytest.fixture(scope="module")
def made(tmp_path_factory, kernbench) -> dict[str, bytes]:
    """Files the API cases read, made once: a trace whose kernel name is a million
    characters long."""
    import gzip

    from kernbench_cli.sim.trace_file import MAGIC

    folder = tmp_path_factory.mktemp("made")
    kernbench.run("run", "softmax", "-t", ONE, "--timing-only", "--record", "t.trace",
                  cwd=folder, check=True)
    data = gzip.decompress((folder / "t.trace").read_bytes())
    size = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "little")
    head = json.loads(data[len(MAGIC) + 8:len(MAGIC) + 8 + size])
    head["kernel"] = "k" * 10**6
    text = json.dumps(head).encode()
    return {"long.trace": gzip.compress(MAGIC + len(text).to_bytes(8, "little") + text
                                        + data[len(MAGIC) + 8 + size:], mtime=0)}


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_corpus(tmp_path, c: Case, kernbench, made):
    run_case(tmp_path, c, kernbench, made)


def test_the_corpus_covers_every_class():
    """One case or more per class of hostile input (the section titles above)."""
    ids = " ".join(c.id for c in CASES)
    for word in ("collective", "kernel-name", "factor", "progress", "all-reduce-bytes",
                 "host-random", "api-", "recorded-set", "topology-file", "outside",
                 "twice", "dask", "not-utf8", "1Bps", "sweep-with-stderr", "deleted",
                 "100000-digit", "billion", "forks", "800000", "stale-temporary",
                 "out-of-memory"):
        assert word in ids, word
