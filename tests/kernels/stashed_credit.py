"""PE 0's east ring (two slots, see the test) takes three messages from PE 2 and one from
PE `far` (the other SIP), which comes `lag` cycles late. PE 0 starts receiving after
`wait` cycles, the far message first: its receive copies PE 2's first two chunks aside
(freeing their slots) and waits on, so PE 2's third send, which waited for a credit, takes
one freed by a copy of that receive, long before the receive itself ends. PE 2 then
computes for `tail` cycles: the run ends there, and its critical path goes back through
that credit and that copy."""


PARAMS = {"n": 64, "far": 4, "wait": 1000, "lag": 3000, "tail": 5000}


def setup(host, p):
    return dict(p)


def kernel(tl, n, far, wait, lag, tail):
    if tl.pid == far:
        tl.cycles(lag)
        tl.send(tl.full((n,), 1.0), to=0)
    elif tl.pid == 2:
        t = tl.full((n,), 2.0)
        for _ in range(3):
            tl.send(t, to=0)  # the third waits for a credit
        tl.cycles(tail)
    elif tl.pid == 0:
        tl.cycles(wait)
        tl.recv(frm=far, shape=(n,), dtype="f32")
        for _ in range(3):
            tl.recv(frm=2, shape=(n,), dtype="f32")


def reference(host, p):
    return {}


def outputs(host, args, p):
    return {}
