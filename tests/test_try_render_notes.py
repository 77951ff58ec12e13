"""try-kernel's note on the gate reference: names the rung reference.py chose, and says
"eager only" exactly when there is no reference at all."""
from __future__ import annotations

from kernel_advisor.render.try_render import note_lines, try_markdown
from kernel_advisor.trykernel.reference import FLOAT32_TOLERANCE
from kernel_advisor.trykernel.results import TryReport


def _report(reference: str) -> TryReport:
    return TryReport(model="m.py", device="cpu", mode="inference", dtype="float32", timing="CPU timing",
                     float64_reference=reference, variants=(), notes=())


def test_full_float64_reference_needs_no_note():
    assert note_lines(_report("")) == []


def test_sampled_reference_is_named_and_not_called_eager_only():
    why = "float64 on 3 of 8 batch items (memory)"
    assert note_lines(_report(why)) == [f"gate reference: {why}"]


def test_float32_reference_states_its_tolerance():
    why = f"float32 reference (no memory for float64); {FLOAT32_TOLERANCE}"
    (line,) = note_lines(_report(why))
    assert line == f"gate reference: {why}" and "eager only" not in line


def test_no_reference_says_the_gate_uses_eager_only():
    why = "none: the model already computes in float64"
    assert note_lines(_report(why)) == [f"gate reference: {why}; the gate compares with eager only"]
    assert f"- gate reference: {why}; the gate compares with eager only" in try_markdown(_report(why))
