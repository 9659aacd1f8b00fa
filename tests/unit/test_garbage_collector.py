"""The garbage collector kept out of the passes, and its state given back whatever happens."""

from __future__ import annotations

import gc
import gzip
import weakref

import pytest

from kernbench_cli import gc_control
from kernbench_cli.address import load_address_map
from kernbench_cli.config.loader import read_set_value, read_toml
from kernbench_cli.errors import KernbenchError
from kernbench_cli.fileio import parse_json
from kernbench_cli.hw.system import System
from kernbench_cli.hw.timing import Timing
from kernbench_cli.sim.kernels import load_kernel, parse_params
from kernbench_cli.sim.run import run_kernel
from kernbench_cli.sim.trace_file import read_trace


class Node:
    """A cycle's link: `Node().me = itself` is garbage only the collector frees."""


def _cycle() -> weakref.ref:
    node = Node()
    node.me = node
    return weakref.ref(node)


@pytest.fixture
def collections():
    """The generations of the collections that start while the test runs."""
    seen: list[int] = []

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(note)
    yield seen
    gc.callbacks.remove(note)


def test_paused_runs_no_collection_inside_and_one_young_one_after(collections):
    assert gc.isenabled()
    with gc_control.paused():
        assert not gc.isenabled()
        cycles = [_cycle() for _ in range(5_000)]  # a young collection every 700, normally
        assert collections == []
        assert all(ref() is not None for ref in cycles)
    assert gc.isenabled()
    assert collections == [0]
    assert all(ref() is None for ref in cycles)  # the cycles made inside are freed


def test_paused_without_collect_runs_none_after(collections):
    """A parser's pause: nothing collected inside or on the way out (its cycles wait for
    the next young collection)."""
    gc.collect()  # the counts at 0: no young collection falls due inside the test
    collections.clear()
    with gc_control.paused(collect=False):
        cycles = [_cycle() for _ in range(100)]
    assert gc.isenabled() and collections == []
    assert all(ref() is not None for ref in cycles)
    gc.collect(0)
    assert all(ref() is None for ref in cycles)


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_paused_gives_the_collector_back_on_errors(error):
    with pytest.raises(error), gc_control.paused():
        raise error
    assert gc.isenabled()


def test_paused_leaves_a_disabled_collector_disabled(collections):
    gc.disable()
    try:
        with gc_control.paused(), gc_control.paused():
            pass
        assert not gc.isenabled()
        assert collections == []
    finally:
        gc.enable()


def test_deferred_freezes_what_exists_and_raises_the_young_threshold():
    before = gc.get_threshold()
    with gc_control.deferred(100_000):
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (100_000, *before[1:])
        with gc_control.deferred(60_000):  # nested: the larger threshold holds
            assert gc.get_threshold()[0] == 100_000
        assert gc.get_threshold()[0] == 100_000
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_deferred_gives_the_collector_back_on_errors(error):
    before = gc.get_threshold()
    with pytest.raises(error), gc_control.deferred():
        raise error
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_deferred_still_frees_cyclic_garbage_inside():
    """A kernel's own cycles do not pile up during the functional pass: the collector
    still runs, once per `threshold` objects kept."""
    with gc_control.deferred(10_000):
        cycles = [_cycle() for _ in range(50_000)]
        freed = sum(ref() is None for ref in cycles)
    assert freed > 30_000


def test_deferred_leaves_the_callers_frozen_objects_frozen():
    """Unfrozen, the count would be 0 (and `deferred` would unfreeze on the way out); it may
    fall by a few meanwhile, frozen objects freed by another thread (pytest-xdist's)."""
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with gc_control.deferred():
            assert gc.get_freeze_count() > frozen // 2
        assert gc.get_freeze_count() > frozen // 2
    finally:
        gc.unfreeze()


@pytest.fixture(scope="module")
def gqa():
    """A timing-only gqa_attention run on the SIP (128 PEs): its address map and program."""
    kernel = load_kernel("gqa_attention")
    amap = load_address_map("sip")
    params = parse_params(kernel, ["model=llama3-8b"], amap.topology.num_pes)
    return amap, run_kernel(kernel, amap, params, timing_only=True).trace.program


def test_the_timing_pass_runs_no_collection_but_the_one_after(gqa, collections):
    """The full pass (dedup off: a pass that splits classes and times again collects the
    pass it drops, `Timing._reset`)."""
    amap, program = gqa
    timing = Timing(System(amap), program, dedup=False)
    collections.clear()  # those building the system
    timing.run()
    assert collections == [0]
    assert gc.isenabled()


def test_the_timing_pass_makes_no_cyclic_garbage(gqa):
    """What makes pausing the collector safe: nothing it would have freed accumulates. A
    change that leaves cycles behind per command (a SimPy process per command, say)
    fails here. The full pass: dedup's passes are of the same engine."""
    amap, program = gqa
    timing = Timing(System(amap), program, oplog=True, dedup=False)
    gc.collect()
    gc.disable()
    try:
        timing.run()
        assert gc.collect() == 0
    finally:
        gc.enable()


PROBE = '''
import gc

PARAMS = {}
SEEN = []


def setup(host, p):
    return {}


def kernel(tl):
    SEEN.append((gc.get_threshold()[0], gc.get_freeze_count() > 0, gc.isenabled()))
    tl.cycles(1)


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
'''


def test_the_functional_pass_defers_the_collector_and_gives_it_back(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text(PROBE)
    kernel = load_kernel(str(path))
    before = gc.get_threshold()
    run_kernel(kernel, load_address_map("default"), parse_params(kernel, []), timing_only=True)
    assert kernel.module.SEEN == [(gc_control.DEFERRED_THRESHOLD, True, True)] * 16  # each PE
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


class _Finalizer:
    """Cyclic garbage whose finalizer makes more of it and calls a few frames deep: a
    collection anywhere in a deep recursion runs it, and at the limit it fails. `again`
    ends the chain."""

    again = True

    def __del__(self):
        if _Finalizer.again:
            more = _Finalizer()
            more.me = more
        _frames(5)


def _frames(n: int) -> int:
    return _frames(n - 1) if n else 0


@pytest.mark.parametrize("kind", ["toml", "set", "json", "trace"])
def test_nesting_past_the_recursion_limit_prints_the_one_line_error_alone(
        kind, tmp_path, capfd):
    """Input nested past the recursion limit is the parser's one-line error, nothing else:
    no collection runs inside the parse (CI saw 'Exception ignored in sys.unraisablehook'
    lines from a finalizer run at the limit)."""
    deep = 5_000
    path = tmp_path / "deep"
    path.write_text({"toml": "a = " + "[" * deep + "]" * deep,
                     "json": "[" * deep + "]" * deep}.get(kind, ""))
    if kind == "trace":
        path.write_bytes(gzip.compress(b'{"format": ' + b"[" * deep + b"]" * deep + b"}"))
    _Finalizer.again = True
    garbage = _Finalizer()
    garbage.me = garbage
    del garbage
    threshold = gc.get_threshold()
    gc.set_threshold(1)  # a collection at every allocation: one at the limit, for sure
    try:
        if kind == "set":
            assert read_set_value("[" * deep) == "[" * deep
        else:
            with pytest.raises((KernbenchError, RecursionError)):
                {"toml": read_toml, "trace": read_trace,
                 "json": lambda p: parse_json(p.read_text(), str(p))}[kind](path)
    finally:
        gc.set_threshold(*threshold)
        _Finalizer.again = False
    gc.collect()
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("manager", ["deferred", "paused"])
def test_threads_in_the_collectors_blocks_at_once_leave_it_as_it_was(manager):
    """Two threads enter, the first leaves first: each saving and restoring its own left
    the threshold at 50,000 (the second saved the first's), or the collector on while the
    second's pass ran. The first in changes it, the last out puts it back."""
    import threading

    block = getattr(gc_control, manager)
    before = (gc.get_threshold(), gc.isenabled())
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    inside = []

    def first() -> None:
        with block():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second() -> None:
        first_in.wait(10)
        with block():
            second_in.set()
            first_out.wait(10)
            inside.append((gc.get_threshold(), gc.isenabled()))

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    changed = ((gc_control.DEFERRED_THRESHOLD, *before[0][1:]), True) \
        if manager == "deferred" else (before[0], False)
    assert inside == [changed] and (gc.get_threshold(), gc.isenabled()) == before
