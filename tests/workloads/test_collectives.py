"""The collectives library (kernbench_cli/lang/collectives/) through the all_reduce kernel.

Inputs are small integers, so every algorithm's sums are exact: each run's verification
(PASS, max |err| 0) is the check against numpy. The wide matrix (every collective and
algorithm at sizes from 4 B to 4 MiB, on four topologies and three group shapes, and on
one-slot rings; 256 MiB once, timing-only) is marked slow; the fast suite runs each pair
once.
"""

from __future__ import annotations

from collections import Counter

import pytest

from kernbench_cli.lang import collectives as coll
from kernbench_cli.lang.alpha_beta import busbw_gbps, seconds
from tests.conftest import test_topology

PAIRS = [(call, algo) for call, algos in coll.ALGOS.items() for algo in algos]


def _exact(result) -> None:
    assert result.verified, [(c.name, c.max_abs_err) for c in result.checks]
    assert all(c.max_abs_err == 0 for c in result.checks)


@pytest.mark.parametrize(("call", "algo"), PAIRS)
def test_each_collective_and_algorithm_equals_numpy(run, call, algo):
    # 16 PEs over 2 cubes; 4,097 elements: uneven parts
    _exact(run("all_reduce", "default", (f"collective={call}", f"algo={algo}",
                                         "bytes=16388")))


@pytest.mark.parametrize("algo", ("ring", "direct", "hier"))
def test_all_reduce_over_racks_sips_and_cubes_at_once(run, algo):
    # 2 racks x 2 SIPs x 2 cubes x 4 PEs: one group of all, then one per SIP
    for group in ("all", "sip"):
        _exact(run("all_reduce", "racks", (f"algo={algo}", "bytes=4100", f"group={group}")))


@pytest.mark.slow
@pytest.mark.parametrize(("call", "algo"), PAIRS)
@pytest.mark.parametrize(("topology", "groups", "sizes"), [
    ("default", ("all", "cube"), (4, 100, 4100, 65548, 1048580)),
    ("default", ("all",), (4194308,)),
    ("default_1slot", ("all", "cube"), (4, 4100, 65548)),
    ("racks", ("all", "sip", "cube"), (4, 100, 4100, 65548)),
    ("two_sips", ("all", "sip"), (4, 65548)),
    ("sip", ("all",), (4100,)),
])
def test_every_size_group_and_ring_depth(run, call, algo, topology, groups, sizes):
    for group in groups:
        for size in sizes:
            _exact(run("all_reduce", topology, (f"collective={call}", f"algo={algo}",
                                                f"bytes={size}", f"group={group}")))


@pytest.mark.slow
@pytest.mark.parametrize("algo", ("ring", "hier"))
def test_all_reduce_over_the_128_pes_of_a_sip(run, algo):
    _exact(run("all_reduce", "sip", (f"algo={algo}", "bytes=131076")))


@pytest.mark.slow
def test_256_mib_streams_at_a_constant_cost_per_byte(run):
    """256 MiB through one-slot rings (timing-only, about 600,000 commands): no
    deadlock, and past the pipeline's fill every MiB costs exactly the same, so the
    step from 32 to 256 MiB is 8 times the step from 4 to 32 MiB, to the picosecond."""
    def latency_ps(mib):
        return run("all_reduce", "pair", (f"bytes={mib << 20}",),
                   timing_only=True).latency_ps

    small, mid, big = latency_ps(4), latency_ps(32), latency_ps(256)
    assert big - mid == 8 * (mid - small)


def test_ranks_follow_the_mesh():
    class Grid:  # default's shape: 2 cubes side by side, PEs 4 x 2
        num_pes = 16

        def num_programs(self, axis):
            return (8, 2, 1)[axis]

        def mesh(self, axis):
            return ((4, 2), (2, 1), (1, 1))[axis]

    # along row 0, back along row 1: each step one hop, the cycle closed
    assert coll.ranks(Grid()) == (0, 1, 2, 3, 7, 6, 5, 4, 8, 9, 10, 11, 15, 14, 13, 12)
    assert coll.part(10, 4, 0) == (0, 3) and coll.part(10, 4, 3) == (8, 2)


def test_alpha_beta_of_a_ring_of_two_is_the_stated_formula(amap):
    from kernbench_cli.address import load_address_map

    topo = load_address_map("tests/topologies/pair.toml").topology
    hbm = topo.hbm
    stream = hbm.bandwidth * (1 - hbm.refresh_time / hbm.refresh_interval)
    noc, setup, slot = topo.noc, topo.pe.dma.setup / 1e12, topo.pe.ipcq.slot_size
    latency = noc.latency / 1e12  # one hop: PE 1 is east of PE 0
    credits = 1 * slot / (2 * latency + slot / noc.bandwidth)  # a one-slot ring
    beta = 1 / stream + 1 / min(noc.bandwidth, credits) + 1 / noc.bandwidth + 3 * setup / slot
    alpha = latency + setup
    n, nbytes = 2, 1 << 20
    want = 2 * (n - 1) * (alpha + nbytes / n * beta)
    assert seconds(topo, "all_reduce", "ring", [0, 1], nbytes) == pytest.approx(want, rel=1e-12)
    assert busbw_gbps("all_reduce", n, nbytes, want) == pytest.approx(nbytes / want / 1e9)
    # a pipelined broadcast sends pieces of the one-slot ring's 4 KiB, or the whole
    # buffer when it is smaller: (n-1)(alpha + p beta) + N beta, p = min(piece, N); a
    # message shorter than a piece still takes its three transfers' setups, of which p
    # beta counts p / piece
    for nbytes, piece in ((4, 4), (4096, 4096), (1 << 20, 4096)):
        short = 3 * setup * (1 - piece / slot)
        want = (n - 1) * (alpha + piece * beta + short) + nbytes * beta
        # direct: one alpha, then the n-1 messages of the whole buffer, each its setups
        direct = alpha + (n - 1) * (nbytes * beta + 3 * setup * max(0, 1 - nbytes / slot))
        for call in ("broadcast", "reduce"):
            assert seconds(topo, call, "ring", [0, 1], nbytes) == pytest.approx(want, rel=1e-12)
            assert seconds(topo, call, "direct", [0, 1], nbytes) == pytest.approx(direct,
                                                                                 rel=1e-12)


def _dma_bytes(result) -> dict[int, Counter]:
    """Bytes each PE's DMA moved, by record kind (load, store, send, recv copy)."""
    moved: dict[int, Counter] = {}
    for record in result.oplog:
        if record[2] == "dma":
            moved.setdefault(record[1], Counter())[record[3]] += record[7]
    return moved


@pytest.mark.parametrize("algo", ("ring", "direct"))
def test_each_pe_dma_moves_the_algorithms_exact_bytes(run, amap, algo):
    """all_reduce of 4,097 f32 over default's 16 PEs (uneven parts: the rank at ring
    position 0 holds 257 elements, the others 256). With m_r the bytes of position r's
    part and N the buffer, the rank at position i moves, by its algorithm's schedule:

    - ring: loads N (each part once: n-1 to send in the reduce-scatter, its own to add
      at the last step), stores N (its reduced part, then n-1 gathered), sends
      (N - m_i) + (N - m_{i+1}), copies out of its ring (N - m_{i-1}) + (N - m_i);
    - direct: loads N - m_i + 2(n-1) m_i (every other part for its owner, its own part
      to add to each peer's and to send to each), stores and receives (n-1) m_i +
      N - m_i, sends (N - m_i) + (n-1) m_i.

    Fails if a piece is loaded twice (`Group.load` issuing its `tl.load` twice: every
    load count doubles), or a step is dropped or repeated."""
    count, item = 4097, 4
    result = run("all_reduce", "default", (f"algo={algo}", f"bytes={count * item}"))
    _exact(result)
    order = coll.ranks(coll.Grid(amap.topology))
    n, total = len(order), count * item
    m = [coll.part(count, n, r)[1] * item for r in range(n)]
    assert sorted(set(m)) == [1024, 1028]
    moved = _dma_bytes(result)
    for i, pid in enumerate(order):
        prev, mine, nxt = m[i - 1], m[i], m[(i + 1) % n]
        if algo == "ring":
            want = {"load": total, "store": total, "send": 2 * total - mine - nxt,
                    "recv copy": 2 * total - prev - mine}
        else:
            others = total - mine
            want = {"load": others + 2 * (n - 1) * mine, "store": (n - 1) * mine + others,
                    "send": others + (n - 1) * mine, "recv copy": (n - 1) * mine + others}
        assert moved[pid] == want, (pid, i)


def test_a_ring_all_reduce_of_two_takes_the_alpha_beta_time_and_its_last_step(run):
    """pair: 2 PEs one NoC hop apart, each direction of the link used by one PE and each
    HBM slice by its owner: nothing is shared, so the alpha-beta model
    (`alpha_beta.seconds`: (n-1) steps a phase, each alpha + m beta, beta = the DMA moving
    every byte out of HBM, over the link, out of the ring, with a setup per piece) holds
    but for what it does not list: the reduce-scatter's last step loads the rank's own
    part and stores the sum (2 more transfers of m, at the HBM's rate, a setup each piece).
    So, 1 MiB (m = 512 KiB, 4 KiB pieces: one-slot rings):

        lower = the model without setups (a setup can hide under the transfer before)
                + 2 m / HBM rate
        upper = the model + 2 (m / HBM rate + pieces x setup)

    The two differ by the setups alone (20.5 us of 98.2). Fails if every piece is loaded
    twice (`Group.load` issuing its `tl.load` twice: +N / HBM rate = 21.9 us, the run at
    115.3 us; it takes 93.4 us, the bounds 77.7 and 98.2), or if a step of either phase
    is left out (at least its send, ring copy and store of m: -27.9 us)."""
    import dataclasses

    from kernbench_cli.address import load_address_map
    from kernbench_cli.hw.network import hbm_stream_bandwidth

    topo = load_address_map(test_topology("pair")).topology
    nbytes, group = 1 << 20, [0, 1]
    m = nbytes // 2
    pieces = m // topo.pe.ipcq.slot_size  # one-slot rings: a piece is a slot
    hbm_s = m / hbm_stream_bandwidth(topo.hbm)
    setup_s = topo.pe.dma.setup / 1e12
    no_setup = dataclasses.replace(topo, pe=dataclasses.replace(
        topo.pe, dma=dataclasses.replace(topo.pe.dma, setup=0)))
    lower = seconds(no_setup, "all_reduce", "ring", group, nbytes) + 2 * hbm_s
    upper = seconds(topo, "all_reduce", "ring", group, nbytes) + 2 * (hbm_s + pieces * setup_s)
    # the setups: one in each alpha, 3 a piece in each step's beta, 2 a piece in the last
    assert upper - lower == pytest.approx((2 + 2 * 3 * pieces + 2 * pieces) * setup_s)
    result = run("all_reduce", "pair", (f"bytes={nbytes}",), timing_only=True)
    assert lower < result.latency_ps / 1e12 < upper



def test_a_ring_all_reduce_of_fewer_bytes_takes_no_longer(run):
    """With fewer elements than ranks most parts are empty, and a part's chain of 2(n-1)
    hops sets the time. A rank's load of its own contribution, issued as the exchange
    starts, hides under its wait for the part. It was issued after the part's receive, an
    HBM latency at every hop: on `sip` 4 bytes took 31.2 us, 64 bytes 29.5, 256 bytes 24.3."""
    four, sixty_four, two_five_six = (
        run("all_reduce", "sip", ("algo=ring", f"bytes={n}"), timing_only=True).latency_ps
        for n in (4, 64, 256))
    assert four < sixty_four <= two_five_six

def test_the_run_reports_nccl_tests_bandwidths(run):
    result = run("all_reduce", "default", ("bytes=262144",), timing_only=True)
    m = {k: v for k, (v, _) in result.metrics.items()}
    seconds_ = result.latency_ps / 1e12
    assert m["algbw_gbps"] == pytest.approx(262144 / seconds_ / 1e9)
    assert m["busbw_gbps"] == pytest.approx(m["algbw_gbps"] * 2 * 15 / 16)
    assert m["busbw_over_alpha_beta"] == pytest.approx(
        m["busbw_gbps"] / m["alpha_beta_busbw_gbps"])


@pytest.mark.parametrize(("case", "line", "message"), [
    ("algo", 15, "all_reduce: algo 'butterfly' is not one of ring, direct, tree, rhd, hier"),
    ("outside", 17, "all_reduce: PE 2 calls it but is not in the group"),
    ("irregular", 19, "hier needs a regular group: its cubes hold 7 and 8 members"),
    ("rhd", 21, "reduce_scatter: rhd needs a power-of-two group, this one has 15 PEs (ring "
                "or hier work on any group)"),
    ("float", 23, "a group is a non-empty list of PE indexes 0..15, got [0.0, 1]"),
    ("list", 25, "a group is a non-empty list of PE indexes 0..15, got [[0], 1]"),
    ("twice", 27, "a group names a PE twice"),
    ("range", 29, "a group is a non-empty list of PE indexes 0..15, got [0, 16]"),
    ("count", 31, "all_reduce: count = 1,000,000,000,000,000 f32 elements (3.55PiB) at "
                  "0x2000000000 is not a buffer of this PE's: tl.ref of 4000000000000000 B at "
                  "0x2000000000 runs past the end of 'buf' (256 B at 0x2000000000) by "
                  "3999999999999744 B"),
    ("count_broadcast", 33, "broadcast: count = 65 f32 elements (260 B) at 0x2000000000 is "
                            "not a buffer of this PE's: tl.ref of 260 B at 0x2000000000 runs "
                            "past the end of 'buf' (256 B at 0x2000000000) by 4 B"),
])
def test_misuse_is_a_kernel_error_at_the_calling_line(cli, case, line, message):
    """Each bad argument fails at the call, at once (a count far beyond the buffer too: it
    not cut into pieces until the watchdog stops the kernel)."""
    code, _, err = cli("run", "tests/kernels/coll_misuse.py", "-p", f"case={case}")
    assert code == 1
    pe = "pe=2" if case == "outside" else "pe=0"
    assert err == (f"error: tests/kernels/coll_misuse.py:{line}: PE (rack=0 sip=0 cube=0 "
                   f"{pe}) at t=0ns: ValueError: {message}\n")
