"""The kernel watchdog (`--kernel-timeout`): a kernel's Python that issues no command for
the limit is stopped, even where the timeout lands in a finaliser."""

from __future__ import annotations

import pytest


def test_a_timeout_landing_in_a_finaliser_is_raised_after_it(monkeypatch):
    """Python drops an exception raised inside `__del__`: a loop that mostly runs
    finalisers (temporary tensors dropped each turn) must still be stopped, at the line
    after the finaliser where the limit passed. The watchdog's clock is the test's: the
    first finaliser moves it past the limit, then waits for the watchdog's next tick."""
    import time
    from types import SimpleNamespace

    from kernbench_cli.lang import watchdog as watching
    from tests.conftest import HANG_GUARD_S

    clock, ticks = [0.0], []
    monkeypatch.setattr(watching, "time", SimpleNamespace(monotonic=lambda: clock[0],
                                                         process_time=lambda: clock[0]))

    def progress() -> int:  # the watchdog reads it at each tick
        ticks.append(clock[0])
        return 0  # no command issued, ever

    class Finalised:
        def __del__(self):
            clock[0] += 1.0  # past the limit of 0.05 s
            seen, guard = len(ticks), time.monotonic() + HANG_GUARD_S
            while len(ticks) == seen and time.monotonic() < guard:
                pass  # the tick lands here, in the finaliser

    made = 0
    with pytest.raises(watching.KernelTimeout), watching.watchdog(progress, 0.05):
        while made < 1_000:
            made += 1
            Finalised()
    assert made == 1  # raised after the first finaliser, not dropped


def _spin_until(done, seconds: float) -> None:
    """Loop in Python until `done()` or `seconds` pass (a test that fails, not hangs)."""
    import time

    end = time.monotonic() + seconds
    while not done() and time.monotonic() < end:
        pass


def test_a_block_that_takes_the_timer_away_is_stopped_by_the_thread_behind_it(monkeypatch):
    """Ignoring SIGALRM, or stopping the timer, leaves the signal handler nothing to run
    on: the thread behind it raises `KernelTimeout` in the block once it is the grace
    past its limit."""
    import signal
    import time

    from kernbench_cli.lang import watchdog as watching

    monkeypatch.setattr(watching, "BACKSTOP_GRACE_S", 0.1)
    for take_away in (lambda: signal.signal(signal.SIGALRM, signal.SIG_IGN),
                      lambda: signal.setitimer(signal.ITIMER_REAL, 0)):
        start = time.monotonic()
        with pytest.raises(watching.KernelTimeout) as raised, watching.watchdog(None, 0.05):
            take_away()
            _spin_until(lambda: False, 10.0)
        assert raised.value.limit == 0.05
        assert 0.15 <= time.monotonic() - start < 5.0


def test_memory_running_low_stops_the_block_with_a_memory_error(monkeypatch):
    """A kernel issuing commands without end fills the machine long before the command
    limit: once what is left falls below the floor (4% of 24 GiB here), MemoryError."""
    from kernbench_cli.lang import watchdog as watching

    gib = 1 << 30
    left = [10 * gib]
    monkeypatch.setattr(watching, "memory_left", lambda: (left[0], 24 * gib))
    assert watching.memory_floor(10 * gib, 24 * gib) == 24 * gib // 25
    assert watching.memory_floor(gib, 24 * gib) == gib // 2  # little left at the start
    with pytest.raises(MemoryError, match=r"^900 MiB of 24,576 MiB left$"), \
            watching.watchdog(None, 0):  # no time limit: memory only
        _spin_until(lambda: False, 0.6)  # a few ticks with enough left: nothing raised
        left[0] = 900 << 20
        _spin_until(lambda: False, 10.0)


def test_a_block_inside_another_takes_the_timer_and_gives_it_back(monkeypatch):
    """A block inside another (a kernel's setup that calls `kb.run`) has the timer for
    its span, the outer one's clock stopped (nor does the outer thread behind the timer
    fire); the outer clock starts again when it ends, and the outer limit holds again."""
    import signal
    import time

    from kernbench_cli.lang import watchdog as watching

    monkeypatch.setattr(watching, "BACKSTOP_GRACE_S", 0.1)
    with pytest.raises(watching.KernelTimeout) as raised, watching.watchdog(None, 0.2):
        with watching.watchdog(None, 0):  # memory only, for longer than the outer limit
            _spin_until(lambda: False, 0.6)
        inner_ended = time.monotonic()
        assert signal.getitimer(signal.ITIMER_REAL)[1] == 0.05  # the outer block's ticks
        _spin_until(lambda: False, 10.0)
    assert raised.value.limit == 0.2
    assert 0.15 <= time.monotonic() - inner_ended < 5.0


def test_a_timer_of_the_callers_waits_for_the_block_and_runs_on_after():
    """`signal.alarm` or pytest-timeout's timer set before a watched block (`kb.run`) was
    left disarmed after it: a timeout the caller relied on was gone. What was left of it
    runs on after the block; one that fell due inside fires at once after."""
    import signal
    import time

    from kernbench_cli.lang import watchdog as watching

    fired: list[float] = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(time.monotonic()))
    try:
        signal.setitimer(signal.ITIMER_REAL, 5.0)
        with watching.watchdog(None, 1.0):
            _spin_until(lambda: False, 0.3)
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        assert 4.0 < left < 4.75 and not fired
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with watching.watchdog(None, 1.0):
            _spin_until(lambda: False, 0.3)
        ended = time.monotonic()
        _spin_until(lambda: bool(fired), 2.0)
        assert fired and fired[0] - ended < 0.5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_callers_timer_due_in_a_kernels_hook_raises_in_the_caller(tmp_path):
    """The caller's timer fell due while `setup` ran: re-armed as the hook's watch ended,
    its handler ran inside kernbench's handling of the hook's errors, and what it raised
    came back as the kernel's error (`KernelError ... in setup`). It runs after the API
    call now, and its exception reaches the caller as raised."""
    import signal

    import kernbench_cli as kb

    class Budget(Exception):
        pass

    def over(*_):
        raise Budget("the caller's budget")

    kernel = tmp_path / "slow_setup.py"
    kernel.write_text("import time\nPARAMS = {}\n\ndef setup(host, p):\n"
                      "    end = time.monotonic() + 0.6\n    while time.monotonic() < end:\n"
                      "        pass\n    return {}\n\ndef kernel(tl):\n    tl.cycles(1)\n\n"
                      "def reference(host, p):\n    return {}\n\n"
                      "def outputs(host, args, p):\n    return {}\n")
    kb.load_kernel(kernel)  # imports made before the timer is set
    previous = signal.signal(signal.SIGALRM, over)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)  # setup runs from some 0.1 s to 0.7 s
        with pytest.raises(Budget, match="the caller's budget"):
            kb.run(kernel, timing_only=True)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(("cgroup", "files", "expected"), [
    ("0::/\n", {}, (6, 24)),  # no limit set: the machine's
    ("0::/job\n", {"/sys/fs/cgroup/job/memory.max": "8388608\n",
                   "/sys/fs/cgroup/job/memory.current": "5242880\n"}, (3, 8)),
    ("0::/job\n", {"/sys/fs/cgroup/job/memory.max": "max\n",
                   "/sys/fs/cgroup/job/memory.current": "5242880\n"}, (6, 24)),
    ("4:memory:/job\n0::/\n", {"/sys/fs/cgroup/memory/job/memory.limit_in_bytes": "8388608\n",
                                "/sys/fs/cgroup/memory/job/memory.usage_in_bytes": "7340032\n"},
     (1, 8)),
])
def test_the_memory_left_is_the_machines_or_the_cgroups(monkeypatch, cgroup, files, expected):
    """MemAvailable of the machine, or less where the process's memory cgroup (v2 or v1)
    sets a limit: its limit less its use (MiB here)."""
    from kernbench_cli.lang import watchdog as watching

    mib = 1 << 20
    files = {"/proc/meminfo": f"MemTotal: {24 * 1024} kB\nMemFree: 1 kB\n"
                              f"MemAvailable: {6 * 1024} kB\n",
             "/proc/self/cgroup": cgroup, **files}
    monkeypatch.setattr(watching, "_read", files.get)
    left, total = watching.memory_left()
    assert (left / mib, total / mib) == expected


def test_a_watched_block_ends_under_a_profiler():
    """A kernel writer may run kernbench under cProfile: a watched block (memory only, and
    with a limit) must end there as it does without (it once hung at its end, the thread
    behind the timer having cleared its pending exception). In a process of its own, so
    that a hang fails the test instead of the suite."""
    import subprocess
    import sys

    code = ("import cProfile, time\n"
            "from kernbench_cli.lang.watchdog import watchdog\n"
            "profile = cProfile.Profile()\n"
            "profile.enable()\n"
            "for limit in (0, 30):\n"
            "    with watchdog(None, limit):\n"
            "        end = time.monotonic() + 0.6\n"
            "        while time.monotonic() < end:\n"
            "            pass\n"
            "profile.disable()\n"
            "print('ended')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "ended\n", "")


def test_the_thread_behind_the_timer_raises_again_a_grace_later_not_each_tick(monkeypatch):
    """A timeout taken (a kernel's ``except BaseException``) is raised again, once the
    grace has passed again: not at each tick, which could land a second one in the
    handling of the first."""
    import signal
    import time

    from kernbench_cli.lang import watchdog as watching

    monkeypatch.setattr(watching, "BACKSTOP_GRACE_S", 0.3)
    raised: list[float] = []
    with pytest.raises(watching.KernelTimeout), watching.watchdog(None, 0.02):
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        try:
            _spin_until(lambda: False, 10.0)
        except watching.KernelTimeout:
            raised.append(time.monotonic())
        _spin_until(lambda: False, 10.0)
    raised.append(time.monotonic())
    assert len(raised) == 2 and 0.25 <= raised[1] - raised[0] < 5.0


@pytest.mark.parametrize("where", ["setting up", "taking down"])
def test_a_stop_mid_way_through_the_watchs_steps_leaves_nothing_behind(monkeypatch, where):
    """A Ctrl-C landing between the watch's steps (here: as it arms or disarms the interval
    timer) skipped the rest: kernbench's watch stayed on SIGALRM with its timer ticking,
    and raised `KernelTimeout` into the caller's code ever after. The stop is taken once
    the steps are done, and everything is as it was."""
    import os
    import signal

    from kernbench_cli.lang import watchdog as watching

    before = (signal.getsignal(signal.SIGALRM), signal.getitimer(signal.ITIMER_REAL))
    real = signal.setitimer
    sent = []

    def setitimer(which, seconds, interval=0.0):
        if (seconds > 0) == (where == "setting up") and not sent:
            sent.append(signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)  # taken at the next bytecode
            _spin_until(lambda: False, 0.01)
        return real(which, seconds, interval)

    # Python's own Ctrl-C handler: a run in the background of a script has it ignored
    interrupts = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        monkeypatch.setattr(signal, "setitimer", setitimer)
        with pytest.raises(KeyboardInterrupt), watching.watchdog(None, 1.0):
            _spin_until(lambda: False, 0.05)
        monkeypatch.undo()
    finally:
        signal.signal(signal.SIGINT, interrupts)
    handler, (left, interval) = signal.getsignal(signal.SIGALRM), \
        signal.getitimer(signal.ITIMER_REAL)
    assert sent and (handler, interval) == (before[0], before[1][1])
    assert before[1][0] - 5 < left <= before[1][0]  # the caller's own (pytest-timeout's), or 0


def test_a_process_stopped_and_continued_is_not_a_block_without_progress(monkeypatch):
    """Ctrl-Z then `fg` (or a debugger, a frozen cgroup) in a slow `reference`: the time
    the process did not run was counted as time without progress, and a run whose hook
    had its limit of CPU to spare ended as an endless loop. A gap of more than `PAUSED_S`
    between two looks (due every quarter second) is not counted."""
    from kernbench_cli.lang import watchdog

    now, cpu = [100.0], [0.0]
    monkeypatch.setattr(watchdog.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(watchdog.time, "process_time", lambda: cpu[0])
    watch = watchdog._Watch(lambda: 0, 3.0)
    looks = []
    for t, ran in ((100.25, 0.25), (100.5, 0.25), (106.5, 0.0), (106.75, 0.25), (108.0, 1.25),
                   (109.75, 1.75)):  # stopped from 100.5 to 106.5: no CPU time then
        now[0], cpu[0] = t, cpu[0] + ran
        looks.append(watch.stalled())
    assert looks == [0.25, 0.5, 0.5, 0.75, 2.0, 3.75]  # 108.0: 1.25 s on, a look late


def test_one_long_call_holding_the_gil_is_no_pause(monkeypatch):
    """A gap between two looks in which the process ran (one C call of seconds that holds
    the GIL, looped: `sum(range(10**8))`) is time without progress: taking it off as a
    pause made such a loop unstoppable."""
    from kernbench_cli.lang import watchdog

    now, cpu = [100.0], [0.0]
    monkeypatch.setattr(watchdog.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(watchdog.time, "process_time", lambda: cpu[0])
    watch = watchdog._Watch(lambda: 0, 3.0)
    for _ in range(3):  # three calls of 2.5 s each, CPU bound
        now[0], cpu[0] = now[0] + 2.5, cpu[0] + 2.5
        last = watch.stalled()
    assert last == 7.5
