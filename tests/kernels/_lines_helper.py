"""A helper of `lines.py` in a file of its own: its commands take the kernel's line."""


def double(tl, t):
    return tl.maximum(t + t, t)
