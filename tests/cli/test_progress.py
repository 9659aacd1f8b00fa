"""Big runs that are not blind: the estimate before the timing pass, and
`--progress` lines when stderr is not a terminal (as under the test runner)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernbench_cli.sim import watch as watching
from kernbench_cli.stream import Stream
from tests.conftest import test_topology


def _streams(*lengths: int) -> list[Stream]:
    streams = []
    for n in lengths:
        stream = Stream()
        stream.op.extend([0] * n)  # LOADs: n commands
        streams.append(stream)
    return streams


def _watch(functional: tuple[int, float, int] | None, *lengths: int,
           dedup: bool = False) -> watching.Watch:
    w = watching.Watch()
    w.phase, w.functional = "timing pass", functional
    w.timing = SimpleNamespace(program=SimpleNamespace(streams=_streams(*lengths)),
                               dedup=dedup)
    return w


def test_the_estimate_is_the_commands_at_the_functional_pass_rate_times_three():
    """150,000 commands on 2 of 3 PEs; the functional pass issued 100,000 in 20 s (5,000 a
    second): 150,000 / 5,000 x 3 = 90 s = 1.5 min. Below 100,000 commands: no line."""
    assert watching.estimate(_watch((100_000, 20.0, 0), 100_000, 50_000, 0)) == (
        "estimate: 150,000 commands to time on 2 PEs: about 1.5 min (3x the functional "
        "pass's 5,000 commands/s)")
    assert watching.estimate(_watch((100_000, 2.0, 0), 100_000)) == (
        "estimate: 100,000 commands to time on 1 PE: about 6 s (3x the functional pass's "
        "50,000 commands/s)")
    assert watching.estimate(_watch(None, 60_000, 60_000)) == (
        "estimate: 120,000 commands to time on 2 PEs (a replay: no functional pass to time "
        "it by)")
    assert watching.estimate(_watch((100_000, 2.0, 0), 100_000, dedup=True)) == (
        "estimate: 100,000 commands to time on 1 PE: about 6 s (3x the functional pass's "
        "50,000 commands/s; less where PEs time alike)")  # dedup: an upper bound
    assert watching.estimate(_watch(None, 60_000, 60_000, dedup=True)) == (
        "estimate: 120,000 commands to time on 2 PEs (a replay: no functional pass to time "
        "it by; less where PEs time alike)")
    # 90,000 of 100,000 commands copied (`tl.repeat`): the 10,000 run in 2 s set the rate
    assert watching.estimate(_watch((100_000, 2.0, 90_000), 100_000)) == (
        "estimate: 100,000 commands to time on 1 PE: about 60 s (3x the functional pass's "
        "5,000 commands/s run (90,000 more copied))")
    assert watching.estimate(_watch((1, 1.0, 0), 99_999)) is None
    assert watching.estimate(watching.Watch()) is None  # not yet timing


def test_the_watch_keeps_the_functional_pass_s_commands_and_time(monkeypatch):
    """The watch's clock is the test's: the functional pass begins at 10 s and the timing
    pass at 12.5 s, so the functional pass took 2.5 s."""
    now = [0.0]
    monkeypatch.setattr(watching, "time", SimpleNamespace(perf_counter=lambda: now[0]))
    seen = []
    w = watching.Watch(on_begin=lambda w: seen.append((w.phase, w.functional)))
    launch = SimpleNamespace(commands=0, copied=0)
    now[0] = 10.0
    w.begin("functional pass", launch)
    launch.commands, launch.copied = 1234, 1000
    now[0] = 12.5
    w.begin("timing pass", SimpleNamespace(procs=[], env=SimpleNamespace(now=0)))
    assert seen == [("functional pass", None), ("timing pass", (1234, 2.5, 1000))]


def test_a_big_run_prints_its_estimate_before_the_timing_pass(cli, monkeypatch):
    """gqa_attention on default issues 804 commands: with the threshold at 804 the run says
    so on stderr (and nothing else: no --progress); at 805, nothing."""
    monkeypatch.setattr(watching, "ESTIMATE_FROM", 804)
    code, out, err = cli("run", "gqa_attention", "--timing-only", "--json")
    assert code == 0 and out.startswith("{")
    assert re.fullmatch(r"gqa_attention on 16 PEs: estimate: 804 commands to time on 16 PEs: "
                        r"about \d+ s \(3x the functional pass's [\d,]+ commands/s; less where PEs "
                        r"time alike\)\n", err), err
    monkeypatch.setattr(watching, "ESTIMATE_FROM", 805)
    assert cli("run", "gqa_attention", "--timing-only", "--json")[2] == ""


SIZE = r"[\d.]+ (?:[KMGT]i)?B"
LINE = re.compile(
    r"(?P<what>[^:]+): (?:setting up|functional pass|"
    rf"setting up: (?:building the system|[\d,]+(?: of [\d,]+)? placements \({SIZE}\), "
    rf"inputs {SIZE}), [\d.]+ s|"
    r"timing pass(?: \(functional pass: [\d,]+ commands in [\d.]+ s\))?|"
    r"functional pass: [\d,]+ commands, [\d,]+ commands/s|"
    r"timing pass: t=\S+ simulated, [\d,]+ of [\d,]+ PEs done, [\d.]+ s|done in [\d.]+ s)")


def _progress(err: str, what: str) -> list[str]:
    """The progress lines of `err` about `what`, each checked to be a plain line of one of
    the shapes `--progress` prints; the phases in order, ticks left out."""
    assert "\r" not in err and "\x1b" not in err  # no spinner, no colour
    phases = []
    for line in err.splitlines():
        match = LINE.fullmatch(line)
        assert match and match["what"] == what, line
        if line != f"{what}: setting up" and (", " not in line or " (functional " in line):
            phases.append(re.sub(r"[\d.]+ s\)?$", "", line[len(what) + 2:]))
    return phases


def test_progress_prints_plain_lines_as_each_pass_begins_and_at_the_end(cli, monkeypatch):
    from kernbench_cli.cli import common

    monkeypatch.setattr(common, "PROGRESS_EVERY", 0.01)  # ticks too
    code, _, err = cli("run", "gqa_attention", "--progress")
    assert code == 0
    assert _progress(err, "gqa_attention on 16 PEs") == [
        "functional pass", "timing pass (functional pass: 804 commands in ", "done in "]
    assert re.search(r": (functional|timing) pass: .*, ", err)  # a tick while it ran
    assert cli("run", "gqa_attention")[2] == ""  # without --progress: nothing


def test_replay_and_golden_progress(cli, tmp_path):
    trace = tmp_path / "r.trace"
    assert cli("run", "gqa_attention", "--timing-only", "--record", str(trace))[0] == 0
    code, _, err = cli("replay", str(trace), "--progress")
    assert code == 0
    assert _progress(err, "replaying gqa_attention on 16 PEs") == ["timing pass", "done in "]
    code, _, err = cli("golden", "check", "--only", "gqa_attention.default", "--progress")
    assert code == 0
    first, *rest = err.splitlines()
    assert first == "running gqa_attention.default"
    assert _progress("\n".join(rest), "gqa_attention.default (1 of 1)") == [
        "functional pass", "timing pass (functional pass: 804 commands in ", "done in "]


@pytest.mark.parametrize("command", ["run", "replay", "golden"])
def test_progress_is_in_each_command_s_help(cli, command):
    args = ["golden", "check"] if command == "golden" else [command]
    out = cli(*args, "--help")[1]
    assert "--progress" in out


def test_a_failing_run_with_progress_says_no_done(cli):
    path = Path(__file__).parents[1] / "kernels" / "endless.py"
    code, _, err = cli("run", str(path), "-t", test_topology("one"), "--max-commands", "5000",
                       "--progress")
    assert code == 1
    lines = err.splitlines()
    assert not any(line.endswith(" s") and "done in" in line for line in lines)
    assert lines[-1].startswith("error: ")


def test_setup_says_what_it_placed_of_what_it_expects():
    """In setup the line counts the host's placements (of those the kernel expects, when it
    says), their bytes and the inputs' bytes; past the expected count, just the count."""
    host = SimpleNamespace(placements=1234, expected=5000, placed_bytes=3 << 29,
                           drawn_bytes=80)
    w = watching.Watch()
    assert w.text() == "setting up"  # before a run begins it (a replay never does)
    w.begin("setting up", None)
    assert re.fullmatch(r"setting up: building the system, \d+\.\d s", w.text()), w.text()
    w.host = host  # as run_kernel sets it once the system is built
    assert re.fullmatch(r"setting up: 1,234 of 5,000 placements \(1\.5 GiB\), inputs 80 B, "
                        r"\d+\.\d s", w.text()), w.text()
    host.placements, host.drawn_bytes = 5001, 12 << 10
    assert w.text().startswith("setting up: 5,001 placements (1.5 GiB), inputs 12.0 KiB, ")


def test_a_run_counts_its_setup_as_it_goes():
    """As the functional pass begins, the watch's host has counted every allocation it
    made, and llama_decode said beforehand how many it would make: the count it reached
    (on sip, two pipeline stages, so the last one's LM head is counted too)."""
    from kernbench_cli.address import load_address_map
    from kernbench_cli.sim.kernels import load_kernel, parse_params
    from kernbench_cli.sim.run import run_kernel

    class SetUp(Exception):
        pass

    def began(w):
        if w.phase == "functional pass":
            host = w.host
            raise SetUp(host.placements, host.expected, len(host.memory.allocations()))

    kernel = load_kernel("llama_decode")
    with pytest.raises(SetUp) as info:
        run_kernel(kernel, load_address_map("sip"),
                   parse_params(kernel, ["pp=2"], 128), timing_only=True,
                   watch=watching.Watch(on_begin=began))
    made, expected, allocations = info.value.args
    assert made == expected == allocations > 0


def test_progress_names_the_pass_and_how_far_it_got():
    from types import SimpleNamespace

    from kernbench_cli.sim.watch import Watch

    watch = Watch()
    assert watch.text() == "setting up"
    watch.begin("functional pass", SimpleNamespace(commands=12_345, copied=0))
    assert watch.text().startswith("functional pass: 12,345 commands, ")
    procs = [SimpleNamespace(done=True), SimpleNamespace(done=False)]
    watch.begin("timing pass", SimpleNamespace(procs=procs, env=SimpleNamespace(now=2_500_000)))
    assert watch.text().startswith("timing pass: t=2.5us simulated, 1 of 2 PEs done, ")
