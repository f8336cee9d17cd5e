"""Kubernetes resource quantities (apimachinery ``resource.Quantity``) with exact arithmetic.

Owns: the quantity grammar (``1.5Gi``, ``500m``, ``12e6``), exact comparison and arithmetic, and the
conversions the CEL ``kubernetes.quantity`` library exposes.  Other code (API validation, the device
model) may reuse it: it depends on nothing but the standard library.

Must never: use floats to compare or add (``1Gi == 1024Mi`` and ``0.5 == 500m`` hold exactly, as
rationals), import celpy, or do I/O.

The parser is a port of apimachinery's ``ParseQuantity`` (``parseQuantityString`` plus the suffix
table) rather than a regular expression, so its odd corners match Kubernetes: ``"1."`` and ``".5"``
are numbers, magnitudes are rounded *up* to 1n, binary-SI values are capped at 2^63-1.  Kubernetes
keeps small quantities as an ``int64Amount`` (value x 10^scale) and only converts those to int64;
:meth:`Quantity.as_int64` follows that rule, which is why ``quantity("1000m").isInteger()`` is false
in Kubernetes and here.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from fractions import Fraction

INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
NANO = Fraction(1, 10**9)

# apimachinery's error texts, so messages match what kube-apiserver says.
FORMAT_WRONG = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
NUMERIC_WRONG = "unable to parse numeric part of quantity"
SUFFIX_WRONG = "unable to parse quantity's suffix"

# A decimal exponent beyond this would make exact rationals with more digits than any real quantity
# needs; Kubernetes accepts any int32 exponent.  (migdra limit, documented in docs/deviceclasses.md.)
MAX_DECIMAL_EXPONENT = 10_000

_DIGITS = frozenset("0123456789")
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_MAX_INT64_FACTORS = 18  # digits that always fit an int64
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity; the message is apimachinery's."""


class QuantityFormat(enum.StrEnum):
    """How a quantity was written, which decides its canonical spelling."""

    DECIMAL_SI = "DecimalSI"  # 12M, 500m, 7
    BINARY_SI = "BinarySI"  # 12Mi
    DECIMAL_EXPONENT = "DecimalExponent"  # 12e6


@dataclass(frozen=True, slots=True)
class _Int64Amount:
    """apimachinery's fast representation ``value * 10**scale``; only it converts to int64."""

    value: int
    scale: int

    def as_int64(self) -> int | None:
        if self.scale == 0:
            return self.value
        if self.scale < 0:
            return None
        scaled = self.value * 10**self.scale
        return scaled if INT64_MIN <= scaled <= INT64_MAX else None

    def add(self, other: _Int64Amount) -> _Int64Amount | None:
        """``int64Amount.Add``: exact when no int64 overflow happens, else ``None`` (go to Dec)."""
        if other.value == 0:
            return self
        if self.value == 0:
            return other
        low = min(self.scale, other.scale)
        left = self.value * 10 ** (self.scale - low)
        right = other.value * 10 ** (other.scale - low)
        if not (_fits(left) and _fits(right) and _fits(left + right)):
            return None
        return _Int64Amount(left + right, low)


def _fits(value: int) -> bool:
    return INT64_MIN <= value <= INT64_MAX


@dataclass(frozen=True, slots=True, eq=False)
class Quantity:
    """An exact quantity.  ``value`` is the number; ``text`` the spelling it was parsed from, if any.

    Equality, ordering and hashing are by value, so ``Quantity.parse("1Gi") == Quantity.parse("1024Mi")``.
    """

    value: Fraction
    format: QuantityFormat = QuantityFormat.DECIMAL_SI
    text: str | None = field(default=None, compare=False)
    # The int64Amount Kubernetes would hold, or None where it holds an inf.Dec (see module docstring).
    _int64: _Int64Amount | None = field(default=None, compare=False, repr=False)

    @classmethod
    def parse(cls, text: str) -> Quantity:
        """Parse like ``resource.ParseQuantity``; raise :class:`QuantityError` with kube's message."""
        return _parse(text)

    @classmethod
    def from_int(cls, value: int, quantity_format: QuantityFormat = QuantityFormat.DECIMAL_SI) -> Quantity:
        """``resource.NewQuantity(value, format)``: an integer held as an int64Amount."""
        if not _fits(value):
            raise QuantityError(f"integer {value} does not fit int64")
        return cls(Fraction(value), quantity_format, None, _Int64Amount(value, 0))

    # -- the CEL quantity library, in apimachinery terms --------------------------------------------

    def sign(self) -> int:
        return (self.value > 0) - (self.value < 0)

    def compare(self, other: Quantity) -> int:
        """``Cmp``: -1, 0 or 1, exactly."""
        return (self.value > other.value) - (self.value < other.value)

    def as_int64(self) -> int | None:
        """``AsInt64``: the int64 value, or ``None`` on overflow, a fraction, or an inf.Dec value."""
        if self._int64 is None:
            return None
        return self._int64.as_int64()

    def is_integer(self) -> bool:
        return self.as_int64() is not None

    def as_approximate_float(self) -> float:
        try:
            return float(self.value)
        except OverflowError:
            return math.copysign(math.inf, self.value)

    def add(self, other: Quantity | int) -> Quantity:
        """``Add`` on a copy; an int is ``NewQuantity(int, self.format)`` as in the CEL library."""
        return self._combine(other if isinstance(other, Quantity) else Quantity.from_int(other, self.format), 1)

    def sub(self, other: Quantity | int) -> Quantity:
        return self._combine(other if isinstance(other, Quantity) else Quantity.from_int(other, self.format), -1)

    def _combine(self, other: Quantity, direction: int) -> Quantity:
        # Go: a zero receiver takes the other operand's format.
        result_format = other.format if self.value == 0 else self.format
        int64: _Int64Amount | None = None
        if self._int64 is not None and other._int64 is not None:
            operand = other._int64 if direction > 0 else _Int64Amount(-other._int64.value, other._int64.scale)
            int64 = self._int64.add(operand)
        return Quantity(self.value + direction * other.value, result_format, None, int64)

    # -- Python protocol ----------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Quantity):
            return NotImplemented
        return self.value == other.value

    def __lt__(self, other: Quantity) -> bool:
        return self.value < other.value

    def __le__(self, other: Quantity) -> bool:
        return self.value <= other.value

    def __gt__(self, other: Quantity) -> bool:
        return self.value > other.value

    def __ge__(self, other: Quantity) -> bool:
        return self.value >= other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __str__(self) -> str:
        return self.text if self.text is not None else self.canonical()

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def canonical(self) -> str:
        """Kubernetes' canonical spelling (``1024Mi`` -> ``1Gi``, ``0.5`` -> ``500m``, ``1500`` stays)."""
        return _canonical(self.value, self.format)


def _parse(text: str) -> Quantity:
    if not text:
        raise QuantityError(FORMAT_WRONG)
    if text == "0":
        return Quantity(Fraction(0), QuantityFormat.DECIMAL_SI, text, _Int64Amount(0, 0))
    positive, value_text, num, denom, suffix = _scan(text)
    base, exponent, quantity_format = _interpret_suffix(suffix)

    int64 = _fast_path(positive, num, denom, base, exponent, quantity_format)
    if int64 is not None:
        return Quantity(Fraction(int64.value) * Fraction(10) ** int64.scale, quantity_format, text, int64)

    # apimachinery's slow path: an inf.Dec, rounded up to 1n, capped for binary SI.
    magnitude = _decimal(value_text.lstrip("+-"))
    magnitude *= Fraction(10) ** exponent if base == 10 else Fraction(2) ** exponent
    if magnitude != 0:
        magnitude = Fraction(math.ceil(magnitude / NANO)) * NANO
    if quantity_format is QuantityFormat.BINARY_SI:
        magnitude = min(magnitude, Fraction(INT64_MAX))
        if 0 < magnitude < 1:
            quantity_format = QuantityFormat.DECIMAL_SI
    return Quantity(magnitude if positive else -magnitude, quantity_format, text, None)


def _scan(text: str) -> tuple[bool, str, str, str, str]:
    """``parseQuantityString``: (positive, number text, integer digits, fraction digits, suffix)."""
    end = len(text)
    pos = 0
    positive = True
    if text[0] in "+-":
        positive = text[0] == "+"
        pos = 1
    while pos < end and text[pos] == "0":  # leading zeros
        pos += 1
    if pos >= end:
        return positive, "0", "0", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]  # "1." is allowed, as in Kubernetes
    value_text = text[:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(FORMAT_WRONG)
    return positive, value_text, num, denom, text[suffix_start:]


def _interpret_suffix(suffix: str) -> tuple[int, int, QuantityFormat]:
    """(base, exponent, format) of a suffix, or :class:`QuantityError` (``quantitySuffixer.interpret``)."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], QuantityFormat.DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], QuantityFormat.BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:].lstrip("+-")
        if suffix[1:].count("+") + suffix[1:].count("-") <= 1 and digits and set(digits) <= _DIGITS:
            exponent = int(suffix[1:])
            if abs(exponent) > MAX_DECIMAL_EXPONENT:
                raise QuantityError(f"{SUFFIX_WRONG}: exponent beyond +/-{MAX_DECIMAL_EXPONENT} (migdra limit)")
            return 10, exponent, QuantityFormat.DECIMAL_EXPONENT
    raise QuantityError(SUFFIX_WRONG)


def _fast_path(
    positive: bool, num: str, denom: str, base: int, exponent: int, quantity_format: QuantityFormat
) -> _Int64Amount | None:
    """The int64Amount ``ParseQuantity`` builds without an inf.Dec, or ``None`` where it needs one."""
    mantissa = 1
    if base == 10:
        scale = exponent
        precision = _MAX_INT64_FACTORS - (len(num) + len(denom))
    elif exponent >= 0 and not denom:
        scale = 0
        mantissa = 1 << exponent
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1
    else:
        return None
    if precision < 0:
        return None
    scale -= len(denom)
    if scale < -9:
        return None
    result = int(num + denom) * mantissa
    if not _fits(result):
        return None
    return _Int64Amount(result if positive else -result, scale)


def _decimal(text: str) -> Fraction:
    whole, _, fraction = text.partition(".")
    if not (whole or fraction):
        raise QuantityError(NUMERIC_WRONG)
    return Fraction(int(whole or "0")) + (Fraction(int(fraction), 10 ** len(fraction)) if fraction else 0)


def _canonical(value: Fraction, quantity_format: QuantityFormat) -> str:
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    if quantity_format is QuantityFormat.BINARY_SI and magnitude >= 1024 and magnitude.denominator == 1:
        number = magnitude.numerator
        power = 0
        while number % 1024 == 0 and power < len(_BINARY_SUFFIXES):
            number //= 1024
            power += 1
        suffix = "" if power == 0 else list(_BINARY_SUFFIXES)[power - 1]
        return f"{sign}{number}{suffix}"
    # Decimal: the largest exponent (multiple of 3, at least -9) that leaves an integer mantissa.
    exponent = -9
    mantissa = magnitude * 10**9
    if mantissa.denominator != 1:  # finer than 1n cannot be written; round up like Kubernetes
        mantissa = Fraction(math.ceil(mantissa))
    number = mantissa.numerator
    while number % 1000 == 0 and exponent < 18:
        number //= 1000
        exponent += 3
    if quantity_format is QuantityFormat.DECIMAL_EXPONENT:
        return f"{sign}{number}" + (f"e{exponent}" if exponent else "")
    suffix = next(name for name, power in _DECIMAL_SUFFIXES.items() if power == exponent)
    return f"{sign}{number}{suffix}"
