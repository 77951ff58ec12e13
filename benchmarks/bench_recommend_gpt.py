"""Predicted vs measured: apply recommend's advice to examples/gpt_block.py.

Profiles the GPT example (bf16 inference), runs `recommend`, then times variants with each
recommendation applied by hand — SDPA for the naive attention, F.rms_norm for the written-out
RMSNorm, torch.compile for the fusion rules, and all of them — and prints the predicted saving
next to the measured one. CUDA events, warm-up excluded, medians of interleaved rounds.
    python benchmarks/bench_recommend_gpt.py --out DIR
"""
from __future__ import annotations

import argparse
import json
import statistics
import types
from pathlib import Path

import torch
import torch.nn.functional as F

from kernel_advisor.collect.loader import load_model
from kernel_advisor.pipeline import profile_to_run
from kernel_advisor.collect.rundir import load_run
from kernel_advisor.recommend.kernels import registry_kernels
from kernel_advisor.recommend.report import recommend
from kernel_advisor.recommend.schema import load_rules
from kernel_advisor.recommend.report import recommendations_json

REPO = Path(__file__).resolve().parent.parent
GPT = REPO / "examples" / "gpt_block.py"


def sdpa_forward(self, x):
    b, t, d = x.shape
    q, k, v = self.qkv(x).split(d, dim=-1)
    q, k, v = (z.view(b, t, self.n_heads, -1).transpose(1, 2) for z in (q, k, v))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return self.out(y.transpose(1, 2).reshape(b, t, d))


def rms_forward(self, x):
    return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def build(module, model, sdpa=False, rms=False, compiled=False):
    for m in model.modules():
        if sdpa and isinstance(m, module.Attention):
            m.forward = types.MethodType(sdpa_forward, m)
        if rms and isinstance(m, module.RMSNorm):
            m.forward = types.MethodType(rms_forward, m)
    return torch.compile(model) if compiled else model


VARIANTS = {  # name → (build flags, rule ids whose predicted savings it realises)
    "baseline": ({}, ()),
    "sdpa": ({"sdpa": True}, ("lib-sdpa",)),
    "rms_norm": ({"rms": True}, ("lib-rms-norm",)),
    "compile": ({"compiled": True}, ("compile-fuse-elementwise", "compile-swiglu", "lib-rms-norm")),
    "sdpa+rms_norm": ({"sdpa": True, "rms": True}, ("lib-sdpa", "lib-rms-norm")),
    "all+compile": ({"sdpa": True, "rms": True, "compiled": True}, None),  # None: the report's total
}


def time_variants(fns: dict, x, rounds: int = 30) -> dict:
    with torch.no_grad():
        for fn in fns.values():
            for _ in range(3):
                fn(x)
        torch.cuda.synchronize()
        times = {k: [] for k in fns}
        for _ in range(rounds):  # interleaved, so clock and thermal drift hit every variant alike
            for name, fn in fns.items():
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn(x)
                end.record()
                end.synchronize()
                times[name].append(start.elapsed_time(end) * 1e-3)
    return {k: statistics.median(v) for k, v in times.items()}


def predicted_saving_s(doc: dict, rule_ids) -> float:
    if rule_ids is None:
        return doc["total_estimated_gain_per_step_s"] or 0.0
    # Amdahl-consistent: per row, the largest saving any of these rules claims
    per_row: dict = {}
    for rec in doc["recommendations"]:
        if rec["rule_id"] in rule_ids and rec.get("estimated_gain_per_step_s"):
            rows = rec.get("row_ids") or [f"run:{rec['rule_id']}"]
            share = rec["estimated_gain_per_step_s"] / len(rows)
            for r in rows:
                per_row[r] = max(per_row.get(r, 0.0), share)
    return sum(per_row.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    loaded = load_model(GPT, device="cuda", dtype="bfloat16")
    args = {"device": "cuda", "mode": "inference", "dtype": "bfloat16", "warmup": 3, "steps": 5, "seed": 0,
            "entry": None}
    run_dir, _ = profile_to_run(loaded, args, a.out / "gpt-run")
    run = load_run(run_dir)
    kernels = registry_kernels()
    report = recommend(run.ops, run.sequence, run.meta, load_rules(kernel_ids={k.id for k in kernels}), kernels)
    doc = recommendations_json(report, str(run_dir))
    (a.out / "recommendations.json").write_text(json.dumps(doc, indent=2))
    fns = {}
    for name, (flags, _) in VARIANTS.items():
        fresh = load_model(GPT, device="cuda", dtype="bfloat16")
        fns[name] = build(fresh.module, fresh.model, **flags)
    x = loaded.inputs[0]
    step = time_variants(fns, x)
    base = step["baseline"]
    rows = []
    for name, (_, rule_ids) in VARIANTS.items():
        pred = predicted_saving_s(doc, rule_ids)
        rows.append({"variant": name, "rules": rule_ids or "all", "step_ms": step[name] * 1e3,
                     "measured_saving_ms": (base - step[name]) * 1e3, "predicted_saving_ms": pred * 1e3,
                     "measured_pct": 100 * (base - step[name]) / base, "predicted_pct": 100 * pred / base})
    (a.out / "bench_recommend_gpt.json").write_text(json.dumps({"rows": rows, "recommendations": [
        {k: r.get(k) for k in ("rule_id", "tier", "estimated_gain_per_step_s", "estimated_gain_frac")}
        for r in doc["recommendations"]]}, indent=2))
    print(f"{'variant':16s} {'step ms':>8s} {'measured saving':>16s} {'predicted saving':>17s}")
    for r in rows:
        print(f"{r['variant']:16s} {r['step_ms']:8.3f} {r['measured_saving_ms']:9.3f} ms {r['measured_pct']:4.0f}% "
              f"{r['predicted_saving_ms']:9.3f} ms {r['predicted_pct']:4.0f}%")


if __name__ == "__main__":
    main()
