"""Scale SI values for people: the only place units change."""
from __future__ import annotations

import math


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def fmt_time_s(seconds) -> str:
    if _missing(seconds):
        return "–"
    s = float(seconds)
    if abs(s) >= 1:
        return f"{s:.2f} s"
    if abs(s) >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


def fmt_si(value, unit: str, digits: int = 3) -> str:
    if _missing(value):
        return "–"
    v = float(value)
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= factor:
            return f"{v / factor:.{digits}g} {prefix}{unit}"
    return f"{v:.{digits}g} {unit}"


def fmt_pct(pct, digits: int = 1) -> str:
    return "–" if _missing(pct) else f"{float(pct):.{digits}f}%"


def fmt_frac_pct(frac, digits: int = 0) -> str:
    return "–" if _missing(frac) else f"{100 * float(frac):.{digits}f}%"


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def fmt_ratio(value: float, low: float | None = None, high: float | None = None, sep: str = "–") -> str:
    """"1.08× [1.02–1.15]". Each figure gets as many decimals (2 to 4) as keep it on its own side
    of 1: an interval that ends at 0.9951 is printed 0.995, never 1.00, lest it read as
    "no difference" beside a verdict of "slower"."""
    text = f"{_beside_one(value)}×"
    if low is None or high is None:
        return text
    return f"{text} [{_beside_one(low)}{sep}{_beside_one(high)}]"


def _beside_one(x: float) -> str:
    for digits in (2, 3, 4):
        shown = round(x, digits)
        if (shown > 1) == (x > 1) and (shown < 1) == (x < 1):
            break
    return f"{x:.{digits}f}"
