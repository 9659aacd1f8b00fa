"""`hw.ratio.Ratio`, the fair-share solver's exact rational, against `fractions.Fraction`."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernbench_cli.hw.ratio import Ratio, approx, ceil_div, ratio, summed

ints = st.integers(-10**30, 10**30)
positive = st.integers(1, 10**30)
ratios = st.builds(Ratio, ints, positive)


def value(x: Ratio | int) -> Fraction:
    return x.fraction() if isinstance(x, Ratio) else Fraction(x)


def lowest(r: Ratio) -> bool:
    return r.d > 0 and math.gcd(r.n, r.d) == 1


@given(ratios, st.one_of(ratios, ints))
def test_arithmetic_and_order_equal_fractions_and_stay_in_lowest_terms(a, b):
    fa, fb = value(a), value(b)
    for got, want in ((a + b, fa + fb), (b + a, fb + fa), (a - b, fa - fb), (b - a, fb - fa),
                      (-a, -fa)):
        assert got.fraction() == want and lowest(got)
    assert ((a < b), (a <= b), (a > b), (a >= b), (a == b), (a != b)) == (
        (fa < fb), (fa <= fb), (fa > fb), (fa >= fb), (fa == fb), (fa != fb))
    assert hash(a) == hash(fa)


@given(ratios, ints, positive)
def test_scaling_division_and_ceiling_equal_fractions(a, k, m):
    assert (a * k).fraction() == a.fraction() * k and lowest(a * k)
    assert (k * a).fraction() == a.fraction() * k
    assert ratio(a, m).fraction() == a.fraction() / m and lowest(ratio(a, m))
    assert ratio(k, m).fraction() == Fraction(k, m)
    rate = Ratio(m, abs(k) + 1)
    assert ceil_div(a, rate) == math.ceil(a.fraction() / rate.fraction())
    assert ceil_div(k, rate) == math.ceil(Fraction(k) / rate.fraction())


@given(st.lists(st.one_of(ratios, st.builds(Ratio, ints, st.sampled_from([1, 3, 6, 10**9])))))
def test_a_sum_equals_the_fractions_sum_in_lowest_terms(terms):
    """`summed` (the fair-share meter's sum of rates): the sum `+` gives, term by term."""
    got = summed(terms)
    want = sum(terms, start=0)  # Ratio.__add__, reducing at every term
    assert (type(got), value(got)) == (type(want), sum(map(value, terms), start=Fraction(0)))
    assert got == want and (not terms or lowest(got))


@given(ratios, ratios, st.one_of(ints, ratios), positive)
def test_floats_are_correctly_rounded_so_they_order_ratios_weakly(a, b, n, m):
    """What `flows._fill` relies on to compare floats first."""
    assert float(a) == float(a.fraction())
    assert approx(n, m) == float(value(n) / m)
    if a < b:
        assert float(a) <= float(b)


def test_a_ratio_mixes_only_with_ints_and_ratios():
    with pytest.raises(TypeError, match="a Ratio meets a float: only ints and Ratios mix"):
        _ = Ratio(1, 3) < 0.5
    with pytest.raises(TypeError):
        _ = Ratio(1, 3) + Fraction(1, 3)
    with pytest.raises(TypeError):
        _ = Ratio(1, 3) * 0.5
    with pytest.raises(ZeroDivisionError, match=r"Ratio\(1, 0\): the denominator must be "
                                                "positive"):
        Ratio(1, 0)
