"""Share of device time the cost model covers, per benchmarks/advice model, inference and train.

    python3 benchmarks/advice/coverage.py --out OUT/coverage.csv       # on the GPU machine
    python3 benchmarks/advice/coverage.py --merge OUT/coverage.csv     # -> benchmarks/data/coverage.csv
    python3 benchmarks/advice/coverage.py --render                     # -> docs/benchmarks.md

Each model is profiled as the advice sweep profiles it (bf16, or the file's `# advisor:` line),
3 steps after 2 of warm-up, in both modes; a row keeps run.json's modelled share and its
largest unmodelled ops. The aim (docs/methodology.md): at least 98 % on every model.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from docdata import commit_source, splice_block, upsert_rows, write_csv_atomic  # noqa: E402
from run_advice import MODELS_DIR, _commit, discover_models, profile_options  # noqa: E402

DATA = HERE.parent / "data" / "coverage.csv"
DOCS = HERE.parents[1] / "docs" / "benchmarks.md"
KEY = ["model", "mode", "gpu"]
COLUMNS = [*KEY, "modelled_pct", "unmodelled", "kernel_timing", "kernel_timing_reason", "torch", "commit", "date"]
MODES = ("inference", "train")
AIM_PCT = 98.0
BEGIN, END = "<!-- coverage:begin -->", "<!-- coverage:end -->"


def profile_args(path: Path, mode: str, out: Path) -> list[str]:
    return [sys.executable, "-m", "kernel_advisor", "profile", str(path),
            *profile_options(path, "cuda", "bfloat16", mode, steps=3, warmup=2), "--out", str(out)]


def coverage_row(model: str, mode: str, run_json: dict) -> dict:
    """One CSV row from a run.json: the modelled share and the three largest unmodelled ops."""
    cov, dev = run_json["coverage"], run_json["device"]
    worst = sorted(cov.get("unmodelled") or [], key=lambda u: -(u.get("device_time_total_s") or 0.0))[:3]
    timing = run_json.get("kernel_timing") or {}
    return {"model": model, "mode": mode, "gpu": dev["name"], "modelled_pct": round(cov["modelled_time_pct"], 2),
            "unmodelled": "; ".join(u["name"] for u in worst), "kernel_timing": timing.get("source") or "",
            "kernel_timing_reason": timing.get("reason") or "", "torch": run_json["versions"]["torch"],
            "commit": _commit(), "date": time.strftime("%Y-%m-%d", time.gmtime())}


def measure(out_csv: Path, models: list[Path]) -> int:
    rows, failed = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for path in models:
            for mode in MODES:
                run = Path(tmp) / f"{path.stem}-{mode}"
                done = subprocess.run(profile_args(path, mode, run), capture_output=True, text=True)
                if done.returncode != 0:
                    failed += 1
                    print(f"{path.stem} {mode}: rc {done.returncode}: {done.stderr.strip()[-300:]}", flush=True)
                    continue
                rows.append(coverage_row(path.stem, mode, json.loads((run / "run.json").read_text())))
                print(f"{path.stem} {mode}: {rows[-1]['modelled_pct']:.1f} % {rows[-1]['unmodelled']}", flush=True)
                write_csv_atomic(pd.DataFrame(rows, columns=COLUMNS), out_csv)
    return 1 if failed else 0


def merge(paths: list[Path], data: Path = DATA) -> pd.DataFrame:
    old = pd.read_csv(data) if data.is_file() else pd.DataFrame(columns=COLUMNS)
    for p in paths:
        old = upsert_rows(old, pd.read_csv(p), KEY)
    df = old.reindex(columns=COLUMNS).sort_values(KEY).reset_index(drop=True)
    write_csv_atomic(df, data)
    return df


def render_block(df: pd.DataFrame) -> str:
    df = df.reindex(columns=COLUMNS)
    texts = ["unmodelled", "kernel_timing", "kernel_timing_reason"]
    df[texts] = df[texts].astype(object).where(df[texts].notna(), "")
    lines = []
    for gpu, g in df.groupby("gpu"):
        below = g[g["modelled_pct"] < AIM_PCT]
        lines += [f"{', '.join(sorted(g['date'].unique()))} · {gpu} · torch {', '.join(sorted(g['torch'].unique()))} · "
                  f"{commit_source('benchmarks/data/coverage.csv')} · raw: `benchmarks/data/coverage.csv`", "",
                  f"{len(g) - len(below)} of {len(g)} runs at least {AIM_PCT:g} % modelled "
                  f"(lowest {g['modelled_pct'].min():.1f} %).", "",
                  "| model | inference | train | unmodelled (largest first) |", "|---|---:|---:|---|"]
        for model, m in g.groupby("model"):
            pct = {r["mode"]: f"{r['modelled_pct']:.1f} %" for _, r in m.iterrows()}
            names = "; ".join(sorted({u for u in m["unmodelled"] if u}))
            lines.append(f"| {model} | {pct.get('inference', '—')} | {pct.get('train', '—')} | {names or '—'} |")
        lines += ["", *_timing_lines(g)]
        lines.append("")
    return "\n".join(lines)


def _timing_lines(g: pd.DataFrame) -> list[str]:
    """How many runs took their kernel times from the CUDA-only timing pass, and why not the others."""
    known = g[g["kernel_timing"] != ""]
    if not len(known):
        return []
    apart = known[known["kernel_timing"] == "kernels-only"]
    lines = [f"Kernel times from the CUDA-only timing pass (matched to the shapes pass by launch order): "
             f"{len(apart)} of {len(known)} runs."]
    for _, r in known[known["kernel_timing"] != "kernels-only"].iterrows():
        lines.append(f"- {r['model']} {r['mode']}: shapes pass times ({r['kernel_timing_reason'] or 'no timing pass'})")
    return lines


def render(data: Path = DATA, docs: Path = DOCS) -> None:
    text = splice_block(docs.read_text(), render_block(pd.read_csv(data)), BEGIN, END,
                        "Cost-model coverage", before="## Measured advice")
    docs.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="measure (GPU) into this CSV")
    ap.add_argument("--models", help="comma-separated model stems (default: all)")
    ap.add_argument("--merge", type=Path, nargs="+", help="upsert these CSVs into benchmarks/data/coverage.csv")
    ap.add_argument("--render", action="store_true", help="write the table into docs/benchmarks.md")
    args = ap.parse_args(argv)
    rc = 0
    if args.out:
        models = discover_models(MODELS_DIR)
        if args.models:
            wanted = set(args.models.split(","))
            models = [m for m in models if m.stem in wanted]
        rc = measure(args.out, models)
    if args.merge:
        merge(args.merge)
    if args.render:
        render()
    return rc


if __name__ == "__main__":
    sys.exit(main())
