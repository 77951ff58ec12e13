"""`recommend --measure` credits a compile recommendation with the mode that measured clearly faster,
and says so: stubbed measurements on a synthetic op table (the GPU run is in test_measure_gpu.py)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from test_recommend_support import BW, CEILINGS, op_row, op_table, run_meta, sequence_from

from kernel_advisor.collect.loop_timing import Estimate
from kernel_advisor.experiment.engine import SearchResult, PlanResult
from kernel_advisor.experiment.trial import Outcome
from kernel_advisor.recommend import measured as advice
from kernel_advisor.recommend.measured import measure_report
from kernel_advisor.recommend.measured import measured_json
from kernel_advisor.recommend.report import recommendations_json
from kernel_advisor.recommend.kernels import registry_kernels
from kernel_advisor.recommend.report import recommend
from kernel_advisor.recommend.schema import load_rules
from kernel_advisor.records.experiments import ExperimentsRecord


def _report():
    # group_norm at 19 % of bandwidth, 40 MB a call: compile-memory-bound-op fires with action compile
    row = op_row(0, "aten::group_norm", [[32, 256, 64, 64]], ["bfloat16"], 2, 2 * 52.6e-6, flops=1e6,
                 nbytes=40e6, bw=BW)
    meta = run_meta(total_device_time_s=row["device_time_total_s"], step_wall_s=200e-6, ceilings=CEILINGS)
    return recommend(op_table([row]), sequence_from([]), meta, load_rules(), registry_kernels())


def _timed(speed: float, half: float, verdict: str = "faster") -> Outcome:
    return Outcome("passed", speedup=Estimate(speed, speed - half, speed + half), gain_frac=1 - 1 / speed,
                   verdict=verdict)


@pytest.fixture
def measured_with(monkeypatch):
    """measure_report with measure_actions stubbed: records the names asked for, returns `outcomes`."""
    asked: list[str] = []

    def run(outcomes, device="cuda"):
        def fake(loaded, mode, names, options, busy_frac=None, run_dir=None, progress=None):
            # the engine measures every compile mode of the device beside what the advice names
            asked.extend(names)
            got = {n: o for n, o in outcomes.items() if device == "cuda" or "reduce-overhead" not in n}
            best = max((n for n in got if got[n].verdict == "faster"), key=lambda n: got[n].speedup.value,
                       default=None)
            plan = PlanResult((best,), got[best]) if best else PlanResult((), Outcome("not-applied"))
            record = ExperimentsRecord(True, False, None, 0.0, "", None, None, None, (), None)
            return SearchResult(got, plan, None, None, "", "", record)

        monkeypatch.setattr(advice, "measure_actions", fake)
        report = _report()
        loaded = SimpleNamespace(device=torch.device(device))
        return report, measure_report(report, loaded, "inference", None, top=5), asked

    return run


def test_the_graph_mode_is_measured_and_credited_when_clearly_faster(measured_with):
    report, m, asked = measured_with({"compile": _timed(1.0, 0.03, "no measurable difference"),
                                      "compile:reduce-overhead": _timed(1.41, 0.03)})
    assert asked == ["compile"]
    rec = next(r for f in report.findings for r in f.recommendations if r.action == "compile")
    assert m.action_of(rec) == "compile:reduce-overhead"
    outcome = m.outcome_of(rec)
    assert outcome.speedup.value == 1.41 and outcome.reason.startswith("measured as compile:reduce-overhead: 1.41×")
    assert rec.rule_id in m.plan_rules  # the plan's compile:reduce-overhead is this recommendation's
    doc = measured_json(recommendations_json(report), report, m)
    entry = next(r for r in doc["recommendations"] if r["rule_id"] == rec.rule_id)
    assert entry["action"] == "compile:reduce-overhead"


def test_a_tie_stays_with_the_mode_the_rule_named(measured_with):
    report, m, _ = measured_with({"compile": _timed(2.32, 0.05), "compile:reduce-overhead": _timed(2.36, 0.05)})
    rec = next(r for f in report.findings for r in f.recommendations if r.action == "compile")
    assert m.action_of(rec) == "compile" and m.outcome_of(rec).speedup.value == 2.32


def test_no_graph_mode_on_the_cpu(measured_with):
    _, m, asked = measured_with({"compile": _timed(1.2, 0.02)}, device="cpu")
    assert asked == ["compile"] and set(m.actions.values()) <= {"compile", "none"}
