"""The step time and the profiler overhead as people read them, the same words in every command."""
from __future__ import annotations

from typing import Any, Mapping

from kernel_advisor.collect.kernel_timing import PASS_KERNELS_ONLY
from kernel_advisor.collect.step_time import Ratio, StepTime, overhead_of
from kernel_advisor.render.units import fmt_ratio, fmt_time_s
from kernel_advisor.records.run import RunMeta


def interval_text(step: StepTime) -> str:
    """"[360.00 ms–372.00 ms, 94 % CI]", or "" when the step time has no interval."""
    if not step.has_interval():
        return ""
    conf = f", {100 * step.confidence:.0f} % CI" if step.confidence is not None else ""
    return f"[{fmt_time_s(step.low_s)}–{fmt_time_s(step.high_s)}{conf}]"


def step_value_text(step: StepTime | None) -> str:
    """"367.00 ms [360.00 ms–372.00 ms, 95 % CI]"; "–" without step times."""
    if step is None:
        return "–"
    interval = interval_text(step)
    return f"{fmt_time_s(step.value_s)} {interval}" if interval else fmt_time_s(step.value_s)


# Below this relative difference the synchronized step says nothing the step figure does not.
SYNC_DIFFERS_ABOVE = 0.05


def step_text(step: StepTime | None, sync: StepTime | None = None) -> str:
    """"step 367.00 ms [… CI], median of 5 windows of back-to-back steps": the figure and what it
    is; with `sync`, the synchronized step beside it where the two differ by more than 5 %."""
    if step is None:
        return "step –"
    text = f"step {step_value_text(step)}, {step.basis()}"
    if sync is not None and step.source == "back-to-back" and step.value_s > 0 \
            and abs(sync.value_s / step.value_s - 1) > SYNC_DIFFERS_ABOVE:
        text += f" (synchronized after every step: {fmt_time_s(sync.value_s)})"
    return text


def overhead_text(ratio: Ratio | None) -> str:
    """"1.08× [1.02–1.15]"; "–" when the run timed no unprofiled steps."""
    if ratio is None:
        return "–"
    return fmt_ratio(ratio.value, ratio.low, ratio.high)


def overhead_figure_text(meta: Mapping[str, Any]) -> str:
    """"1.08× [1.02–1.15] (kernels timed with CUDA activity only; the shapes pass 2.10× [...])",
    or "–" when the run has no overhead."""
    basis = overhead_basis_text(meta)
    return overhead_text(overhead_of(meta)) + (f" ({basis})" if basis else "")


def overhead_basis_text(meta: Mapping[str, Any]) -> str:
    """What the overhead compares: "kernels timed with CUDA activity only; the shapes pass 2.10×",
    or "" for a run with one profiled pass."""
    timing = RunMeta.of(meta).kernel_timing
    if not isinstance(timing, Mapping) or timing.get("source") != PASS_KERNELS_ONLY:
        return ""
    shapes = Ratio.from_json(timing.get("shapes_pass_overhead"))
    tail = f"; the shapes pass {overhead_text(shapes)}" if shapes is not None else ""
    return f"kernels timed with CUDA activity only{tail}"


def kernel_timing_warning(meta: Mapping[str, Any]) -> str | None:
    """A timing pass whose kernels could not be matched to the shapes pass's: say why and what it costs."""
    timing = RunMeta.of(meta).kernel_timing
    if not isinstance(timing, Mapping) or not timing.get("reason"):
        return None
    return (f"kernel times come from the shapes pass, whose overhead is higher: {timing['reason']}; "
            "give the model the same work every step (fixed shapes, no data-dependent branches)")
