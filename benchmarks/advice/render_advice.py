"""Render benchmarks/data/advice.csv into docs: per-rule predicted vs measured gain, per-model best fix.

    python3 benchmarks/advice/render_advice.py [--csv benchmarks/data/advice.csv] [--docs docs/benchmarks.md]
                                               [--recall-docs docs/accuracy.md]

The markdown goes between `<!-- advice:begin -->` and `<!-- advice:end -->`; without those
markers a `## Measured advice` section holding them is appended. The per-model recall table
(best measured fix, in the top three?) also goes between `<!-- recall:begin/end -->` of
docs/accuracy.md. Everything but main() is a
pure function of the DataFrame (tests/test_advice_runner.py).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(HERE.parent)]
import fit_gain  # noqa: E402 - a sibling script: one definition of the action-level comparison
from docdata import commit_source, splice_block  # noqa: E402

BEGIN, END = "<!-- advice:begin -->", "<!-- advice:end -->"
RECALL_BEGIN, RECALL_END = "<!-- recall:begin -->", "<!-- recall:end -->"
SEARCH_BEGIN, SEARCH_END = "<!-- search:begin -->", "<!-- search:end -->"
CSV_NAME = "benchmarks/data/advice.csv"  # the blocks name it as the holder of their commits
CLOSE, NEAR = 0.98, 0.9  # the plan against the hand search's best: "reached", and the floor
TOLERANCE = 0.15  # the aim: predicted within ±0.15 of measured (fraction of the step)
TOP = 3
BIG_WIN = 1.2  # the aim: every measured win of at least this speedup is named by the top three
GROUP = ["device_name", "precision", "mode"]  # precision: dtype with "autocast:" dropped, so the
# RNN models (run under bf16 autocast) sit in the same tables as the models cast to bf16


def render(df: pd.DataFrame) -> str:
    """All sections, one block per (device, dtype, mode) measured."""
    if df.empty:
        return "_No measurements yet: run benchmarks/advice/run_advice.py on the GPU machine._\n"
    df = df.assign(precision=df["dtype"].str.replace("autocast:", "", regex=False))
    blocks = []
    for _, group in df.groupby(GROUP, sort=True):
        blocks.append("\n\n".join([header_line(group), "Per action, on the whole model:", action_table(group),
                                    "Per rule (its findings summed per model, against its action's measured gain):",
                                    rule_table(group), "Per model:", model_table(group)]))
    return "\n\n".join(blocks) + "\n"


def header_line(df: pd.DataFrame) -> str:
    def values(col):
        return ", ".join(sorted({str(v) for v in df[col] if isinstance(v, str) and v})) or "?"
    dates = sorted(d[:10] for d in df["date"] if isinstance(d, str) and d)
    when = "?" if not dates else dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    return (f"**Measured {when}** on {values('gpu')} · torch {values('torch')} · triton {values('triton')} · "
            f"{commit_source(CSV_NAME)} · {values('dtype')} {values('mode')} · "
            f"{df['model'].nunique()} models, `recommend --measure` (docs/measure.md)")


def _timed(df: pd.DataFrame) -> pd.DataFrame:
    return df[(df["status"] == "passed") & df["measured_gain_frac"].notna()]


def findings(df: pd.DataFrame) -> pd.DataFrame:
    """Rule rows merged per (model, rule_id, action): an action is measured once, on the whole
    model, so the prediction to hold against it is the rule's gain summed over every subject
    it fired on with that action. Leave-it advice (action none) has nothing to measure."""
    rules = df[(df["kind"] == "rule") & (df["action"] != "none")]
    return rules.groupby(["model", "rule_id", "action"], sort=True, as_index=False).agg(
        predicted_gain_frac=("predicted_gain_frac", lambda x: x.sum(min_count=1)),
        measured_gain_frac=("measured_gain_frac", "first"), verdict=("verdict", "first"),
        status=("status", "first"), rank=("rank", "min"), subjects=("subject", "size"))


def rule_stats(df: pd.DataFrame) -> pd.DataFrame:
    """Per rule_id (and all rules together): how its findings measured against their prediction."""
    rules = findings(df)
    out = [_stats(rule, g) for rule, g in rules.groupby("rule_id", sort=True)]
    if out:
        out.append(_stats("all rules", rules))
    return pd.DataFrame(out, columns=["rule_id", "findings", "measured", "faster", "predicted_median",
                                      "measured_median", "abs_error_median", "within", "within_of"])


def _stats(name: str, g: pd.DataFrame) -> dict:
    timed = _timed(g)
    both = timed[timed["predicted_gain_frac"].notna()]
    error = (both["predicted_gain_frac"] - both["measured_gain_frac"]).abs()
    faster = both[both["verdict"] == "faster"]
    within = (faster["predicted_gain_frac"] - faster["measured_gain_frac"]).abs() <= TOLERANCE + 1e-12
    return {"rule_id": name, "findings": len(g), "measured": len(timed),
            "faster": int((timed["verdict"] == "faster").sum()),
            "predicted_median": both["predicted_gain_frac"].median(), "measured_median": both["measured_gain_frac"].median(),
            "abs_error_median": error.median(), "within": int(within.sum()), "within_of": len(faster)}


def rule_table(df: pd.DataFrame) -> str:
    stats = rule_stats(df)
    lines = [f"| rule | findings | measured | faster | predicted gain (median) | measured gain (median) | "
             f"median abs error | within ±{TOLERANCE:.2f} (of faster) |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for s in stats.itertuples():
        share = "—" if not s.within_of else f"{s.within}/{s.within_of} ({s.within / s.within_of:.0%})"
        name = f"**{s.rule_id}**" if s.rule_id == "all rules" else f"`{s.rule_id}`"
        lines.append(f"| {name} | {s.findings} | {s.measured} | {s.faster} | {_num(s.predicted_median)} | "
                     f"{_num(s.measured_median)} | {_num(s.abs_error_median)} | {share} |")
    return "\n".join(lines)


def action_stats(df: pd.DataFrame) -> pd.DataFrame:
    """Per action family (and all): predicted union against measured, before the fitted scales and
    after them, each model predicted with scales fitted on the other models (leave one out)."""
    rows = fit_gain.action_rows(df)
    if rows.empty:
        return pd.DataFrame()
    rows = rows.assign(loo=fit_gain.leave_one_model_out(rows))
    scales = fit_gain.fit_scales(rows)
    out = [_action_stat(family, g, scales) for family, g in rows.groupby("family", sort=True)]
    return pd.DataFrame(out + [_action_stat("all actions", rows, scales)])


def _action_stat(name: str, g: pd.DataFrame, scales: dict) -> dict:
    faster = g[g["verdict"] == "faster"]
    near = lambda col: int(((faster[col] - faster["measured"]).abs() <= TOLERANCE + 1e-12).sum())  # noqa: E731
    scale = next((s for (_, fam), (s, _n) in scales.items() if fam == name), None)
    return {"family": name, "measured": len(g), "faster": len(faster), "scale": scale,
            "predicted_median": faster["predicted"].median(), "measured_median": faster["measured"].median(),
            "within_before": near("predicted"), "within_after": near("loo")}


def action_table(df: pd.DataFrame) -> str:
    stats = action_stats(df)
    lines = [f"| action | models measured | faster | fitted scale | predicted gain (median, faster) | "
             f"measured gain (median, faster) | within ±{TOLERANCE:.2f} before fit | after fit (leave one model out) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for s in stats.to_dict("records"):
        share = lambda k: "—" if not s["faster"] else f"{s[k]}/{s['faster']} ({s[k] / s['faster']:.0%})"  # noqa: E731
        name = f"**{s['family']}**" if s["family"] == "all actions" else f"`{s['family']}`"
        lines.append(f"| {name} | {s['measured']} | {s['faster']} | {_num(s['scale'])} | {_num(s['predicted_median'])} | "
                     f"{_num(s['measured_median'])} | {share('within_before')} | {share('within_after')} |")
    return "\n".join(lines)


def best_fixes(df: pd.DataFrame) -> pd.DataFrame:
    """Per model, the row with the largest measured gain among those that measured faster
    (rule, also and plan rows alike), with what the recommendations had said about it."""
    out = []
    for model, g in df.groupby("model", sort=True):
        faster = _timed(g)[lambda t: (t["verdict"] == "faster") & t["kind"].isin(["rule", "also", "plan"])]
        rules = findings(g)
        top_actions = set(rules.loc[rules["rank"] <= TOP, "action"])
        plan = g[g["kind"] == "plan"]
        note = "" if plan.empty or plan["status"].iloc[0] != "error" else f"error: {plan['reason'].iloc[0][:120]}"
        if faster.empty:
            out.append({"model": model, "action": "", "note": note or "nothing measured faster"})
            continue
        best = faster.loc[faster["measured_gain_frac"].idxmax()]
        parts = [a for a in best["action"].split("+") if a]
        naming = rules[rules["action"] == best["action"]].sort_values("rank")
        if best["kind"] == "plan":  # the plan names its own rules; it has no predicted gain of its own
            rule_id, predicted = best["rule_id"], None
        else:
            rule_id = naming["rule_id"].iloc[0] if len(naming) else ""
            predicted = naming["predicted_gain_frac"].iloc[0] if len(naming) else None
        in_top = bool(parts) and all(p in top_actions for p in parts)
        out.append({"model": model, "action": best["action"], "kind": best["kind"], "speedup": best["speedup"],
                    "low": best["speedup_low"], "high": best["speedup_high"],
                    "measured_gain": best["measured_gain_frac"], "in_top": in_top,
                    "rule_id": rule_id, "predicted_gain": predicted, "note": note,
                    **_best_of_top(faster, top_actions, best, in_top)})
    return pd.DataFrame(out)


def _best_of_top(faster: pd.DataFrame, top_actions: set, best: pd.Series, in_top: bool) -> dict:
    """The fastest fix made only of top-3 actions, and whether its interval reaches the best's: a
    best fix that the top three miss by less than the measurement can tell is as good as named."""
    if in_top:
        return {"top_fix": best["action"], "top_speedup": best["speedup"], "as_fast": True}
    ours = faster[faster["action"].map(lambda a: bool(a) and all(p in top_actions for p in a.split("+")))]
    if ours.empty:
        return {"top_fix": "", "top_speedup": None, "as_fast": False}
    top = ours.loc[ours["measured_gain_frac"].idxmax()]
    return {"top_fix": top["action"], "top_speedup": top["speedup"],
            "as_fast": bool(top["speedup_high"] >= best["speedup_low"])}


def _named_cell(b: dict) -> str:
    if b["in_top"]:
        return "yes"
    if not b["top_fix"]:
        return "no"
    verdict = "as fast" if b["as_fast"] else "no"
    return f"{verdict}: `{b['top_fix']}` {b['top_speedup']:.2f}×"


def model_table(df: pd.DataFrame) -> str:
    lines = [f"| model | best measured fix | speedup [95 % interval] | measured gain | in top {TOP}? | "
             "rule naming it | predicted gain |", "|---|---|---:|---:|---|---|---:|"]
    for b in best_fixes(df).to_dict("records"):
        if not b["action"]:
            lines.append(f"| {b['model']} | — ({_cell(b['note'])}) | | | | | |")
            continue
        kind = "" if b["kind"] == "rule" else f" ({b['kind']})"
        lines.append(f"| {b['model']} | `{b['action']}`{kind} | {b['speedup']:.2f}× [{_num(b['low'])}, "
                     f"{_num(b['high'])}] | {b['measured_gain']:.2f} | {_named_cell(b)} | "
                     f"{'`' + b['rule_id'] + '`' if b['rule_id'] else 'not recommended'} | "
                     f"{_num(b['predicted_gain'])} |")
    return "\n".join(lines)


def splice(text: str, block: str, markers: tuple[str, str] = (BEGIN, END), title: str = "Measured advice") -> str:
    return splice_block(text, block, *markers, title)


def recall(df: pd.DataFrame) -> str:
    """docs/accuracy.md's block: per model, the best measured fix and whether the top three named it."""
    if df.empty:
        return "_No measurements yet._\n"
    df = df.assign(precision=df["dtype"].str.replace("autocast:", "", regex=False))
    blocks = []
    for _, group in df.groupby(GROUP, sort=True):
        fixes = best_fixes(group)
        named = fixes[fixes["action"] != ""]
        hits = int(named["in_top"].sum()) if len(named) else 0
        as_fast = int((named["as_fast"] & ~named["in_top"]).sum()) if len(named) else 0
        big = named[named["speedup"] >= BIG_WIN]
        big_hits = int((big["in_top"] | big["as_fast"]).sum()) if len(big) else 0
        blocks.append(f"{header_line(group)}\n\nThe best measured fix is named by a top-{TOP} recommendation "
                      f"on {hits} of {len(named)} models with a measured win; on {as_fast} more, top-{TOP} "
                      f"actions measured as fast (overlapping intervals). Of the {len(big)} wins of "
                      f"≥ {BIG_WIN:g}×, {big_hits} are named or matched by the top {TOP}. {silence(group)}"
                      f"\n\n{model_table(group)}" + (f"\n\n{t}" if (t := silent_table(group)) else ""))
    return "\n\n".join(blocks) + "\n"


def silence(df: pd.DataFrame) -> str:
    """Did any hotspot of ≥ 2 % of device time end with neither a rung nor a leave-it reason?"""
    spots = df[df["kind"] == "hotspot"]
    if spots.empty:
        return "No hotspot rows recorded."
    silent = spots[spots["action"] == "none"]
    rungs = int((~spots["action"].isin(["none", "leave-it"])).sum())
    return (f"Of {len(spots)} hotspots of ≥ 2 % of device time in {spots['model'].nunique()} models, {rungs} "
            f"got a rung, {int((spots['action'] == 'leave-it').sum())} an evidenced leave-it, and "
            f"{len(silent)} neither{' (listed below the table)' if len(silent) else ''}.")


def silent_table(df: pd.DataFrame) -> str:
    """The hotspots with neither a rung nor a leave-it: each rung's reason for passing them over."""
    silent = df[(df["kind"] == "hotspot") & (df["action"] == "none")]
    if silent.empty:
        return ""
    lines = ["Hotspots with neither a rung nor a leave-it, with each rung's reason for passing them over:", "",
             "| model | op (verdict) | share of device time | reasons |", "|---|---|---:|---|"]
    for r in silent.itertuples():
        op, _, why = str(r.reason).partition(": ")
        lines.append(f"| {r.model} | {_cell(op)} | {100 * r.predicted_gain_frac:.1f} % | {_cell(why)} |")
    return "\n".join(lines)


def search(df: pd.DataFrame) -> str:
    """The plan `--measure` found against the independent exhaustive search (benchmarks/advice/
    exhaustive.py), per model measured both ways; one block per (device, dtype, mode)."""
    both = df[df["kind"].isin(["exhaustive", "plan"])]
    blocks = []
    for (device, dtype, mode), group in both.groupby(["device_name", "dtype", "mode"], sort=True):
        rows = [r for r in (_search_row(m, g) for m, g in group.groupby("model", sort=True)) if r]
        if rows:
            blocks.append(_search_block(device, dtype, mode, rows, group))
    return "\n\n".join(blocks) + "\n" if blocks else "_No model measured both ways yet._\n"


def _search_row(model: str, g: pd.DataFrame) -> dict | None:
    exh = g[(g["kind"] == "exhaustive") & (g["status"] == "passed") & g["speedup"].notna()]
    plan = g[g["kind"] == "plan"]
    if exh.empty or plan.empty:
        return None
    best, p = exh.loc[exh["speedup"].idxmax()], plan.iloc[0]
    planned = p["speedup"] if p["status"] == "passed" and pd.notna(p["speedup"]) else 1.0  # no plan: eager
    return {"model": model, "best": best["action"], "best_x": best["speedup"], "plan": p["action"] or "eager",
            "plan_x": planned, "ratio": plan_over_best(p, exh, planned / best["speedup"]),
            "eager_ratio": _eager_ratio(p, best), "explored": p["explored"], "pruned": p["pruned"],
            "wall_s": p["wall_s"]}


def plan_over_best(plan: pd.Series, exh: pd.DataFrame, by_speedup: float) -> float:
    """The hand search's fastest step over the plan's step, in seconds where both runs recorded
    them: two runs' eager steps can differ (host drift, warm-up), and what the user gets is the
    plan's absolute step. Older rows without seconds compare speedups."""
    seconds = exh["step_s"].dropna() if "step_s" in exh else pd.Series(dtype=float)
    if seconds.empty or pd.isna(plan.get("step_s")) or not plan["step_s"]:
        return by_speedup
    return float(seconds.min()) / float(plan["step_s"])


def _eager_ratio(plan: pd.Series, best: pd.Series) -> float | None:
    """The two runs' eager steps, search's over the hand search's: far from 1, the runs disagree on
    the baseline itself."""
    a, b = plan.get("eager_step_s"), best.get("eager_step_s")
    return None if pd.isna(a) or pd.isna(b) or not b else float(a) / float(b)


def _search_block(device: str, dtype: str, mode: str, rows: list[dict], group: pd.DataFrame) -> str:
    wins = [r for r in rows if r["best_x"] >= BIG_WIN]
    close = sum(r["ratio"] >= CLOSE for r in wins)
    below = [r["model"] for r in wins if r["ratio"] < NEAR]
    group = group[group["model"].isin([r["model"] for r in rows])]
    dates = sorted(d[:10] for d in group["date"] if isinstance(d, str) and d)
    head = (f"**{device}, {dtype}, {mode}** ({dates[0] if dates else '?'} to {dates[-1] if dates else '?'}; "
            f"{commit_source(CSV_NAME)}): the plan reached ≥ {CLOSE}× the hand search's best on "
            f"{close} of {len(wins)} models with a win ≥ {BIG_WIN}×; below {NEAR}×: {', '.join(below) or 'none'}.")
    lines = ["| model | hand search's best | × | plan | × | best step / plan step | eager / eager | timed | "
             "pruned | wall s |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {_cell(r['best'])} | {r['best_x']:.2f} | {_cell(r['plan'])} | "
                     f"{r['plan_x']:.2f} | {r['ratio']:.2f} | {_num(r['eager_ratio'])} | {_int(r['explored'])} | "
                     f"{_int(r['pruned'])} | {_int(r['wall_s'])} |")
    return head + "\n\n" + "\n".join(lines)


def _int(x) -> str:
    return "—" if x is None or pd.isna(x) else f"{float(x):.0f}"


def _num(x) -> str:
    return "—" if x is None or pd.isna(x) else f"{x:.2f}"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|")


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(HERE))
    from run_advice import DEFAULT_CSV, read_csv  # one reader for both scripts: key columns stay strings

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--docs", type=Path, default=REPO / "docs" / "benchmarks.md")
    ap.add_argument("--recall-docs", type=Path, default=REPO / "docs" / "accuracy.md")
    args = ap.parse_args(argv)
    df = read_csv(args.csv)
    args.docs.write_text(splice(args.docs.read_text() if args.docs.is_file() else "", render(df)))
    old = args.recall_docs.read_text() if args.recall_docs.is_file() else ""
    args.recall_docs.write_text(splice(old, recall(df), (RECALL_BEGIN, RECALL_END),
                                       "Recall: is the best measured fix among the top three?"))
    text = args.docs.read_text()
    args.docs.write_text(splice(text, search(df), (SEARCH_BEGIN, SEARCH_END),
                                "The search against an exhaustive hand search"))
    print(f"wrote the measured-advice and search sections of {args.docs} and the recall table of "
          f"{args.recall_docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
