"""Measured-advice sweep: profile each benchmarks/advice model, run `recommend --measure`, upsert one CSV.

    python3 benchmarks/advice/run_advice.py --budget-s 60            # on the GPU machine
    python3 benchmarks/advice/run_advice.py --dry-run-cpu --models tiny_mlp_host_bound --out /tmp/a.csv
    python3 benchmarks/advice/run_advice.py --merge OUT1/advice.csv OUT2/advice.csv   # GPU outputs -> data

Every model runs in its own temp dir through the CLI (`python3 -m kernel_advisor`), as a user
would; a model that fails is one row with status=error and the end of its stderr, and the
sweep goes on. Columns: benchmarks/advice/README.md.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MODELS_DIR = HERE / "models"
DEFAULT_CSV = REPO / "benchmarks" / "data" / "advice.csv"
sys.path.insert(0, str(HERE.parent))
from docdata import upsert_rows, write_csv_atomic  # noqa: E402

KEY = ["model", "kind", "rule_id", "subject", "action", "device_name", "dtype", "mode"]
VALUES = ["predicted_gain_frac", "measured_gain_frac", "speedup", "speedup_low", "speedup_high", "verdict",
          "status", "reason", "rank", "gpu", "torch", "triton", "commit", "date", "explored", "pruned", "wall_s",
          "step_s", "eager_step_s"]
COLUMNS = KEY + VALUES
NUMERIC = ["predicted_gain_frac", "measured_gain_frac", "speedup", "speedup_low", "speedup_high", "rank",
           "explored", "pruned", "wall_s", "step_s", "eager_step_s"]
TEXT = [c for c in COLUMNS if c not in NUMERIC]
SLICE = ["model", "device_name", "dtype", "mode"]  # one measurement of one model
KIND_ORDER = {"rule": 0, "also": 1, "action": 2, "plan": 3, "hotspot": 4}
HOTSPOT_MIN_PCT = 2.0  # every hotspot of at least this share gets a rung or a reason

ALSO = ("compile", "compile:reduce-overhead")  # measured on every model: the ground truth of "best fix"
MODE = "inference"
PROFILE_TIMEOUT_S = 900
REASON_CHARS = 400


# ---------------------------------------------------------------- the sweep

def discover_models(folder: Path = MODELS_DIR) -> list[Path]:
    return sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))


def load_module(path: Path, small: bool = False):
    """Import a model file under a name of its own; `small` applies its SMALL sizes (CPU tests)."""
    spec = importlib.util.spec_from_file_location(f"advice_model_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    before, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # tests leave no __pycache__ here
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = before
    if small:
        for name, value in module.SMALL.items():
            setattr(module, name, value)
    return module


def extra_args(path: Path) -> list[str]:
    """Arguments from a `# advisor: ...` line of the model file (e.g. --autocast bfloat16)."""
    for line in path.read_text().splitlines():
        m = re.match(r"#\s*advisor:\s*(.*)$", line.strip())
        if m:
            return shlex.split(m.group(1))
    return []


SMALL_SHIM = '''"""{stem} at its SMALL sizes, for a CPU dry run of the advice sweep."""
import importlib.util as _u
_spec = _u.spec_from_file_location("{stem}", {path!r})
_m = _u.module_from_spec(_spec)
_spec.loader.exec_module(_m)
for _k, _v in _m.SMALL.items():
    setattr(_m, _k, _v)
Model, get_inputs = _m.Model, _m.get_inputs
get_init_inputs = getattr(_m, "get_init_inputs", lambda: [])
'''


@dataclass(frozen=True)
class Job:
    model: Path
    dtype_label: str  # "bfloat16", or "autocast:bfloat16" for models run under autocast
    profile_args: tuple[str, ...]  # after `profile MODEL`
    recommend_args: tuple[str, ...]  # after `recommend RUNDIR`
    small: bool
    recommend_timeout_s: float
    mode: str = MODE


def profile_options(path: Path, device: str, dtype: str, mode: str = MODE, steps: int = 5,
                    warmup: int = 3) -> tuple[str, ...]:
    """`advisor profile` options for one model as the sweep profiles it, its `# advisor:` line
    included. --autocast runs the model as built; a 16-bit --dtype next to it is refused by the CLI."""
    extra = extra_args(path)
    run_dtype = "keep" if "--autocast" in extra else dtype
    return ("--device", device, "--dtype", run_dtype, "--mode", mode, "--steps", str(steps),
            "--warmup", str(warmup), *extra)


def plan_jobs(models: list[Path], device: str, dtype: str, budget_s: float, small: bool,
              hotspots_only: bool = False, mode: str = MODE) -> list[Job]:
    """`hotspots_only`: recommend without --measure (what the advice says per hotspot; minutes, not tens)."""
    jobs = []
    for path in models:
        extra = extra_args(path)
        label = f"autocast:{extra[extra.index('--autocast') + 1]}" if "--autocast" in extra else dtype
        profile = profile_options(path, device, dtype, mode)
        measure = ("--measure", "--budget-s", f"{budget_s:g}", *(a for act in ALSO for a in ("--also", act)))
        recommend = (*(() if hotspots_only else measure), "--format", "json")
        # --budget-s caps the measuring only; process start, model load and compiles come on top.
        jobs.append(Job(path, label, profile, recommend, small, 2 * budget_s + 600, mode))
    return jobs


# ---------------------------------------------------------------- JSON -> rows

def run_info(run_json: dict | None, job: Job, device: str) -> dict:
    """What every row of one model shares: where and with what it ran."""
    if run_json is None:  # the profile failed: describe this machine instead
        name, versions = _local_device(device), _local_versions()
        gpu = name
    else:  # gpu: the name plus what tells two machines of one model apart
        dev, versions = run_json.get("device", {}), run_json.get("versions", {})
        name = dev.get("name") or ""
        gpu = name
        if dev.get("type") == "cuda":
            gpu = f"{name} ({dev.get('sm_count')} SMs, driver {dev.get('driver') or '?'})"
    return {"model": job.model.stem, "device_name": name, "dtype": job.dtype_label, "mode": job.mode, "gpu": gpu,
            "torch": versions.get("torch") or "", "triton": versions.get("triton") or "",
            "commit": _commit(), "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}


def _measured_values(measured: dict | None) -> dict:
    if measured is None:
        return {"status": "unmeasured"}
    speedup = measured.get("speedup") or {}
    return {"measured_gain_frac": measured.get("gain_frac"), "speedup": speedup.get("value"),
            "speedup_low": speedup.get("low"), "speedup_high": speedup.get("high"),
            "verdict": measured.get("verdict") or "", "status": measured.get("status") or "",
            "reason": _one_line(measured.get("reason") or "")}


def rows_from_recommend(doc: dict, info: dict) -> list[dict]:
    """One row per recommendation (kind rule), per --also action (also), per measured action with
    its predicted union gain (action), for the plan, and per hotspot of ≥ 2 % of device time."""
    rows = []
    for rec in doc.get("recommendations", []):
        # With --measure the list is ranked by measured gain; keep the predicted rank, which is
        # what a user without --measure would have seen.
        rank = rec.get("predicted_rank") or rec.get("rank")
        rows.append({**info, "kind": "rule", "rule_id": rec["rule_id"], "subject": rec.get("subject") or "",
                     "action": rec.get("action") or "", "predicted_gain_frac": rec.get("estimated_gain_frac"),
                     "rank": rank, **_measured_values(rec.get("measured"))})
    for also in doc.get("also") or []:
        rows.append({**info, "kind": "also", "rule_id": "", "subject": "", "action": also["action"],
                     **_measured_values(also.get("measured"))})
    for act in doc.get("actions") or []:
        rows.append({**info, "kind": "action", "rule_id": "", "subject": "", "action": act["action"],
                     "predicted_gain_frac": act.get("predicted_gain_frac"), **_measured_values(act.get("measured"))})
    plan = doc.get("plan")
    if plan is not None:
        search = doc.get("measurement") or {}  # the search: configurations timed, pruned, its wall time
        rows.append({**info, "kind": "plan", "rule_id": "+".join(plan.get("rules") or []), "subject": "",
                     "action": "+".join(plan.get("actions") or []), **_measured_values(plan.get("measured")),
                     "explored": search.get("explored"), "pruned": search.get("pruned"),
                     "wall_s": search.get("elapsed_s"), **plan_step_seconds(plan.get("measured"), search)})
    rows += [hotspot_row(h, info) for h in doc.get("hotspots") or []
             if (h.get("share_pct") or 0.0) >= HOTSPOT_MIN_PCT]
    return [_complete(r) for r in rows]


def plan_step_seconds(measured: dict | None, search: dict) -> dict:
    """The plan's and eager's back-to-back step in seconds: absolute figures compare with the
    exhaustive search's even where the two runs' eager steps differ (host drift, another warm-up)."""
    eager_s = (search.get("eager_step_s") or {}).get("value")
    speedup = ((measured or {}).get("speedup") or {}).get("value")
    passed = (measured or {}).get("status") == "passed" and speedup
    return {"eager_step_s": eager_s, "step_s": eager_s / speedup if eager_s and passed else eager_s}


def hotspot_row(h: dict, info: dict) -> dict:
    """What the advice said about one hotspot: the rung chosen (or leave-it, or none) and why; for
    `none`, every rung's reason for passing it over."""
    chosen = h["chosen"]
    why = chosen["why"] if chosen["tier"] != "none" else "; ".join(
        [chosen["why"], *(f"{p['tier']}: {p['reason']}" for p in h.get("passed_over") or [])])
    return {**info, "kind": "hotspot", "rule_id": chosen.get("rule_id") or "", "subject": f"row:{h['row_id']}",
            "action": chosen["tier"], "predicted_gain_frac": h["share_pct"] / 100.0,
            "reason": _one_line(f"{h['name']} ({h['verdict']}): {why}")[:REASON_CHARS]}


def error_rows(info: dict, reason: str) -> list[dict]:
    return [_complete({**info, "kind": "plan", "rule_id": "", "subject": "", "action": "", "status": "error",
                       "reason": _one_line(reason)[-REASON_CHARS:]})]


def _complete(row: dict) -> dict:
    return {c: row.get(c, "" if c in TEXT else None) for c in COLUMNS}


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# ---------------------------------------------------------------- the CSV

def read_csv(path: Path) -> pd.DataFrame:
    if not Path(path).is_file():
        return pd.DataFrame(columns=COLUMNS)
    df = pd.read_csv(path, dtype={c: str for c in TEXT})
    df[TEXT] = df[TEXT].fillna("")  # empty key parts must compare equal, not as NaN
    return df.reindex(columns=COLUMNS)


def upsert(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """`new` replaces the rows of `old` with the same KEY; every other row of `old` stays."""
    return sort_rows(upsert_rows(old, new.reindex(columns=COLUMNS), KEY))


def drop_remeasured(old: pd.DataFrame, new: pd.DataFrame, kinds: tuple[str, ...] | None = None) -> pd.DataFrame:
    """Rows of `old` (of `kinds`, default all) for a (model, device, dtype, mode) that `new`
    measured again: a rule that no longer fires, or a plan of other actions, has a key of its
    own and would otherwise linger."""
    if old.empty:
        return old
    again = pd.MultiIndex.from_frame(old[SLICE]).isin(pd.MultiIndex.from_frame(new[SLICE]))
    if kinds is not None:
        again &= old["kind"].isin(kinds).to_numpy()
    return old.loc[~again]


def sort_rows(df: pd.DataFrame) -> pd.DataFrame:
    df = df.assign(**{c: pd.to_numeric(df[c], errors="coerce") for c in NUMERIC})
    order = df["kind"].map(KIND_ORDER).fillna(9)
    df = df.assign(_k=order).sort_values(SLICE + ["_k", "rank", "action", "rule_id", "subject"], na_position="last")
    return df.drop(columns="_k").reset_index(drop=True)


def write_atomic(df: pd.DataFrame, path: Path) -> None:
    write_csv_atomic(df, path)


# ---------------------------------------------------------------- running one model

def run_job(job: Job, device: str, log=print) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix=f"advice-{job.model.stem}-") as tmp:
        work = Path(tmp)
        model = job.model
        if job.small:
            model = work / f"{job.model.stem}.py"
            model.write_text(SMALL_SHIM.format(stem=job.model.stem, path=str(job.model)))
        run_dir = work / "run"
        profile = ["profile", str(model), *job.profile_args, "--out", str(run_dir)]
        ok, out, err = _advisor(profile, work, PROFILE_TIMEOUT_S)
        run_json = _read_json(run_dir / "run.json")
        info = run_info(run_json, job, device)
        if not ok:
            log(f"  profile failed: {err[-200:]}")
            return error_rows(info, f"profile: {err}")
        recommend = ["recommend", str(run_dir), *job.recommend_args]
        ok, out, err = _advisor(recommend, work, job.recommend_timeout_s)
        if not ok:
            log(f"  recommend failed: {err[-200:]}")
            return error_rows(info, f"recommend: {err}")
        try:
            return rows_from_recommend(json.loads(out), info)
        except (ValueError, KeyError, TypeError) as e:
            return error_rows(info, f"recommend printed no valid JSON ({e}): {out[-200:]}")


def _advisor(args: list[str], cwd: Path, timeout_s: float) -> tuple[bool, str, str]:
    env = dict(os.environ, ADVISOR_HOME=str(cwd / ".advisor"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    try:
        p = subprocess.run([sys.executable, "-m", "kernel_advisor", *args], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        tail = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return False, "", f"timed out after {timeout_s:.0f} s; {tail[-REASON_CHARS:]}"
    err = "\n".join(l for l in p.stderr.splitlines() if not l.startswith("USDT:"))  # torch's profiler chatter
    return p.returncode == 0, p.stdout, f"exit {p.returncode}: {err[-REASON_CHARS:]}"


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


_COMMIT: list[str] = []


def _commit() -> str:
    """The commit measured: ADVISOR_COMMIT when set (a copy of the tree without .git), else git's."""
    if not _COMMIT and os.environ.get("ADVISOR_COMMIT"):
        _COMMIT.append(os.environ["ADVISOR_COMMIT"])
    if not _COMMIT:
        def git(*a):
            return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True)
        head = git("rev-parse", "--short", "HEAD").stdout.strip() or "unknown"
        dirty = git("diff", "--quiet", "HEAD").returncode == 1  # tracked changes not in the commit
        _COMMIT.append(head + ("-dirty" if dirty else ""))
    return _COMMIT[0]


def _local_device(device: str) -> str:
    import torch
    if device == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    from kernel_advisor.collect.run_meta import cpu_name
    return cpu_name()


def _local_versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for pkg in ("torch", "triton"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = ""
    return out


# ---------------------------------------------------------------- main

def merge(parts: list[Path], out: Path) -> int:
    """Each part's models replace their earlier measurement in `out`, as if the sweep had run here."""
    df = read_csv(out)
    for part in parts:
        new = read_csv(part)
        only_hotspots = not new.empty and (new["kind"] == "hotspot").all()  # a --hotspots-only sweep
        df = upsert(drop_remeasured(df, new, ("hotspot",) if only_hotspots else None), new)
        print(f"{part}: {new['model'].nunique()} models, {len(new)} rows")
    write_atomic(df, out)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", help="comma-separated model names (file stems); default: every model")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--budget-s", type=float, default=60.0, help="recommend --measure wall-time cap per model")
    ap.add_argument("--mode", default=MODE, choices=("inference", "train"))
    ap.add_argument("--out", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--small", action="store_true", help="run the models at their SMALL sizes")
    ap.add_argument("--dry-run-cpu", action="store_true", help="--device cpu --dtype keep --small: plumbing check")
    ap.add_argument("--hotspots-only", action="store_true",
                    help="recommend without --measure; replace only the models' hotspot rows")
    ap.add_argument("--merge", type=Path, nargs="+", metavar="CSV",
                    help="measure nothing: fold these sweep outputs (from the GPU machine) into --out")
    args = ap.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out)
    if args.dry_run_cpu:
        args.device, args.dtype, args.small = "cpu", "keep", True

    models = discover_models()
    if args.models:
        wanted = [m.strip() for m in args.models.split(",") if m.strip()]
        unknown = sorted(set(wanted) - {m.stem for m in models})
        if unknown:
            ap.error(f"unknown model(s): {', '.join(unknown)}; known: {', '.join(m.stem for m in models)}")
        models = [m for m in models if m.stem in wanted]

    jobs = plan_jobs(models, args.device, args.dtype, args.budget_s, args.small, args.hotspots_only, args.mode)
    failed = 0
    for i, job in enumerate(jobs, 1):
        t0 = time.perf_counter()
        print(f"[{i}/{len(jobs)}] {job.model.stem} ({job.dtype_label})", flush=True)
        new = pd.DataFrame(run_job(job, args.device), columns=COLUMNS)
        errored = len(new) == 1 and new["status"].iloc[0] == "error"
        failed += errored
        # Written after every model, so a sweep cut short keeps what it measured. A failed run
        # adds its error row but keeps the model's earlier measurement (a timeout is often transient).
        old = read_csv(args.out)
        if errored:
            merged = upsert(old, new)
        elif args.hotspots_only:
            merged = upsert(drop_remeasured(old, new, kinds=("hotspot",)), new[new["kind"] == "hotspot"])
        else:
            merged = upsert(drop_remeasured(old, new), new)
        write_atomic(merged, args.out)
        print(f"  {len(new)} rows in {time.perf_counter() - t0:.0f} s", flush=True)
    print(f"{len(jobs) - failed}/{len(jobs)} models measured; rows in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
