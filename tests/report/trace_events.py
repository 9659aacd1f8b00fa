"""A strict checker of the Trace Event format as kernbench writes it (and Perfetto reads it).

Perfetto turns a JSON time (microseconds) into integer nanoseconds by
rounding; the checks are made on those nanoseconds, as Perfetto sees them.
`problems` returns every violation as a line; an empty list is a pass.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

PHASES = {"X", "b", "e", "C", "M", "s", "f"}
METADATA = {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}


def _ns(value: float) -> int:
    return round(value * 1000)


def problems(trace: dict[str, Any]) -> list[str]:
    out: list[str] = []
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        return ["no traceEvents list"]
    tracks: dict[tuple[int, int], list[tuple[int, int, str]]] = defaultdict(list)
    named_pids, named_threads = set(), set()
    opened: dict[tuple, tuple[int, str]] = {}
    flows: dict[Any, dict[str, tuple]] = defaultdict(dict)
    for n, e in enumerate(events):
        ph = e.get("ph")
        where = f"event {n} ({ph} {e.get('name')!r})"
        if ph not in PHASES:
            out.append(f"{where}: unknown phase")
            continue
        if not isinstance(e.get("pid"), int) or not isinstance(e.get("name"), str):
            out.append(f"{where}: pid or name missing")
            continue
        if ph == "M":
            if e["name"] not in METADATA or not isinstance(e.get("args"), dict):
                out.append(f"{where}: bad metadata")
            elif e["name"] == "process_name":
                named_pids.add(e["pid"])
            elif e["name"] == "thread_name":
                named_threads.add((e["pid"], e.get("tid")))
            continue
        ts = e.get("ts")
        if not isinstance(ts, (int, float)) or ts < 0:
            out.append(f"{where}: bad ts {ts!r}")
            continue
        t = _ns(ts)
        if ph == "X":
            dur = e.get("dur")
            if not isinstance(dur, (int, float)) or dur < 0:
                out.append(f"{where}: bad dur {dur!r}")
                continue
            tracks[(e["pid"], e.get("tid"))].append((t, t + _ns(dur), e["name"]))
        elif ph == "b":
            key = (e["pid"], e.get("cat"), e.get("id"), e["name"])
            if key in opened:
                out.append(f"{where}: async id {e.get('id')} opened twice")
            opened[key] = (t, where)
        elif ph == "e":
            key = (e["pid"], e.get("cat"), e.get("id"), e["name"])
            begin = opened.pop(key, None)
            if begin is None:
                out.append(f"{where}: async end without a begin")
            elif t < begin[0]:
                out.append(f"{where}: async slice ends before it begins")
        elif ph == "C":
            args = e.get("args")
            if not isinstance(args, dict) or not args or \
                    not all(isinstance(v, (int, float)) for v in args.values()):
                out.append(f"{where}: a counter needs numeric args")
        else:  # s, f
            key = (e.get("cat"), e.get("id"))
            if ph in flows[key]:
                out.append(f"{where}: flow id {e.get('id')} has two '{ph}' ends")
            flows[key][ph] = (e["pid"], e.get("tid"), t, e.get("bp"), where)
    out.extend(f"{where}: async slice never ends" for _, where in opened.values())
    # slices on one track: disjoint or nested, never partly overlapping
    for (pid, tid), slices in tracks.items():
        if pid not in named_pids:
            out.append(f"pid {pid} has slices but no process_name")
        if (pid, tid) not in named_threads:
            out.append(f"track {pid}/{tid} has slices but no thread_name")
        slices.sort(key=lambda s: (s[0], -s[1]))
        stack: list[tuple[int, int, str]] = []
        for s in slices:
            while stack and stack[-1][1] <= s[0]:
                stack.pop()
            if stack and s[1] > stack[-1][1]:
                out.append(f"track {pid}/{tid}: {s[2]!r} [{s[0]}, {s[1]}] ns partly overlaps "
                           f"{stack[-1][2]!r} [{stack[-1][0]}, {stack[-1][1]}] ns")
            stack.append(s)
    # flows: both ends present, in time order, each inside a slice of its track
    for key, ends in flows.items():
        if set(ends) != {"s", "f"}:
            out.append(f"flow {key}: ends {sorted(ends)} (needs one 's' and one 'f')")
            continue
        if ends["f"][2] < ends["s"][2]:
            out.append(f"flow {key}: ends before it starts")
        if ends["f"][3] != "e":
            out.append(f"flow {key}: the 'f' end must bind to its enclosing slice (bp 'e')")
        for pid, tid, t, _, where in ends.values():
            if not any(a <= t <= b for a, b, _ in tracks.get((pid, tid), ())):
                out.append(f"{where}: no slice on track {pid}/{tid} at {t} ns")
    return out
