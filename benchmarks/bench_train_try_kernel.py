"""`advisor try-kernel` on a training step, kept as data: benchmarks/data/try_kernel_train.csv.

The model (benchmarks/models/llama_train.py: Llama-like, bf16, RMSNorm, SwiGLU, cross-entropy
over 128256 classes) is profiled (`advisor profile --mode train`, so try-kernel's routes follow
the step's measured regime, as a user's second command would), then `advisor try-kernel
--mode train --dtype bfloat16 --all --json` runs with the bundled kernels that apply: eager,
torch.compile, each kernel, all together, and torch.compile + each of those, timed in the
user's loop regime (back-to-back windows, variants interleaved). One row per variant, keyed by
(model, kernels, variant, gpu) and upserted; `--render` writes docs/benchmarks.md's section.

The target is decided from the rows, per kernel set ("all together"): met when the set is
>= 1.05x eager (median step ratio) and torch.compile + the set is not slower than
torch.compile alone (verdict_vs_compile, 95 % bootstrap interval); "routed away" when the set
made no call of its own because the registry's measured routes sent every call to eager (the
reasons are its eager_routes); otherwise not met, saying which side failed.

    python benchmarks/bench_train_try_kernel.py --out DIR [--kernels ID ...] [--reps 30]
    python benchmarks/bench_train_try_kernel.py --merge DIR/try_kernel_train.csv
    python benchmarks/bench_train_try_kernel.py --render [--docs docs/benchmarks.md]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from docdata import commit_source, splice_block, upsert_rows, write_csv_atomic  # noqa: E402

MODEL = HERE / "models" / "llama_train.py"
DEFAULT_CSV = HERE / "data" / "try_kernel_train.csv"
KERNELS = ("triton.rms_norm", "triton.add_rms_norm", "triton.swiglu", "triton.cross_entropy")
TARGET_VS_EAGER = 1.05
KEY = ["model", "kernels", "variant", "gpu"]
VALUES = ["kind", "status", "calls", "eager_routed_calls", "step_ms", "step_low_ms", "step_high_ms",
          "speedup", "speedup_low", "speedup_high", "verdict", "vs_compile", "vs_compile_low",
          "vs_compile_high", "verdict_vs_compile", "reason", "regime", "mode", "dtype", "reps", "date",
          "torch", "triton", "commit"]
COLUMNS = KEY + VALUES
BEGIN, END = "<!-- train-try-kernel:begin -->", "<!-- train-try-kernel:end -->"
TITLE = "try-kernel in a training step"


# ---------------------------------------------------------------- rows from try_kernel.json

def _est(v: dict, key: str, scale: float = 1.0) -> tuple[float, float, float]:
    e = v.get(key) or {}
    return tuple(math.nan if e.get(k) is None else e[k] * scale for k in ("value", "low", "high"))


def _regime(notes) -> str:
    """try-kernel's note on which routes it followed (host- or device-bound step)."""
    return next((n for n in notes if "measured routes" in n or "device-bound" in n or "host-bound" in n), "")[:200]


def rows_of(payload: dict, model: str, kernels: str, stamp: dict) -> list[dict]:
    """One row per variant of a try_kernel.json payload."""
    out = []
    for v in payload["variants"]:
        step, speed, vs = _est(v, "step_s", 1e3), _est(v, "speedup"), _est(v, "speedup_vs_compile")
        why = v.get("reason") or "; ".join(v.get("eager_routes") or ())
        out.append({"model": model, "kernels": kernels, "variant": v["name"], "gpu": payload["device"],
                    "kind": v["kind"], "status": v["status"], "calls": v.get("calls"),
                    "eager_routed_calls": v.get("eager_routed_calls", 0),
                    "step_ms": step[0], "step_low_ms": step[1], "step_high_ms": step[2],
                    "speedup": speed[0], "speedup_low": speed[1], "speedup_high": speed[2],
                    "verdict": v.get("verdict", ""), "vs_compile": vs[0], "vs_compile_low": vs[1],
                    "vs_compile_high": vs[2], "verdict_vs_compile": v.get("verdict_vs_compile", ""),
                    "reason": why[:300], "regime": _regime(payload.get("notes", ())),
                    "mode": payload["mode"], "dtype": payload["dtype"], **stamp})
    return out


# ---------------------------------------------------------------- the target, from the rows

def decide(run: pd.DataFrame) -> dict:
    """The target of one (model, kernels, gpu) run: {"verdict", "why", ...} from its rows."""
    by_kind = {k: g for k, g in run.groupby("kind")}
    sets = by_kind.get("combined", by_kind.get("candidate"))
    if sets is None or not len(sets):
        return {"verdict": "not measured", "why": "no kernel set in the run"}
    s = sets.iloc[0]
    with_compile = run[(run["kind"] == "compile+kernel") & run["variant"].str.endswith(f"+ {s.variant}")]
    c = with_compile.iloc[0] if len(with_compile) else None
    routed = s.status == "not applied" and s.eager_routed_calls > 0
    if routed:
        return {"verdict": "routed away", "set": s.variant, "why": f"every call went to eager: {s.reason}"}
    if s.status != "passed" or math.isnan(s.speedup):
        return {"verdict": "not met", "set": s.variant, "why": f"the set {s.status}: {s.reason}"}
    fails = []
    if s.speedup < TARGET_VS_EAGER:
        fails.append(f"{s.speedup:.3f}x eager < {TARGET_VS_EAGER}x")
    if c is None or c.status != "passed":
        fails.append("torch.compile + the set not measured" + (f" ({c.status}: {c.reason})" if c is not None else ""))
    elif c.verdict_vs_compile == "slower":
        fails.append(f"torch.compile + the set {c.vs_compile:.3f}x torch.compile alone "
                     f"[{c.vs_compile_low:.3f}, {c.vs_compile_high:.3f}]: slower")
    vs = "" if c is None else f"{c.vs_compile:.3f}x torch.compile alone ({c.verdict_vs_compile})"
    return {"verdict": "not met" if fails else "met", "set": s.variant, "speedup": s.speedup,
            "vs_compile": vs, "why": "; ".join(fails)}


# ---------------------------------------------------------------- running it

def _cli(args: list[str], env: dict, log: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "kernel_advisor", *args]
    proc = subprocess.run(cmd, cwd=REPO, env=env, text=True, capture_output=True, check=False)
    log.write_text(f"$ {' '.join(cmd)}\nrc={proc.returncode}\n--- stderr\n{proc.stderr}\n--- stdout\n{proc.stdout}")
    return proc


def stamps() -> dict:
    import torch
    try:
        import triton
        triton_version = triton.__version__
    except Exception:  # noqa: BLE001 - no triton: the Triton kernels cannot run, say so in the row
        triton_version = ""
    from bench_kernels_csv import commit

    return {"torch": torch.__version__, "triton": triton_version, "commit": commit(),
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def run(out: Path, kernels: list[str], reps: int, profile: bool) -> int:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "ADVISOR_HOME": str(out / "advisor-home")}  # never a user's runs
    model = str(MODEL.relative_to(REPO))
    common = [model, "--mode", "train", "--dtype", "bfloat16", "--device", "cuda"]
    if profile:
        proc = _cli(["profile", *common], env, out / "profile.log")
        if proc.returncode != 0:
            print(f"bench_train_try_kernel: advisor profile failed (rc {proc.returncode}); see {out / 'profile.log'}",
                  file=sys.stderr)
            return proc.returncode
    proc = _cli(["try-kernel", *common, *kernels, "--all", "--reps", str(reps), "--json"], env,
                out / "try_kernel.log")
    if proc.returncode not in (0, 3):
        print(f"bench_train_try_kernel: advisor try-kernel failed (rc {proc.returncode}); see "
              f"{out / 'try_kernel.log'}", file=sys.stderr)
        return proc.returncode
    payload = json.loads(proc.stdout)
    (out / "try_kernel_train.json").write_text(json.dumps(payload, indent=2) + "\n")
    rows = pd.DataFrame(rows_of(payload, MODEL.stem, " ".join(kernels), {**stamps(), "reps": reps}))
    upsert_file(out / DEFAULT_CSV.name, rows)
    print(render(rows))
    return proc.returncode


# ---------------------------------------------------------------- the CSV and the docs

def read_csv(path: Path) -> pd.DataFrame:
    if not Path(path).is_file():
        return pd.DataFrame(columns=COLUMNS)
    return pd.read_csv(path, keep_default_na=False, na_values={c: [""] for c in COLUMNS if c not in KEY}
                       ).reindex(columns=COLUMNS)


def upsert_file(path: Path, new: pd.DataFrame) -> pd.DataFrame:
    old = read_csv(path)
    merged = upsert_rows(old, new.reindex(columns=COLUMNS), KEY) if len(old) else new.reindex(columns=COLUMNS)
    write_csv_atomic(merged, path, float_format="%.6g")
    return merged


def _x(v: float, lo: float, hi: float) -> str:
    return "—" if pd.isna(v) else f"{v:.3f}× [{lo:.3f}, {hi:.3f}]"


def render(df: pd.DataFrame) -> str:
    df = df.reindex(columns=COLUMNS)
    blocks = []
    for (model, kernels, gpu), run_rows in df.groupby(["model", "kernels", "gpu"], sort=True):
        r0 = run_rows.iloc[0]
        d = decide(run_rows)
        lines = [f"**{model}** ({r0['mode']}, {r0['dtype']}) · {gpu} · torch {r0['torch']} · triton {r0['triton']} "
                 f"· {str(r0['date'])[:10]} · kernels `{kernels}` · {r0['reps']} rounds "
                 f"of back-to-back windows (`benchmarks/bench_train_try_kernel.py`, "
                 f"`benchmarks/data/try_kernel_train.csv`; {commit_source('benchmarks/data/try_kernel_train.csv')})",
                 "",
                 f"Routes followed: {r0['regime'] or '?'}", "",
                 "| variant | kind | status | calls (to eager) | step ms [95% CI] | vs eager | vs torch.compile |",
                 "|---|---|---|---:|---|---|---|"]
        for r in run_rows.itertuples():
            step = "—" if pd.isna(r.step_ms) else f"{r.step_ms:.2f} [{r.step_low_ms:.2f}, {r.step_high_ms:.2f}]"
            calls = "" if pd.isna(r.calls) else f"{int(r.calls)} ({int(r.eager_routed_calls or 0)})"
            lines.append(f"| {r.variant} | {r.kind} | {r.status} | {calls} | {step} | "
                         f"{_x(r.speedup, r.speedup_low, r.speedup_high)} | "
                         f"{_x(r.vs_compile, r.vs_compile_low, r.vs_compile_high)} |")
        lines += ["", f"Target (set `{d.get('set', '?')}` ≥ {TARGET_VS_EAGER}× eager and torch.compile + set not "
                  f"slower than torch.compile alone): **{d['verdict']}**" + (f" — {d['why']}" if d.get("why") else "")
                  + "."]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n" if blocks else "Not measured yet.\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="run on the GPU; the JSON, logs and a CSV go here")
    ap.add_argument("--kernels", nargs="+", default=list(KERNELS))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--no-profile", action="store_true", help="skip `advisor profile` (routes: host-bound rule)")
    ap.add_argument("--merge", nargs="+", type=Path, metavar="PART_CSV", help="upsert into --csv; no GPU")
    ap.add_argument("--render", action="store_true", help="write the docs section from --csv; no GPU")
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--docs", type=Path, default=REPO / "docs" / "benchmarks.md")
    args = ap.parse_args(argv)
    for part in args.merge or ():
        merged = upsert_file(args.csv, read_csv(part))
        print(f"merged {part} into {args.csv} ({len(merged)} rows)")
    if args.render:
        text = args.docs.read_text() if args.docs.is_file() else ""
        args.docs.write_text(splice_block(text, render(read_csv(args.csv)), BEGIN, END, TITLE))
        print(f"wrote the {TITLE} section of {args.docs}")
    if args.out is None:
        return 0 if (args.merge or args.render) else ap.error("give --out (GPU run), --merge or --render")
    return run(args.out, args.kernels, args.reps, not args.no_profile)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
