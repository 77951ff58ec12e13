"""Per hotspot: its verdict, the rung chosen on the ladder, and why cheaper rungs were passed over.

The ladder is library → torch.compile → Triton → custom CUDA. The chosen rung is the
cheapest one whose best recommendation reaches CHOOSE_FRAC of the best saving any rung
offers for that op: more effort must buy more time. An op that is host- or latency-bound
takes the run's launch-gap rung (CUDA graphs) when it fired: its launches, not its kernel, set
the pace. Otherwise it takes its own rung (compile-host-bound-op, compile-latency-op), and with
none, the launch rule's failed conditions are its reason. An op whose applicable rungs find it
already at or past their target is left as it is, with that as the evidence.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from kernel_advisor.recommend.conditions import Check
from kernel_advisor.recommend.engine import Engine, Recommendation
from kernel_advisor.recommend.gain import HOST_GAPS, row_bucket
from kernel_advisor.recommend.messages import ms_text
from kernel_advisor.recommend.schema import LADDER, Rule
from kernel_advisor.recommend.subjects import Subject

if TYPE_CHECKING:
    from reference_kernels.registry import KernelSpec

CHOOSE_FRAC = 0.8  # NB: a cheaper rung is preferred while it gets 80 % of the best saving
# An op of these verdicts spends its time in launches: its rung is the run's (CUDA graphs).
LAUNCH_VERDICTS = ("host-bound", "latency-bound")
LAUNCH_GAIN_MODEL = "launch-overhead"


@dataclass(frozen=True)
class Hotspot:
    row_id: int
    name: str
    input_shapes: str
    share_pct: float | None
    time_per_step_s: float
    verdict: str
    efficiency_frac: float | None
    chosen_tier: str  # a LADDER tier, "leave-it", or "none"
    chosen_rule: str | None
    why: str
    passed_over: tuple[tuple[str, str], ...]  # (tier, reason), cheapest first



def _row_gain(rec: Recommendation, row_id: int) -> float:
    return rec.row_saving_per_step_s.get(row_bucket(row_id), 0.0)


def _touches(rec: Recommendation, row_id: int) -> bool:
    return (rec.scope == "op" and row_id in rec.subject_rows) or row_bucket(row_id) in rec.row_saving_per_step_s


def _failing(checks: Sequence[Check]) -> list[Check]:
    return [c for c in checks if not c.ok]


def _describe_miss(rule: Rule, failing: Sequence[Check]) -> str:
    parts = [f"{c.key} is {_fmt(c.actual)} (needs {c.expected})" for c in failing[:2]]
    return f"{rule.id}: " + "; ".join(parts)


def _fmt(value: object) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fmt(v)}" for k, v in value.items())
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _nearest_miss(engine: Engine, tier: str, op: Subject) -> str:
    """Why no rule of `tier` fired on this op: the rule that came closest, and what failed."""
    row_id = op.evidence["row_id"]
    best: tuple[int, str] | None = None
    for rule in (r for r in engine.rules if r.tier == tier):
        if rule.scope == "op":
            checks, spec = engine.evaluation(rule, op).checks, engine.evaluation(rule, op).spec
            if any(c.key == "ops" and not c.ok for c in checks):
                continue
            candidates = [checks]
        elif rule.scope == "pattern":
            spec = None
            subjects = [s for s in engine.subjects.patterns if row_id in s.row_time_per_step_s]
            candidates = [engine.evaluation(rule, s).checks for s in subjects]
            candidates = [c for c in candidates if not any(x.key == "pattern" and not x.ok for x in c)]
            if not candidates:
                continue
        else:
            continue
        for checks in candidates:
            failing = _failing(checks)
            why = _describe_miss(rule, failing) if failing else _no_saving(engine, rule, op, checks, spec)
            if best is None or len(failing) < best[0]:
                best = (len(failing), why)
    return best[1] if best else f"no {tier} rule covers {op.evidence['name']}"


def _no_saving(engine: Engine, rule: Rule, op: Subject, checks: tuple[Check, ...],
               spec: KernelSpec | None) -> str:
    """A rule that applies but claims nothing: its gain model's own reason (a kernel that lost
    to eager at the nearest measured shape says so, with both times)."""
    rec = engine.evaluation(rule, op).recommendation if rule.scope == "op" else None
    if rec is None:
        return f"{rule.id} applies but estimates no saving here"
    return f"{rule.id} applies but estimates no saving here: {rec.gain_basis}"


def _passed_over(engine: Engine, op: Subject, recs: Sequence[Recommendation], tiers: Sequence[str],
                 best: Recommendation | None, suppressed: Sequence[Recommendation]) -> tuple[tuple[str, str], ...]:
    row_id = op.evidence["row_id"]
    out = []
    for tier in tiers:
        mine = [r for r in recs if r.tier == tier]
        muted = [r for r in suppressed if r.tier == tier and r.subject == op.key]
        if mine and best is not None:
            top = max(mine, key=lambda r: _row_gain(r, row_id))
            out.append((tier, f"{top.rule_id} saves {ms_text(_row_gain(top, row_id))}, under "
                              f"{CHOOSE_FRAC:.0%} of {best.rule_id}'s {ms_text(_row_gain(best, row_id))}"))
        elif muted:
            out.append((tier, f"{muted[0].rule_id} fired but the op is not worth it (leave-it)"))
        else:
            out.append((tier, _nearest_miss(engine, tier, op)))
    return tuple(out)


def _choose(recs: Sequence[Recommendation], row_id: int) -> Recommendation | None:
    positive = [r for r in recs if r.tier in LADDER and _row_gain(r, row_id) > 0]
    if not positive:
        return None
    best = max(_row_gain(r, row_id) for r in positive)
    for tier in LADDER:
        good = [r for r in positive if r.tier == tier and _row_gain(r, row_id) >= CHOOSE_FRAC * best]
        if good:
            return max(good, key=lambda r: _row_gain(r, row_id))
    return None


AT_TARGET = {"roofline": "already where", "measured-backend": "already faster than where"}


def _at_target(engine: Engine, op: Subject) -> str | None:
    """The evidence that an op is already where its rungs would bring it: a rung whose every
    condition holds but whose gain model finds the op at or past its target (a memory-bound op at
    77 % of bandwidth, which compile would bring to 70 %). None when no rung applies at all."""
    # A roofline zero means "at the target", a backend table's zero "on the fastest backend measured
    # here"; a measured kernel's zero means the kernel lost, which is no evidence about the op.
    for rule in (r for r in engine.rules if r.tier in LADDER and r.scope == "op" and r.gain.model in AT_TARGET):
        rec = engine.evaluation(rule, op).recommendation
        if rec is None:  # a check failed
            continue
        if rec.saving_per_step_s == 0.0:
            return f"{AT_TARGET[rule.gain.model]} {rule.id} would bring it: {rec.gain_basis}"
    return None


def _launch_rung(recs: Sequence[Recommendation]) -> Recommendation | None:
    """The run-level recommendation that removes launch gaps (CUDA graphs), if one fired."""
    return max((r for r in recs if r.row_saving_per_step_s.get(HOST_GAPS, 0.0) > 0),
               key=lambda r: r.row_saving_per_step_s[HOST_GAPS], default=None)


def _launch_miss(engine: Engine, verdict: str) -> str:
    """Why no launch-gap rule fired on this run: the op's own time is launch overhead, a
    run-level matter, so the run-level rules' failed conditions are the evidence."""
    misses = [_describe_miss(rule, failing) for rule in engine.rules
              if rule.scope == "run" and rule.gain.model == LAUNCH_GAIN_MODEL
              and (failing := _failing(engine.evaluation(rule, engine.subjects.run).checks))]
    return f"{verdict}: launch overhead is a run-level matter, and " + (
        "; ".join(misses) if misses else f"no rule with the {LAUNCH_GAIN_MODEL} gain model is loaded")


def hotspot(engine: Engine, op: Subject, recs: Sequence[Recommendation],
            suppressed: Sequence[Recommendation]) -> Hotspot:
    ev, row_id = op.evidence, op.evidence["row_id"]
    mine = [r for r in recs if _touches(r, row_id)]
    chosen = _choose(mine, row_id)
    leave = next((r for r in mine if r.tier == "leave-it" and r.subject == op.key), None)
    host = _launch_rung(recs) if ev["verdict"] in LAUNCH_VERDICTS else None
    if host is not None:
        tier, rule = host.tier, host.rule_id
        why = (f"{ev['verdict']}: its launches, not its kernel, set the pace; {host.rule_id} removes the "
               f"step's launch gaps (saves {ms_text(host.row_saving_per_step_s[HOST_GAPS])} a step)")
        passed = _passed_over(engine, op, mine, LADDER[:LADDER.index(host.tier)], None, suppressed)
    elif chosen is not None:
        best = max((r for r in mine if r.tier in LADDER), key=lambda r: _row_gain(r, row_id))
        tiers = LADDER[:LADDER.index(chosen.tier)]
        tier, rule, why = chosen.tier, chosen.rule_id, f"{chosen.title}: saves {ms_text(_row_gain(chosen, row_id))}"
        passed = _passed_over(engine, op, mine, tiers, best, suppressed)
    elif leave is not None:
        # The message, not the title: a leave-it must state its evidence ("at 85 % of the roofline").
        tier, rule, why, passed = "leave-it", leave.rule_id, leave.message, ()
    elif (at := _at_target(engine, op)) is not None:
        tier, rule, why, passed = "leave-it", None, at, _passed_over(engine, op, mine, LADDER, None, suppressed)
    else:
        tier, rule = "none", None
        why = (_launch_miss(engine, ev["verdict"]) if ev["verdict"] in LAUNCH_VERDICTS
               else "no rule estimates a saving for this op")
        passed = _passed_over(engine, op, mine, LADDER, None, suppressed)
    return Hotspot(row_id=row_id, name=ev["name"], input_shapes=ev.get("input_shapes", "[]"),
                   share_pct=ev.get("share_pct"),
                   time_per_step_s=ev["time_per_step_s"], verdict=ev["verdict"],
                   efficiency_frac=ev.get("efficiency_frac"), chosen_tier=tier, chosen_rule=rule,
                   why=why, passed_over=passed)


def hotspots(engine: Engine, recs: Sequence[Recommendation], suppressed: Sequence[Recommendation],
             top: int = 10) -> tuple[Hotspot, ...]:
    ranked = sorted(engine.subjects.ops, key=lambda s: -s.evidence["time_per_step_s"])[:top]
    return tuple(hotspot(engine, op, recs, suppressed) for op in ranked)
