"""Report sections for the files other commands add to a run: recommendations and try-kernel.

The fields `advisor recommend` (render/recommend_render.py) and `advisor try-kernel`
(trykernel/results.py) write get a layout of their own; any other field is still shown,
as key/value rows, so a newer writer never loses information in an older report.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import pandas as pd

from kernel_advisor.records.try_kernel import TryKernelResults
from kernel_advisor.records.recommendations import MeasuredOutcome, RecommendationEntry as Recommendation
from kernel_advisor.collect.step_time import step_time_of
from kernel_advisor.render.report_sections import fmt_field, kv_table, missing, num_cell, ordered_ops
from kernel_advisor.render.report_template import Html, h, join
from kernel_advisor.render.units import fmt_frac_pct, fmt_ratio, fmt_si, fmt_time_s

CARDS_SHOWN = 10  # the rest are folded: a long tail of small wins should not bury the top ones
_GOOD_STATUS = ("ok", "pass", "passed", "success", "faster", "correct", "baseline")
_BAD_STATUS = ("fail", "failed", "error", "incorrect", "slower", "crashed", "timeout")


# ---------------------------------------------------------------- recommendations


def _gain_text(rec: Recommendation, step_s: float | None) -> str:
    parts = []
    frac = rec.estimated_gain_frac
    if rec.estimated_gain_per_step_s is not None:
        parts.append(f"{fmt_time_s(rec.estimated_gain_per_step_s)}/step")
        if frac is None and step_s:
            frac = rec.estimated_gain_per_step_s / step_s
    if frac is not None:
        parts.append(f"{fmt_frac_pct(frac, 1)} of the step")
    return "est. gain " + ", ".join(parts) if parts else "no gain estimate"


def _measured_text(m: MeasuredOutcome | None) -> str | None:
    """Predicted beside measured: the card's second headline when `recommend --measure` ran."""
    if m is None:
        return None
    if m.status != "passed" or not m.speedup:
        return f"measured: {m.status} — {m.reason}"
    s = m.speedup
    gain = f", {fmt_frac_pct(m.gain_frac, 1)} of the step" if m.gain_frac is not None else ""
    return f"measured {fmt_ratio(s['value'], s['low'], s['high'])} ({m.verdict}{gain})"


def _thresholds(checks: Any) -> Html | None:
    if not isinstance(checks, list) or not checks or not all(isinstance(c, dict) for c in checks):
        return None
    rows = [h("tr", h("td", h("code", c.get("key", ""))), h("td", fmt_field("expected", c.get("expected"))),
              h("td", fmt_field(str(c.get("key", "")), c.get("actual"))),
              h("td", "✓" if c.get("ok") else "✗")) for c in checks]
    head = h("tr", h("th", "condition"), h("th", "wanted"), h("th", "found"), h("th", "held"))
    return h("details", h("summary", "why it fired"), h("table", h("thead", head), h("tbody", rows)))


def _evidence(evidence: Any) -> Html | None:
    if evidence in (None, {}, []):
        return None
    if isinstance(evidence, dict):
        body = kv_table(evidence)
    elif isinstance(evidence, list) and all(isinstance(e, dict) for e in evidence):
        body = join([kv_table(e) for e in evidence])
    else:
        body = h("p", fmt_field("evidence", evidence), class_="mono wrap")
    return h("details", h("summary", "evidence"), body)


def _text_list(values: Any, label: str) -> Html | None:
    items = [v for v in values if v] if isinstance(values, list) else []
    return h("div", h("span", label, class_="note"), h("ul", [h("li", str(v)) for v in items])) if items else None


def _where(rec: Recommendation, names: Mapping[int, str]) -> Html:
    ops = [names[r] for r in rec.row_ids if r in names]
    label = rec.label or rec.subject
    kernel = rec.kernel_id
    return join([h("span", "rule "), h("code", rec.rule_id or "–"),
                 h("span", f" · where: {label}") if label else None,
                 h("span", " · ops: " + "; ".join(ops)) if ops else None,
                 h("span", " · kernel: ") if kernel else None, h("code", kernel) if kernel else None])


def _recommendation_card(rec: Recommendation, names: Mapping[int, str], step_s: float | None) -> Html:
    basis = " — ".join(v for v in (rec.gain_model, rec.gain_basis) if v)
    measured = _measured_text(rec.measured)
    action = f"action: {rec.action}" + (f" ({rec.action_reason})" if rec.action_reason else "")
    return h("article",
             h("header", h("span", rec.tier or "–", class_="badge tier"), h("h3", rec.title),
               h("span", _gain_text(rec, step_s), class_="gain"),
               h("span", measured, class_="gain") if measured else None),
             h("p", rec.message) if rec.message else None,
             h("p", _where(rec, names), class_="note"),
             h("p", f"gain model: {basis}", class_="note") if basis else None,
             h("p", action, class_="note"),
             h("pre", h("code", rec.command)) if rec.command else None,
             _text_list(list(rec.caveats), "caveats"),
             _thresholds(list(rec.thresholds)), _evidence(rec.evidence),
             _text_list(list(rec.references), "references"), class_="rec")


def _op_name(rec: Recommendation, names: Mapping[int, str]) -> str:
    named = [names[r] for r in rec.row_ids if r in names]
    return "; ".join(named) or rec.label or rec.subject


def _share_text(share: Any) -> str:
    if missing(share) or not isinstance(share, (int, float)):
        return "–"
    return f"{share:.2g}%" if share < 1 else f"{share:.1f}%"  # a leave-it row is often 0.01 %, not "0.0%"


def _leave_it_group_card(rule_id: str, recs: list[Recommendation], names: Mapping[int, str]) -> Html:
    """Several ops one leave-it rule closed: one card with the title, the reasoning (the first op's
    message, the others differ only in their numbers), the action and the citations once, then an
    op per row with its share and time."""
    first = recs[0]
    rows = []
    for rec in recs:
        ev = rec.evidence if isinstance(rec.evidence, Mapping) else {}
        share, per_step = ev.get("share_pct"), ev.get("time_per_step_s")
        rows.append(h("tr", h("td", _op_name(rec, names), class_="mono"), num_cell(share, _share_text(share)),
                      num_cell(per_step, fmt_time_s(per_step))))
    head = h("tr", h("th", "op"), h("th", "share", class_="num"), h("th", "time/step", class_="num"))
    checks = [h("tr", h("td", _op_name(rec, names), class_="mono"), h("td", h("code", c.get("key", ""))),
                h("td", fmt_field("expected", c.get("expected"))),
                h("td", fmt_field(str(c.get("key", "")), c.get("actual"))), h("td", "✓" if c.get("ok") else "✗"))
              for rec in recs for c in rec.thresholds if isinstance(c, Mapping)]
    check_head = h("tr", h("th", "op"), h("th", "condition"), h("th", "wanted"), h("th", "found"), h("th", "held"))
    why = (h("details", h("summary", "why it fired"), h("table", h("thead", check_head), h("tbody", checks)))
           if checks else None)
    caveats = list(dict.fromkeys(c for rec in recs for c in rec.caveats))
    references = list(dict.fromkeys(r for rec in recs for r in rec.references))
    action = f"action: {first.action}" + (f" ({first.action_reason})" if first.action_reason else "")
    return h("article",
             h("header", h("span", first.tier, class_="badge tier"), h("h3", first.title),
               h("span", f"{len(recs)} ops, no gain claimed", class_="gain")),
             h("p", first.message) if first.message else None,
             h("p", join([h("span", "rule "), h("code", rule_id),
                          h("span", f" · the same verdict on {len(recs)} ops, in one card:")]), class_="note"),
             h("table", h("thead", head), h("tbody", rows), class_="leave-it-ops"),
             h("p", action, class_="note"), _text_list(caveats, "caveats"), why,
             _text_list(references, "references"), class_="rec leave-it-group", data_rule=rule_id)


def _cards(recs: tuple[Recommendation, ...], names: Mapping[int, str],
           step_s: float | None) -> list[tuple[Html, int]]:
    """One card per recommendation, except that the leave-it verdicts of one rule share one card
    (placed where the first of them ranks): six "under 2 % — leave it" cards would repeat one citation.
    Each card comes with how many recommendations it shows. A leave-it verdict on an op that a fix
    card names is left out: the report would otherwise tell you to fix it and to leave it."""
    recs = without_contradicted_leave_its(recs)
    by_rule: dict[str, list[Recommendation]] = {}
    for rec in recs:
        if rec.tier == "leave-it":
            by_rule.setdefault(rec.rule_id, []).append(rec)
    cards, placed = [], set()
    for rec in recs:
        group = by_rule.get(rec.rule_id) if rec.tier == "leave-it" else None
        if group is None or len(group) < 2:
            cards.append((_recommendation_card(rec, names, step_s), 1))
        elif rec.rule_id not in placed:
            placed.add(rec.rule_id)
            cards.append((_leave_it_group_card(rec.rule_id, group, names), len(group)))
    return cards


def without_contradicted_leave_its(recs: tuple[Recommendation, ...]) -> tuple[Recommendation, ...]:
    """The leave-it verdicts whose ops no other recommendation tells you to fix."""
    fixed = {r for rec in recs if rec.tier != "leave-it" for r in rec.row_ids}
    return tuple(rec for rec in recs if rec.tier != "leave-it" or not fixed.intersection(rec.row_ids))


def op_names(ops: pd.DataFrame) -> dict[int, str]:
    """row_id → "aten::mm (#3)": # is the op's rank by device time, as in the hotspot table and on
    the roofline chart, so one op has one number everywhere in the report."""
    if "row_id" not in ops:
        return {}
    ordered = ordered_ops(ops)
    return {int(r): f"{n} (#{i + 1})" for i, (r, n) in enumerate(zip(ordered["row_id"], ordered["name"].astype(str)))}


def recommendations_section(recs: tuple[Recommendation, ...] | None, ops: pd.DataFrame,
                            meta: Mapping[str, Any]) -> Html:
    title = h("h2", "Recommendations")
    if recs is None:
        note = "No recommendations.json in this run: run `advisor recommend` on it, then render the report again."
        return h("section", title, h("p", note, class_="note"), id="recommendations")
    if not recs:
        note = "`advisor recommend` found nothing worth recommending in this run."
        return h("section", title, h("p", note, class_="note"), id="recommendations")
    names = op_names(ops)
    step = step_time_of(meta)
    step_s = step.value_s if step is not None else None
    cards = _cards(recs, names, step_s)
    intro = f"{len(recs)} recommendation(s), in the order `advisor recommend` ranked them."
    if len(cards) < len(recs):
        intro += " The leave-it verdicts of one rule share one card listing their ops."
    rest = cards[CARDS_SHOWN:]
    folded = (h("details", h("summary", f"{sum(n for _, n in rest)} more recommendation(s)"),
                [card for card, _ in rest]) if rest else None)
    return h("section", title, h("p", intro, class_="note"), [card for card, _ in cards[:CARDS_SHOWN]], folded,
             id="recommendations")


# ---------------------------------------------------------------- try-kernel


def status_badge(status: Any) -> Html:
    word = str(status).strip().lower()
    cls = "s-good" if word in _GOOD_STATUS else "s-bad" if word in _BAD_STATUS else "s-other"
    return h("span", str(status), class_=f"badge {cls}")


def _estimate(value: Any) -> tuple[float | None, float | None, float | None]:
    """(value, low, high) from a number or an {"value", "low", "high"} mapping."""
    if isinstance(value, dict):
        return value.get("value"), value.get("low"), value.get("high")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value, None, None
    return None, None, None


def _with_range(value: Any, fmt: Callable[[float], str]) -> tuple[Any, str]:
    mid, low, high = _estimate(value)
    if mid is None:
        return None, "–"
    spread = f" [{fmt(low)}–{fmt(high)}]" if low is not None and high is not None else ""
    return mid, fmt(mid) + spread


def _dig(variant: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        variant = variant.get(key) if isinstance(variant, dict) else None
    return variant


def _name(v: Mapping[str, Any]) -> tuple[Any, Html]:
    kind = h("span", f" {v['kind']}", class_="note") if v.get("kind") else None
    return v.get("name"), join([h("span", v.get("name", ""), class_="mono"), kind])


def _status(v: Mapping[str, Any]) -> tuple[Any, Html]:
    reason = h("div", v["reason"], class_="note") if v.get("reason") else None
    return v.get("status"), join([status_badge(v["status"]) if v.get("status") else "–", reason])


def _op_time(v: Mapping[str, Any]) -> tuple[Any, str]:
    base, new = _dig(v, "op", "baseline_s"), _dig(v, "op", "variant_s")
    if base is None or new is None:
        return None, "–"
    return new, f"{fmt_time_s(base)} → {fmt_time_s(new)}"


def _gain_frac(key: str) -> Callable[[Mapping[str, Any]], tuple[Any, str]]:
    return lambda v: (_dig(v, "prediction", key), fmt_frac_pct(_dig(v, "prediction", key), 1))


def _gate(v: Mapping[str, Any]) -> tuple[Any, Html | str]:
    gate = v.get("gate")
    if not isinstance(gate, dict):
        return None, "–"
    err = gate.get("rel_err")
    return err, join([status_badge(gate.get("status", "?")),
                      f" rel. error {err:.2g}" if isinstance(err, (int, float)) else ""])


def _field(key: str, fmt: Callable[[Any], str]) -> Callable[[Mapping[str, Any]], tuple[Any, str]]:
    return lambda v: (v.get(key), fmt(v.get(key)))


# (header, numeric, extractor → (sort value, cell)) for trykernel/results.py's VariantResult.
VARIANT_COLUMNS: tuple[tuple[str, bool, Callable[[Mapping[str, Any]], tuple[Any, Any]]], ...] = (
    ("variant", False, _name),
    ("status", False, _status),
    ("step time", True, lambda v: _with_range(v.get("step_s"), fmt_time_s)),
    ("speedup", True, lambda v: _with_range(v.get("speedup"), lambda x: f"{x:.3g}×")),
    ("verdict", False, _field("verdict", lambda x: x or "–")),
    ("op time eager → variant", True, _op_time),
    ("predicted gain", True, _gain_frac("predicted_gain_frac")),
    ("measured gain", True, _gain_frac("measured_gain_frac")),
    ("correctness gate", False, _gate),
    ("peak memory", True, _field("peak_memory_bytes", lambda x: fmt_si(x, "B"))),
    ("fallback calls", True, _field("fallback_calls", lambda x: fmt_field("n", x))),
    ("warning", False, _field("suspect", lambda x: x or "")),
)


def _known_variant_table(variants: tuple[Mapping[str, Any], ...]) -> Html:
    cells = [[extract(v) for _, _, extract in VARIANT_COLUMNS] for v in variants]
    # A column no variant has a value for (e.g. no prediction without recommendations) is dropped.
    keep = [i for i in range(len(VARIANT_COLUMNS)) if any(not missing(row[i][0]) and row[i][0] != "" for row in cells)]
    head = h("tr", [h("th", VARIANT_COLUMNS[i][0], class_="num" if VARIANT_COLUMNS[i][1] else None) for i in keep])
    rows = [h("tr", [num_cell(row[i][0], row[i][1]) if VARIANT_COLUMNS[i][1]
                     else h("td", row[i][1], data_sort=str(row[i][0] or "")) for i in keep]) for row in cells]
    return h("table", h("thead", head), h("tbody", rows), class_="sortable", id="try-kernel-table")


def _generic_variant_table(variants: tuple[Mapping[str, Any], ...]) -> Html:
    columns: list[str] = []
    for variant in variants:
        columns += [k for k in variant if k not in columns]
    head = h("tr", [h("th", c) for c in columns])
    rows = [h("tr", [h("td", status_badge(v[c]) if c == "status" and v.get(c) is not None
                       else fmt_field(c, v.get(c)), class_="wrap") for c in columns]) for v in variants]
    return h("table", h("thead", head), h("tbody", rows), class_="sortable", id="try-kernel-table")


def try_kernel_section(results: TryKernelResults | None) -> Html:
    title = h("h2", "Try-kernel results")
    if results is None:
        note = ("No try_kernel.json in this run: `advisor try-kernel` A/B-tests reference kernels inside "
                "the model and records the result here.")
        return h("section", title, h("p", note, class_="note"), id="try-kernel")
    summary = {k: v for k, v in results.summary.items() if k not in ("notes", "schema_version")}
    known = any(isinstance(v.get("step_s"), dict) or "kind" in v for v in results.variants)
    table = (h("p", "No variants were recorded.", class_="note") if not results.variants
             else _known_variant_table(results.variants) if known else _generic_variant_table(results.variants))
    return h("section", title, kv_table(summary) if summary else None, table,
             _text_list(results.summary.get("notes"), "notes"), id="try-kernel")
