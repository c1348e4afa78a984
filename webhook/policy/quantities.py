"""Kubernetes resource quantities, read as the API server reads them, in bounded time.

The grammar and the arithmetic follow `ParseQuantity` in k8s.io/apimachinery
(pkg/api/resource/quantity.go, with the suffix table of suffix.go and the bound of math.go);
the comments below name the Go function each behaviour comes from. Where matching Go would
take unbounded work, this module refuses instead, before doing any arithmetic:

- a string longer than `MAX_LENGTH` characters (Go has no limit; no quantity the API server
  itself writes comes close, and the canonical forms are at most about 21 characters);
- a value greater than 2^63-1 in magnitude. The Quantity doc comment says no quantity may
  exceed it; in the code `ParseQuantity` caps only binary-suffixed values ("9Ei" becomes
  2^63-1) and keeps decimal ones of any size ("1e999999" is a 10^999999 it then carries
  around as a big integer). Both are out of range here;
- an exponent beyond +-(2^31-1). `suffixHandler.interpret` reads it as an int64 and then
  truncates it to int32, so the API server reads "1e4294967296" as 1: refused rather than
  guessed at.

Everything else is Go's behaviour, quirks included: "1." and "." and "+" (zero) parse, the
"n" and "u" suffixes exist though the documented grammar leaves them out, whitespace is not
trimmed, and a value with digits below 10^-9 is rounded up, away from zero, to the next
multiple of 10^-9 (the doc comment's "3 decimal places" is out of date).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

# The largest magnitude a quantity may have (math.go: `maxAllowed`, "== max int64").
MAX = 2**63 - 1
# Longer strings are refused before they are looked at. Every legitimate spelling of a value
# within MAX fits, with room for redundant zeros and exponents.
MAX_LENGTH = 64
# Exponents the API server reads as written (suffix.go `interpret`: int64, truncated to int32).
_MAX_EXPONENT = 2**31 - 1
# ParseQuantity rounds non-zero values up to the smallest representable one: nano (10^-9).
_NANO = 10**9
# The common case takes no regular expression: a string of at most 18 ASCII digits is a
# whole number below 10^18, so well within MAX.
_FAST_DIGITS = 18

# parseQuantityString: an optional sign, digits, an optional "." and more digits (all of them
# ASCII 0-9 only, and every part may be empty), then the suffix. The scanner takes suffix
# characters from "eEinumkKMGTP", an optional sign and digits; `interpret` then accepts only
# the table of suffix.go (exact case: "1ki" and "1K" are errors) or "e"/"E" followed by a
# base-10 integer (strconv.ParseInt: an optional sign and at least one digit, leading zeros
# allowed). `fullmatch` because "$" would also match before a trailing newline. The policy
# model's pattern for a quantity is this one's text, anchored.
GRAMMAR: re.Pattern[str] = re.compile(
    r"([+-]?)([0-9]*)(?:\.([0-9]*))?"
    r"(?:[eE]([+-]?[0-9]+)|([KMGTPE]i|[numkMGTPE]))?",
    re.ASCII,
)
_GRAMMAR = GRAMMAR.fullmatch

# suffix.go `newSuffixer`: suffix -> (power of ten, power of two).
_SUFFIXES = {
    "n": (-9, 0), "u": (-6, 0), "m": (-3, 0),
    "k": (3, 0), "M": (6, 0), "G": (9, 0), "T": (12, 0), "P": (15, 0), "E": (18, 0),
    "Ki": (0, 10), "Mi": (0, 20), "Gi": (0, 30), "Ti": (0, 40), "Pi": (0, 50), "Ei": (0, 60),
}  # fmt: skip

# Reasons: each reads after the value ("<value> <reason>").
NOT_A_QUANTITY = (
    "is not a quantity (the API server's grammar: a number, optional sign, optional suffix "
    "such as 1, 500m, 2Gi, 1e3)"
)
NOT_A_STRING_OR_NUMBER = "is not a quantity (quantities are strings or numbers)"
NOT_FINITE = "is not a quantity (quantities are finite numbers)"
TOO_LONG = f"is too long for a quantity (at most {MAX_LENGTH} characters)"
OUT_OF_RANGE = "is out of range (quantities are at most 2^63-1)"
EXPONENT_OUT_OF_RANGE = "is out of range (exponents are at most 2^31-1 in magnitude)"
NOT_WHOLE = "is not a whole number"
NEGATIVE = "is negative"


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity, or not one a rule can use.

    `str(exc)` is a short lower-case reason that reads after the value: "is negative".
    """


def parse(value: object) -> Fraction:
    """The exact value of a quantity given as a JSON string or number, as the API server
    holds it (that is, after its rounding up to a multiple of 10^-9).

    The API server serialises quantities as strings; hand-written JSON may use numbers, which
    it reads as their text (`Quantity.UnmarshalJSON`). A float is read through its shortest
    repr, the text of any number a person writes. bool, None, lists, dicts, NaN and
    infinities are not quantities. Raises QuantityError.
    """
    if type(value) is str:
        if len(value) <= _FAST_DIGITS and value.isascii() and value.isdigit():
            return Fraction(int(value))
        return _parse_text(value)
    if isinstance(value, bool):
        raise QuantityError(NOT_A_STRING_OR_NUMBER)
    if isinstance(value, int):
        if -MAX <= value <= MAX:
            return Fraction(int(value))
        raise QuantityError(OUT_OF_RANGE)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(NOT_FINITE)
        # float.__repr__, not repr(): a subclass may print itself otherwise.
        return _parse_text(float.__repr__(value))
    if isinstance(value, str):
        return _parse_text(str.__str__(value))
    raise QuantityError(NOT_A_STRING_OR_NUMBER)


def count(value: object) -> int:
    """A device count: a whole, non-negative quantity (extended resources must be integers).

    Raises QuantityError; a negative value is reported as such before a fractional one, the
    order of the API server's own resource validation.
    """
    # The common cases first, with no regular expression and no Fraction: the API server
    # sends "1", hand-written JSON may have 1.
    if type(value) is str:
        if len(value) <= _FAST_DIGITS and value.isascii() and value.isdigit():
            return int(value)
    elif type(value) is int and 0 <= value <= MAX:
        return value
    q = parse(value)
    if q < 0:
        raise QuantityError(NEGATIVE)
    if q.denominator != 1:
        raise QuantityError(NOT_WHOLE)
    return q.numerator


def _parse_text(text: str) -> Fraction:
    # Length first: everything after it works on at most MAX_LENGTH characters.
    if len(text) > MAX_LENGTH:
        raise QuantityError(TOO_LONG)
    m = _GRAMMAR(text)
    # ParseQuantity refuses the empty string explicitly; the scanner would read it as 0.
    if m is None or not text:
        raise QuantityError(NOT_A_QUANTITY)
    sign, whole, fraction, exponent, suffix = m.groups()
    fraction = fraction or ""
    if exponent is not None:
        power10, power2 = int(exponent), 0  # at most MAX_LENGTH digits: cheap
        if abs(power10) > _MAX_EXPONENT:
            raise QuantityError(EXPONENT_OUT_OF_RANGE)
    elif suffix is not None:
        power10, power2 = _SUFFIXES[suffix]
    else:
        power10 = power2 = 0
    # The value is int(digits) * 10^power10 * 2^power2. With no digits at all (".", "+",
    # "e3", "k") parseQuantityString gives the numerator "0": zero, as in Go.
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return Fraction(0)
    power10 -= len(fraction)
    # Bound the magnitude before building any number: 10^(n-1+power10) <= |value| and
    # 2^power2 >= 1, so n-1+power10 >= 19 means |value| >= 10^19 > MAX.
    n = len(digits)
    if n - 1 + power10 >= 19:
        raise QuantityError(OUT_OF_RANGE)
    negative = sign == "-"
    # |value| < 10^(n+power10) * 2^60 < 10^(n+power10+19); at most 10^-9 it rounds up to 10^-9.
    if n + power10 + 19 <= -9:
        return Fraction(-1 if negative else 1, _NANO)
    # Here -28-MAX_LENGTH < power10 < 19: every number below has at most ~110 digits.
    numerator = int(digits) << power2
    denominator = 1
    if power10 >= 0:
        numerator *= 10**power10
    else:
        denominator = 10**-power10
    if numerator > MAX * denominator:
        raise QuantityError(OUT_OF_RANGE)
    # ParseQuantity: amount.Round(amount, Nano.infScale(), inf.RoundUp), away from zero. MAX
    # is whole, so this never takes a value in range out of it.
    nanos, rest = divmod(numerator * _NANO, denominator)
    if rest:
        numerator, denominator = nanos + 1, _NANO
    return Fraction(-numerator if negative else numerator, denominator)
