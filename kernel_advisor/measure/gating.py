"""The correctness gate for prepared actions: every variant against eager on fresh input draws.

The same gate as try-kernel's (trykernel/gate.py): every output leaf and, in train mode,
every parameter gradient, against eager at the run's dtype and against the reference
(float64 where memory allows, trykernel/reference.py). A variant's first call is where
torch.compile compiles, so compile time is spent here and never inside the timing.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from kernel_advisor.actions import Variant
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.trykernel.candidates import default_tolerance
from kernel_advisor.trykernel.capture import Captured, capture_step, compare_captures
from kernel_advisor.trykernel.gate import LeafComparison


@dataclass
class GateRecord:
    """What the gate saw for one variant over every draw."""

    comparisons: list[LeafComparison] = field(default_factory=list)
    error: str = ""  # the variant raised: its first line
    draws: int = 0

    @property
    def problem(self) -> str:
        bad = next((c for c in self.comparisons if not c.ok), None)
        return self.error or (f"{bad.path}: {bad.problem}" if bad else "")

    def worst(self) -> dict | None:
        """The largest errors seen, for people: relative to eager and to the reference."""
        if not self.comparisons:
            return None
        return {"draws": self.draws, "leaves": len(self.comparisons) // max(self.draws, 1),
                "rel_err": _max(c.rel_err for c in self.comparisons),
                "ref_rel_err": _max(c.ref_rel_err for c in self.comparisons),
                "baseline_ref_rel_err": _max(c.baseline_ref_rel_err for c in self.comparisons)}


def gate_variant(loaded: LoadedModel, v: Variant, inputs: list, base: Captured, ref: Captured | None,
                 mode: str, record: GateRecord) -> None:
    """One draw of one variant; a variant that raises is recorded, never re-raised."""
    if record.error:
        return
    try:
        with v.context():
            got = capture_step(loaded, v.model, v.params_of or loaded.model, v.convert_inputs(inputs), mode)
    except Exception as e:  # noqa: BLE001 - a transformation the model rejects is a result, not a crash
        record.error = first_line(e)
        return
    tolerance = v.tolerance or default_tolerance
    record.comparisons.extend(compare_captures(_like(got, base), base, ref, tolerance))
    record.draws += 1


def _like(got: Captured, base: Captured) -> Captured:
    """The variant's leaves in eager's dtypes: autocast returns bfloat16 where eager gave float32."""
    dtypes = dict((path, t.dtype) for path, t in base.leaves)
    leaves = tuple((path, t.to(dtypes[path]) if path in dtypes and t.is_floating_point()
                    and dtypes[path].is_floating_point else t) for path, t in got.leaves)
    return dataclasses.replace(got, leaves=leaves)


def first_line(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}".strip()
    return text.splitlines()[0][:300] if text else type(e).__name__


def _max(values) -> float | None:
    finite = [v for v in values if v == v]
    return max(finite) if finite else None


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
