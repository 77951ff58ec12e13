"""The experiment engine on a CUDA device: one number per substitution whichever command asks,
the user's loop as a plain loop sees it, a budget that holds, Ctrl-C that keeps what was measured,
and a quiet terminal."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from kernel_advisor.collect.loader import load_model
from kernel_advisor.collect.loop_timing import TimedStep, autorange_steps, interleaved_windows_s, median_ci
from kernel_advisor.collect.runner import timed_loop
from kernel_advisor.experiment.engine import measure_actions
from kernel_advisor.experiment.search import SearchOptions

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[1]
MODELS = REPO / "benchmarks" / "advice" / "models"
SINGLES = SearchOptions(short_windows=30, long_windows=0, warmup=3, compile_modes=(), combinations=False)


def _loaded(stem: str):
    return load_model(MODELS / f"{stem}.py", device="cuda", dtype="bfloat16")


def _plain_loop_s(loaded, steps: int, rounds: int = 7) -> float:
    """What the user's loop prints: `steps` steps between two synchronizes, median of rounds."""
    model, inputs = loaded.model.eval(), loaded.inputs
    times = []
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)
        for _ in range(rounds):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(steps):
                model(*inputs)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) / steps)
    return sorted(times)[rounds // 2]


@pytest.mark.parametrize("stem,kernel", [("ce_vocab_151k", "cuda.cross_entropy"),
                                         ("dropout_residual_ln", "triton.layer_norm"),
                                         ("wide_softmax", "cuda.softmax")])
def test_try_kernel_and_measure_agree_on_the_same_substitution(tmp_path, monkeypatch, stem, kernel):
    from kernel_advisor.trykernel.driver import run_try_kernel
    from kernel_advisor.trykernel.candidates import TryOptions, TryRequest

    monkeypatch.chdir(tmp_path)  # no `latest` run: both assume the same (host-bound) routes
    loaded = _loaded(stem)
    tried = run_try_kernel(loaded, TryRequest((kernel,), options=TryOptions(reps=30, warmup=3, compile=False))).report
    mine = next(v for v in tried.variants if v.name == kernel)
    measured = measure_actions(loaded, "inference", [f"kernel:{kernel}"], SINGLES).outcomes[f"kernel:{kernel}"]
    if mine.speedup is None or measured.speedup is None:
        pytest.skip(f"{kernel} took no call of {stem} here: {mine.reason or measured.reason}")
    a, b = mine.speedup, measured.speedup
    assert a.low <= b.high and b.low <= a.high, (a, b)  # overlapping 95 % intervals


@pytest.mark.parametrize("stem", ["tiny_mlp_host_bound", "small_convnet", "tiny_convnet_host_bound"])
def test_the_eager_step_is_the_plain_loops_on_host_bound_models(stem):
    """The harness's eager window against a user's plain loop (`with torch.no_grad(): for …:
    model(x)`), the two interleaved window by window so the host's drift (tens of percent
    within seconds on this machine) hits both alike; and the search's own eager figure
    against plain loops timed right before and after it."""
    loaded = _loaded(stem)
    model, inputs = loaded.model.eval(), loaded.inputs
    plain = TimedStep("plain", torch.no_grad, lambda: model(*inputs))
    ours = timed_loop("eager", loaded, "inference")
    with ours.activate():
        steps = autorange_steps(ours.step, loaded.device)
    times = interleaved_windows_s([plain, ours], 21, steps, 3, loaded.device)
    assert median_ci(times["eager"]).value == pytest.approx(median_ci(times["plain"]).value, rel=0.05)
    before = _plain_loop_s(loaded, steps)
    m = measure_actions(loaded, "inference", [], SearchOptions(short_windows=15, long_windows=0, warmup=3,
                                                               compile_modes=("compile:reduce-overhead",),
                                                               combinations=False))
    after = _plain_loop_s(loaded, m.steps_per_window)
    e = m.eager_step_s
    assert e.low <= max(before, after) * 1.05 and e.high >= min(before, after) * 0.95, (e, before, after)


def _profiled(tmp_path: Path, stem: str) -> Path:
    run = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "kernel_advisor", "profile", str(MODELS / f"{stem}.py"), "--device",
                    "cuda", "--dtype", "bfloat16", "--steps", "3", "--warmup", "2", "--out", str(run)],
                   check=True, capture_output=True, cwd=tmp_path)
    return run


def test_the_budget_holds_and_the_terminal_stays_ours_on_the_slowest_model(tmp_path):
    run = _profiled(tmp_path, "llama_naive_attention")
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kernel_advisor", "recommend", str(run), "--measure",
                           "--budget-s", "60", "--format", "json"], capture_output=True, text=True, cwd=tmp_path)
    elapsed = time.monotonic() - t0
    assert done.returncode == 0, done.stderr[-2000:]
    assert elapsed <= 66, elapsed
    doc = json.loads(done.stdout)
    assert doc["measurement"]["explored"] >= 1 and doc["plan"]["measured"]["status"]
    foreign = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("advisor:")]
    assert not foreign, foreign[:5]  # inductor, dynamo and triton went to measure.log
    assert (run / "measure.log").is_file()


def test_ctrl_c_halfway_leaves_the_measured_part_as_json(tmp_path):
    run = _profiled(tmp_path, "llama_naive_attention")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "kernel_advisor", "recommend", str(run), "--measure",
                             "--budget-s", "120"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
                            env=env, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    record = run / "experiments.json"
    deadline = time.monotonic() + 100
    while time.monotonic() < deadline:
        if record.is_file() and len(json.loads(record.read_text())["trials"]) >= 2:
            break
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    doc = json.loads(record.read_text())
    assert not doc["complete"] and any(t["speedup"] for t in doc["trials"])
