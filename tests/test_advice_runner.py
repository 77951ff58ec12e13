"""The measured-advice sweep's plumbing (benchmarks/advice/): JSON -> rows, the CSV upsert, the
docs renderer. Hand-made inputs, no GPU; the end-to-end CPU dry run is marked slow."""
import pandas as pd
import pytest

from benchmarks.advice import render_advice as ra
from benchmarks.advice import run_advice as adv

INFO = {"model": "m", "device_name": "NVIDIA H200", "dtype": "bfloat16", "mode": "inference",
        "gpu": "NVIDIA H200 (132 SMs, driver 580.159.04)", "torch": "2.11.0+cu130", "triton": "3.6.0",
        "commit": "abc1234", "date": "2026-11-25 08:00"}


def _measured(gain, verdict="faster", status="passed", speedup=None):
    value = speedup if speedup is not None else (None if gain is None else 1 / (1 - gain))
    return {"status": status, "reason": "", "applied": "x",
            "speedup": None if value is None else {"value": value, "low": value * 0.9, "high": value * 1.1},
            "gain_frac": gain, "verdict": verdict, "step_s": None}


SAMPLE = {
    "schema_version": 3, "run": {"dir": "run"}, "step_s": 0.004,
    "recommendations": [
        # measured rank 1, predicted rank 2: the row keeps the predicted rank
        {"rank": 1, "predicted_rank": 2, "rule_id": "compile-fuse-elementwise", "tier": "compile",
         "subject": "aten::mul → aten::add", "label": "fuse", "estimated_gain_frac": 0.2, "kernel_id": None,
         "action": "compile", "action_reason": "", "measured": _measured(0.5, speedup=2.0)},
        {"rank": 2, "predicted_rank": 1, "rule_id": "lib-sdpa", "tier": "library", "subject": "attention",
         "label": "sdpa", "estimated_gain_frac": 0.4, "kernel_id": None, "action": "sdpa", "action_reason": "",
         "measured": _measured(None, verdict="", status="failed-gate")},
        {"rank": 3, "rule_id": "leave-it-gemm", "tier": "leave", "subject": "aten::mm", "label": "",
         "estimated_gain_frac": None, "kernel_id": None, "action": "none", "action_reason": "cuBLAS at 90 %",
         "measured": None},
    ],
    "also": [{"action": "compile:reduce-overhead", "measured": _measured(0.75, speedup=4.0)}],
    "actions": [{"action": "compile", "predicted_gain_frac": 0.25, "measured": _measured(0.5, speedup=2.0)}],
    "plan": {"actions": ["sdpa", "compile"], "rules": ["lib-sdpa", "compile-fuse-elementwise"],
             "measured": _measured(0.6, speedup=2.5)},
}


def test_rows_from_recommend_follows_the_contract():
    rows = adv.rows_from_recommend(SAMPLE, INFO)
    assert all(list(r) == adv.COLUMNS for r in rows)
    assert [r["kind"] for r in rows] == ["rule", "rule", "rule", "also", "action", "plan"]
    fuse, sdpa, leave, also, action, plan = rows
    assert (fuse["rank"], fuse["predicted_gain_frac"], fuse["measured_gain_frac"]) == (2, 0.2, 0.5)
    assert (fuse["speedup"], fuse["speedup_low"], fuse["speedup_high"]) == pytest.approx((2.0, 1.8, 2.2))
    assert (fuse["status"], fuse["verdict"], fuse["action"]) == ("passed", "faster", "compile")
    assert sdpa["rank"] == 1 and sdpa["status"] == "failed-gate" and sdpa["speedup"] is None
    assert leave["rank"] == 3 and leave["status"] == "unmeasured" and leave["action"] == "none"
    assert (also["action"], also["rule_id"], also["speedup"]) == ("compile:reduce-overhead", "", 4.0)
    assert (action["action"], action["predicted_gain_frac"], action["measured_gain_frac"]) == ("compile", 0.25, 0.5)
    assert (plan["action"], plan["rule_id"]) == ("sdpa+compile", "lib-sdpa+compile-fuse-elementwise")
    assert all(r["gpu"] == INFO["gpu"] and r["commit"] == "abc1234" for r in rows)


HOTSPOTS = [  # recommend's hotspots: one with a rung, one silent, one under 2 % (no row)
    {"row_id": 4, "name": "aten::group_norm", "share_pct": 19.0, "verdict": "memory-bound",
     "chosen": {"tier": "compile", "rule_id": "compile-memory-bound-op", "why": "saves 0.2 ms"}, "passed_over": []},
    {"row_id": 7, "name": "aten::cumsum", "share_pct": 3.5, "verdict": "latency-bound",
     "chosen": {"tier": "none", "rule_id": None, "why": "no rule estimates a saving for this op"},
     "passed_over": [{"tier": "library", "reason": "no library rule covers aten::cumsum"}]},
    {"row_id": 9, "name": "aten::add", "share_pct": 1.0, "verdict": "memory-bound",
     "chosen": {"tier": "none", "rule_id": None, "why": "x"}, "passed_over": []},
]


def test_hotspots_of_two_percent_are_rows_and_silence_is_named():
    rows = adv.rows_from_recommend({**SAMPLE, "hotspots": HOTSPOTS}, INFO)
    spots = [r for r in rows if r["kind"] == "hotspot"]
    assert [(r["subject"], r["action"], r["rule_id"]) for r in spots] == [
        ("row:4", "compile", "compile-memory-bound-op"), ("row:7", "none", "")]
    assert spots[0]["predicted_gain_frac"] == pytest.approx(0.19)
    assert spots[1]["reason"] == ("aten::cumsum (latency-bound): no rule estimates a saving for this op; "
                                  "library: no library rule covers aten::cumsum")
    text = ra.silence(pd.DataFrame(rows))
    assert text == ("Of 2 hotspots of ≥ 2 % of device time in 1 models, 1 got a rung, 0 an evidenced "
                    "leave-it, and 1 neither (listed below the table).")
    assert "| m | aten::cumsum (latency-bound) | 3.5 % | no rule estimates a saving for this op; library: no " \
           "library rule covers aten::cumsum |" \
        in ra.silent_table(pd.DataFrame(rows))


def test_a_null_plan_gives_no_plan_row():
    rows = adv.rows_from_recommend({**SAMPLE, "plan": None, "also": [], "actions": []}, INFO)
    assert [r["kind"] for r in rows] == ["rule", "rule", "rule"]


def _frame(*rows):
    return pd.DataFrame([adv._complete({**INFO, "kind": "rule", "rule_id": "r", "subject": "", "action": "a",
                                        "status": "passed", **r}) for r in rows])


def test_upsert_replaces_the_same_key_and_keeps_the_rest(tmp_path):
    old = _frame({"rule_id": "r1", "measured_gain_frac": 0.1}, {"rule_id": "r2", "measured_gain_frac": 0.2},
                 {"kind": "also", "rule_id": "", "action": "compile", "measured_gain_frac": 0.3})
    path = tmp_path / "advice.csv"
    adv.write_atomic(adv.upsert(pd.DataFrame(columns=adv.COLUMNS), old), path)
    # Read back, the empty rule_id of the also row must still be "", or its key would never match.
    new = _frame({"rule_id": "r1", "measured_gain_frac": 0.9},
                 {"kind": "also", "rule_id": "", "action": "compile", "measured_gain_frac": 0.8},
                 {"rule_id": "r3", "measured_gain_frac": 0.4})
    merged = adv.upsert(adv.read_csv(path), new)
    got = {(k, r): g for k, r, g in merged[["kind", "rule_id", "measured_gain_frac"]].itertuples(index=False)}
    assert got == {("rule", "r1"): 0.9, ("rule", "r2"): 0.2, ("rule", "r3"): 0.4, ("also", ""): 0.8}
    assert list(merged["kind"]) == ["rule", "rule", "rule", "also"]  # sorted: rules, also, plan
    assert [p.name for p in tmp_path.iterdir()] == ["advice.csv"]  # no temp file left behind


def test_a_model_measured_again_drops_its_stale_rows_only():
    old = _frame({"model": "a", "rule_id": "gone"}, {"model": "b", "rule_id": "kept"},
                 {"model": "a", "rule_id": "x", "dtype": "float16"})
    new = _frame({"model": "a", "rule_id": "fresh"})
    merged = adv.upsert(adv.drop_remeasured(old, new), new)
    assert sorted(zip(merged["model"], merged["rule_id"])) == [("a", "fresh"), ("a", "x"), ("b", "kept")]


def test_plan_jobs_reads_the_advisor_line(tmp_path):
    rnn, plain = tmp_path / "rnn.py", tmp_path / "plain.py"
    rnn.write_text('"""An RNN."""\n# advisor: --autocast bfloat16\n')
    plain.write_text('"""A plain model."""\n')
    jobs = {j.model.stem: j for j in adv.plan_jobs([rnn, plain], "cuda", "bfloat16", 60, small=False)}
    r, p = jobs["rnn"], jobs["plain"]
    assert r.dtype_label == "autocast:bfloat16" and p.dtype_label == "bfloat16"
    assert r.profile_args[r.profile_args.index("--dtype") + 1] == "keep"
    assert r.profile_args[-2:] == ("--autocast", "bfloat16")
    assert p.recommend_args == ("--measure", "--budget-s", "60", "--also", "compile", "--also",
                                "compile:reduce-overhead", "--format", "json")
    assert p.recommend_timeout_s > 60


def test_main_upserts_after_each_model_and_a_failure_keeps_old_rows(tmp_path, monkeypatch):
    out = tmp_path / "advice.csv"
    monkeypatch.setattr(adv, "run_job", lambda job, device: adv.rows_from_recommend(SAMPLE, {**INFO, "model": job.model.stem}))
    assert adv.main(["--models", "tiny_mlp_host_bound,gru_seq", "--out", str(out)]) == 0
    first = adv.read_csv(out)
    assert sorted(first["model"].unique()) == ["gru_seq", "tiny_mlp_host_bound"] and len(first) == 12
    monkeypatch.setattr(adv, "run_job", lambda job, device: adv.error_rows({**INFO, "model": job.model.stem}, "boom"))
    adv.main(["--models", "gru_seq", "--out", str(out)])
    second = adv.read_csv(out)
    assert len(second) == 13 and second.loc[second["status"] == "error", "reason"].tolist() == ["boom"]
    with pytest.raises(SystemExit):
        adv.main(["--models", "no_such_model", "--out", str(out)])


def test_a_hotspots_only_sweep_replaces_hotspot_rows_and_keeps_the_measurements(tmp_path, monkeypatch):
    out, part = tmp_path / "advice.csv", tmp_path / "part.csv"
    full = {**SAMPLE, "hotspots": HOTSPOTS}
    monkeypatch.setattr(adv, "run_job", lambda job, device: adv.rows_from_recommend(full, {**INFO, "model": "gru_seq"}))
    adv.main(["--models", "gru_seq", "--out", str(out)])
    assert adv.plan_jobs([adv.MODELS_DIR / "gru_seq.py"], "cuda", "bfloat16", 60, False, True)[0].recommend_args \
        == ("--format", "json")
    # the advice changed: the silent cumsum hotspot now has a rung; measured rows must stay
    fixed = [dict(HOTSPOTS[1], chosen={"tier": "compile", "rule_id": "compile-cuda-graphs", "why": "launches"})]
    monkeypatch.setattr(adv, "run_job", lambda job, device: adv.rows_from_recommend(
        {**SAMPLE, "hotspots": fixed}, {**INFO, "model": "gru_seq"}))
    adv.main(["--models", "gru_seq", "--hotspots-only", "--out", str(part)])
    assert set(adv.read_csv(part)["kind"]) == {"hotspot"}
    adv.main(["--merge", str(part), "--out", str(out)])
    merged = adv.read_csv(out)
    spots = merged[merged["kind"] == "hotspot"]
    assert list(zip(spots["subject"], spots["action"])) == [("row:7", "compile")]
    assert (merged["kind"] != "hotspot").sum() == 6  # rule, rule, rule, also, action, plan


# ---------------------------------------------------------------- renderer

def _row(model, kind, action, measured, verdict="faster", rule_id="", rank=None, predicted=None,
         status="passed", speedup=None):
    return adv._complete({**INFO, "model": model, "kind": kind, "rule_id": rule_id, "subject": "s",
                          "action": action, "rank": rank, "predicted_gain_frac": predicted,
                          "measured_gain_frac": measured, "verdict": verdict, "status": status,
                          "speedup": speedup, "speedup_low": None if speedup is None else speedup - 0.1,
                          "speedup_high": None if speedup is None else speedup + 0.1})


HAND = pd.DataFrame([
    _row("A", "rule", "sdpa", 0.60, rule_id="lib-sdpa", rank=1, predicted=0.50, speedup=2.5),
    _row("A", "rule", "compile", 0.55, rule_id="compile-fuse", rank=2, predicted=0.20, speedup=2.22),
    _row("A", "rule", "rms_norm_module", 0.05, "no measurable difference", rule_id="lib-rms-norm", rank=4,
         predicted=0.10, speedup=1.05),
    _row("A", "also", "compile:reduce-overhead", 0.70, speedup=3.33),
    _row("A", "plan", "sdpa+compile", 0.65, rule_id="lib-sdpa+compile-fuse", speedup=2.86),
    _row("B", "rule", "sdpa", -0.10, "slower", rule_id="lib-sdpa", rank=1, predicted=0.30, speedup=0.91),
    _row("B", "rule", "compile", 0.45, rule_id="compile-fuse", rank=2, predicted=0.40, speedup=1.82),
    _row("B", "rule", "kernel:auto", None, "", rule_id="triton-x", rank=3, predicted=0.25, status="not-measurable"),
    _row("B", "plan", "compile", 0.45, rule_id="compile-fuse", speedup=1.82),
    {**_row("C", "plan", "", None, "", status="error"), "reason": "profile: exit 1: boom | bad"},
])


def test_rule_stats_hand_worked():
    s = ra.rule_stats(HAND).set_index("rule_id")
    # compile-fuse: predicted 0.20, 0.40 (median 0.30); measured 0.55, 0.45 (median 0.50);
    # errors 0.35, 0.05 (median 0.20); both faster, only B's 0.05 is within 0.15 -> 1/2
    assert tuple(s.loc["compile-fuse", ["findings", "measured", "faster", "within", "within_of"]]) == (2, 2, 2, 1, 2)
    assert tuple(s.loc["compile-fuse", ["predicted_median", "measured_median", "abs_error_median"]]) == pytest.approx((0.30, 0.50, 0.20))
    # lib-sdpa: predicted 0.50, 0.30 (0.40); measured 0.60, -0.10 (0.25); errors 0.10, 0.40 (0.25);
    # only A's faster, its error 0.10 within -> 1/1
    assert tuple(s.loc["lib-sdpa", ["findings", "measured", "faster", "within", "within_of"]]) == (2, 2, 1, 1, 1)
    assert tuple(s.loc["lib-sdpa", ["predicted_median", "measured_median", "abs_error_median"]]) == pytest.approx((0.40, 0.25, 0.25))
    # triton-x was recommended but not timed: counted, no medians
    assert tuple(s.loc["triton-x", ["findings", "measured", "faster"]]) == (1, 0, 0)
    assert pd.isna(s.loc["triton-x", "abs_error_median"])
    # all rules: 6 findings, 5 timed, 3 faster; predicted 0.5, 0.2, 0.1, 0.3, 0.4 -> 0.30;
    # measured -0.1, 0.05, 0.45, 0.55, 0.6 -> 0.45; errors 0.05, 0.05, 0.1, 0.35, 0.4 -> 0.10;
    # faster errors 0.10, 0.35, 0.05 -> 2 of 3 within
    assert tuple(s.loc["all rules", ["findings", "measured", "faster", "within", "within_of"]]) == (6, 5, 3, 2, 3)
    assert tuple(s.loc["all rules", ["predicted_median", "measured_median", "abs_error_median"]]) == pytest.approx((0.30, 0.45, 0.10))


def test_a_rule_on_several_subjects_is_one_finding_with_the_summed_prediction():
    # compile is measured once on the whole model (0.55): it answers for both chains together,
    # predicted 0.10 + 0.15 = 0.25 -> error 0.30, outside 0.15
    df = pd.DataFrame([_row("A", "rule", "compile", 0.55, rule_id="fuse", rank=2, predicted=p, speedup=2.2)
                       for p in (0.10, 0.15)])
    s = ra.rule_stats(df).set_index("rule_id").loc["fuse"]
    assert (s["findings"], s["measured"], s["faster"], s["within"], s["within_of"]) == (1, 1, 1, 0, 1)
    assert (s["predicted_median"], s["abs_error_median"]) == pytest.approx((0.25, 0.30))
    assert ra.best_fixes(df).loc[0, "predicted_gain"] == pytest.approx(0.25)


def test_rule_table_markdown():
    table = ra.rule_table(HAND).splitlines()
    assert "| `compile-fuse` | 2 | 2 | 2 | 0.30 | 0.50 | 0.20 | 1/2 (50%) |" in table
    assert "| `lib-rms-norm` | 1 | 1 | 0 | 0.10 | 0.05 | 0.05 | — |" in table
    assert "| `triton-x` | 1 | 0 | 0 | — | — | — | — |" in table
    assert table[-1] == "| **all rules** | 6 | 5 | 3 | 0.30 | 0.45 | 0.10 | 2/3 (67%) |"


def test_action_stats_hand_worked():
    s = ra.action_stats(HAND).set_index("family")
    # compile: A predicted 0.20 measured 0.55, B 0.40 / 0.45, both faster; 2 points < 3: no scale,
    # so "after" is "before"; within 0.15: only B (0.05) → 1 of 2
    assert tuple(s.loc["compile", ["measured", "faster", "within_before", "within_after"]]) == (2, 2, 1, 1)
    assert s.loc["compile", "scale"] is None
    assert tuple(s.loc["compile", ["predicted_median", "measured_median"]]) == pytest.approx((0.30, 0.50))
    # reduce-overhead (an --also action) is predicted as the union of what it carries out: compile's 0.20
    assert s.loc["compile:reduce-overhead", "predicted_median"] == pytest.approx(0.20)
    # all: 6 actions timed (A: sdpa, compile, rms_norm_module, reduce-overhead; B: sdpa, compile; B's
    # kernel was not timed), 4 faster; within: A sdpa (0.10) and B compile (0.05) → 2 of 4
    assert tuple(s.loc["all actions", ["measured", "faster", "within_before", "within_after"]]) == (6, 4, 2, 2)
    assert "| `compile` | 2 | 2 | — | 0.30 | 0.50 | 1/2 (50%) | 1/2 (50%) |" in ra.action_table(HAND).splitlines()


def test_best_fix_per_model_hand_worked():
    best = ra.best_fixes(HAND).set_index("model")
    # A: reduce-overhead (0.70, an --also action no rule named) beats the plan (0.65) and sdpa (0.60)
    a = best.loc["A"]
    assert (a["action"], a["kind"], a["in_top"], a["rule_id"]) == ("compile:reduce-overhead", "also", False, "")
    # B: compile 0.45, rule and plan tie; the rule row (listed first) names it at rank 2 -> in the top 3
    b = best.loc["B"]
    assert (b["action"], b["kind"], b["in_top"], b["rule_id"], b["predicted_gain"]) == ("compile", "rule", True, "compile-fuse", 0.40)
    assert best.loc["C", "action"] == "" and best.loc["C", "note"].startswith("error: profile")
    lines = ra.model_table(HAND).splitlines()
    # A's best is no top-3 action; the fastest top-3 fix, the plan at 2.86× [2.76, 2.96], does not reach 3.23
    assert ("| A | `compile:reduce-overhead` (also) | 3.33× [3.23, 3.43] | 0.70 | no: `sdpa+compile` 2.86× | "
            "not recommended | — |") in lines
    assert "| B | `compile` | 1.82× [1.72, 1.92] | 0.45 | yes | `compile-fuse` | 0.40 |" in lines
    assert "| C | — (error: profile: exit 1: boom \\| bad) | | | | | |" in lines  # a | would split the cell


def test_a_top_three_fix_within_the_best_ones_interval_is_as_fast():
    # best: reduce-overhead 2.53× [2.43, 2.63] (not recommended); compile, ranked 1, 2.52× [2.42, 2.62]
    df = pd.DataFrame([_row("A", "rule", "compile", 0.603, rule_id="c", rank=1, predicted=0.4, speedup=2.52),
                       _row("A", "also", "compile:reduce-overhead", 0.605, speedup=2.53)])
    best = ra.best_fixes(df).loc[0]
    assert (best["in_top"], best["as_fast"], best["top_fix"]) == (False, True, "compile")
    assert "| as fast: `compile` 2.52× |" in ra.model_table(df)
    assert "on 1 more, top-3 actions measured as fast" in ra.recall(df)
    assert "Of the 1 wins of ≥ 1.2×, 1 are named or matched by the top 3." in ra.recall(df)


def test_a_plan_counts_as_top_three_only_if_every_action_is():
    df = pd.DataFrame([_row("A", "rule", "sdpa", 0.3, rule_id="lib-sdpa", rank=1, predicted=0.3, speedup=1.4),
                       _row("A", "rule", "compile", 0.2, rule_id="c", rank=5, predicted=0.1, speedup=1.2),
                       _row("A", "plan", "sdpa+compile", 0.5, rule_id="lib-sdpa+c", speedup=2.0)])
    assert not ra.best_fixes(df).loc[0, "in_top"]
    df.loc[1, "rank"] = 3
    best = ra.best_fixes(df).loc[0]
    assert best["in_top"] and best["rule_id"] == "lib-sdpa+c" and best["predicted_gain"] is None
    assert "| A | `sdpa+compile` (plan) | 2.00× [1.90, 2.10] | 0.50 | yes | `lib-sdpa+c` | — |" in ra.model_table(df)


def test_header_line_takes_its_facts_from_the_rows():
    later = {**_row("B", "plan", "compile", 0.1, speedup=1.1), "date": "2026-11-26 09:00", "commit": "def5678"}
    header = ra.header_line(pd.concat([HAND, pd.DataFrame([later])]))
    assert header.startswith("**Measured 2026-11-25 to 2026-11-26** on NVIDIA H200 (132 SMs, driver 580.159.04)")
    assert ("torch 2.11.0+cu130 · triton 3.6.0 · commit: the `commit` column of `benchmarks/data/advice.csv` · "
            "bfloat16 inference · 3 models") in header
    assert "abc1234" not in header and "def5678" not in header  # the docs name the data, not the commits


def test_render_and_splice(tmp_path):
    block = ra.render(HAND)
    assert block.count("**Measured") == 1 and "| rule |" in block and "| model |" in block
    # An RNN model run under bf16 autocast joins the bf16 block; leave-it advice (action none) has
    # nothing to measure and gets no row in the rule table.
    rnn = {**_row("D", "also", "compile", 0.2, speedup=1.25), "dtype": "autocast:bfloat16"}
    leave = _row("A", "rule", "none", None, "", rule_id="leave-small-op", rank=5, status="not-measurable")
    block = ra.render(pd.concat([HAND, pd.DataFrame([rnn, leave])]))
    assert block.count("**Measured") == 1 and "| D | `compile` (also) | 1.25×" in block
    assert "leave-small-op" not in block and "| **all rules** | 6 | 5 | 3 |" in block
    other = pd.DataFrame([{**_row("A", "rule", "sdpa", 0.3, rule_id="lib-sdpa", rank=1, speedup=1.4), "dtype": "float16"}])
    assert ra.render(pd.concat([HAND, other])).count("**Measured") == 2  # one block per dtype
    assert "No measurements" in ra.render(pd.DataFrame(columns=adv.COLUMNS))

    text = "# Benchmarks\n\nintro\n"
    once = ra.splice(text, "v1")
    assert once == f"# Benchmarks\n\nintro\n\n## Measured advice\n\n{ra.BEGIN}\nv1\n{ra.END}\n"
    assert ra.splice("", "v") == f"## Measured advice\n\n{ra.BEGIN}\nv\n{ra.END}\n"
    twice = ra.splice(once + "\n## Later section\n", "v2\n")
    assert twice.count(ra.BEGIN) == 1 and "v1" not in twice and f"{ra.BEGIN}\nv2\n{ra.END}" in twice
    assert twice.endswith("\n## Later section\n")


def test_render_main_writes_only_the_given_files(tmp_path):
    csv, docs = tmp_path / "advice.csv", tmp_path / "bench.md"
    adv.write_atomic(adv.upsert(pd.DataFrame(columns=adv.COLUMNS), HAND), csv)
    docs.write_text("# B\n")
    recall_docs = tmp_path / "accuracy.md"
    assert ra.main(["--csv", str(csv), "--docs", str(docs), "--recall-docs", str(recall_docs)]) == 0
    text = docs.read_text()
    assert text.startswith("# B\n\n## Measured advice\n") and "| B | `compile` | 1.82×" in text
    recall = recall_docs.read_text()
    assert ra.RECALL_BEGIN in recall and "named by a top-3 recommendation on 1 of 2 models" in recall


@pytest.mark.slow
def test_dry_run_cpu_end_to_end(tmp_path):
    # The real CLI on one small model: profile, recommend --measure, rows in the CSV (about a minute).
    out = tmp_path / "advice.csv"
    assert adv.main(["--dry-run-cpu", "--models", "tiny_mlp_host_bound", "--budget-s", "20", "--out", str(out)]) == 0
    rows = adv.read_csv(out)
    assert set(rows["kind"]) >= {"also", "plan"} and set(rows["model"]) == {"tiny_mlp_host_bound"}
    also = rows[rows["kind"] == "also"].set_index("action")
    assert also.loc["compile", "status"] in {"passed", "error", "failed-gate"}
    assert (rows["dtype"] == "keep").all() and rows["commit"].str.len().min() >= 7


def test_the_search_table_holds_the_plan_against_the_hand_searchs_best():
    import render_advice

    def row(model, kind, action, speedup, **extra):
        return {"model": model, "kind": kind, "action": action, "speedup": speedup, "status": "passed",
                "device_name": "H200", "dtype": "bfloat16", "mode": "inference", "date": "2026-11-28 08:00",
                "commit": "abc1234", "explored": extra.get("explored"), "pruned": extra.get("pruned"),
                "wall_s": extra.get("wall_s"), "step_s": extra.get("step_s"), "eager_step_s": extra.get("eager_s")}

    df = pd.DataFrame([
        row("a", "exhaustive", "compile", 2.0), row("a", "exhaustive", "eager", 1.0),
        row("a", "plan", "compile", 1.99, explored=4, pruned=1, wall_s=30.4),  # 1.99 / 2.0 = 0.995: reached
        row("b", "exhaustive", "channels_last + compile", 3.0),
        row("b", "plan", "compile", 2.4, explored=6, pruned=2, wall_s=55.0),  # 2.4 / 3.0 = 0.80: below 0.9
        row("c", "exhaustive", "compile", 1.1), row("c", "plan", "compile", 1.1),  # no win of 1.2x: not counted
        row("d", "plan", "compile", 1.5),  # no hand search: not in the table
        # Seconds win over speedups: the search's eager ran 1.5x slower (6 ms against 4 ms), so its
        # 3.0x plan is a 2.0 ms step against the hand search's 2.5 ms (1.6x): 2.5 / 2.0 = 1.25.
        row("e", "exhaustive", "compile", 1.6, step_s=2.5e-3, eager_s=4e-3),
        row("e", "plan", "compile", 3.0, step_s=2.0e-3, eager_s=6e-3),
    ])
    text = render_advice.search(df)
    assert "reached ≥ 0.98× the hand search's best on 2 of 3 models with a win ≥ 1.2×; below 0.9×: b." in text
    assert "| a | compile | 2.00 | compile | 1.99 | 0.99 | — | 4 | 1 | 30 |" in text
    assert "| b | channels_last + compile | 3.00 | compile | 2.40 | 0.80 | — | 6 | 2 | 55 |" in text
    assert "| e | compile | 1.60 | compile | 3.00 | 1.25 | 1.50 | — | — | — |" in text
    assert "| d |" not in text
