"""Java's Double.toString, as Kafka prints and stores quota values ("1024.0", "1.0E9")."""

from __future__ import annotations

import math
from decimal import Decimal


def java_double(value: float) -> str:
    """Plain decimal notation for 1e-3 <= |value| < 1e7, else computerized scientific
    notation with at least one digit after the point; the shortest digits that read back."""
    v = float(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    if v == 0:
        return "-0.0" if math.copysign(1.0, v) < 0 else "0.0"
    if 1e-3 <= abs(v) < 1e7:
        text = repr(v)
        return text if "." in text else f"{text}.0"
    sign, digits, exponent = Decimal(repr(v)).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    exp = exponent + len(text) - 1
    mantissa = text[0] + "." + (text[1:] or "0")
    return f"{'-' if sign else ''}{mantissa}E{exp}"
