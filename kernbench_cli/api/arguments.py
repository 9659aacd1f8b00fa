"""The API's arguments, checked where they enter: each public function checks what it is
given before using it, so a wrong type is an `ArgumentError` naming the argument, the
value and what it takes, never a `TypeError` or `AttributeError` from deep inside."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernbench_cli.errors import ArgumentError, clip
from kernbench_cli.fileio import file_name


def _wrong(name: str, value: Any, takes: str) -> ArgumentError:
    got = "an empty one" if isinstance(value, str) and not value else type(value).__name__
    return ArgumentError(f"{name}={clip(value)}: expected {takes}, got {got}")


def path(value: Any, name: str, required: bool = False) -> Path | None:
    """`value` as a path: a str or an `os.PathLike` of one (None stays None unless
    `required`)."""
    text = name_or_path(value, name, "a path (a str or pathlib.Path)", required)
    return None if text is None else Path(text)


def output(value: Any, name: str, required: bool = False) -> Path | None:
    """`value` as the path of a file to write (`path`; one ending in '/' is refused, as
    naming a folder)."""
    text = name_or_path(value, name, "a path (a str or pathlib.Path)", required)
    return None if text is None else file_name(text, name)


def name_or_path(value: Any, name: str, takes: str, required: bool = False) -> str | None:
    """`value` as the CLI's NAME|PATH text: a non-empty str or `os.PathLike` of one (None
    stays None unless `required`); `takes` says what the argument takes, for the
    message."""
    if value is None and not required:
        return None
    if isinstance(value, str | os.PathLike):
        text = os.fspath(value)
        if isinstance(text, str) and text:
            return text
    raise _wrong(name, value, takes)


def flags(**values: Any) -> None:
    """Each value is a bool (True or False, not a truthy string)."""
    for name, value in values.items():
        if not isinstance(value, bool):
            raise _wrong(name, value, "True or False")


def callback(value: Any, name: str) -> None:
    """None or a function."""
    if value is not None and not callable(value):
        raise _wrong(name, value, "a function (or None)")


def watch(value: Any) -> None:
    """None or a `sim.watch.Watch`."""
    from kernbench_cli.sim.watch import Watch

    if value is not None and not isinstance(value, Watch):
        raise _wrong("watch", value, "a kernbench_cli.sim.watch.Watch (or None)")


def number(value: Any, name: str) -> None:
    """An int or a float (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _wrong(name, value, "a number")


def strings(value: Any, name: str, takes: str) -> tuple[str, ...] | None:
    """None, or a list or tuple of strings (a single string is refused: it would be taken
    for its characters)."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(
            isinstance(item, str) for item in value):
        raise _wrong(name, value, takes)
    return tuple(value)


def one_of(value: Any, name: str, types: tuple[type, ...], takes: str) -> None:
    """`value` is an instance of one of `types`; `takes` says what that is, for the
    message."""
    if not isinstance(value, types):
        raise _wrong(name, value, takes)
