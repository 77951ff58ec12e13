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
