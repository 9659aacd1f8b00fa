"""The one exception tree of kernbench.

Everything a user can cause (a bad TOML value, an address outside the
topology, a kernel that raises or deadlocks) raises a subclass of
`KernbenchError`. The CLI catches that root once and prints one line per
problem; anything else is a bug in kernbench and keeps its traceback.

`exit_code` is 2 for bad input (configuration, addresses, usage) and 1 for a
run that went wrong (kernel error, deadlock, failed verification, golden
drift).
"""

from __future__ import annotations


def clip(value: object, width: int = 40) -> str:
    """`repr(value)` for a message, cut in the middle past `width` characters, so a hostile
    value (a number with 10^5 digits) still gives a one-line error; the count is of the
    value's own characters (a string's, not its quotes)."""
    text = repr(value)
    if len(text) <= width:
        return text
    count = len(value) if isinstance(value, str | bytes) else len(text)
    return f"{text[:width // 2]}…{text[-8:]} ({count:,} characters)"


#: the most of a kernel's own exception message an error shows
MESSAGE_CHARS = 500


def message_of(exc: BaseException) -> str:
    """A kernel's own exception's message for a one-line error: its lines joined, cut
    past `MESSAGE_CHARS`; one whose ``__str__`` raises says so (kernel code made it)."""
    try:
        text = str(exc)
    except Exception as failed:  # any exception: the class is the kernel's own
        return f"(its message could not be made: {type(failed).__name__})"
    text = " / ".join(line for line in text.splitlines() if line.strip())
    if len(text) > MESSAGE_CHARS:
        text = f"{text[:MESSAGE_CHARS]}… ({len(text):,} characters)"
    return text


#: The most characters of an error's message shown: past it (a path of 100,000 characters
#: given through the API), its head and tail, and how long it was
MESSAGE_MOST = 2000


class KernbenchError(Exception):
    """Root of every error a user can cause."""

    exit_code = 2

    def __str__(self) -> str:
        text = super().__str__()
        if len(text) <= MESSAGE_MOST:
            return text
        return f"{text[:MESSAGE_MOST - 200]}… ({len(text):,} characters) …{text[-150:]}"

    def lines(self) -> list[str]:
        """The message as the CLI prints it, one problem per line."""
        return [str(self)]


class ConfigError(KernbenchError):
    """A topology or cost-table file is unreadable or invalid.

    Holds every problem found in one file, each already phrased as
    ``FILE: key.path: what is wrong``. `str()` gives the first, with a count of
    the rest, so a single-line report stays a single line.
    """

    #: Problems `lines()` lists; past them, one line gives the count of the rest.
    SHOWN = 20

    def __init__(self, problems: list[str]):
        if not problems:
            raise ValueError("ConfigError needs at least one problem")
        self.problems = list(problems)
        more = len(self.problems) - 1
        text = self.problems[0]
        if more:
            text += f" (and {more:,} more problem{'s' if more > 1 else ''})"
        super().__init__(text)

    def lines(self) -> list[str]:
        """The first `SHOWN` problems, then how many more there are (a file of 800,000
        unknown keys is 21 lines, not 800,000)."""
        if len(self.problems) <= self.SHOWN + 1:
            return list(self.problems)
        rest = len(self.problems) - self.SHOWN
        where = self.problems[self.SHOWN].split(": ", 1)[0]  # the file (or --set) of the next
        return [*self.problems[:self.SHOWN], f"{where}: and {rest:,} more problems (the "
                                             f"first {self.SHOWN} are above)"]


class ArgumentError(KernbenchError):
    """A Python API call given an argument of a type (or shape) it does not take: the API's
    counterpart of a malformed command-line option. The message names the argument."""


class AddressError(KernbenchError):
    """An address or address field that the layout or topology does not allow."""


class NotInTopology(AddressError):
    """An address the layout allows that names a place this topology does not have (a rack
    beyond ``system.racks``, HBM beyond the slices, a reserved resource range)."""


class KernelError(KernbenchError):
    """A kernel, its parameters or its launch is wrong."""

    exit_code = 1


class ParamError(KernelError):
    """A kernel that cannot start: unknown, or given parameters its setup cannot run.

    Bad input, like a TOML error (exit 2), unlike a kernel failing mid-run.
    """

    exit_code = 2


class DeadlockError(KernelError):
    """Every live PE is blocked and no event is pending."""


class VerificationError(KernelError):
    """A kernel's outputs disagree with its numpy reference."""


class RaceError(KernelError):
    """Data races between PEs (`run --races`): one line each."""

    def __init__(self, races: list[str]):
        self.races = races
        super().__init__(races[0] if races else "data races")

    def lines(self) -> list[str]:
        return list(self.races)


class GoldenMismatch(KernbenchError):
    """A result differs from its stored golden."""

    exit_code = 1


class OutputError(KernbenchError):
    """An output file could not be written (a full disk, a quota, an I/O error)."""

    exit_code = 1


class SweepError(KernbenchError):
    """Points of a sweep failed (each row says why); the others completed."""

    exit_code = 1
