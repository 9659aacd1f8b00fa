"""Senders of one class whose receivers give their ring's credit back at other times.

Even PEs send a tile to their odd neighbour twice, over one-slot rings (`default_1slot`):
the second send needs the credit the first one's receive gives back. Between the two
sends a sender issues `work` dots and sends the last one's result. The receivers load a
block before they receive, `early` rows of 64 B at `pid % 4 == 1`, `late` rows at
`pid % 4 == 3`: the longer a receiver's PE_DMA is busy loading, the later it copies the
first chunk out of its slot and the later its credit comes back. Every receiver issues
`pre` dots before it receives (its receive is posted later: with more than the sender's
`work`, after the sender asks for its second credit), the late ones `tail` dots after
(their streams differ even when their loads do not).

Short loads: both credits are back before the sender's data is ready, and the sender
sees no difference. A long late one: its sender waits for the credit, the others do
not. Receives posted late: every sender waits, and wakes when its receiver's credit is
back.
"""

PARAMS = {"work": 8, "early": 32, "late": 64, "pre": 0, "tail": 0}


def setup(host, p):
    rows = max(32, p["early"], p["late"])
    x = host.random("x", (host.num_pes * rows, 32), "f16")
    return {"x": host.scatter("x", x, axis=0), **{k: p[k] for k in PARAMS}}


def kernel(tl, x, work, early, late, pre, tail):
    if tl.pid % 2 == 0:
        t = tl.load(tl.shard(x), (32, 32), "f16")
        tl.send(t, tl.pid + 1)
        for _ in range(work):
            acc = tl.dot(t, t, trans_b=True)
        tl.send(acc, tl.pid + 1)
        return
    s = tl.load(tl.shard(x), (32, 32), "f16")
    tl.load(tl.shard(x), (late if tl.pid % 4 == 3 else early, 32), "f16")
    for _ in range(pre):
        tl.dot(s, s, trans_b=True)
    t = tl.recv(tl.pid - 1, (32, 32), "f16")
    tl.recv(tl.pid - 1, (32, 32), "f32")
    for _ in range(tail if tl.pid % 4 == 3 else 0):
        tl.dot(t, t, trans_b=True)


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
