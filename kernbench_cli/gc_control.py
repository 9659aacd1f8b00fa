"""The garbage collector kept out of the two passes (`paused`, `deferred`).

CPython frees most objects by reference counting; its cyclic collector runs
besides, every few hundred container objects allocated, and each run walks
the references of every object in the generations it collects. A run keeps
millions of long-lived containers (the system's per-PE blocks, the streams'
composites, the timing pass's calendars, flows and routes), so on a rack
every full collection walked them all, young collections paid a cache miss
per reference into that heap, and the collector took about a quarter of the
timing pass, more per command the more PEs (measured by
`benchmarks/pass_cpu.py`). Neither pass needs it: reference counting frees
what they drop.

The parsers of input files (TOML, JSON, a trace's header) run with it
paused too: input nested deep enough to reach the recursion limit must end
in the parser's RecursionError alone, and a collection there would run other
objects' finalizers at the limit, whose own RecursionErrors print "Exception
ignored" lines past the one-line error.

Both context managers restore the collector's state on the way out, whatever
ends the pass (an error, KeyboardInterrupt); they nest, and they leave alone
a collector the caller disabled or objects the caller froze. The collector is the
process's: threads running passes at once (the API from several threads) share one
change of each kind, made by the first in and undone by the last out (each thread
saving and restoring its own left the threshold at 50,000 for good when their blocks
interleaved).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: Objects allocated (and not freed) between young collections in `deferred`: CPython's
#: default is 700.
DEFERRED_THRESHOLD = 50_000

_LOCK = threading.Lock()
#: [blocks inside, whether the collector was on when the first entered] (`paused`)
_PAUSED: list = [0, False]
#: [blocks inside, the thresholds and whether it froze, as the first found them] (`deferred`)
_DEFERRED: list = [0, None, False]


@contextmanager
def paused(collect: bool = True) -> Iterator[None]:
    """No collection inside; one collection of the young generation on the way out (unless
    not `collect`: a parser's, which makes no cycles, costs a few microseconds less).

    For the timing pass, kernbench's own code, which makes no cyclic garbage
    (``tests/unit/test_garbage_collector.py`` checks it on a rack-shaped run): nothing the
    collector could find accumulates while it waits. With the collector off,
    every object the pass made is still in the young generation at the end,
    so the one young collection after it finds any cycle the pass left,
    walking only what the pass made (0.7 s on the 8,192-PE gqa case, against
    about 17 s of collections inside the pass before).
    """
    with _LOCK:
        if not _PAUSED[0]:
            _PAUSED[1] = gc.isenabled()
            gc.disable()
        _PAUSED[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _PAUSED[0] -= 1
            last = not _PAUSED[0] and _PAUSED[1]
            if last:
                gc.enable()
        if last and collect:
            gc.collect(0)


@contextmanager
def deferred(threshold: int = DEFERRED_THRESHOLD) -> Iterator[None]:
    """Collections rare and short inside: the objects from before are frozen (no collection
    walks them), and a young collection waits for `threshold` new objects, not 700.

    For the functional pass, where the kernel's own Python runs: a kernel may
    make cyclic garbage (an exception it keeps, a structure pointing at
    itself), so the collector stays on to free it, at most `threshold`
    objects late. Frozen objects return to the oldest generation on the way
    out; objects the caller froze (``gc.freeze``) stay frozen.
    """
    with _LOCK:
        if not _DEFERRED[0]:
            thresholds = gc.get_threshold()
            freeze = gc.isenabled() and gc.get_freeze_count() == 0
            _DEFERRED[1:] = [thresholds, freeze]
            if freeze:
                gc.freeze()
            gc.set_threshold(max(threshold, thresholds[0]), *thresholds[1:])
        _DEFERRED[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEFERRED[0] -= 1
            if not _DEFERRED[0]:
                thresholds, freeze = _DEFERRED[1:]
                gc.set_threshold(*thresholds)
                if freeze:
                    gc.unfreeze()
