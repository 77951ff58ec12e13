"""The multi-GPU measurement in one unattended call: calibrate, an independent bus-bandwidth
check of each collective family, DDP / FSDP2 / tensor-parallel profiles, the data-parallel actions
measured by `recommend --measure`, and benchmarks/data/distributed.json.

On a 2- or 4-GPU host, from the repository root, in one device call (or `benchmarks/gpu_pass.sh
OUT distributed_runs`):

    ADVISOR_COMMIT=<git rev-parse --short HEAD> PYTHONUNBUFFERED=1 PYTHONPATH=$PWD \\
        python3 benchmarks/bench_distributed.py $OUT --nproc 2 --budget-s 420

--budget-s bounds the call (gpu_pass.sh gives it what is left of its ~8.5 min after the multi-GPU
tests). Each step is a subprocess with a deadline (a hung NCCL call is stopped, not waited for).
The required steps always run: calibrate, busbw_check (3 families), the bf16 DDP run of
examples/ddp_mlp.py with its one-process twin, and the same model cast to float32 with the DDP
actions measured (the bf16 run's profile took 22 s on 2 x H200, its wall_s in
benchmarks/data/distributed.json; a `recommend --measure` launches the ranks once more and times
for MEASURE_BUDGET_S). The optional runs (FSDP2 with its actions, tensor parallel, gpt_block)
start only when their deadlines fit what is left of --budget-s, in that order: even a run that
hangs everywhere ends within the budget, with its log in OUT. Steps:

  1. what the host is: GPUs, driver, `nvidia-smi topo -m`, torch/CUDA/NCCL/Triton versions;
  2. `advisor calibrate --force` into a temporary ADVISOR_CACHE_DIR, which the profiles then
     read: the measured all-reduce busbw is the runs' interconnect ceiling;
  3. benchmarks/busbw_check.py (imports nothing of kernel_advisor): nccl-tests-style all-reduce
     busbw, 4 KiB ... 1 GiB; the calibrated ceiling is compared with it at the same size;
  4. `advisor profile --mode train --nproc-per-node N` of examples/ddp_mlp.py (the primary run:
     bf16, the all-reduce is a visible share of the step) and `advisor recommend --format json` on
     it; the same model profiled as one process (the step without communication); the same model
     with --dtype float32 and `recommend --measure --also` each DDP action on it (predicted beside
     measured; float32 gradients, so the bf16 compression hook has something to compress); then,
     as the budget allows, the bf16 model under FSDP2 (--fsdp, with the FSDP actions measured),
     examples/tp_mlp.py (tensor parallel) and examples/gpt_block.py under DDP. Each run's
     collective families are held against busbw_check's sweep of the same family. The profiler's
     overhead is each run's own (run.json "profiler_overhead": profiled / unprofiled median step,
     with interval);
  5. the record: OUT/distributed.json, and on GPU benchmarks/data/distributed.json (--record).

OUT receives 3 files (the device returns 8, and gpu_pass.sh adds its own logs):
bench_distributed.log (everything printed), distributed.json (or distributed.failed.json) and
runs.tar.gz (run directories, calibration.json, busbw_check.json; rank traces while they fit in
12 MiB). Back on the development machine:

    python3 benchmarks/distributed_record.py FILES_AT/distributed.json   # upserted by GPU count
    python3 benchmarks/render_distributed.py          # the section of docs/distributed.md

`--device cpu` runs the same path on gloo with small sizes (a check of the script; its numbers
are not measurements and it writes no record into the repository unless --record says so).
Exit 1, with FAILED lines last, when a step failed or a check on the figures did not hold.
NVLink multicast stays off in every child (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1): a program using it can take a shared host's GPUs out of service.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback
from dataclasses import asdict, dataclass, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO)]
from distributed_record import (DEFAULT_PATH, SCHEMA_VERSION, DistributedRecord, RunFigures,  # noqa: E402
                                busbw_at, clean, clock_skew_us, family_ceiling, ratio, upsert_record, write_record)

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
STOP_GRACE_S = 15.0  # after SIGINT: the advisor stops its ranks and exits
TAR_TRACE_BUDGET = 12 * 2**20  # rank traces go into runs.tar.gz while they fit (one returned file <= 16 MiB)
SINGLE_DEADLINE_S = 90.0  # the primary model as one process, for the step without communication
CEILING_AGREEMENT = (0.8, 1.25)  # tool's calibrated busbw / busbw_check's at the same size: outside, a warning
SKEW_WARN_US = 50.0  # trace clocks of ranks on one host should agree far better than this


@dataclass(frozen=True)
class RunSpec:
    name: str
    model: str
    steps: int
    warmup: int
    required: bool  # the record is not written without it
    deadline_s: float
    options: tuple[str, ...] = ()  # more `advisor profile` options (--fsdp, --dtype)
    # data-parallel actions `recommend --measure` measures on the run's ranks (--also each)
    measure: tuple[str, ...] = ()
    single_process: bool = False  # also profile the model as one process: the step DDP adds to


DDP_ACTIONS = ("ddp:bucket_cap_mb", "ddp:gradient_as_bucket_view", "ddp:bf16_compress")
FSDP_ACTIONS = ("fsdp:prefetch", "fsdp:no_reshard_after_forward")
# recommend --measure's single-process search (the compile modes) gets little: the data-parallel
# actions, measured on the ranks before it, are what the record keeps.
MEASURE_BUDGET_S = 20.0
MEASURE_DEADLINE_S = 90.0
# The required runs always run; the others start only when their deadlines (and their measure's)
# fit what is left of --budget-s, so the whole call ends within it. On GPU ddp_mlp is bf16, whose
# gradients the bf16 hook cannot compress: the DDP actions are measured on it cast to float32.
GPU_RUNS = (RunSpec("ddp_mlp", "examples/ddp_mlp.py", 20, 5, True, 120.0, single_process=True),
            RunSpec("ddp_mlp_fp32", "examples/ddp_mlp.py", 10, 3, True, 120.0, ("--dtype", "float32"),
                    DDP_ACTIONS),
            RunSpec("fsdp_mlp", "examples/ddp_mlp.py", 10, 3, False, 60.0, ("--fsdp",), FSDP_ACTIONS),
            RunSpec("tp_mlp", "examples/tp_mlp.py", 10, 3, False, 60.0),
            RunSpec("gpt_block_ddp", "examples/gpt_block.py", 5, 3, False, 120.0))
GPU_REQUIRED = {s.name for s in GPU_RUNS if s.required}
CPU_RUNS = (RunSpec("ddp_mlp", "examples/ddp_mlp.py", 3, 1, True, 240.0, measure=DDP_ACTIONS, single_process=True),
            RunSpec("tp_mlp", "examples/tp_mlp.py", 3, 1, False, 240.0),
            RunSpec("fsdp_mlp", "examples/ddp_mlp.py", 3, 1, False, 240.0, ("--fsdp",)))
COLLECTIVES = "all_reduce,all_gather,reduce_scatter"


@dataclass
class StepResult:
    name: str
    returncode: int | None  # None: stopped at its deadline
    wall_s: float
    output: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class Log:
    """Everything printed goes to stdout and OUT/bench_distributed.log (the device returns both)."""

    def __init__(self, path: Path):
        self.file = open(path, "a", encoding="utf-8")
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        with self.lock:
            print(text, flush=True)
            self.file.write(text + "\n")
            self.file.flush()


# ---------------------------------------------------------------- subprocesses with deadlines


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGINT first: the advisor stops torchrun and its ranks (their own session) and exits."""
    for sig, grace in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            return


def run_step(name: str, cmd: list[str], env: dict, deadline_s: float, log: Log, echo: bool = True) -> StepResult:
    """Run `cmd` to its end or its deadline; its output is kept, and printed when `echo`."""
    log.line(f"=== {name}: {' '.join(cmd)}  (deadline {deadline_s:.0f} s)")
    t0 = time.perf_counter()
    lines: list[str] = []
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True)

    def pump() -> None:
        for text in proc.stdout:
            lines.append(text.rstrip("\n"))
            if echo:
                log.line(f"  | {text.rstrip()}")

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        code = proc.wait(deadline_s)
    except subprocess.TimeoutExpired:
        log.line(f"=== {name}: past its {deadline_s:.0f} s deadline, stopping it")
        _stop_group(proc)
        code = None
    reader.join(10.0)
    wall = time.perf_counter() - t0
    log.line(f"=== {name}: exit {code} in {wall:.1f} s")
    return StepResult(name, code, wall, "\n".join(lines))


# ---------------------------------------------------------------- the host


def child_env(home: Path, nproc: int, device: str) -> dict:
    env = {**os.environ, **SAFE_ENV, "ADVISOR_HOME": str(home / "advisor-home"),
           "ADVISOR_CACHE_DIR": str(home / "cache"), "PYTHONUNBUFFERED": "1",
           "COLUMNS": "1000",  # the CLI's summary lines stay whole, so the headline parses
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    if device == "cuda" and "CUDA_VISIBLE_DEVICES" not in env:
        # calibrate's all-reduce spans every visible GPU: the same GPUs as the ranks
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(nproc))
    return env


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # nvidia-smi underlines the topo header


def plain_lines(text: str) -> list[str]:
    """A command's output as lines for the record: no terminal escapes, no blank lines."""
    lines = (ANSI_ESCAPE.sub("", line).rstrip() for line in text.splitlines())
    return [line for line in lines if line]


def _command_lines(cmd: list[str]) -> list[str]:
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return plain_lines(res.stdout) if res.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired):
        return []


def host_info(device: str, nproc: int) -> tuple[dict, dict]:
    """(gpus, versions) of this host."""
    import torch

    import kernel_advisor

    versions = {"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": None, "triton": None,
                "python": sys.version.split()[0], "kernel_advisor": kernel_advisor.__version__}
    try:
        import triton
        versions["triton"] = triton.__version__
    except Exception:  # noqa: BLE001 - optional on CPU hosts
        pass
    if device != "cuda" or not torch.cuda.is_available():
        return {"name": "cpu", "count": 0, "driver": None, "topology": []}, versions
    nccl = torch.cuda.nccl.version()  # a tuple in current torch, an int (2708) in old ones
    versions["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    smi = _command_lines(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    driver = smi[0].split(",")[-1].strip() if smi else None
    gpus = {"name": torch.cuda.get_device_name(0), "count": torch.cuda.device_count(), "driver": driver,
            "topology": _command_lines(["nvidia-smi", "topo", "-m"])[: 1 + nproc]}  # header, a row per GPU
    return gpus, versions


def commit_id() -> str:
    """ADVISOR_COMMIT when given (the device machine's copy may have no .git), else git's HEAD."""
    if os.environ.get("ADVISOR_COMMIT"):
        return os.environ["ADVISOR_COMMIT"]
    head = _command_lines(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
    if not head:
        return "unknown"
    dirty = _command_lines(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"])
    return head[0] + (" (uncommitted changes)" if dirty else "")


# ---------------------------------------------------------------- the steps


def calibrate(env: dict, device: str, home: Path, out: Path, log: Log) -> tuple[StepResult, dict | None]:
    step = run_step("calibrate", [sys.executable, "-m", "kernel_advisor", "calibrate", "--device", device,
                                  "--force"], env, 150.0, log)
    cached = sorted((home / "cache" / "ceilings").glob("*.json"))
    if not step.ok or not cached:
        return step, None
    doc = json.loads(cached[0].read_text())
    (out / "calibration.json").write_text(json.dumps(doc, indent=2))
    return step, doc


def busbw_check(env: dict, device: str, nproc: int, out: Path, log: Log) -> tuple[StepResult, dict | None]:
    path = out / "busbw_check.json"
    cmd = [sys.executable, str(HERE / "busbw_check.py"), "--nproc", str(nproc), "--json", str(path),
           "--collectives", COLLECTIVES]
    if device == "cpu":
        cmd += ["--backend", "gloo", "--device", "cpu", "--max-bytes", "256K", "--iters", "5", "--warmup", "2"]
    step = run_step("busbw_check", cmd, env, 120.0, log)
    return step, json.loads(path.read_text()) if step.ok and path.is_file() else None


def profile(spec: RunSpec, env: dict, device: str, nproc: int, home: Path, log: Log) -> tuple[StepResult, Path]:
    run_dir = home / "runs" / spec.name
    cmd = [sys.executable, "-m", "kernel_advisor", "profile", spec.model, "--device", device, "--mode", "train",
           "--nproc-per-node", str(nproc), "--steps", str(spec.steps), "--warmup", str(spec.warmup),
           *spec.options, "--out", str(run_dir)]
    return run_step(f"profile {spec.name}", cmd, env, spec.deadline_s, log), run_dir


def measured_actions(spec: RunSpec, env: dict, run_dir: Path, log: Log) -> list[dict]:
    """`advisor recommend --measure` with the run's data-parallel actions: each one's predicted gain
    (the rule's, null when no rule named it) beside what it measured on the ranks."""
    cmd = [sys.executable, "-m", "kernel_advisor", "recommend", str(run_dir), "--measure", "--budget-s",
           str(MEASURE_BUDGET_S), "--format", "json", *[x for a in spec.measure for x in ("--also", a)]]
    step = run_step(f"recommend --measure {spec.name}", cmd, env, MEASURE_DEADLINE_S, log, echo=False)
    start = step.output.find("{")
    if not step.ok or start < 0:
        raise RuntimeError(f"recommend --measure {spec.name} exited {step.returncode}")
    doc = json.loads(step.output[start:])
    return [{"action": a["action"], "predicted_gain_frac": a["predicted_gain_frac"], "measured": a["measured"]}
            for a in doc.get("actions", []) if a["action"] in spec.measure]


def single_process_step_s(spec: RunSpec, env: dict, device: str, home: Path, log: Log) -> float | None:
    """The model's step as one process (rank 0's device alone, no DDP): the baseline DDP adds to."""
    run_dir = home / "runs" / f"{spec.name}_1proc"
    cmd = [sys.executable, "-m", "kernel_advisor", "profile", spec.model, "--device", device, "--mode", "train",
           "--steps", str(spec.steps), "--warmup", str(spec.warmup), "--out", str(run_dir)]
    # torchrun gives each rank OMP_NUM_THREADS=1; the baseline runs as the ranks do (on a shared
    # 2-core CPU two spinning OpenMP threads made the one-process step 20x slower)
    step = run_step(f"profile {spec.name} as one process", cmd, {**env, "OMP_NUM_THREADS": "1"},
                    SINGLE_DEADLINE_S, log)
    if not step.ok:
        return None
    return (json.loads((run_dir / "run.json").read_text()).get("step_s") or {}).get("value")


def fired_rules(env: dict, run_dir: Path, log: Log) -> list[str]:
    """Rule ids `advisor recommend` gives for the run (the dist-* ones are the multi-GPU rules)."""
    step = run_step(f"recommend {run_dir.name}", [sys.executable, "-m", "kernel_advisor", "recommend",
                                                  str(run_dir), "--format", "json"], env, 60.0, log,
                    echo=False)  # the JSON is long; the rule ids are what the record keeps
    if not step.ok:
        return []
    start = step.output.find("{")
    try:
        doc = json.loads(step.output[start:]) if start >= 0 else {}
    except json.JSONDecodeError:
        return []
    return sorted({r["rule_id"] for r in doc.get("recommendations", []) if r.get("rule_id")})


# ---------------------------------------------------------------- figures from a run directory


HEADLINE = re.compile(r"^(step |\d+ ranks \()")


def headline_lines(cli_output: str) -> list[str]:
    """The profile's summary lines: 'step ... · profiler overhead ...' and 'N ranks (...) · ...'."""
    return [ln.strip() for ln in cli_output.splitlines() if HEADLINE.match(ln.strip())]


def call_ends_us(comms_csv: Path, collective: str = "all_reduce") -> list[float]:
    """End times (ts + dur, µs) of one rank's NCCL kernels of `collective`, in issue order.

    NB: gloo's ranges end when each rank's thread gets round to it, so CPU runs have none.
    """
    with open(comms_csv, newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f)
                if r.get("collective") == collective and r.get("source") == "nccl_kernel"]
    rows.sort(key=lambda r: float(r["ts_us"]))
    return [float(r["ts_us"]) + float(r["dur_us"]) for r in rows]


def rank_rows(run_dir: Path, ranks_doc: dict) -> list[dict]:
    rows = []
    for row in ranks_doc["ranks"]:
        rank_dir = run_dir / f"rank{row['rank']}"
        meta = json.loads((rank_dir / "rank.json").read_text())
        trace = rank_dir / "trace.json.gz"
        rows.append({k: row.get(k) for k in ("rank", "device", "step_median_s", "device_busy_per_step_s",
                                             "comm_per_step_s", "exposed_comm_per_step_s",
                                             "comm_wait_per_step_s", "overlap_frac", "is_straggler")}
                    | {"trace_bytes": trace.stat().st_size if trace.is_file() else None,
                       "profiler_overhead": meta.get("profiler_overhead"), "step_s": meta.get("step_s")})
    return rows


def skew_of(run_dir: Path, world_size: int) -> dict:
    try:
        return clock_skew_us({r: call_ends_us(run_dir / f"rank{r}" / "comms.csv") for r in range(world_size)})
    except (OSError, KeyError, ValueError) as e:
        return {"per_rank": {}, "max_abs_us": None, "calls": 0, "error": f"{type(e).__name__}: {e}"}


def run_figures(spec: RunSpec, step: StepResult, run_dir: Path, busbw_rows: list[dict],
                rules: list[str]) -> RunFigures:
    meta = json.loads((run_dir / "run.json").read_text())
    ranks_doc = json.loads((run_dir / "ranks.json").read_text())
    dist = meta["distributed"]
    step_s = (meta.get("step_s") or {}).get("value") or dist.get("step_s")
    independent = busbw_at(busbw_rows, dist.get("mean_allreduce_bytes"))
    return RunFigures(
        name=spec.name, model=spec.model, options=["--mode", "train", "--steps", str(spec.steps),
                                                   "--warmup", str(spec.warmup), *spec.options],
        wall_s=step.wall_s, step_s=step_s, backend=dist["backend"], wrapper=dist["wrapper"],
        comm_time_s=dist.get("comm_time_s"), comm_share_of_step=ratio(dist.get("comm_time_s"), step_s),
        exposed_comm_s=dist.get("exposed_comm_s"), exposed_comm_pct=dist.get("exposed_comm_pct"),
        overlap_frac=dist.get("overlap_frac"), allreduce_count=dist.get("allreduce_count"),
        mean_allreduce_bytes=dist.get("mean_allreduce_bytes"), busbw_bytes_per_s=dist.get("busbw_bytes_per_s"),
        bus_ceiling_bytes_per_s=dist.get("bus_ceiling_bytes_per_s"), bus_ceiling_source=dist["bus_ceiling_source"],
        busbw_frac_of_ceiling=dist.get("busbw_frac_of_ceiling"), independent_busbw_bytes_per_s=independent,
        busbw_vs_independent=ratio(dist.get("busbw_bytes_per_s"), independent),
        straggler={"ratio": dist.get("straggler_ratio"), "slowest_rank": dist.get("slowest_rank"),
                   "fastest_rank": dist.get("fastest_rank"), "ranks": dist.get("straggler_ranks"),
                   "waited_for_rank": dist.get("waited_for_rank"), "max_comm_wait_s": dist.get("max_comm_wait_s"),
                   "max_comm_wait_pct": dist.get("max_comm_wait_pct"), "calls_aligned": dist.get("calls_aligned")},
        profiler_overhead=meta.get("profiler_overhead"), clock_skew_us=skew_of(run_dir, ranks_doc["world_size"]),
        ranks=rank_rows(run_dir, ranks_doc), headline=headline_lines(step.output), recommendations=rules,
        collectives=collective_rows(ranks_doc, busbw_rows), allgather_overlap_frac=dist.get("allgather_overlap_frac"))


def collective_rows(ranks_doc: dict, busbw_rows: list[dict]) -> list[dict]:
    """Each collective family of the run against busbw_check: the family's swept peak (its ceiling)
    and its busbw at the run's message size."""
    rows = []
    for c in ranks_doc.get("collectives", []):
        name, busbw = c["collective"], c.get("busbw_bytes_per_s")
        ceiling = family_ceiling(busbw_rows, name)
        at_size = busbw_at(busbw_rows, c.get("bytes_per_call"), name)
        rows.append({"collective": name, "calls_per_step": c.get("calls_per_step"),
                     "bytes_per_call": c.get("bytes_per_call"), "busbw_bytes_per_s": busbw,
                     "family_ceiling_bytes_per_s": ceiling, "busbw_frac_of_family_ceiling": ratio(busbw, ceiling),
                     "independent_busbw_bytes_per_s": at_size, "busbw_vs_independent": ratio(busbw, at_size),
                     "transfer_per_step_s": c.get("transfer_per_step_s")})
    return rows


def ceiling_check(calibration: dict | None, busbw_doc: dict | None) -> dict:
    """The tool's calibrated all-reduce busbw against busbw_check's at the same message size."""
    ar = (calibration or {}).get("allreduce")
    if not ar:
        return {"source": "none", "busbw_bytes_per_s": None, "size_bytes": None, "world_size": None,
                "median_s": None, "independent_busbw_bytes_per_s": None, "ratio": None}
    independent = busbw_at(busbw_doc["rows"], ar["size_bytes"]) if busbw_doc else None
    return {"source": "advisor calibrate (hardware.calibrate.measure_allreduce)",
            "busbw_bytes_per_s": ar["busbw_bytes_per_s"], "size_bytes": ar["size_bytes"],
            "world_size": ar["world_size"], "median_s": ar["median_s"],
            "independent_busbw_bytes_per_s": independent, "ratio": ratio(ar["busbw_bytes_per_s"], independent)}


# ---------------------------------------------------------------- checks: fail loudly


def figure_problems(device: str, nproc: int, record: DistributedRecord) -> list[str]:
    """What makes the record unusable (GPU runs only: CPU figures are a script check)."""
    if device != "cuda":
        return []
    problems = []
    if record.ceiling["busbw_bytes_per_s"] is None:
        problems.append("advisor calibrate measured no all-reduce (fewer than 2 GPUs visible?)")
    for run in record.runs:
        if run.backend != "nccl" or len(run.ranks) != nproc:
            problems.append(f"{run.name}: {len(run.ranks)} ranks on {run.backend}, expected {nproc} on nccl")
        if run.bus_ceiling_source != "measured":
            problems.append(f"{run.name}: the bus ceiling is '{run.bus_ceiling_source}', not the calibration "
                            "(the calibration cache was not found under ADVISOR_CACHE_DIR)")
        if not run.busbw_bytes_per_s:
            problems.append(f"{run.name}: no all-reduce busbw (no NCCL kernels found in the traces)")
    problems += [note for run in record.runs if run.name in GPU_REQUIRED for note in unmeasured_actions(run)]
    return problems


def unmeasured_actions(run: RunFigures) -> list[str]:
    """The run's data-parallel actions that did not get a measured interval, with why."""
    spec = {s.name: s for s in GPU_RUNS}.get(run.name)
    got = {a["action"]: a["measured"] for a in run.measured_actions}
    notes = []
    for action in spec.measure if spec else ():
        m = got.get(action) or {"status": "absent", "reason": "recommend --measure gave no figures"}
        if m.get("status") != "passed":
            notes.append(f"{run.name}: {action} not measured ({m.get('status')}: {m.get('reason')})")
    return notes


def figure_warnings(record: DistributedRecord) -> list[str]:
    """Figures worth a second look; the record is still written."""
    notes = []
    low, high = CEILING_AGREEMENT
    r = record.ceiling.get("ratio")
    if r is not None and not low <= r <= high:
        notes.append(f"calibrated ceiling / busbw_check at {record.ceiling['size_bytes']} B = {r:.2f}")
    for run in record.runs:
        skew = run.clock_skew_us.get("max_abs_us")
        if skew is not None and skew > SKEW_WARN_US:
            notes.append(f"{run.name}: rank trace clocks differ by {skew:.0f} µs (matched NCCL call ends)")
        if run.busbw_frac_of_ceiling is not None and run.busbw_frac_of_ceiling > 1.05:
            notes.append(f"{run.name}: busbw {run.busbw_frac_of_ceiling:.2f}x the ceiling")
        if record.gpus.get("count") and run.name not in GPU_REQUIRED:  # the required runs': problems
            notes += unmeasured_actions(run)
    return notes


# ---------------------------------------------------------------- OUT


def pack_runs(home: Path, out: Path, log: Log) -> None:
    """runs.tar.gz: every run directory's tables and JSON, calibration.json, busbw_check.json; rank
    traces while they fit."""
    runs = home / "runs"
    if not runs.is_dir():
        return
    files = [p for p in sorted(runs.rglob("*")) if p.is_file()]
    traces = sorted((p for p in files if p.name.endswith(".json.gz") and p.parent.name.startswith("rank")),
                    key=lambda p: p.stat().st_size)
    keep, used = [], 0
    for p in traces:
        if used + p.stat().st_size <= TAR_TRACE_BUDGET:
            keep.append(p)
            used += p.stat().st_size
    left_out = [str(p.relative_to(runs)) for p in traces if p not in keep]
    with tarfile.open(out / "runs.tar.gz", "w:gz") as tar:
        for p in files:
            if p.name.endswith(".json.gz") and p not in keep:
                continue  # the run's own trace.json.gz is rank 0's, linked
            tar.add(p, arcname=str(p.relative_to(runs)))
    log.line(f"runs.tar.gz: {(out / 'runs.tar.gz').stat().st_size / 2**20:.1f} MiB"
             + (f"; traces left out (over {TAR_TRACE_BUDGET >> 20} MiB): {', '.join(left_out)}" if left_out else ""))


def build_record(args, gpus: dict, versions: dict, busbw_doc: dict, calibration: dict | None,
                 runs: list[RunFigures]) -> DistributedRecord:
    return DistributedRecord(
        schema_version=SCHEMA_VERSION, date_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        commit=commit_id(),
        command=f"python3 benchmarks/bench_distributed.py OUT --nproc {args.nproc} --device {args.device}",
        gpus=gpus, world_size=args.nproc, versions=versions, env=dict(SAFE_ENV),
        busbw_check=dict(busbw_doc), ceiling=ceiling_check(calibration, busbw_doc),
        runs=runs, primary_run=runs[0].name)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path, help="directory for the log, the record and the packed runs")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--record", type=Path, default=None,
                   help=f"also write the record here (default on cuda: {DEFAULT_PATH.relative_to(REPO)})")
    p.add_argument("--budget-s", type=float, default=420.0, help="optional runs are skipped past this")
    args = p.parse_args(argv)
    if args.record is None and args.device == "cuda":
        args.record = DEFAULT_PATH
    return args


def profile_and_read(spec: RunSpec, env: dict, args, home: Path, busbw_doc: dict | None, t0: float,
                     log: Log) -> RunFigures:
    """Profile one model, ask recommend, read the figures (RuntimeError when the run failed)."""
    step, run_dir = profile(spec, env, args.device, args.nproc, home, log)
    if not step.ok:
        raise RuntimeError(f"profile {spec.name} exited {step.returncode}")
    rules = fired_rules(env, run_dir, log)
    figures = run_figures(spec, step, run_dir, (busbw_doc or {}).get("rows", []), rules)
    if spec.measure:
        try:
            figures = replace(figures, measured_actions=measured_actions(spec, env, run_dir, log))
        except (RuntimeError, json.JSONDecodeError, KeyError) as e:
            log.line(f"=== recommend --measure {spec.name}: no figures ({type(e).__name__}: {e})")
    if spec.single_process and time.perf_counter() - t0 + SINGLE_DEADLINE_S <= args.budget_s:
        figures = replace(figures, single_process_step_s=single_process_step_s(spec, env, args.device, home, log))
    return figures


def measure(args, home: Path, t0: float, log: Log) -> tuple[dict, dict, dict | None, dict | None,
                                                             list[RunFigures], list[str], list[str]]:
    """Every step in order: (gpus, versions, calibration, busbw_check, runs, failures, optional failures)."""
    failed: list[str] = []
    optional: list[str] = []
    env = child_env(home, args.nproc, args.device)
    gpus, versions = host_info(args.device, args.nproc)
    log.line(f"host: {json.dumps(gpus)}\nversions: {json.dumps(versions)}")
    if args.device == "cuda" and gpus["count"] < args.nproc:
        return gpus, versions, None, None, [], [f"{args.nproc} GPUs needed, {gpus['count']} visible"], []
    raw = home / "runs"  # calibration.json and busbw_check.json travel in runs.tar.gz
    raw.mkdir(parents=True, exist_ok=True)
    step, calibration = calibrate(env, args.device, home, raw, log)
    if not step.ok:
        failed.append(f"advisor calibrate exited {step.returncode}")
    step, busbw_doc = busbw_check(env, args.device, args.nproc, raw, log)
    if not step.ok or busbw_doc is None:
        failed.append(f"busbw_check exited {step.returncode}")
    elif any(r["wrong"] for r in busbw_doc["rows"]):
        failed.append("busbw_check: all-reduce results were wrong")
    runs: list[RunFigures] = []
    for spec in GPU_RUNS if args.device == "cuda" else CPU_RUNS:
        worst_s = spec.deadline_s + (MEASURE_DEADLINE_S if spec.measure else 0.0)
        if not spec.required and time.perf_counter() - t0 + worst_s > args.budget_s:
            log.line(f"=== profile {spec.name}: skipped, {args.budget_s:.0f} s budget")
            continue
        try:
            runs.append(profile_and_read(spec, env, args, home, busbw_doc, t0, log))
        except Exception as e:  # noqa: BLE001 - one run's failure must not lose the others' figures
            log.line(traceback.format_exc())
            (failed if spec.required else optional).append(f"{spec.name}: {type(e).__name__}: {e}")
    return gpus, versions, calibration, busbw_doc, runs, failed, optional


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    log = Log(args.out / "bench_distributed.log")
    t0 = time.perf_counter()
    os.environ.update(SAFE_ENV)
    with tempfile.TemporaryDirectory(prefix="bench-distributed-") as tmp:
        try:
            gpus, versions, calibration, busbw_doc, runs, failed, optional = measure(args, Path(tmp), t0, log)
        finally:
            pack_runs(Path(tmp), args.out, log)  # whatever ran, even when a step raised
    primary = (GPU_RUNS if args.device == "cuda" else CPU_RUNS)[0].name
    if not runs or runs[0].name != primary or busbw_doc is None:
        failed.append("no record: the primary run or busbw_check is missing")
        (args.out / "distributed.failed.json").write_text(json.dumps(clean(
            {"failed": failed, "runs": [asdict(r) for r in runs], "gpus": gpus, "versions": versions}), indent=2))
    else:
        record = build_record(args, gpus, versions, busbw_doc, calibration, runs)
        failed += figure_problems(args.device, args.nproc, record)
        for note in figure_warnings(record):
            log.line(f"WARNING: {note}")
        write_record(record, args.out / ("distributed.failed.json" if failed else "distributed.json"))
        if args.record and not failed:
            upsert_record(record, args.record)  # one record per GPU count
            log.line(f"record: {args.record}")
        log.line(summary_text(record))
    log.line(f"total {time.perf_counter() - t0:.0f} s")
    for line in failed:
        log.line(f"FAILED: {line}")
    for line in optional:
        log.line(f"FAILED (optional run; the record holds the others): {line}")
    return 1 if failed or optional else 0


def skew_text(skew: dict) -> str:
    return "– (no NCCL calls)" if skew.get("max_abs_us") is None else f"{skew['max_abs_us']:.1f} µs"


def summary_text(record: DistributedRecord) -> str:
    """The headline figures, in a few lines (the end of the device's output)."""
    run = record.primary()
    gb = lambda v: "–" if v is None else f"{v / 1e9:.1f} GB/s"  # noqa: E731
    pct = lambda v: "–" if v is None else f"{v * 100:.0f} %"  # noqa: E731
    ov = run.profiler_overhead or {}
    lines = [f"{record.world_size} x {record.gpus['name']} · torch {record.versions['torch']} · "
             f"NCCL {record.versions['nccl']} · commit {record.commit}",
             f"busbw_check peak {gb(max(r['busbw_bytes_per_s'] for r in record.busbw_check['rows']))}; "
             f"calibrated ceiling {gb(record.ceiling['busbw_bytes_per_s'])} vs busbw_check "
             f"{gb(record.ceiling['independent_busbw_bytes_per_s'])} at the same size "
             f"(ratio {record.ceiling['ratio'] or float('nan'):.2f})"]
    for r in record.runs:
        lines.append(f"{r.name}: step {r.step_s * 1e3 if r.step_s else float('nan'):.2f} ms, comm "
                     f"{pct(r.comm_share_of_step)} of it, overlap {pct(r.overlap_frac)}, exposed "
                     f"{r.exposed_comm_pct if r.exposed_comm_pct is not None else float('nan'):.1f} %, "
                     f"busbw {gb(r.busbw_bytes_per_s)} = {pct(r.busbw_frac_of_ceiling)} of the ceiling, "
                     f"{r.busbw_vs_independent or float('nan'):.2f}x busbw_check at "
                     f"{(r.mean_allreduce_bytes or 0) / 2**20:.1f} MiB, DDP step / one-process step "
                     f"{ratio(r.step_s, r.single_process_step_s) or float('nan'):.2f}, straggler ratio "
                     f"{r.straggler['ratio'] or float('nan'):.3f}, clock skew {skew_text(r.clock_skew_us)}, traces "
                     f"{sum(x['trace_bytes'] or 0 for x in r.ranks) / 2**20:.1f} MiB, rules {r.recommendations}")
    lines.append(f"profiler overhead ({run.name}, rank 0): {ov.get('value') or float('nan'):.3f}x "
                 f"[{ov.get('low') or float('nan'):.3f}–{ov.get('high') or float('nan'):.3f}]")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
