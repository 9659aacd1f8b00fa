"""The `tl` kernel language and the functional pass: API (`tl.TL`), tensors, dtypes, memory
contents, and the one greenlet bridge. It emits each PE's command stream."""

#: Commands a run may issue before it is taken for an endless loop (`--max-commands`).
#: Here, not in `tl`, so the CLI reads it without importing numpy or simpy.
DEFAULT_MAX_COMMANDS = 100_000_000
