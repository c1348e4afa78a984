"""Kubernetes resource quantities, as far as counting devices needs them."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[KMGTPE]i|[mkMGTPE])?$")
_SUFFIX = {
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}


def parse(value: object) -> Decimal | None:
    """The quantity's value, or None when it is not a Kubernetes quantity."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value)) if math.isfinite(value) else None
    if not isinstance(value, str):
        return None
    m = _QUANTITY.match(value.strip())
    if not m:
        return None
    number, suffix = m.groups()
    try:
        base = Decimal(number)
    except InvalidOperation:
        return None
    if not suffix:
        return base
    if suffix[0] in "eE":
        return base * (Decimal(10) ** int(suffix[1:]))
    return base * _SUFFIX[suffix]


def count(value: object) -> int | None:
    """A device count: a whole, non-negative quantity; None when it is anything else."""
    # The common case first: the API server serialises integers as "1".
    if type(value) is str and value.isdigit():
        return int(value)
    if type(value) is int:
        return value if value >= 0 else None
    q = parse(value)
    if q is None or q < 0 or q != q.to_integral_value():
        return None
    return int(q)
