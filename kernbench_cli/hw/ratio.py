"""Exact rationals for the fair-share solver: the few operations it needs, made cheap.

`fractions.Fraction` is general (any `numbers.Rational`, floats, strings), and it
pays for that on every operation: ABC instance checks, a normalising constructor.
The solver (`hw.flows`) does millions of operations in a collective's timing
pass, on ints and its own rates only. `Ratio` takes exactly those: it is ``n/d``
in lowest terms with ``d > 0`` (so equal values have equal fields), and mixes
with ints, never with floats or Fractions (a TypeError, not a silent rounding).

Its float is ``n / d``, which CPython rounds correctly, so floats order Ratios
weakly: ``a < b`` gives ``float(a) <= float(b)``, and ``a == b`` gives equal
floats. The solver compares floats first and Ratios only on ties.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from math import gcd


class Ratio:
    """The rational ``n/d``, exact; immutable by convention (the solver never mutates one)."""

    __slots__ = ("d", "n")

    def __init__(self, n: int, d: int = 1):
        if d <= 0:
            raise ZeroDivisionError(f"Ratio({n}, {d}): the denominator must be positive")
        g = gcd(n, d)
        self.n, self.d = n // g, d // g

    def __repr__(self) -> str:
        return f"Ratio({self.n}, {self.d})"

    def __float__(self) -> float:
        return self.n / self.d

    def fraction(self) -> Fraction:
        """The same value as a `fractions.Fraction` (for checks independent of this type)."""
        return Fraction(self.n, self.d)

    def over(self, k: int) -> Ratio:
        """``self / k`` for a positive int `k`."""
        g = gcd(self.n, k)
        return _reduced(self.n // g, self.d * (k // g))

    def __mul__(self, k: int) -> Ratio:
        """``self * k`` for an int `k` (the solver scales rates by times and counts)."""
        if type(k) is not int:
            return NotImplemented
        g = gcd(k, self.d)
        return _reduced(self.n * (k // g), self.d // g)

    __rmul__ = __mul__

    def __add__(self, other: Ratio | int) -> Ratio:
        if type(other) is int:  # (n + k·d)/d is in lowest terms as n/d is
            return _reduced(self.n + other * self.d, self.d)
        if type(other) is not Ratio:
            return NotImplemented
        n, d = self.n * other.d + other.n * self.d, self.d * other.d
        g = gcd(n, d)
        return _reduced(n // g, d // g)

    __radd__ = __add__

    def __sub__(self, other: Ratio | int) -> Ratio:
        if type(other) is int:  # (n - k·d)/d is in lowest terms as n/d is
            return _reduced(self.n - other * self.d, self.d)
        if type(other) is not Ratio:
            return NotImplemented
        n, d = self.n * other.d - other.n * self.d, self.d * other.d
        g = gcd(n, d)
        return _reduced(n // g, d // g)

    def __rsub__(self, k: int) -> Ratio:
        if type(k) is not int:
            return NotImplemented
        return _reduced(k * self.d - self.n, self.d)

    def __neg__(self) -> Ratio:
        return _reduced(-self.n, self.d)

    def __eq__(self, other: object) -> bool:
        if type(other) is Ratio:
            return self.n == other.n and self.d == other.d
        if type(other) is int:
            return self.d == 1 and self.n == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.fraction())  # equal to an equal int's or Fraction's hash

    def __lt__(self, other: Ratio | int) -> bool:
        n, d = _parts(other)
        return self.n * d < n * self.d

    def __le__(self, other: Ratio | int) -> bool:
        n, d = _parts(other)
        return self.n * d <= n * self.d

    def __gt__(self, other: Ratio | int) -> bool:
        n, d = _parts(other)
        return self.n * d > n * self.d

    def __ge__(self, other: Ratio | int) -> bool:
        n, d = _parts(other)
        return self.n * d >= n * self.d


def ratio(n: Ratio | int, k: int) -> Ratio:
    """``n / k`` exactly, for an int or Ratio `n` and a positive int `k`."""
    return Ratio(n, k) if type(n) is int else n.over(k)


def approx(n: Ratio | int, k: int) -> float:
    """``float(ratio(n, k))``, correctly rounded, without making the Ratio."""
    return n / k if type(n) is int else n.n / (n.d * k)


def summed(rates: Iterable[Ratio]) -> Ratio | int:
    """The exact sum of `rates` (0 if there are none): the terms over their least common
    denominator, reduced once, at the end (`Ratio.__add__` reduces at every term)."""
    n, d, any_term = 0, 1, False
    for r in rates:
        any_term = True
        if r.d == d:
            n += r.n
        else:
            g = gcd(d, r.d)
            n, d = n * (r.d // g) + r.n * (d // g), d // g * r.d
    return Ratio(n, d) if any_term else 0


def ceil_div(x: Ratio | int, rate: Ratio) -> int:
    """The least int at or above ``x / rate`` (`rate` > 0)."""
    n, d = _parts(x)
    return -((-n * rate.d) // (d * rate.n))


def _parts(x: Ratio | int) -> tuple[int, int]:
    if type(x) is int:
        return x, 1
    if type(x) is Ratio:
        return x.n, x.d
    raise TypeError(f"a Ratio meets a {type(x).__name__}: only ints and Ratios mix")


def _reduced(n: int, d: int) -> Ratio:
    """A Ratio from `n`, `d` already in lowest terms, `d` > 0 (no gcd)."""
    r = object.__new__(Ratio)
    r.n, r.d = n, d
    return r
