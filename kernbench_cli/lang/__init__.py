"""The `tl` kernel language: API (`tl.TL`), tensors, dtypes, and the one greenlet bridge."""

#: Commands a run may issue before it is taken for an endless loop (`--max-commands`).
#: Here, not in `tl`, so the CLI reads it without importing numpy or simpy.
DEFAULT_MAX_COMMANDS = 100_000_000
