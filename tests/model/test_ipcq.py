"""IPCQ send/recv between neighbours: values, chunking, credits, addresses."""

from __future__ import annotations

import pytest

from kernbench_cli.address import load_address_map
from tests.conftest import test_topology


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_ping_pong_over_a_one_slot_ring_in_chunks(run, dtype):
    result = run("ping_pong", "pair", (f"dtype={dtype}",))
    assert result.verified
    sends = [r for r in result.oplog if r[3] == "send"]
    n_bytes = 3000 * (4 if dtype == "f32" else 2)
    chunks = -(-n_bytes // 4096)
    assert len(sends) == 2 * chunks  # there and back, one DMA per slot-sized chunk
    assert sum(r[7] for r in sends) == 2 * n_bytes


def test_neighbours_in_different_cubes_talk_over_ucie(run):
    result = run("ping_pong", "two_cubes")
    assert result.verified
    assert result.engines["ucie"].ops == (3, 3)  # one link each way, 12000 B = 3 chunks
    assert "noc" not in result.engines


def test_sends_land_in_the_receivers_ring_slots(run):
    result = run("ping_pong", "pair", ("n=256",))
    amap = load_address_map(test_topology("pair"))
    there, back = (amap.decode(r[10]) for r in result.oplog if r[3] == "send")
    assert (there.pe, there.component, there.direction, there.slot) == (1, "ipcq", "W", 0)
    assert (back.pe, back.component, back.direction, back.slot) == (0, "ipcq", "E", 0)
    assert there.text == "IPCQ ring rack=0 sip=0 cube=0 pe=1 dir=W slot=0 offset=0x0"


def test_a_full_ring_makes_the_sender_wait(run):
    """One slot: each send after the first waits for the receiver's next recv."""
    tight = run("backpressure", "pair", ("count=4", "gap=1000"))
    roomy = run("backpressure", "default", ("count=4", "gap=1000"))  # 4 slots
    # PE 1 issues receive k after 1000 cycles and its 4 ns issue; its PE_DMA copies the 1 KiB
    # out of the slot (20 ns setup + 16 ns at 64 GB/s), so receive k ends at k x 1040 ns and
    # the slot's credit reaches PE 0 one NoC hop (2 ns) later: 1042, 2082, 3122 ns. PE 0
    # issues sends 2, 3, 4 at 12, 1046, 2086 ns (4 ns after a 4 ns load, then 4 ns after each
    # credit) and each waits for the one slot to come back.
    assert tight.cpu_stall_ps[0] == ((1042 - 12) + (2082 - 1046) + (3122 - 2086)) * 1000
    assert roomy.cpu_stall_ps[0] == 0
    assert tight.latency_ps == roomy.latency_ps == 4 * 1040_000  # the receiver sets the pace


@pytest.mark.parametrize("sharing", ["fair", "circuit"])
def test_a_waiting_sender_resumes_at_the_credit_back_soonest(run, sharing):
    """Two slots in PE 0's east ring, a far sender (PE 4, the other SIP) and a near one (PE
    2, the next cube); PE 2's second send waits for a credit. PE 0 frees the far slot
    first, but its credit is back at PE 4 only after two SIP links (1 us); it frees PE 2's
    first slot next, and that credit is back at PE 2 after UCIe and a NoC hop (12 ns),
    sooner. PE 2 resumes then: its second send starts at that copy's end + 12 ns, and PE 0's
    last receive ends 60 ns later (20 ns setup + 256 B at the NoC's 64 GB/s in 4 ns + 12 ns
    of latency, then PE 0's copy: 20 ns setup + 4 ns). A sender that slept until the far
    credit's time and took the sooner credit in the past would start a flow before one
    fair sharing had solved, and in circuit mode hold PE 2's CPU and PE 0's receive 1 us
    late."""
    result = run("late_credit", "two_sips", sets=("pe.ipcq.slots=2",
                                                  f"network.sharing={sharing}"))
    far_copy, first_copy, last_copy = (r for r in result.oplog
                                       if r[1] == 0 and r[3] == "recv copy")
    _, second = (r for r in result.oplog if r[1] == 2 and r[3] == "send")
    assert far_copy[6] < first_copy[6] < far_copy[6] + 1_000_000 - 12_000  # as described
    back = first_copy[6] + 12_000
    assert second[5] == back
    assert result.cpu_stall_ps[2] == back - second[4]  # PE 2's CPU waited until then
    assert last_copy[6] == back + 60_000
    receives = [r for r in result.oplog if r[1] == 0 and r[3] == "recv"]
    assert receives[-1][6] == back + 60_000


def test_messages_never_received_are_an_error(cli):
    from pathlib import Path

    path = Path(__file__).parents[1] / "kernels" / "unreceived.py"
    code, _, err = cli("run", str(path), "-t", test_topology("pair"))
    assert code == 1
    assert err == (f"error: {path}: the kernel ended with messages never received: PE (rack=0 "
                   "sip=0 cube=0 pe=0) ring E: 1 chunk from PE (rack=0 sip=0 cube=0 pe=1)\n")
