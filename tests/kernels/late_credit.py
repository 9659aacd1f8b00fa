"""PE 0's east ring (two slots, see the test) takes a message from PE `far` (the other
SIP: its credits go back over the SIP links) and two from PE 2 (the next cube: back over
UCIe). PE 0 waits `wait` cycles, so that PE 2's second send finds the ring full, then
takes the far message, then PE 2's two. The far slot's credit is given back first and is
back late; PE 2's first slot is given back second and is back sooner: PE 2 must resume at
the sooner one. PE 1 stores into PE 0's slice at `store` cycles, a transfer between the
two credit times on a link PE 2's messages cross (a fair-shared flow event)."""

import numpy as np

PARAMS = {"n": 64, "far": 4, "lag": 50, "wait": 300, "store": 1500}


def setup(host, p):
    y = np.zeros(p["n"], dtype=np.float32)
    return {"y": host.place("y", y, 0), **p}


def kernel(tl, y, n, far, lag, wait, store):
    if tl.pid == far:
        tl.send(tl.full((n,), 1.0), to=0)
    elif tl.pid == 2:
        tl.cycles(lag)  # after the far message
        t = tl.full((n,), 2.0)
        tl.send(t, to=0)
        tl.send(t, to=0)  # waits for a credit
        tl.cycles(1)
    elif tl.pid == 1:
        tl.cycles(store)
        tl.store(y, tl.full((n,), 3.0))
    elif tl.pid == 0:
        tl.cycles(wait)
        tl.recv(frm=far, shape=(n,), dtype="f32")
        tl.recv(frm=2, shape=(n,), dtype="f32")
        tl.recv(frm=2, shape=(n,), dtype="f32")


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
