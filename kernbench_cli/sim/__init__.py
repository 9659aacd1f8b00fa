"""Build a system from config, run a kernel's two passes (or replay a trace), collect a result."""
