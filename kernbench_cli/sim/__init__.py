"""Build a system from config, launch a kernel, collect a result."""
