"""Number formatting shared by every renderer (kernel_advisor/render/units.py)."""
from __future__ import annotations

import pytest

from kernel_advisor.render.units import fmt_ratio


@pytest.mark.parametrize("args, text", [
    ((1.08, 1.02, 1.15), "1.08× [1.02–1.15]"),
    ((0.99, 0.94, 0.9951), "0.99× [0.94–0.995]"),  # 0.9951 at 2 decimals would read 1.00
    ((1.004, 0.9999, 1.0049), "1.004× [0.9999–1.005]"),  # each figure stays on its side of 1
    ((1.0, 0.99, 1.0), "1.00× [0.99–1.00]"),  # exactly 1 is 1.00
    ((2.5, None, None), "2.50×"),
])
def test_ratio_intervals_never_round_across_one(args, text):
    assert fmt_ratio(*args) == text
