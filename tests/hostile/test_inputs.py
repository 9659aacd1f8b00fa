"""Hostile input through the CLI in this process: bad files, numbers, addresses, arguments,
kernels, traces and results files.

Every case is generated and must end with its documented exit code (docs/running.md,
"Exit codes and errors"): 0 ok, 1 a kernel or run that went wrong, 2 bad input, 3 an
address this topology lacks (`decode`). Never a traceback or an `internal error` (exit
70), every stderr line an `error: …` of sane length, and no temporary file left behind.
Signals, pipes and hangs, which need a process of their own, are test_signals_and_pipes.py.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from kernbench_cli.sim.trace_file import MAGIC
from tests.conftest import ROOT, TESTS
from tests.hostile.cases import BASE, ONE

PAIR = str(TESTS / "topologies" / "pair.toml")

HUGE = "9" * 100_000
HEX_HUGE = "0x" + "f" * 100_000


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    code: int
    says: str = ""  # a substring the first stderr line must hold


CASES: list[Case] = []


def case(id_: str, args, code: int, says: str = "") -> None:
    CASES.append(Case(id_, tuple(args), code, says))


# ------------------------------------------------------------ numbers in TOML and --set

TOML_KEYS = [("pe", "clock"), ("hbm", "latency"), ("hbm", "bandwidth"), ("pe.tcm", "size"),
             ("pe.gemm", "rows"), ("system", "racks"), ("pe.ipcq", "slots")]
TOML_VALUES = {
    "exp5000": '"1e5000GHz"', "exp400": '"1e400ns"', "huge_size": '"1e30GiB"',
    "tiny": '"1e-400ns"', "nan": '"nanGHz"', "inf": '"infGHz"', "negative": "-5",
    "digits": HUGE, "hex_digits": HEX_HUGE, "digit_string": f'"{HUGE}ns"', "float": "1e308",
    "array": "[1, 2]", "table": "{a = 1}", "bool": "true", "empty": '""',
}
for table, key in TOML_KEYS:
    for name in TOML_VALUES:
        case(f"toml-{table}.{key}-{name}", ("topology", "validate", f"{{toml:{table}:{key}:"
                                                                     f"{name}}}"), 2, ": ")
SET_VALUES = {"exp5000": "1e5000GHz", "exp400": "1e400ns", "digits": HUGE, "nan": "nanGHz",
              "negative": "-5", "garbage": "[[[", "deep": "[" * 5000}
for table, key in TOML_KEYS:
    for name, value in SET_VALUES.items():
        case(f"set-{table}.{key}-{name}", ("topology", "validate", "default", "--set",
                                          f"{table}.{key}={value}"), 2, "--set ")
for key in ("costs.issue.composite", "costs.scheduler.plan", "costs.issue.load"):
    for name in ("exp5000", "exp400", "digits", "negative"):
        case(f"set-{key}-{name}", ("topology", "validate", "default", "--set",
                                   f"{key}={SET_VALUES[name]}"), 2, "--set ")
for item in ("novalue", "=5", "a..b=1", ".=1", "hbm=5"):
    case(f"set-shape-{item}", ("topology", "validate", "default", "--set", item), 2)

# ------------------------------------------------------------ files given where input is read

FILE_KINDS = ("missing", "folder", "loop", "fifo", "device", "empty", "binary", "latin1",
              "nested_arrays", "nested_tables", "under_a_file")
for kind in FILE_KINDS:
    case(f"topology-file-{kind}", ("topology", "validate", f"{{file:{kind}:toml}}"), 2)
    case(f"costs-file-{kind}", ("topology", "validate", "default", "--costs",
                                f"{{file:{kind}:toml}}"), 0 if kind == "empty" else 2)
    case(f"run-topology-file-{kind}", ("run", "sharded_gemm", "-t", f"{{file:{kind}:toml}}"), 2)
    case(f"replay-file-{kind}", ("replay", f"{{file:{kind}:trace}}"), 2)
for kind in ("missing", "folder", "loop", "fifo", "empty_py", "binary_py", "txt"):
    case(f"kernel-file-{kind}", ("run", f"{{file:{kind}:py}}", "-t", ONE), 2)

# ------------------------------------------------------------ addresses

for text, code in (("zz", 2), ("", 2), ("0x", 2), ("-5", 2), ("0x-1", 2), ("1e5", 2),
                   ("0b101", 0), ("0x1__0", 2), ("\u0663", 2), (HUGE, 2), (HEX_HUGE, 2),
                   ("0x8000000000000", 2),
                   ("0x7fffffffff", 3), ("0xe000001234", 3), ("0x3f000000", 3),
                   ("0x1c00000000", 2), ("0x2000000100", 0), ("0x1000", 0)):
    label = text[:12] or "empty"
    case(f"decode-{label}", ("decode", "--", text), code)
    case(f"decode-json-{label}", ("decode", "--json", "--", text), code)
for option, value in (("--rack", HUGE), ("--rack", "-1"), ("--pe", "99"), ("--offset", HEX_HUGE),
                      ("--cube", "x"), ("--slot", "3")):
    case(f"encode-{option}-{value[:8]}", ("encode", "tcm", option, value), 2)

# ------------------------------------------------------------ run, replay and golden arguments

TINY = ("run", str(TESTS / "kernels" / "tiny_ops.py"), "-t", ONE)
for args, code in (
        (("-p", f"n={HUGE}"), 2), (("-p", "n=1e400"), 2), (("-p", "n=inf"), 2),
        (("-p", "n"), 2), (("-p", "nope=1"), 2), (("-p", "=1"), 2),
        (("--seed", "-1"), 2), (("--seed", HUGE), 2), (("--seed", "x"), 2),
        (("--max-commands", "-1"), 2), (("--max-commands", "0"), 2),
        (("--kernel-timeout", "-1"), 2), (("--kernel-timeout", "nan"), 2),
        (("--save", "/proc/kb.npz"), 2), (("--save", "{tmp}/no/such/x.npz"), 2),
        (("--save", "{tmp}"), 2), (("--record", "/proc/kb.trace"), 2),
        (("--chrome-trace", "{tmp}"), 2), (("--oplog", "{tmp}/no/such/x.jsonl"), 2),
        (("--critical-path", "/proc/kb.jsonl"), 2), (("--timing-only", "--save", "{tmp}/x"), 2),
        (("--max-commands", "100"), 1), (("--unknown",), 2)):
    case("run-" + "-".join(a[:12] for a in args), TINY + args, code)
for args, code in (
        (("golden", "check", "--dir", "{tmp}/none"), 2),
        (("golden", "check", "--only", "nomatch*"), 2),
        (("golden", "regen", "--only", "softmax.default", "--dir", "/proc/kb"), 2),
        (("golden", "regen", "--only", "softmax.default", "--dir", "{file:binary:json}"), 2),
        (("golden", "regen", "--only", "softmax.default", "--dir", "{tmp}/new/goldens"), 0),
        (("sweep", "softmax", "-j", "0"), 2), (("sweep", "softmax", "-p", "rows"), 2),
        (("sweep", "softmax", "-p", "rows=1,,2", "--out", "/proc/kb.csv"), 2),
        (("sweep", "softmax", "--resume"), 2), (("compare", "{file:missing:json}"), 2),
        (("compare", "{file:binary:json}", "{file:binary:json}"), 2),
        (("kernels", "{file:binary_py:py}"), 2), (("topology", "show", "nope"), 2),
        (("run", "sharded_gemm", "-p", "model=x"), 2),
        (("run", "gqa_attention", "-p", "model=llama3-8b", "-p", "heads_q=16"), 2)):
    case("cli-" + "-".join(a[:12] for a in args), args, code)

# ------------------------------------------------------------ kernel files

KERNELS = {  # name: (source, exit code, what the error says)
    "syntax": ("def kernel(tl:\n", 2, "loading the kernel failed: SyntaxError"),
    "import": ("import no_such_module_anywhere\n" + BASE, 2, "ModuleNotFoundError"),
    "module_raises": ("raise RuntimeError('boom')\n" + BASE, 2, "RuntimeError: boom"),
    "module_exit": ("import sys\nsys.exit(3)\n" + BASE, 2, "the kernel called sys.exit(3)"),
    "no_setup": ("PARAMS = {}\ndef kernel(tl):\n    pass\n", 2, "must define setup"),
    "params_list": (BASE + "PARAMS = [1]\n", 2, "PARAMS must be a dict"),
    "params_object": (BASE + "PARAMS = {'n': object()}\n", 2, "a default must be"),
    "params_name": (BASE + "PARAMS = {1: 2}\n", 2, "is not an identifier"),
    # a default a result cannot hold: refused at load, not after the run as a from_dict
    **{f"params_{what}": (BASE + f"PARAMS = {{'n': 8, 'f': {value}}}\n", 2,
                          "a default number must be finite, an integer within 64 bits")
       for what, value in (("nan", "float('nan')"), ("inf", "float('inf')"),
                           ("huge", "10**30"))},
    "choices_type": (BASE + "CHOICES = 5\n", 2, "CHOICES must be a dict"),
    "choices_default": (BASE + "PARAMS = {'n': 8, 'm': 'a'}\nCHOICES = {'m': ('b',)}\n", 2,
                        "holding the default"),
    "choices_unknown": (BASE + "CHOICES = {'zz': ('a',)}\n", 2, "not in PARAMS"),
    "presets_type": (BASE + "PRESETS = []\n", 2, "PRESETS must be a dict"),
    "presets_values": (BASE + "PARAMS = {'n': 8, 'm': 'a'}\nPRESETS = {'m': {'a': 5}}\n", 2,
                       "PRESETS['m']"),
    "presets_param": (BASE + "PARAMS = {'n': 8, 'm': 'a'}\nPRESETS = {'m': {'a': {'q': 1}}}\n",
                      2, "is not a parameter"),
    "info_type": (BASE + "PARAM_INFO = {'n': 5}\n", 2, "PARAM_INFO"),
    "needs_unknown": (BASE + "NEEDS = {'n': 'zz'}\n", 2,
                      "NEEDS['n'] must name another parameter in PARAMS, not 'zz'"),
    "needs_itself": (BASE + "NEEDS = {'n': 'n'}\n", 2, "NEEDS['n'] must name another"),
    "needs_param": (BASE + "NEEDS = {'zz': 'n'}\n", 2, "NEEDS names 'zz', which is not in"),
    "setup_not_callable": (BASE + "setup = 5\n", 2, "setup must be a function"),
    "kernel_not_function": (BASE + "kernel = print\n", 1, "kernel must be a function"),
    "setup_list": (BASE + "def setup(host, p):\n    return [1]\n", 2, "as a dict"),
    "setup_int_key": (BASE + "def setup(host, p):\n    return {1: 2}\n", 2,
                      "as a dict of argument names, not the key 1"),  # was an internal error
    "setup_str_key": (BASE + "def setup(host, p):\n    return {'a b': 2}\n", 2,
                      "as a dict of argument names, not the key 'a b'"),
    "setup_raises": (BASE + "def setup(host, p):\n    return {}['x']\n", 1, "in setup: KeyError"),
    "setup_exit": (BASE + "import sys\ndef setup(host, p):\n    sys.exit(4)\n", 1,
                   "sys.exit(4)"),
    "setup_value_error": (BASE + "def setup(host, p):\n    raise ValueError('n too big')\n", 2,
                          "n too big"),
    "signature": (BASE + "def kernel(tl, x):\n    pass\n", 1,
                  "kernel() does not take the arguments setup returns"),
    "kernel_exit": (BASE + "import sys\ndef kernel(tl, x, n):\n    sys.exit(3)\n", 1,
                    "the kernel called sys.exit(3)"),
    "kernel_base_exception": (BASE + "def kernel(tl, x, n):\n    raise BaseException('b')\n",
                              1, "BaseException: b"),
    "kernel_generator_exit": (BASE + "def kernel(tl, x, n):\n    raise GeneratorExit\n", 1,
                              "GeneratorExit"),
    "kernel_overflow": (BASE + "def kernel(tl, x, n):\n    tl.cycles(10**30)\n", 1, ""),
    # a bool is no PE, count, axis or size (True was PE 1, one cycle, a size of 1)
    "cycles_bool": (BASE + "def kernel(tl, x, n):\n    tl.cycles(True)\n", 1,
                    "tl.cycles expects an integer from 0 to 2^62 - 1, got True"),
    "program_id_bool": (BASE + "def kernel(tl, x, n):\n    tl.program_id(True)\n", 1,
                        "axis must be 0 (PE in cube), 1 (cube in SIP) or 2 (SIP)"),
    "shape_bool": (BASE + "def kernel(tl, x, n):\n    tl.load(tl.shard(x), (True,), 'f32')\n",
                   1, "shape must be a sequence of integers, got (True,)"),
    "kernel_bad_shape": (BASE + "def kernel(tl, x, n):\n    tl.load(tl.shard(x), (10**30,), "
                         "'f32')\n", 1, ""),
    "kernel_huge_pointer": (BASE + "def kernel(tl, x, n):\n    tl.load(10**30, (8,), 'f32')\n",
                            1, ""),
    "kernel_string_pointer": (BASE + "def kernel(tl, x, n):\n    tl.load('x', (8,), 'f32')\n",
                              1, ""),
    "kernel_float_shape": (BASE + "def kernel(tl, x, n):\n    tl.load(tl.shard(x), (2.5,), "
                           "'f32')\n", 1, ""),
    "kernel_bad_dtype": (BASE + "def kernel(tl, x, n):\n    tl.load(tl.shard(x), (8,), 'f8')\n",
                         1, "unknown dtype"),
    "kernel_full_string": (BASE + "def kernel(tl, x, n):\n    tl.full((8,), 'a')\n", 1,
                           "tl.full: value must be a number, got str"),
    "kernel_full_huge": (BASE + "def kernel(tl, x, n):\n    tl.full((8,), 10**400)\n", 1,
                         "is beyond any float"),
    "kernel_str_raises": (BASE + "class E(Exception):\n    def __str__(self):\n        raise "
                          "ValueError('boom')\ndef kernel(tl, x, n):\n    raise E()\n", 1,
                          "E: (its message could not be made: ValueError)"),
    "kernel_long_message": (BASE + "def kernel(tl, x, n):\n    raise RuntimeError('x\\n' * 3 "
                            "+ 'y' * 5000)\n", 1, "RuntimeError: x / x / x / yyyy"),
    "kernel_recursion": (BASE + "def kernel(tl, x, n):\n    kernel(tl, x, n)\n", 1,
                         "RecursionError"),
    "outputs_list": (BASE + "def outputs(host, args, p):\n    return [1]\n"
                     "def reference(host, p):\n    return {'y': __import__('numpy').zeros(2)}\n",
                     1, "outputs() must return"),
    "outputs_not_array": (BASE + "def outputs(host, args, p):\n    return {'y': 5}\n"
                          "def reference(host, p):\n    return {'y': __import__('numpy')"
                          ".zeros(2)}\n", 1, "output 'y' is not an array"),
    "outputs_missing": (BASE + "def reference(host, p):\n    return {'y': __import__('numpy')"
                        ".zeros(2)}\n", 1, "outputs() returned no 'y'"),
    "outputs_unchecked": (BASE + "def outputs(host, args, p):\n    return {'y': __import__("
                          "'numpy').zeros(2), 'z': __import__('numpy').full(2, 1e30)}\n"
                          "def reference(host, p):\n    return {'y': __import__('numpy')"
                          ".zeros(2)}\n", 1, "outputs() returned 'z', which reference() does "
                          "not: nothing to check it against"),
    "reference_none": (BASE + "def reference(host, p):\n    return None\n", 1,
                       "reference() must return"),
    "bounds_junk": (BASE + "def bounds(topology, p):\n    return 5\n", 1, "bounds() must return"),
    "bounds_huge": (BASE + "def bounds(topology, p):\n    return {'a': (10**30, 'x')}\n", 1,
                    "bounds() must return a dict of name (1 to 100 printable characters): "
                    "(picoseconds within 64 bits"),
    "metrics_huge": (BASE + "def metrics(topology, p, run):\n    return {'a': (10**30, 'x')}\n",
                     1, "metrics() must return a dict of name (1 to 100 printable characters):"
                        " (finite number, integers within 64 bits"),
    # a label of 100,000 letters squeezed every value out of the report (and took minutes)
    "bounds_long_name": (BASE + "def bounds(topology, p):\n    return {'b' * 101: (1, 'x')}\n",
                         1, "bounds() must return a dict of name (1 to 100 printable"),
    "metrics_long_name": (BASE + "def metrics(topology, p, run):\n    return {'m' * 101: (1, "
                          "'x')}\n", 1, "metrics() must return a dict of name (1 to 100"),
    "metrics_newline_name": (BASE + "def metrics(topology, p, run):\n    return {'a\\nb': (1, "
                             "'x')}\n", 1, "metrics() must return a dict of name (1 to 100"),
    "resolved_junk": (BASE + "def resolved(topology, p):\n    return {**p, 'n': 'x'}\n", 1,
                      "resolved() must return the parameters, each of its given type, not "),
    "resolved_raises": (BASE + "def resolved(topology, p):\n    return p['nope']\n", 1,
                        "KeyError"),
    "scaled_exit": (BASE + "import sys\ndef scaled_defaults(n):\n    sys.exit(3)\n", 2,
                    "scaled_defaults(1) failed: the kernel called sys.exit(3)"),
    "scaled_junk": (BASE + "def scaled_defaults(n):\n    return {'n': 'x'}\n", 2,
                    "scaled_defaults must return"),
    "random_huge": (BASE + "def setup(host, p):\n    host.random('x', (10**15,), 'f32')\n", 2,
                    "input 'x' [1000000000000000] f32 is 3.55PiB (4,000,000,000,000,000 B), "
                    "more than the 1GiB of HBM in the system"),
    "random_negative": (BASE + "def setup(host, p):\n    host.random('x', (-5, 4), 'f32')\n", 2,
                        "input 'x': shape [-5, 4] has a negative size"),
    "setup_memory": (BASE + "def setup(host, p):\n    raise MemoryError('Unable to allocate "
                     "1 GiB')\n", 1, "in setup: this machine ran out of memory (Unable to "
                                      "allocate 1 GiB)"),
    "kernel_memory": (BASE + "def kernel(tl, x, n):\n    t = tl.load(tl.shard(x), (n,), "
                      "'f32')\n    raise MemoryError\n", 1, "PE (rack=0 sip=0 cube=0 pe=0): "
                      "this machine ran out of memory after the kernel issued 1 command, "
                      "holding the command streams and the tensors' values (--timing-only "
                      "keeps none); a loop without end? --max-commands 100,000,000 stops it "
                      "sooner"),
    # regions nest: a region left out of order, or one object entered inside itself,
    # would book the commands after it to a region they are not in
    "region_out_of_order": (BASE + "def kernel(tl, x, n):\n    a, b = tl.region('a'), "
                            "tl.region('b')\n    a.__enter__()\n    b.__enter__()\n"
                            "    a.__exit__(None, None, None)\n", 1, ":16: PE (rack=0 sip=0 "
                            "cube=0 pe=0) at t=0ns: tl.region('a') left while 'a/b', entered "
                            "inside it, is still open: regions nest (`with`)"),
    "region_inside_itself": (BASE + "def kernel(tl, x, n):\n    r = tl.region('a')\n"
                             "    with r:\n        with r:\n            pass\n", 1,
                             ":15: PE (rack=0 sip=0 cube=0 pe=0) at t=0ns: tl.region('a') "
                             "entered again while inside it: call tl.region for each `with`"),
    "region_left_unentered": (BASE + "def kernel(tl, x, n):\n    tl.region('a').__exit__("
                              "None, None, None)\n", 1, ":13: PE (rack=0 sip=0 cube=0 pe=0) "
                              "at t=0ns: tl.region('a') left without being entered"),
    "region_never_left": (BASE + "def kernel(tl, x, n):\n    with tl.region('a'):\n"
                          "        pass\n    tl.region('b').__enter__()\n    tl.load(tl.shard"
                          "(x), (n,), 'f32')\n", 1, ":15: PE (rack=0 sip=0 cube=0 pe=0) at "
                          "t=4ns: "
                          "tl.region('b') was entered and never left: the kernel ended inside "
                          "it (`with tl.region(...):` leaves it)"),
    # the host's refusals name the kernel line that called it
    "random_twice": (BASE + "def setup(host, p):\n    host.random('x', (8,), 'f32')\n"
                     "    host.random('x', (8,), 'f32')\n", 2,
                     ":14: in setup: input 'x' is drawn twice: each input needs a name of its "
                     "own"),
    "place_no_pe": (BASE + "import numpy as np\ndef setup(host, p):\n    host.place('x', "
                    "np.zeros(8, np.float32), 5)\n", 2, ":14: in setup: 'x': PE 5 does not "
                    "exist: the grid has 1 (0..0)"),
    "place_bool_pe": (BASE + "import numpy as np\ndef setup(host, p):\n    host.place('x', "
                      "np.zeros(8, np.float32), True)\n", 2, ":14: in setup: 'x': PE True does "
                      "not exist: the grid has 1 (0..0)"),
    "place_float64": (BASE + "import numpy as np\ndef setup(host, p):\n    host.place('x', "
                      "np.zeros(8), 0)\n", 2, ":14: in setup: 'x': an array of float64 is not "
                      "one kernbench holds (f16, bf16, f32; dtype= casts it)"),
    "replicate_strings": (BASE + "import numpy as np\ndef setup(host, p):\n    host.replicate"
                          "('x', np.array(['a']))\n", 2, ":14: in setup: 'x': an array of <U1 "
                          "is not one kernbench holds"),
    "replicate_list": (BASE + "def setup(host, p):\n    host.replicate('x', [1.0])\n", 2,
                       ":13: in setup: 'x': a list is not a numpy array"),
    "scatter_axis": (BASE + "import numpy as np\ndef setup(host, p):\n    host.scatter('x', "
                     "np.zeros(8, np.float32), 3)\n", 2, ":14: in setup: 'x': axis 3 is not "
                     "one of the array's 1 (0..0)"),
    "random_dtype": (BASE + "def setup(host, p):\n    host.random('x', (8,), 'f64')\n", 1,
                     ":13: in setup: unknown dtype 'f64'"),
    "read_shard_no_pe": (BASE + "def outputs(host, args, p):\n    return {'y': host.read_shard("
                         "args['x'], 3)}\ndef reference(host, p):\n    return {'y': __import__"
                         "('numpy').zeros(8)}\n", 2, ":13: in outputs: 'x': PE 3 does not "
                         "exist: the grid has 1 (0..0)"),
    "empty_not_a_shape": (BASE + "def setup(host, p):\n    host.empty('y', 'abc', 'f32')\n", 2,
                          "input 'y': shape 'abc' is not a sequence of integers"),
}
for name, (_, code, says) in KERNELS.items():
    case(f"kernel-{name}", ("run", f"{{kernel:{name}}}", "-t", ONE), code, says)

SPIN = "    while True:\n        pass\n"
STILL = ("still running after 0.2 s of wall-clock time with no progress: an endless loop? "
         "(--kernel-timeout changes the limit)")
NO_COMMAND = ("issued no command for 0.2 s of wall-clock time: an endless loop in the "
              "kernel's Python? (--kernel-timeout changes the limit)")
#: a kernel module's code that never returns, wherever it is, is stopped at the limit, and a
#: kernel that takes the watchdog's timer away is stopped by the thread behind it
SPINS = {
    "import": ("if True:\n" + SPIN + BASE, 2, f":2: loading the kernel failed: {STILL}"),
    "scaled_defaults": (BASE + "def scaled_defaults(n):\n" + SPIN, 2,
                        f": scaled_defaults(1) failed: {STILL}"),
    "setup": (BASE + "def setup(host, p):\n" + SPIN, 1, f":13: in setup: {STILL}"),
    "reference": (BASE + "def reference(host, p):\n" + SPIN, 1, f":13: in reference: {STILL}"),
    "outputs": (BASE + "def outputs(host, args, p):\n" + SPIN, 1, f":13: in outputs: {STILL}"),
    "bounds": (BASE + "def bounds(topology, p):\n" + SPIN, 1, f":13: in bounds: {STILL}"),
    "kernel_ignores_the_alarm": (BASE + "import signal\ndef kernel(tl, x, n):\n    signal."
                                 "signal(signal.SIGALRM, signal.SIG_IGN)\n" + SPIN, 1,
                                 f":15: PE (rack=0 sip=0 cube=0 pe=0) {NO_COMMAND}"),
    "kernel_stops_the_timer": (BASE + "import signal\ndef kernel(tl, x, n):\n    signal."
                               "setitimer(signal.ITIMER_REAL, 0)\n" + SPIN, 1,
                               f":15: PE (rack=0 sip=0 cube=0 pe=0) {NO_COMMAND}"),
}
KERNELS.update({f"spin_{name}": spec for name, spec in SPINS.items()})
#: a `tl` or tensor kept from another PE's kernel: its commands would be charged to that
#: PE (on two PEs)
TWO_PES = {
    "foreign_tl": ("KEPT = []\n" + BASE + "def kernel(tl, x, n):\n    KEPT.append(tl)\n"
                   "    KEPT[0].cycles(1)\n", 1, ":15: PE (rack=0 sip=0 cube=0 pe=1) at t=0ns: a "
                   "command of PE (rack=0 sip=0 cube=0 pe=0) issued by the kernel of PE (rack=0 "
                   "sip=0 cube=0 pe=1): each PE issues through its own `tl` and tensors"),
    "foreign_tensor": ("KEPT = []\n" + BASE + "def kernel(tl, x, n):\n    KEPT.append("
                       "tl.zeros((8,)))\n    KEPT[0] + 1.0\n", 1, ":15: PE (rack=0 sip=0 cube=0 "
                       "pe=1) at t=4ns: a command of PE (rack=0 sip=0 cube=0 pe=0) issued by"),
}
KERNELS.update(TWO_PES)
for name, (_, code, says) in TWO_PES.items():
    case(f"kernel-{name}", ("run", f"{{kernel:{name}}}", "-t", PAIR), code, says)
for name, (_, code, says) in SPINS.items():
    case(f"kernel-spin_{name}", ("run", f"{{kernel:spin_{name}}}", "-t", ONE, "--kernel-timeout",
                                 "0.2"), code, says)
#: a kernel that takes its PE's failure and tries again: each try appended a command past
#: the limit (15 GB after minutes) or failed TCM again, and each counted as progress
RETRIES = {
    "retries_past_the_command_limit": (
        BASE + "def kernel(tl, x, n):\n    while True:\n        try:\n            tl.cycles(1)"
        "\n        except Exception:\n            pass\n", 1,
        ":15: PE (rack=0 sip=0 cube=0 pe=0): the kernel issued more than 100 commands"),
    "retries_a_full_tcm": (
        BASE + "def kernel(tl, x, n):\n    while True:\n        try:\n            tl.zeros("
        "(1024, 1024))\n        except Exception:\n            pass\n", 1,
        ":15: PE (rack=0 sip=0 cube=0 pe=0) at t=4ns: tensors overflow TCM"),
}
KERNELS.update(RETRIES)
for name, (_, code, says) in RETRIES.items():
    case(f"kernel-{name}", ("run", f"{{kernel:{name}}}", "-t", ONE, "--max-commands", "100"),
         code, says)
# timing only refuses what a run with values does
for name in ("kernel_full_string", "kernel_full_huge"):
    case(f"kernel-{name}-timing-only", ("run", f"{{kernel:{name}}}", "-t", ONE,
                                        "--timing-only"), *KERNELS[name][1:])

# ------------------------------------------------------------ damaged traces

TRACE_KEYS = ("format", "version", "kernel", "params", "seed", "topology", "topology_file",
              "memory", "lengths", "gemm_shapes", "math_kinds", "composites", "tcm_peak")
TRACE_VALUES = {"null": None, "string": "x", "list": [], "dict": {}, "negative": -1,
                "huge": 10**30, "nested": [["x"]]}
#: values a replay takes as they are (a name it only prints, a seed it only reports)
TRACE_HARMLESS = {("kernel", "string"), ("topology", "string"), ("topology_file", "string"),
                  ("params", "dict"), ("seed", "negative"), ("gemm_shapes", "list"),
                  ("math_kinds", "list")}  # this trace has no dot and no math command
for key in TRACE_KEYS:
    for name in TRACE_VALUES:
        code = 0 if (key, name) in TRACE_HARMLESS else 2
        case(f"trace-{key}-{name}", ("replay", f"{{trace:{key}:{name}}}", "-t", "{gemm_topology}"),
             code)
for name in ("truncated", "appended", "no_magic", "deep_header", "digits_header"):
    case(f"trace-{name}", ("replay", f"{{trace:{name}}}"), 2)


# ------------------------------------------------------------ results files for compare

RESULT_KEYS = ("latency_ps", "engines", "bound", "checks")
for key in RESULT_KEYS:
    for name in TRACE_VALUES:
        # (a latency of 10^30 ps is no run's: beyond 64 bits, refused like NaN)
        harmless = (key, name) in {("engines", "dict"), ("bound", "dict"), ("checks", "list")}
        case(f"results-{key}-{name}", ("compare", "{results:good}", f"{{results:{key}.{name}}}"),
             0 if harmless else 2)


# ------------------------------------------------------------ the fixtures the cases name


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Every file the cases name, made once."""
    from typer.testing import CliRunner

    from kernbench_cli.cli.app import app

    root = tmp_path_factory.mktemp("corpus")
    files = root / "files"
    files.mkdir()
    for kind in (*FILE_KINDS, "empty_py", "binary_py", "txt"):
        for ext in ("toml", "trace", "py", "json"):
            path = files / f"{kind}.{ext}"
            if kind == "folder":
                path.mkdir()
            elif kind == "loop":
                path.symlink_to(path)
            elif kind == "fifo":
                os.mkfifo(path)
            elif kind == "device":
                path.symlink_to("/dev/zero")
            elif kind in ("empty", "empty_py"):
                path.write_text("")
            elif kind in ("binary", "binary_py"):
                path.write_bytes(bytes(range(256)) * 8)
            elif kind == "latin1":
                path.write_bytes("name = \"caf\xe9\"\n".encode("latin-1"))
            elif kind == "nested_arrays":
                path.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
            elif kind == "nested_tables":
                path.write_text("a = " + "{b = " * 3000 + "1" + "}" * 3000 + "\n")
            elif kind == "txt":
                path.write_text(BASE)
            elif kind == "under_a_file":  # the cases name path/x: the OS refuses to look
                path.write_text("")
    (files / "txt.py").unlink()
    (files / "txt.txt").write_text(BASE)
    shipped = (ROOT / "topologies" / "default.toml").read_text().replace(
        'costs = "costs/default.toml"', 'costs = "default"')
    tomls = root / "toml"
    tomls.mkdir()
    for table, key in TOML_KEYS:
        for name, value in TOML_VALUES.items():
            (tomls / f"{table}.{key}.{name}.toml").write_text(_set_key(shipped, table, key,
                                                                       value))
    kernels = root / "kernels"
    kernels.mkdir()
    for name, (source, _, _) in KERNELS.items():
        (kernels / f"{name}.py").write_text(source)
    traces = root / "traces"
    traces.mkdir()
    gemm_topology = ONE
    good = traces / "good.trace"
    result = CliRunner().invoke(app, ["run", "sharded_gemm", "-t", gemm_topology, "-p", "M=16",
                                      "-p", "K=64", "-p", "N=64", "--record", str(good)])
    assert result.exit_code == 0, result.output
    data = gzip.decompress(good.read_bytes())
    size = int.from_bytes(data[len(MAGIC):len(MAGIC) + 8], "little")
    header = json.loads(data[len(MAGIC) + 8:len(MAGIC) + 8 + size])
    columns = data[len(MAGIC) + 8 + size:]
    assert header["composites"] and header["memory"]

    def write(name: str, head: bytes, tail: bytes = columns, magic: bytes = MAGIC) -> None:
        raw = magic + len(head).to_bytes(8, "little") + head + tail
        (traces / f"{name}.trace").write_bytes(gzip.compress(raw, mtime=0))

    for key in TRACE_KEYS:
        for name, value in TRACE_VALUES.items():
            write(f"{key}.{name}", json.dumps({**header, key: value}).encode())
    head = json.dumps(header).encode()
    write("truncated", head, columns[:len(columns) // 2])
    write("appended", head, columns + b"\0" * 9)
    write("no_magic", head, magic=b"")
    write("deep_header", b"[" * 100_000 + b"]" * 100_000)
    write("digits_header", b'{"format": ' + HUGE.encode() + b"}")
    results = root / "results"
    results.mkdir()
    ran = CliRunner().invoke(app, ["run", str(TESTS / "kernels" / "tiny_ops.py"), "-t", ONE,
                                   "--json"])
    run = json.loads(ran.stdout)
    (results / "good.json").write_text(json.dumps(run))
    for key in RESULT_KEYS:
        for name, value in TRACE_VALUES.items():
            (results / f"{key}.{name}.json").write_text(json.dumps({**run, key: value}))
    return {"root": root, "files": files, "tomls": tomls, "kernels": kernels, "traces": traces,
            "results": results, "gemm_topology": gemm_topology}


def _set_key(text: str, table: str, key: str, value: str) -> str:
    """`text` (a topology) with `[table] key = value`, replacing the key where it is."""
    lines, out, section, done = text.splitlines(), [], "", False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            if section == table and not done:
                out.append(f"{key} = {value}")
                done = True
            section = stripped[1:-1]
        if section == table and stripped.split("=")[0].strip() == key:
            continue
        out.append(line)
    if not done:
        if section != table:
            out.append(f"[{table}]")
        out.append(f"{key} = {value}")
    return "\n".join(out) + "\n"


def _expand(arg: str, corpus: dict, tmp: Path) -> str:
    if not (arg.startswith("{") and "}" in arg) and "{tmp}" not in arg:
        return arg
    if "{tmp}" in arg:
        return arg.replace("{tmp}", str(tmp))
    kind, *rest = arg.strip("{}").split(":")
    if kind == "toml":
        table, key, name = rest
        return str(corpus["tomls"] / f"{table}.{key}.{name}.toml")
    if kind == "file":
        name, ext = rest
        suffix = "txt" if name == "txt" else ext
        path = corpus["files"] / f"{name}.{suffix}"
        return str(path / "x" if name == "under_a_file" else path)
    if kind == "kernel":
        return str(corpus["kernels"] / f"{rest[0]}.py")
    if kind == "trace":
        return str(corpus["traces"] / f"{'.'.join(rest)}.trace")
    if kind == "results":
        return str(corpus["results"] / f"{rest[0]}.json")
    if kind == "gemm_topology":
        return corpus["gemm_topology"]
    raise AssertionError(arg)


def _check(code: int, out: str, err: str, expected: Case, tmp: Path) -> None:
    text = out + err
    assert "Traceback" not in text and "internal error" not in text, text[-2000:]
    assert code == expected.code, (code, err[:600])
    lines = err.splitlines()
    if code:
        assert lines, "an error exit without a message"
    for line in lines:
        if not line.startswith("running "):  # golden's progress
            assert line.startswith(("error: ", "interrupted")), line[:300]
        assert len(line) <= 1000, f"a {len(line):,}-character line: {line[:200]}"
    if expected.says:
        assert expected.says in lines[0], (expected.says, lines[0][:400])
    assert not list(tmp.rglob("*.tmp")), "a temporary file was left behind"


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_hostile_input(c, corpus, cli, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    args = [_expand(a, corpus, tmp_path) for a in c.args]
    code, out, err = cli(*args)
    _check(code, out, err, c, tmp_path)


def test_the_corpus_is_large_and_covers_every_class():
    assert len(CASES) >= 150
    prefixes = {c.id.split("-")[0] for c in CASES}
    assert prefixes == {"toml", "set", "topology", "costs", "run", "replay", "kernel",
                        "decode", "encode", "cli", "trace", "results"}
