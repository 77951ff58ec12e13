"""The one internal signal of this package: these arguments are outside what a formula models."""
from __future__ import annotations


class Unmodelled(Exception):
    """Raised by formulas and argument readers; op_cost turns it into None (unknown, not zero)."""
