"""Trajectory dedup (`hw.symmetry`, `hw.dedup`): results equal to the full pass, exactly.

Every case runs with `dedup=True` (the default) and with `dedup=False`, and must give the
same golden record (whose op-log digest covers every record), the same op log with
its CPU and scheduler slices, rings and resources, and the same critical path, races,
energy and invariants. The test kernels are built to break a soundness check; the
result must still be the full one.
"""

import json

import pytest

from kernbench_cli.golden import record as rec
from kernbench_cli.golden.cases import CASES
from kernbench_cli.golden.run import case_result
from kernbench_cli.hw import timing as timing_module
from tests.conftest import TESTS, test_topology


def _outputs(result) -> dict:
    log = result.oplog
    return {"record": rec.dumps(rec.make_record("case", result)),
            "oplog": list(log), "paths": [log.paths[v] if v >= 0 else None for v in log.via],
            "cpu": log.cpu, "scheduler": log.scheduler, "rings": log.rings,
            "critical": repr(result.critical_path), "races": repr(result.races),
            "energy": repr(result.energy), "invariants": repr(result.invariants),
            "engines": repr(result.engines), "high water": result.tcm_high_water}


@pytest.fixture
def passes(monkeypatch):
    """The `Timing` objects of the runs made while it is in use."""
    made = []
    run = timing_module.Timing.run

    def keep(self):
        made.append(self)
        run(self)

    monkeypatch.setattr(timing_module.Timing, "run", keep)
    return made


def _both(case) -> tuple[dict, dict]:
    return _outputs(case_result(case, dedup=True)), _outputs(case_result(case, dedup=False))


def _same(a: dict, b: dict) -> None:
    for key in a:
        assert a[key] == b[key], key


@pytest.mark.parametrize("name", ["gqa_attention.sip", "softmax.default"])
def test_small_golden_cases_are_the_same_both_ways(name):
    case = next(c for c in CASES if c.name == name)
    dedup, full = _both(case)
    _same(dedup, full)


def test_a_reduction_tree_is_timed_by_multicast(passes):
    """gqa on `sip`: its reduction tree's senders of one role send to receivers of other
    classes (each cube's role carried down), and a class's sends are multicast to them:
    14 classes of 128 PEs, in one pass. One class's sender finds every copy's ring full
    and waits on them all (`Multicast.waited`); each gives a credit back at one time, so
    the class does not split (it did when a copy without a credit split it: 15 classes,
    2 passes). The result is still the full pass's."""
    case = next(c for c in CASES if c.name == "gqa_attention.sip")
    dedup = _outputs(case_result(case, dedup=True))
    timing = passes[0]
    assert (len(timing.classes.members), len(timing.procs), timing.tries) == (14, 128, 1)
    assert timing.multicast.waited == 1 and timing.split == {}
    _same(dedup, _outputs(case_result(case, dedup=False)))


def _credits(monkeypatch, **params) -> tuple[list, object, dict, dict]:
    """`dedup_credits` (tests/kernels) on `default_1slot` with `params`, both ways, with
    classes worth timing however few PEs they save: (per classed pass, its chunks that
    waited on several rings and those whose copies' credits differed unseen, the last
    classed pass, both outputs)."""
    from kernbench_cli.address import load_address_map
    from kernbench_cli.hw import multicast, symmetry
    from kernbench_cli.sim.kernels import load_kernel, parse_params
    from kernbench_cli.sim.run import run_kernel

    monkeypatch.setattr(symmetry, "WORTH", 1)
    seen, made, splits, run = [], [], multicast.Multicast.splits, timing_module.Timing.run

    def counted(self, classes):
        seen.append((self.waited, self.hidden))
        return splits(self, classes)

    def keep(self):
        made.append(self)
        run(self)

    monkeypatch.setattr(multicast.Multicast, "splits", counted)
    monkeypatch.setattr(timing_module.Timing, "run", keep)
    module = load_kernel(str(TESTS / "kernels" / "dedup_credits.py"))
    amap = load_address_map(test_topology("default_1slot"), None, ())
    args = parse_params(module, [f"{k}={v}" for k, v in params.items()])
    both = [_outputs(run_kernel(module, amap, args, oplog=True, races=True, dedup=dedup))
            for dedup in (True, False)]
    return seen, made[0], both[0], both[1]


SENDERS, EARLY, LATE = list(range(0, 16, 2)), [1, 5, 9, 13], [3, 7, 11, 15]
SPLIT = [[0, 4, 8, 12], EARLY, [2, 6, 10, 14], LATE]  # senders by their receivers


def test_credits_that_differ_before_the_data_is_ready_do_not_split(monkeypatch):
    """Receivers loading 32 and 1,024 rows give the first send's credit back at other
    times, both before the sender's second send has its data: the senders stay one
    class, timed once (one chunk's copies differed unseen), and every output is the full
    pass's."""
    seen, timing, dedup, full = _credits(monkeypatch, late=1024)
    assert timing.classes.members == [SENDERS, EARLY, LATE] and seen == [(0, 1)]
    _same(dedup, full)


def test_a_credit_the_sender_waits_for_splits(monkeypatch):
    """With 4,096 rows the late receivers' credit is back after the data is ready (the
    early ones' before): senders to early and to late receivers split, and the result
    is the full pass's."""
    seen, timing, dedup, full = _credits(monkeypatch, late=4096)
    assert timing.classes.members == SPLIT and len(seen) == 2
    _same(dedup, full)


def test_senders_woken_at_one_time_by_every_ring_do_not_split(monkeypatch):
    """Every receiver posts its receive after 16 dots, after the sender asks for its
    second credit: every copy's ring is full then. Both loads are short, so the credits
    are back at one time (the late ones' streams differ after). The sender waits on
    every ring and wakes once for all: one class, one pass."""
    seen, timing, dedup, full = _credits(monkeypatch, late=64, pre=16, tail=1)
    assert timing.classes.members == [SENDERS, EARLY, LATE] and seen == [(1, 0)]
    _same(dedup, full)


@pytest.mark.parametrize(("early", "late"), [(4000, 4096), (4096, 4000)])
def test_senders_woken_at_other_times_split(monkeypatch, early, late):
    """Receives posted late after loads of other lengths: every ring is full when the
    sender asks, and one receiver's credit would wake it before the other's; the
    representative's own first (4,000 rows early), or the other copy's (it waits on).
    The senders split, and the result is the full pass's."""
    seen, timing, dedup, full = _credits(monkeypatch, early=early, late=late, pre=16)
    assert timing.classes.members == SPLIT and seen[0] == (1, 0) and len(seen) == 2
    _same(dedup, full)


def test_a_tie_out_of_the_members_order_splits():
    """Representatives 1 (a sender) and 0 (the receiver) used ring (0, E)'s credits at one
    time, 1 first. PE 0 and its sender 1 are in that order; PE 3 and its sender 2 are not
    (2 < 3): those two must be timed apart. A receiver taking chunks while its only sender
    puts one is no tie; members whose order agrees are none."""
    from types import SimpleNamespace

    from kernbench_cli.hw.dedup import tie_faults
    from kernbench_cli.hw.symmetry import Classes

    classes = Classes([0, 1, 1, 0])
    classes.rings = {(0, "E"): [1], (3, "E"): [2]}
    timing = SimpleNamespace(ties={(0, "E", 1, 0, "credits")})
    assert tie_faults(timing, classes) == {2, 3}
    timing.ties = {(0, "E", 1, 0, "chunks")}
    assert tie_faults(timing, classes) == set()
    agreeing = Classes([0, 1, 0, 1])  # PE 2's sender 3 is after it, as 1 is after 0
    agreeing.rings = {(0, "E"): [1], (2, "E"): [3]}
    timing.ties = {(0, "E", 1, 0, "credits")}
    assert tie_faults(timing, agreeing) == set()


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_every_golden_case_is_the_same_both_ways(case):
    dedup, full = _both(case)
    _same(dedup, full)


def _run(kernel: str, topology: str, dedup: bool):
    from kernbench_cli.address import load_address_map
    from kernbench_cli.sim.kernels import load_kernel, parse_params
    from kernbench_cli.sim.run import run_kernel

    module = load_kernel(str(TESTS / "kernels" / f"{kernel}.py"))
    amap = load_address_map(test_topology(topology), None, ())
    return run_kernel(module, amap, parse_params(module, []), oplog=True, races=True,
                      dedup=dedup)


def test_loads_that_meet_on_another_pes_slice_time_as_in_full():
    """The PEs' loads of PE 0's block meet on its HBM slice: whatever the classes, the
    result is the full pass's."""
    dedup = _outputs(_run("dedup_shared_slice", "tall", True))
    _same(dedup, _outputs(_run("dedup_shared_slice", "tall", False)))


def test_a_kernel_without_symmetry_is_timed_in_full(passes, monkeypatch):
    """Every stream differs: no class of more than one PE, one full pass; seen from the
    op and size columns alone, before any surroundings are looked at."""
    from kernbench_cli.hw import symmetry

    monkeypatch.setattr(symmetry, "_Surroundings", None)  # calling it would fail
    dedup = _outputs(_run("dedup_skewed", "tall", True))
    assert passes[0].tries == 1 and passes[0].classes is None
    _same(dedup, _outputs(_run("dedup_skewed", "tall", False)))


def _members(timing) -> list[list[int]]:
    return timing.classes.members if timing.classes is not None else []


def test_streams_that_differ_only_in_a_size_are_not_one_class(passes):
    """dedup_sizes on tall (16 PEs): every PE sums 256 elements, odd ones 64 (a view), with
    the same commands, producers, addresses and TCM: the `size` column alone tells them
    apart. Evens and odds are two classes, and the result is the full pass's. Fails if
    the stream key leaves out `size` (`_FIELDS = [name for name, _ in COLUMNS if name
    not in ("line", "size")]` in `hw/symmetry.py`: one class, every PE timed as summing
    256; the math-work invariant then stops the run)."""
    dedup = _outputs(_run("dedup_sizes", "tall", True))
    assert _members(passes[0]) == [list(range(0, 16, 2)), list(range(1, 16, 2))]
    _same(dedup, _outputs(_run("dedup_sizes", "tall", False)))


def test_senders_whose_routes_differ_only_in_their_links_are_not_one_class(passes):
    """dedup_links on cube_line (40 PEs): PE 8k sends to 8k+1 over a NoC hop, PE 8k+5 to
    8k+6 over a UCIe link of the same latency and a quarter of the bandwidth. Their
    streams are equal and their routes' latency, round trip and way back too: only the
    resources on the route differ. Five classes (the two kinds of sender, their
    receivers, the idle PEs), and the result is the full pass's. Fails if a path's
    signature leaves out its resources (`return (path[1], path[2], private)` in
    `hw.symmetry._path_sig`: three classes, the UCIe sends timed at the NoC's rate, the run
    192 ns short)."""
    dedup = _outputs(_run("dedup_links", "cube_line", True))
    senders = [[p for p in range(40) if p % 8 == r] for r in (0, 1, 5, 6)]
    idle = [p for p in range(40) if p % 8 not in (0, 1, 5, 6)]
    assert sorted(_members(passes[0])) == sorted([*senders, idle])
    _same(dedup, _outputs(_run("dedup_links", "cube_line", False)))


def test_a_path_signature_holds_its_latencies_and_every_resource_field():
    """`_path_sig` is what the classes compare of a path: latency, round trip, privacy and
    each resource's level, bandwidth, latency, DRAM page, tFAW and activates. Paths that
    differ in any one of these have different signatures. In the model a path's latency
    and round trip follow from its resources' latencies, and a level's links share one
    configuration, so dropping one of these alone cannot change a run (an equivalent
    mutant); this pins the signature as documented, so that it stays sound if a latency
    or a link ever stops following from the rest. Fails if `_path_sig` leaves out
    `path[1]` or `path[2]`, or `_cal_sig` any of its fields."""
    import dataclasses

    from kernbench_cli.hw.network import Calendar
    from kernbench_cli.hw.symmetry import _path_sig

    @dataclasses.dataclass
    class Cal:
        level: str = "hbm"
        bandwidth: int = 100
        latency_ps: int = 5
        page_bytes: int = 1024
        faw_ps: int = 15
        activates: int = 4

    def sig(path, private=True):
        return _path_sig(path, private, {})

    base = sig(((Cal(), Cal("noc")), 7, 9))
    assert sig(((Cal(), Cal("noc")), 7, 9)) == base
    assert sig(((Cal(), Cal("noc")), 8, 9)) != base  # latency
    assert sig(((Cal(), Cal("noc")), 7, 10)) != base  # round trip
    assert sig(((Cal(), Cal("noc")), 7, 9), private=False) != base
    assert sig(((Cal(),), 7, 9)) != base  # one resource fewer
    for field in ("level", "bandwidth", "latency_ps", "page_bytes", "faw_ps", "activates"):
        changed = dataclasses.replace(Cal(), **{field: "x" if field == "level" else 6})
        assert sig(((changed, Cal("noc")), 7, 9)) != base, field
    assert set(Calendar.__slots__) >= {f.name for f in dataclasses.fields(Cal)}


def test_the_cli_times_by_classes_unless_told_not_to(cli, monkeypatch):
    """Dedup is on by default; `--no-dedup` times every PE in full, with the same
    results."""
    made, run = [], timing_module.Timing.run

    def keep(self):
        made.append(self)
        run(self)

    monkeypatch.setattr(timing_module.Timing, "run", keep)
    code, out, _ = cli("run", "gqa_attention", "-t", "sip", "--json")
    code2, out2, _ = cli("run", "gqa_attention", "-t", "sip", "--json", "--no-dedup")
    assert code == code2 == 0
    assert [m.dedup for m in made] == [True, False] and len(made[0].classes.members) == 14
    assert json.loads(out) == json.loads(out2)


def test_a_class_books_its_energy_to_its_own_regions(cli):
    """Every PE runs the same composite, the even ones in region "a", the odd ones in "b":
    alike up to relocation, but a class's representative books its members' energy to
    its own regions, so PEs of different regions are never one class. Each region's
    energy equals `--no-dedup`'s (a and b alike), as does the whole run's JSON."""
    kernel = str(TESTS / "kernels" / "regions_by_parity.py")
    got = {}
    for flag in ((), ("--no-dedup",)):
        code, out, err = cli("run", kernel, "-t", "sip", "--timing-only", "--json", *flag)
        assert code == 0, err
        got[flag] = json.loads(out)
    regions = {r["name"]: r["energy_aj"] for r in got[()]["regions"]}
    assert regions["a"] == regions["b"] > 0
    assert got[()] == got[("--no-dedup",)]


def test_a_pe_that_names_no_region_beside_one_that_does(cli):
    """PE 0 loads inside a region, PE 1 runs a composite outside any (it names none): its
    tile moves are booked outside the regions, not an internal error."""
    code, out, err = cli("run", str(TESTS / "kernels" / "region_on_some_pes.py"),
                         "--timing-only", "--json")
    assert code == 0, err
    regions = {r["name"]: r["energy_aj"] for r in json.loads(out)["regions"]}
    assert regions["r"] > 0 and regions["(outside)"] > 0


def test_a_class_stuck_in_a_multicast_says_what_it_waits_for(monkeypatch, tmp_path):
    """Senders of one class whose receivers (two classes: their loads differ) never
    receive: the second send waits on every copy's full one-slot ring, and the deadlock
    names, for each sender, the ring it waits on, as a run without dedup does."""
    from kernbench_cli.address import load_address_map
    from kernbench_cli.errors import DeadlockError
    from kernbench_cli.hw import symmetry
    from kernbench_cli.sim.kernels import load_kernel, parse_params
    from kernbench_cli.sim.run import run_kernel

    monkeypatch.setattr(symmetry, "WORTH", 1)
    path = tmp_path / "unreceived.py"
    path.write_text(
        "PARAMS = {}\n\n"
        "def setup(host, p):\n"
        "    x = host.random('x', (host.num_pes * 64, 32), 'f16')\n"
        "    return {'x': host.scatter('x', x, axis=0)}\n\n"
        "def kernel(tl, x):\n"
        "    t = tl.load(tl.shard(x), (32 if tl.pid % 4 == 1 else 64, 32), 'f16')\n"
        "    if tl.pid % 2 == 0:\n"
        "        tl.send(t, tl.pid + 1)\n"
        "        tl.send(t, tl.pid + 1)\n\n"
        "def reference(host, p):\n    return {}\n\n"
        "def outputs(host, args, p):\n    return {}\n")
    module = load_kernel(str(path))
    amap = load_address_map(test_topology("default_1slot"), None, ())
    said = []
    for dedup in (True, False):
        with pytest.raises(DeadlockError) as err:
            run_kernel(module, amap, parse_params(module, []), timing_only=True, dedup=dedup)
        said.append(str(err.value))
    assert said[0] == said[1] == "deadlock: 8 of 16 PEs still wait and nothing is left to " \
        "run: " + "; ".join(
            f"PE (rack=0 sip=0 cube={p // 8} pe={p % 8}) at {path}:11 waits: send to PE "
            f"(rack=0 sip=0 cube={p // 8} pe={p % 8 + 1}): its W ring is full (since t=12ns)"
            for p in range(0, 16, 2))
