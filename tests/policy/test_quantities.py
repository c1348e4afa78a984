"""webhook.policy.quantities: the API server's quantity grammar and bounds, in bounded time.

Expected values come from k8s.io/apimachinery pkg/api/resource: `ParseQuantity` and
`parseQuantityString` (quantity.go), the suffix table (suffix.go) and their tests
(quantity_test.go: TestQuantityParse, TestParseQuantityString). Where this module is stricter
than Go (see the module's docstring) the case says so.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support import loop
from webhook.policy import quantities as q
from webhook.policy.quantities import QuantityError, count, parse

MAX = 2**63 - 1
NANO = Fraction(1, 10**9)
HUGE_TEXT = [
    "1e999999",
    "1e9999999999999999999",
    "9" * 5000,
    "1" + "0" * 5000,
    "0." + "0" * 5000 + "1",
    "1e-999999",
    "1e" + "9" * 5000,
    "1e-" + "9" * 5000,
    "." + "0" * 60 + "1e-2147483647",
]


VALID = [
    pytest.param(1, 1, id="json-int"),
    pytest.param("1", 1, id="plain"),
    pytest.param("+1", 1, id="plus"),
    pytest.param("-1", -1, id="minus"),
    pytest.param("007", 7, id="leading-zeros"),
    pytest.param("1.0", 1, id="decimal"),
    pytest.param("1.", 1, id="trailing-dot"),
    pytest.param(".5", Fraction(1, 2), id="leading-dot"),
    pytest.param("1k", 1000, id="kilo"),
    pytest.param("1Ki", 1024, id="kibi"),
    pytest.param("1e3", 1000, id="exponent"),
    pytest.param("1E3", 1000, id="exponent-upper"),
    pytest.param("1e+3", 1000, id="exponent-plus"),
    pytest.param("1e-3", Fraction(1, 1000), id="exponent-minus"),
    pytest.param("1e0003", 1000, id="exponent-leading-zeros"),
    pytest.param("1E", 10**18, id="exa-not-exponent"),
    pytest.param("1Ei", 2**60, id="exbi"),
    pytest.param("0.001", Fraction(1, 1000), id="milli-decimal"),
    pytest.param("500m", Fraction(1, 2), id="milli"),
    pytest.param("2000m", 2, id="milli-whole"),
    pytest.param("0", 0, id="zero"),
    pytest.param("-0", 0, id="minus-zero"),
    # Not in the documented grammar, but in suffix.go's table (and TestQuantityParse).
    pytest.param("5n", Fraction(5, 10**9), id="nano"),
    pytest.param("4u", Fraction(4, 10**6), id="micro"),
    # TestQuantityParse "Things written by trolls".
    pytest.param("1.G", 10**9, id="dot-suffix"),
    pytest.param(".0001k", Fraction(1, 10), id="dot-kilo"),
    pytest.param("100.035Ki", Fraction(10243584, 100), id="fractional-kibi"),
    # TestQuantityParse "Things that saturate/round": up to a multiple of 10^-9, away from 0.
    pytest.param("3.001n", 4 * NANO, id="round-nano"),
    pytest.param("1.1E-9", 2 * NANO, id="round-exponent"),
    pytest.param("0.0000000001", NANO, id="round-tiny"),
    pytest.param("0.00000012345", 124 * NANO, id="round-digits"),
    pytest.param("0.000000000001Ki", 2 * NANO, id="round-kibi"),
    pytest.param("-0.0000000001", -NANO, id="round-away-from-zero"),
    pytest.param("0.9999999999", 1, id="round-to-whole"),
    pytest.param("1e-999999", NANO, id="tiny-exponent"),
    pytest.param("0." + "0" * 60 + "1", NANO, id="tiny-digits"),
    # parseQuantityString reads a number with no digits as 0 (TestParseQuantityString has
    # "." and "-."), and ParseQuantity then accepts any valid suffix after it.
    pytest.param(".", 0, id="lone-dot"),
    pytest.param("-.", 0, id="signed-dot"),
    pytest.param("+", 0, id="lone-sign"),
    pytest.param("e3", 0, id="lone-exponent"),
    pytest.param("k", 0, id="lone-suffix"),
    # The bounds: 2^63-1 in magnitude (math.go maxAllowed).
    pytest.param("9223372036854775807", MAX, id="max"),
    pytest.param("-9223372036854775807", -MAX, id="min"),
    pytest.param("9223372036854775807000m", MAX, id="max-milli"),
    pytest.param("7Ei", 7 * 2**60, id="big-exbi"),
    pytest.param("0e9", 0, id="zero-big-exponent"),
    pytest.param("0" * 64, 0, id="longest"),
    # JSON numbers: read as the text of the number (Quantity.UnmarshalJSON).
    pytest.param(2**63 - 1, MAX, id="json-int-max"),
    pytest.param(-5, -5, id="json-int-negative"),
    pytest.param(1.5, Fraction(3, 2), id="json-float"),
    pytest.param(0.1, Fraction(1, 10), id="json-float-decimal"),
    pytest.param(1e16, 10**16, id="json-float-exponent"),
    pytest.param(-0.0, 0, id="json-float-minus-zero"),
    pytest.param(5e-324, NANO, id="json-float-denormal"),
]


@pytest.mark.parametrize(("value", "expected"), VALID)
def test_valid(value: object, expected: int | Fraction) -> None:
    got = parse(value)
    assert type(got) is Fraction
    assert got == expected


INVALID = [
    pytest.param("", q.NOT_A_QUANTITY, id="empty"),
    # ParseQuantity refuses whitespace (TestQuantityParse: " 1", "1 "); only
    # Quantity.UnmarshalJSON trims it, and the API server never sends it.
    pytest.param(" 1", q.NOT_A_QUANTITY, id="leading-space"),
    pytest.param("1 ", q.NOT_A_QUANTITY, id="trailing-space"),
    pytest.param("1\n", q.NOT_A_QUANTITY, id="trailing-newline"),
    pytest.param("\t1", q.NOT_A_QUANTITY, id="tab"),
    # The scanner compares bytes with '0'..'9': no other digits.
    pytest.param("\u24fd", q.NOT_A_QUANTITY, id="circled-digit"),
    pytest.param("\u00b2", q.NOT_A_QUANTITY, id="superscript"),
    pytest.param("\u0661", q.NOT_A_QUANTITY, id="arabic-indic"),
    pytest.param("\uff11", q.NOT_A_QUANTITY, id="fullwidth"),
    pytest.param("1e\u0663", q.NOT_A_QUANTITY, id="non-ascii-exponent"),
    pytest.param("1e", q.NOT_A_QUANTITY, id="bare-e"),
    pytest.param("1e+", q.NOT_A_QUANTITY, id="bare-e-sign"),
    pytest.param("1e1.5", q.NOT_A_QUANTITY, id="fractional-exponent"),
    pytest.param("1.2.3", q.NOT_A_QUANTITY, id="two-dots"),
    pytest.param("1ki", q.NOT_A_QUANTITY, id="lower-kibi"),
    pytest.param("1K", q.NOT_A_QUANTITY, id="upper-kilo"),
    pytest.param("1KB", q.NOT_A_QUANTITY, id="bytes"),
    pytest.param("--1", q.NOT_A_QUANTITY, id="two-signs"),
    pytest.param("1-", q.NOT_A_QUANTITY, id="trailing-sign"),
    pytest.param("0x10", q.NOT_A_QUANTITY, id="hex"),
    pytest.param("1_000", q.NOT_A_QUANTITY, id="underscore"),
    pytest.param("Infinity", q.NOT_A_QUANTITY, id="infinity-text"),
    pytest.param("nan", q.NOT_A_QUANTITY, id="nan-text"),
    # TestQuantityParse's own invalid list.
    pytest.param("1.1.M", q.NOT_A_QUANTITY, id="go-1.1.M"),
    pytest.param("1+1.0M", q.NOT_A_QUANTITY, id="go-1+1.0M"),
    pytest.param("0.1mi", q.NOT_A_QUANTITY, id="go-0.1mi"),
    pytest.param("0.1am", q.NOT_A_QUANTITY, id="go-0.1am"),
    pytest.param("aoeu", q.NOT_A_QUANTITY, id="go-aoeu"),
    pytest.param(".5i", q.NOT_A_QUANTITY, id="go-.5i"),
    pytest.param("-3.01e-", q.NOT_A_QUANTITY, id="go--3.01e-"),
    pytest.param(True, q.NOT_A_STRING_OR_NUMBER, id="bool"),
    pytest.param(None, q.NOT_A_STRING_OR_NUMBER, id="none"),
    pytest.param([], q.NOT_A_STRING_OR_NUMBER, id="list"),
    pytest.param({}, q.NOT_A_STRING_OR_NUMBER, id="dict"),
    pytest.param(b"1", q.NOT_A_STRING_OR_NUMBER, id="bytes-object"),
    pytest.param(math.nan, q.NOT_FINITE, id="float-nan"),
    pytest.param(math.inf, q.NOT_FINITE, id="float-inf"),
    pytest.param(-math.inf, q.NOT_FINITE, id="float-minus-inf"),
    # Bounds. Go keeps decimal values of any size and caps binary ones at 2^63-1; both are
    # out of range here (the documented bound), before any arithmetic.
    pytest.param("9223372036854775808", q.OUT_OF_RANGE, id="max-plus-one"),
    pytest.param("-9223372036854775808", q.OUT_OF_RANGE, id="int64-min"),
    pytest.param("9223372036854775807001m", q.OUT_OF_RANGE, id="max-plus-milli"),
    pytest.param("12E", q.OUT_OF_RANGE, id="go-12E"),
    pytest.param("9Ei", q.OUT_OF_RANGE, id="go-9Ei-capped-in-go"),
    pytest.param("9223372036854775807Ki", q.OUT_OF_RANGE, id="go-max-kibi"),
    pytest.param("1e19", q.OUT_OF_RANGE, id="1e19"),
    pytest.param("1e999999", q.OUT_OF_RANGE, id="huge-exponent"),
    pytest.param("1e2147483647", q.OUT_OF_RANGE, id="int32-exponent"),
    pytest.param(2**63, q.OUT_OF_RANGE, id="json-int-max-plus-one"),
    pytest.param(-(2**63), q.OUT_OF_RANGE, id="json-int-min"),
    pytest.param(10**5000, q.OUT_OF_RANGE, id="json-int-5000-digits"),
    pytest.param(1e300, q.OUT_OF_RANGE, id="json-float-huge"),
    # Go parses the exponent as int64 (error beyond) and truncates it to int32 (so
    # "1e4294967296" is 1 there): refused here rather than guessed at.
    pytest.param("1e2147483648", q.EXPONENT_OUT_OF_RANGE, id="exponent-beyond-int32"),
    pytest.param("1e4294967296", q.EXPONENT_OUT_OF_RANGE, id="exponent-wraps-in-go"),
    pytest.param("1e9999999999999999999", q.EXPONENT_OUT_OF_RANGE, id="exponent-beyond-int64"),
    pytest.param("1e-9999999999", q.EXPONENT_OUT_OF_RANGE, id="negative-exponent-beyond"),
    # Go has no length limit; here nothing past MAX_LENGTH characters is looked at.
    pytest.param("0" * 65, q.TOO_LONG, id="one-too-long"),
    pytest.param("9" * 5000, q.TOO_LONG, id="5000-nines"),
    pytest.param("1" + "0" * 5000, q.TOO_LONG, id="5000-zeros"),
    pytest.param("0." + "0" * 5000 + "1", q.TOO_LONG, id="5000-decimals"),
    pytest.param("1e" + "9" * 5000, q.TOO_LONG, id="5000-digit-exponent"),
    pytest.param("\u24fd" * 5000, q.TOO_LONG, id="5000-circled"),
]


@pytest.mark.parametrize(("value", "reason"), INVALID)
def test_invalid(value: object, reason: str) -> None:
    with pytest.raises(QuantityError) as caught:
        parse(value)
    assert str(caught.value) == reason
    assert isinstance(caught.value, ValueError)


COUNTS = [
    pytest.param("1", 1, id="plain"),
    pytest.param(1, 1, id="json-int"),
    pytest.param("0", 0, id="zero"),
    pytest.param(0, 0, id="json-zero"),
    pytest.param("+1", 1, id="plus"),
    pytest.param("-0", 0, id="minus-zero"),
    pytest.param("1.0", 1, id="decimal"),
    pytest.param("1.", 1, id="trailing-dot"),
    pytest.param("1k", 1000, id="kilo"),
    pytest.param("1Ki", 1024, id="kibi"),
    pytest.param("1e3", 1000, id="exponent"),
    pytest.param("2000m", 2, id="milli"),
    pytest.param(2.0, 2, id="json-float"),
    pytest.param("999999999999999999", 10**18 - 1, id="fast-path-longest"),
    pytest.param("000000000000000001", 1, id="fast-path-zeros"),
    pytest.param("9223372036854775807", MAX, id="max"),
    pytest.param(MAX, MAX, id="json-max"),
]


@pytest.mark.parametrize(("value", "expected"), COUNTS)
def test_count(value: object, expected: int) -> None:
    got = count(value)
    assert type(got) is int
    assert got == expected


NOT_COUNTS = [
    pytest.param(".5", q.NOT_WHOLE, id="half"),
    pytest.param("500m", q.NOT_WHOLE, id="milli"),
    pytest.param("1.5", q.NOT_WHOLE, id="decimal"),
    pytest.param("1n", q.NOT_WHOLE, id="nano"),
    pytest.param(1.5, q.NOT_WHOLE, id="json-float"),
    pytest.param("-1", q.NEGATIVE, id="negative"),
    pytest.param(-1, q.NEGATIVE, id="json-negative"),
    # The API server's resource validation checks the sign before the integer.
    pytest.param("-0.5", q.NEGATIVE, id="negative-fraction"),
    pytest.param("9223372036854775808", q.OUT_OF_RANGE, id="max-plus-one"),
    pytest.param(2**63, q.OUT_OF_RANGE, id="json-max-plus-one"),
    pytest.param("1e999999", q.OUT_OF_RANGE, id="huge-exponent"),
    pytest.param("9" * 5000, q.TOO_LONG, id="5000-nines"),
    pytest.param("\u00b2", q.NOT_A_QUANTITY, id="superscript"),
    pytest.param("\u24fd", q.NOT_A_QUANTITY, id="circled-digit"),
    pytest.param("\u0661", q.NOT_A_QUANTITY, id="arabic-indic"),
    pytest.param("", q.NOT_A_QUANTITY, id="empty"),
    pytest.param(True, q.NOT_A_STRING_OR_NUMBER, id="bool"),
    pytest.param(False, q.NOT_A_STRING_OR_NUMBER, id="bool-false"),
    pytest.param(None, q.NOT_A_STRING_OR_NUMBER, id="none"),
    pytest.param(math.nan, q.NOT_FINITE, id="nan"),
]


@pytest.mark.parametrize(("value", "reason"), NOT_COUNTS)
def test_not_a_count(value: object, reason: str) -> None:
    with pytest.raises(QuantityError) as caught:
        count(value)
    assert str(caught.value) == reason


class _Str(str):
    __slots__ = ()


class _Int(int):
    pass


class _Float(float):
    def __repr__(self) -> str:
        return "not a number"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(_Str("2Ki"), 2048, id="str-subclass"),
        pytest.param(_Int(3), 3, id="int-subclass"),
        pytest.param(_Float(4.0), 4, id="float-subclass-own-repr"),
    ],
)
def test_subclasses_read_by_value(value: object, expected: int) -> None:
    assert parse(value) == expected
    assert count(value) == expected


def test_fast_path_agrees_with_grammar() -> None:
    """The digit-string shortcut gives what the full parse gives, and stops before 2^63."""
    for text in ["0", "1", "09", "1" * 18, "9" * 18, "1" * 19, "9" * 19, "0" * 19 + "1"]:
        if int(text) <= MAX:
            assert parse(text) == q._parse_text(text) == count(text) == int(text)
        else:
            for read in (parse, q._parse_text, count):
                with pytest.raises(QuantityError, match=re.escape(q.OUT_OF_RANGE)):
                    read(text)


# Every reason follows the value: "<value> <reason>" must read as a sentence.
_REASON = re.compile(r"is [a-z ]+( \([^()]+\))?")


@pytest.mark.parametrize(
    "value",
    [pytest.param(p.values[0], id=f"parse-{p.id}") for p in INVALID]
    + [pytest.param(p.values[0], id=f"count-{p.id}") for p in NOT_COUNTS],
)
def test_messages_read_after_the_value(value: object) -> None:
    with pytest.raises(QuantityError) as caught:
        count(value)
    reason = str(caught.value)
    assert _REASON.fullmatch(reason), reason
    assert not reason.endswith("."), reason
    assert "\n" not in reason
    assert len(reason) <= 120
    # The value is the caller's to show (it may be 5,000 characters): reasons are constants.
    assert reason in vars(q).values()


def test_all_reasons_covered() -> None:
    reasons = {v for k, v in vars(q).items() if k.isupper() and isinstance(v, str)}
    used = {p.values[1] for p in INVALID + NOT_COUNTS}
    assert reasons == used


# --- properties --------------------------------------------------------------------------

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=80)
    | st.sampled_from(HUGE_TEXT),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                               max_size=3),
    max_leaves=8,
)

# Anything the scanner would look at, of any length, exponent and digit count.
_quantity_like = st.from_regex(
    r"\A[+-]?[0-9]{0,80}(\.[0-9]{0,80})?([eE][+-]?[0-9]{1,30}|[KMGTPE]i|[numkMGTPE])?\Z"
)


def _parse_or_error(value: object) -> Fraction | None:
    try:
        got = parse(value)
    except QuantityError:
        return None
    assert type(got) is Fraction
    assert abs(got) <= MAX
    # Always a multiple of 10^-9, as the API server holds it.
    assert (got * 10**9).denominator == 1
    return got


@settings(max_examples=loop.examples(500), deadline=None)
@given(st.text())
@example("1e999999")
@example("1e9999999999999999999")
@example("9" * 5000)
@example("1" + "0" * 5000)
@example("0." + "0" * 5000 + "1")
@example("1e-999999")
def test_any_text_parses_or_raises(text: str) -> None:
    _parse_or_error(text)


@pytest.mark.slow  # 500 hypothesis examples, huge texts among them
@settings(max_examples=500, deadline=None)
@given(_quantity_like | st.sampled_from(HUGE_TEXT))
def test_quantity_like_text_parses_or_raises(text: str) -> None:
    got = _parse_or_error(text)
    if got is not None:
        # count agrees with parse on what a count is.
        if got >= 0 and got.denominator == 1:
            assert count(text) == got
        else:
            with pytest.raises(QuantityError):
                count(text)


@settings(max_examples=loop.examples(300), deadline=None)
@given(_json)
def test_any_json_value_parses_or_raises(value: Any) -> None:
    _parse_or_error(value)
    try:
        got = count(value)
    except QuantityError:
        return
    assert type(got) is int
    assert 0 <= got <= MAX


_SUFFIX_POWERS = {
    "": (0, 0), "n": (-9, 0), "u": (-6, 0), "m": (-3, 0), "k": (3, 0), "M": (6, 0),
    "G": (9, 0), "T": (12, 0), "P": (15, 0), "E": (18, 0),
    "Ki": (0, 10), "Mi": (0, 20), "Gi": (0, 30), "Ti": (0, 40), "Pi": (0, 50), "Ei": (0, 60),
}  # fmt: skip


@st.composite
def _small_quantities(draw: st.DrawFn) -> tuple[str, Fraction]:
    """A quantity with a modest exponent, and its value computed the plain way."""
    sign = draw(st.sampled_from(["", "+", "-"]))
    whole = draw(st.text("0123456789", max_size=22))
    dot = draw(st.booleans())
    fraction = draw(st.text("0123456789", max_size=22)) if dot else ""
    if draw(st.booleans()):
        exponent = draw(st.integers(-40, 40))
        spelled = draw(st.sampled_from(["e", "E"])) + draw(
            st.sampled_from(["{}", "{:+d}", "{:03d}"])).format(exponent)
        power10, power2 = exponent, 0
    else:
        spelled = draw(st.sampled_from(sorted(_SUFFIX_POWERS)))
        power10, power2 = _SUFFIX_POWERS[spelled]
    text = sign + whole + ("." if dot else "") + fraction + spelled
    value = Fraction(int(whole + fraction or "0"), 10 ** len(fraction))
    value *= Fraction(10) ** power10 * 2**power2
    if sign == "-":
        value = -value
    # Round up (away from zero) to a multiple of 10^-9.
    nanos = value * 10**9
    if nanos.denominator != 1:
        nanos = Fraction(math.ceil(nanos) if nanos > 0 else math.floor(nanos))
    return text, nanos / 10**9


@settings(max_examples=loop.examples(500), deadline=None)
@given(_small_quantities())
def test_value_matches_plain_arithmetic(case: tuple[str, Fraction]) -> None:
    text, expected = case
    expected_error: str | None = None
    if text == "":  # ParseQuantity's one explicit refusal; "+", "." and "e3" are 0
        expected_error = q.NOT_A_QUANTITY
    elif abs(expected) > MAX:
        expected_error = q.OUT_OF_RANGE
    if expected_error is None:
        assert parse(text) == expected
    else:
        with pytest.raises(QuantityError) as caught:
            parse(text)
        assert str(caught.value) == expected_error


@pytest.mark.parametrize(
    ("value", "sentence"),
    [
        pytest.param("1e999999", "1e999999 is out of range (quantities are at most 2^63-1)",
                     id="range"),
        pytest.param("1e4294967296",
                     "1e4294967296 is out of range (exponents are at most 2^31-1 in magnitude)",
                     id="exponent"),
        pytest.param("-1", "-1 is negative", id="negative"),
        pytest.param("500m", "500m is not a whole number", id="fraction"),
        pytest.param("1KB", "1KB is not a quantity (the API server's grammar: a number, optional "
                     "sign, optional suffix such as 1, 500m, 2Gi, 1e3)", id="grammar"),
        pytest.param(None, "None is not a quantity (quantities are strings or numbers)",
                     id="type"),
        pytest.param(math.inf, "inf is not a quantity (quantities are finite numbers)",
                     id="infinite"),
        pytest.param("0" * 65, "0" * 65 + " is too long for a quantity (at most 64 characters)",
                     id="long"),
    ],
)
def test_sentences(value: object, sentence: str) -> None:
    with pytest.raises(QuantityError) as caught:
        count(value)
    assert f"{value} {caught.value}" == sentence
