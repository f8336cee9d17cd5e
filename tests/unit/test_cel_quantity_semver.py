"""The pure Quantity and Semver types: apimachinery's parsing rules and blang/semver's precedence."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.quantity import INT64_MAX, Quantity, QuantityError
from dra_driver.tools.cel.semver import Semver, SemverError


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("0", Fraction(0), id="zero"),
        pytest.param("1", Fraction(1), id="plain"),
        pytest.param("+5", Fraction(5), id="plus-sign"),
        pytest.param("-5", Fraction(-5), id="minus-sign"),
        pytest.param("1.5", Fraction(3, 2), id="decimal"),
        pytest.param("1.", Fraction(1), id="trailing-dot-allowed"),
        pytest.param(".5", Fraction(1, 2), id="leading-dot"),
        pytest.param("007", Fraction(7), id="leading-zeros"),
        pytest.param("500m", Fraction(1, 2), id="milli"),
        pytest.param("3n", Fraction(3, 10**9), id="nano"),
        pytest.param("2u", Fraction(2, 10**6), id="micro"),
        pytest.param("1k", Fraction(1000), id="kilo"),
        pytest.param("1M", Fraction(10**6), id="mega"),
        pytest.param("1G", Fraction(10**9), id="giga"),
        pytest.param("1T", Fraction(10**12), id="tera"),
        pytest.param("1P", Fraction(10**15), id="peta"),
        pytest.param("1E", Fraction(10**18), id="exa-not-exponent"),
        pytest.param("1Ki", Fraction(1024), id="kibi"),
        pytest.param("1Mi", Fraction(1024**2), id="mebi"),
        pytest.param("1.5Gi", Fraction(3 * 1024**3, 2), id="fractional-gibi"),
        pytest.param("1Ti", Fraction(1024**4), id="tebi"),
        pytest.param("1Pi", Fraction(1024**5), id="pebi"),
        pytest.param("12e6", Fraction(12 * 10**6), id="exponent"),
        pytest.param("12E6", Fraction(12 * 10**6), id="capital-exponent"),
        pytest.param("1e-3", Fraction(1, 1000), id="negative-exponent"),
        pytest.param("1e+3", Fraction(1000), id="signed-exponent"),
        pytest.param("0.1n", Fraction(1, 10**9), id="rounds-up-to-nano"),
        pytest.param("-0.1n", Fraction(-1, 10**9), id="rounds-away-from-zero"),
        pytest.param("16Ei", Fraction(INT64_MAX), id="binary-capped-at-int64"),
        pytest.param("1e30", Fraction(10**30), id="big-decimal-not-capped"),
    ],
)
def test_parse(text: str, value: Fraction) -> None:
    assert Quantity.parse(text).value == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "regular expression", id="empty"),
        pytest.param("10GB", "regular expression", id="unknown-suffix-letters"),
        pytest.param("1 Gi", "regular expression", id="space"),
        pytest.param("abc", "regular expression", id="not-a-number"),
        pytest.param("1.2.3", "regular expression", id="two-dots"),
        pytest.param("10k3", "suffix", id="suffix-then-digits"),
        pytest.param("1Kii", "suffix", id="doubled-suffix"),
        pytest.param("1e", "suffix", id="exponent-without-digits"),
        pytest.param("1e99999", "migdra limit", id="exponent-too-big"),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(QuantityError, match=message):
        Quantity.parse(text)


def test_equality_is_by_value_across_units() -> None:
    assert Quantity.parse("1Gi") == Quantity.parse("1024Mi")
    assert Quantity.parse("0.5") == Quantity.parse("500m")
    assert Quantity.parse("1G") != Quantity.parse("1Gi")
    assert hash(Quantity.parse("1k")) == hash(Quantity.parse("1000"))
    assert Quantity.parse("999Mi") < Quantity.parse("1Gi")


@pytest.mark.parametrize(
    ("text", "as_int"),
    [
        pytest.param("5", 5, id="integer"),
        pytest.param("1Gi", 1024**3, id="binary"),
        pytest.param("50.703k", 50703, id="decimal-with-suffix"),
        pytest.param("1.5", None, id="fraction"),
        pytest.param("1000m", None, id="kubernetes-keeps-milli-scale"),
        pytest.param("1.5Gi", None, id="binary-fraction-is-inf-dec"),
        pytest.param("10E", None, id="overflow"),
        pytest.param("999999999999999999", 999999999999999999, id="eighteen-digits"),
        pytest.param("9223372036854775807", None, id="nineteen-digits-are-inf-dec"),
    ],
)
def test_as_int64_follows_apimachinery(text: str, as_int: int | None) -> None:
    assert Quantity.parse(text).as_int64() == as_int


def test_add_and_sub_are_exact_and_accept_ints() -> None:
    assert Quantity.parse("0.1").add(Quantity.parse("0.2")) == Quantity.parse("300m")
    assert Quantity.parse("1Gi").sub(1024**3).sign() == 0
    assert Quantity.parse("1").add(2).as_int64() == 3


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        pytest.param("1024Mi", "1Gi", id="binary-folds-up"),
        pytest.param("1536Mi", "1536Mi", id="binary-stays"),
        pytest.param("0.5", "500m", id="decimal-milli"),
        pytest.param("1500", "1500", id="no-suffix-when-not-whole"),
        pytest.param("1000", "1k", id="kilo"),
        pytest.param("12e6", "12e6", id="exponent"),
        pytest.param("-2Ki", "-2Ki", id="negative"),
    ],
)
def test_canonical(text: str, canonical: str) -> None:
    assert Quantity.parse(text).canonical() == canonical


@pytest.mark.parametrize(
    ("text", "normalize", "parsed"),
    [
        pytest.param("1.2.3", False, (1, 2, 3, ()), id="strict"),
        pytest.param("1.2.3-rc.1+build.5", False, (1, 2, 3, ("rc", 1)), id="prerelease-and-build"),
        pytest.param("v1.2.3", True, (1, 2, 3, ()), id="normalize-strips-v"),
        pytest.param("1.2", True, (1, 2, 0, ()), id="normalize-pads"),
        pytest.param("1", True, (1, 0, 0, ()), id="normalize-pads-major-only"),
        pytest.param("01.002.0003", True, (1, 2, 3, ()), id="normalize-drops-zeros"),
    ],
)
def test_semver_parse(text: str, normalize: bool, parsed: tuple[int, int, int, tuple[int | str, ...]]) -> None:
    version = Semver.parse(text, normalize=normalize)
    assert (version.major, version.minor, version.patch, version.pre) == parsed


@pytest.mark.parametrize(
    ("text", "normalize", "message"),
    [
        pytest.param("1.2", False, "No Major.Minor.Patch", id="short"),
        pytest.param("v1.2.3", False, "Invalid character", id="v-prefix-strict"),
        pytest.param("01.2.3", False, "leading zeroes", id="leading-zero"),
        pytest.param("1.2.3-", False, "Prerelease is empty", id="empty-prerelease"),
        pytest.param("1.2.3-01", False, "leading zeroes", id="numeric-prerelease-zero"),
        pytest.param("1.2-rc", True, "short version cannot contain", id="short-with-prerelease"),
        pytest.param("", False, "empty", id="empty"),
    ],
)
def test_semver_errors(text: str, normalize: bool, message: str) -> None:
    with pytest.raises(SemverError, match=message):
        Semver.parse(text, normalize=normalize)


def test_semver_precedence() -> None:
    ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11"]
    ordered += ["1.0.0-rc.1", "1.0.0", "1.0.1", "1.1.0", "2.0.0", "10.0.0"]
    versions = [Semver.parse(text) for text in ordered]
    assert versions == sorted(versions)
    assert all(a < b for a, b in itertools.pairwise(versions))
    assert Semver.parse("1.0.0+a") == Semver.parse("1.0.0+b")


@given(
    number=st.integers(min_value=-(10**12), max_value=10**12),
    suffix=st.sampled_from(["", "n", "u", "m", "k", "M", "G", "Ki", "Mi", "Gi", "e3", "e-2"]),
)
def test_canonical_spelling_parses_back_to_the_same_value(number: int, suffix: str) -> None:
    quantity = Quantity.parse(f"{number}{suffix}")
    assert Quantity.parse(quantity.canonical()) == quantity


@given(number=st.integers(min_value=0, max_value=2**30), power=st.integers(min_value=1, max_value=3))
def test_binary_units_are_equal_across_scales(number: int, power: int) -> None:
    """Below the binary-SI cap of 2^63-1 (which Kubernetes applies to Ki..Ei values only)."""
    units = ["", "Ki", "Mi", "Gi"]
    assert Quantity.parse(f"{number * 1024**power}{units[0]}") == Quantity.parse(f"{number}{units[power]}")
    assert Quantity.parse(f"{number * 1024}{units[power - 1]}") == Quantity.parse(f"{number}{units[power]}")
