"""The op log as JSON lines: one object per command, addresses decoded.

Keys: the op-log fields (`seq, pid, engine, kind, issue_ps, start_ps, end_ps,
bytes, flops, src, dst`), `pe` (its coordinates), `line` (the kernel line that
issued the record's command: a composite's for its tiles, a send's for its
chunks; 0 where not known) and `src_text`/`dst_text` (the decoded addresses,
as `kernbench decode` prints them). Sorted keys, one
record per line, in op-log order: equal runs give equal files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from kernbench_cli.address.physaddr import AddressMap
from kernbench_cli.hw.oplog import OP_FIELDS
from kernbench_cli.report.chrome_trace import decoded, kernel_line
from kernbench_cli.sim.result import RunResult


def oplog_lines(result: RunResult, amap: AddressMap) -> Iterator[str]:
    cache: dict[int, str] = {}
    commands = result.oplog.command
    for record in result.oplog:
        op = dict(zip(OP_FIELDS, record, strict=True))
        op["pe"] = result.pe_labels[op["pid"]]
        op["line"] = kernel_line(result, op["pid"], commands[op["seq"]])
        op["src_text"] = decoded(amap, op["src"], cache)
        op["dst_text"] = decoded(amap, op["dst"], cache)
        yield json.dumps(op, sort_keys=True)
