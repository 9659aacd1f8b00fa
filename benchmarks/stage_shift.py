"""Would an exact pipeline-stage shortcut skip anything on `llama_decode`? A measurement,
not a speed: how far a middle stage's timing is a time shift of the stage before.

The shortcut the speed aims call for times one pipeline stage and shifts it for the
stages after, where that is exact: every record of stage k's i-th PE equal to the
record of stage k-1's i-th PE moved by one shift D, the same for every PE. This runs a
decode step with `pp` stages, timing only, with the op log, and compares each pair of
middle stages (neither the first, which takes no hand-off, nor the last, which runs the
LM head) record by record: per PE, the distinct shifts of its records (1 everywhere,
and one D across PEs, is what the shortcut needs), the share of records at that PE's
most common shift, and how many records start at the same time in both (work that
does not wait for the hand-off).

    python benchmarks/stage_shift.py [--topology sip --pp 4 --layers 8 --context 1024]
"""

from __future__ import annotations

import argparse
from collections import Counter

import kernbench_cli as kb
from kernbench_cli.models.decoder import Layout, run_of


def _records(oplog) -> dict[int, dict[tuple, tuple[int, int]]]:
    """Per PE, each record's (start, end) under its key: its command, engine, kind, bytes
    and how many such records of that command came before it (the op log appends a PE's
    records as its engines finish them, which is not one order for all PEs)."""
    out: dict[int, dict[tuple, tuple[int, int]]] = {}
    for r in range(len(oplog)):
        key = (oplog.command[r], oplog.engine[r], oplog.kind[r], oplog.amounts[2 * r])
        mine = out.setdefault(oplog.pid[r], {})
        n = 0
        while (*key, n) in mine:
            n += 1
        mine[(*key, n)] = (oplog.times[3 * r + 1], oplog.times[3 * r + 2])
    return out


def compare(records: dict, stages: list[list[int]], k: int) -> dict:
    """Stage k against stage k - 1, PE by PE (the i-th of each, which its peer hands on
    to): per PE, how many distinct shifts its records moved by."""
    shifts, total, modal, same_start, unlike = Counter(), 0, 0, 0, 0
    for before, after in zip(stages[k - 1], stages[k], strict=True):
        a, b = records.get(before, {}), records.get(after, {})
        if a.keys() != b.keys():
            unlike += 1
            continue
        moved = Counter((b[key][0] - a[key][0], b[key][1] - a[key][1]) for key in a)
        shifts[len(moved)] += 1
        total, modal = total + len(a), modal + moved.most_common(1)[0][1]
        same_start += sum(a[key][0] == b[key][0] for key in a)
    return {"unlike": unlike, "distinct_shifts": shifts, "records": total, "modal": modal,
            "same_start": same_start}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default="sip")
    parser.add_argument("--model", default="llama3-8b")
    parser.add_argument("--pp", type=int, default=4)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--context", type=int, default=1024)
    args = parser.parse_args()
    params = {"model": args.model, "pp": args.pp, "layers": args.layers,
              "context": args.context}
    result = kb.run("llama_decode", args.topology, params=params, timing_only=True,
                    oplog=True)
    topology = result.address_map.topology
    stages = Layout(topology, run_of(topology, dict(result.raw.params))).stages
    print(f"llama_decode {params} on {args.topology}: {result.commands:,} commands, "
          f"{len(stages[0])} PEs a stage")
    records = _records(result.raw.oplog)
    for k in range(2, args.pp - 1):
        c = compare(records, stages, k)
        print(f"stage {k - 1} -> {k}: {c['unlike']} PEs whose commands differ; distinct "
              f"shifts a PE {min(c['distinct_shifts'], default=0)} to "
              f"{max(c['distinct_shifts'], default=0)}; {c['modal']:,} of {c['records']:,} "
              f"records ({c['modal'] / max(c['records'], 1):.1%}) at their PE's most common "
              f"shift; {c['same_start']:,} start at the same time in both")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
