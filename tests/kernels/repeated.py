"""A loop body run through `tl.repeat`, `layers` times: each PE scales its state by the
layer's weights (a region "mix"), passes it round a ring of every PE (region "ring": a
send east, a receive from the west), and multiplies it by the layer's matrix on the
scheduler (a composite from memory, stored to the layer's output). `mode` makes the
repetitions unlike in a way the key cannot see (`hidden`: cycles counted in a global),
or not copyable (`outside`: a tensor the body was not given; `held`: a dict of tensors
given by identity), or copyable with a tensor given in a list (`given`); or misuses it
(`misuse`: moves not a dict; `stray`: an address in no allocation); or deadlocks in the
last layer (`quit`: PE 0 leaves before it)."""

import ml_dtypes
import numpy as np

PARAMS = {"layers": 6, "n": 64, "mode": "alike"}
CHOICES = {"mode": ("alike", "hidden", "outside", "given", "held", "misuse", "stray", "quit")}
CALLS = []  # `hidden`: what the key cannot see
OUTSIDE = {}  # `outside`: each PE's tensor, not given to the body


def setup(host, p):
    n, layers = p["n"], []
    for i in range(p["layers"]):
        layers.append({"w": host.replicate(f"w{i}", host.random(f"w{i}", (1, n), "f32")),
                       "m": host.replicate(f"m{i}", host.random(f"m{i}", (n, n), "bf16")),
                       "out": host.empty(f"out{i}", (1, n), "f32")})
    x = host.random("x", (host.num_pes, n), "f32")
    return {"x": host.scatter("x", x, 0), "layers": layers, "n": n, "mode": p["mode"]}


def _layer(tl, layer, state, n, mode, extra):
    x = state.pop()
    with tl.region("mix"):
        y = x * tl.load(layer["w"], (1, n), "f32")
        if mode == "hidden":
            CALLS.append(None)
            tl.cycles(len(CALLS))
        if mode == "outside":
            y = y + OUTSIDE[tl.pid]
        if mode == "given":  # a tensor given in a list: a repetition is keyed by it
            y = y + extra[0]
    with tl.region("ring"):
        tl.send(y, to=(tl.pid + 1) % tl.num_pes)
        got = tl.recv(frm=(tl.pid - 1) % tl.num_pes, shape=(1, n), dtype="f32")
    h = tl.composite(a=got.to("bf16"),
                     b=tl.ref(layer["m"], shape=(n, n), dtype="bf16"), out_ptr=layer["out"],
                     out_dtype="f32")
    tl.wait(h)
    state.append(got)


def kernel(tl, x, layers, n, mode):
    CALLS.clear()
    state = [tl.load(tl.shard(x), (1, n), "f32")]
    extra = [tl.zeros((1, n))]
    held = {"extra": extra[0]}
    OUTSIDE[tl.pid] = extra[0]
    for i, layer in enumerate(layers):
        if mode == "quit" and tl.pid == 0 and i == len(layers) - 1:
            return
        moves = {"w": tl.shard(layer["w"]), "m": tl.shard(layer["m"]),
                 "out": tl.shard(layer["out"])}
        if mode == "stray":
            moves["w"] = 12345
        with tl.region(f"layer{i}"):
            if mode == "misuse":
                tl.repeat(_layer, list(moves.values()), state, n, mode, None)
            if mode == "held":
                tl.repeat(_layer, moves, state, n, mode, held)
            else:
                tl.repeat(_layer, moves, state, n, mode, extra if mode == "given" else None)
    tl.store(tl.shard(x), state.pop())


def reference(host, p):
    x, outs = host.inputs["x"], {}
    for i in range(p["layers"]):
        y = np.roll(x * host.inputs[f"w{i}"], 1, axis=0)  # f32, as PE_MATH multiplies
        a = y.astype(ml_dtypes.bfloat16).astype(np.float64)
        outs[f"out{i}"] = (a @ host.inputs[f"m{i}"].astype(np.float64)).astype(np.float32)
        x = y
    outs["x"] = x
    return outs


def outputs(host, args, p):
    out = {f"out{i}": host.gather(layer["out"], 0) for i, layer in enumerate(args["layers"])}
    out["x"] = host.gather(args["x"], 0)
    return out
