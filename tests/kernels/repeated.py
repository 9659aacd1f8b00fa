"""A loop body run through `tl.repeat`, `layers` times: each PE scales its state by the
layer's weights (a region "mix"), passes it round a ring of every PE (region "ring": a
send east, a receive from the west), and multiplies it by the layer's matrix on the
scheduler (a composite from memory, stored to the layer's output). `mode` makes the
repetitions unlike in a way the key cannot see (`hidden`: cycles counted in a global),
or in one it can (`signed`: cycles only for a -0.0 given in the last two layers, alike
to 0.0 by value), or not copyable (`outside`: a tensor the body was not given; `held`: a
dict of tensors given by identity; `keep`: a tensor it was given left in the state;
`mutate`: a dict it was given changed; `loop`: a list holding itself), or copyable with
a tensor given in a list (`given`); or visits layers 0, 1, 2, 1, 2, 3 loading from layer
1's weights at a fixed address too (`fixed`: the first two of a key share addresses); or
misuses it (`misuse`: moves not a dict; `stray`: an address in no allocation); or stops
in the last layer (`quit`: PE 0 leaves before it; `short`: PE 0 sends PE 1 a short
message first; `catch`: the kernel takes every Exception tl.repeat raises)."""

import contextlib
import math

import ml_dtypes
import numpy as np

PARAMS = {"layers": 6, "n": 64, "mode": "alike"}
CHOICES = {"mode": ("alike", "hidden", "signed", "outside", "given", "held", "keep", "mutate",
                    "loop", "fixed", "misuse", "stray", "quit", "short", "catch")}
FIXED = (0, 1, 2, 1, 2, 3)  # `fixed`: the layers visited
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
        if mode == "fixed":  # layer 1's weights, whichever layer this is
            y = y + tl.load(extra, (1, n), "f32") * 0.0
        if mode == "signed" and math.copysign(1.0, extra) < 0:
            tl.cycles(7)
        if mode == "mutate":  # counted in a dict given by identity: the key cannot see it
            extra["calls"] += 1
    with tl.region("ring"):
        tl.send(y, to=(tl.pid + 1) % tl.num_pes)
        got = tl.recv(frm=(tl.pid - 1) % tl.num_pes, shape=(1, n), dtype="f32")
    h = tl.composite(a=got.to("bf16"),
                     b=tl.ref(layer["m"], shape=(n, n), dtype="bf16"), out_ptr=layer["out"],
                     out_dtype="f32")
    tl.wait(h)
    state.append(got)
    if mode == "keep":
        state.append(extra[0])


def kernel(tl, x, layers, n, mode):
    CALLS.clear()
    state = [tl.load(tl.shard(x), (1, n), "f32")]
    extra = [tl.zeros((1, n))]
    OUTSIDE[tl.pid] = extra[0]
    given = {"held": {"extra": extra[0]}, "given": extra, "keep": extra, "mutate": {"calls": 0},
             "fixed": tl.shard(layers[1]["w"]), "loop": []}.get(mode)
    if mode == "loop":
        given.append(given)
    last = len(layers) - 1
    for i in FIXED if mode == "fixed" else range(len(layers)):
        if mode == "quit" and tl.pid == 0 and i == last:
            return
        if mode == "short" and tl.pid == 0 and i == last:
            tl.send(tl.zeros((1, 1)), to=1)
        if mode == "signed":
            given = -0.0 if i >= last - 1 else 0.0
        moves = {"w": tl.shard(layers[i]["w"]), "m": tl.shard(layers[i]["m"]),
                 "out": tl.shard(layers[i]["out"])}
        if mode == "stray":
            moves["w"] = 12345
        with tl.region(f"layer{i}"):
            if mode == "misuse":
                tl.repeat(_layer, list(moves.values()), state, n, mode, None)
            if mode == "catch":
                with contextlib.suppress(Exception):
                    tl.repeat(_layer, moves, state, n, mode, given)
            else:
                tl.repeat(_layer, moves, state, n, mode, given)
        if mode == "keep":
            state.pop()
    if mode == "mutate":
        tl.cycles(given["calls"])
    tl.store(tl.shard(x), state.pop())


def reference(host, p):
    x, outs = host.inputs["x"], {}
    for i in FIXED if p["mode"] == "fixed" else range(p["layers"]):
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
