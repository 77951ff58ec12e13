"""Nothing is lost: Ctrl-C and crashes mid-write leave no partial file and `latest` where it was.

Ctrl-C is a real SIGINT to a real `python -m kernel_advisor` process, sent once a marker
file proves the interesting part is running (torch.profiler recording; a candidate kernel
installed). Crashes mid-write are simulated in-process: the write gets half of its bytes
out, then fails (disk full) or is interrupted.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from battery.checks import (BATTERY, REPO, assert_clean_failure, assert_nothing_partial, assert_result_fails,
                            invoke, latest_text, previous_run)
from battery.signals import default_sigint, default_sigint_in_child  # noqa: F401 - autouse fixture

B = str(BATTERY)
SOFTMAX_MODEL = BATTERY / "softmax_model.py"
DATA = Path(__file__).parent / "data"
INTERRUPTED = ("interrupted", "the last complete run is unchanged")
MARKER_TIMEOUT_S = 120  # torch's import alone takes seconds on a loaded 2-core machine


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / ".advisor"
    monkeypatch.setenv("ADVISOR_HOME", str(home))
    monkeypatch.setenv("ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ADVISOR_BATTERY_MARKER", str(tmp_path / "marker"))
    monkeypatch.delenv("ADVISOR_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    return home


def softmax_run(home: Path) -> Path:
    """A complete run of softmax_model.py made `latest`: try-kernel saves its results there."""
    return previous_run(home, "softmax-run", model={"file": str(SOFTMAX_MODEL), "sha256": None, "entry": None})


# ---------------------------------------------------------------- Ctrl-C, real processes

def interrupt_when_marked(args: list[str], marker: Path, tmp: Path) -> tuple[int, str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, "-m", "kernel_advisor", *args], cwd=tmp, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=default_sigint_in_child)
    deadline = time.monotonic() + MARKER_TIMEOUT_S
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), f"never reached the marked point (exit {proc.poll()})"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def test_ctrl_c_while_profiling(home, tmp_path):
    previous_run(home)
    before = latest_text(home)
    code, out, err = interrupt_when_marked(
        ["profile", f"{B}/slow_model.py", "--device", "cpu", "--steps", "50", "--warmup", "0"],
        tmp_path / "marker", tmp_path)
    assert_clean_failure(130, code, out, err, INTERRUPTED)
    assert_nothing_partial(home, before)
    assert sorted(p.name for p in (home / "runs").iterdir()) == ["latest", "prev-run"]


def test_ctrl_c_while_a_candidate_is_installed(home, tmp_path):
    run = softmax_run(home)
    before = latest_text(home)
    code, out, err = interrupt_when_marked(
        ["try-kernel", str(SOFTMAX_MODEL), "--device", "cpu", "--impl", f"{B}/user_kernels.py:slow_softmax",
         "--op", "aten::_softmax", "--no-compile", "--reps", "50"], tmp_path / "marker", tmp_path)
    assert_clean_failure(130, code, out, err, INTERRUPTED)
    assert_nothing_partial(home, before)
    assert not (run / "try_kernel.json").exists()


# ---------------------------------------------------------------- Ctrl-C, in-process

def test_ctrl_c_inside_the_profiler_in_process(home):
    previous_run(home)
    before = latest_text(home)
    result = invoke("profile", f"{B}/interrupt_model.py", "--device", "cpu", "--steps", "2", "--warmup", "0")
    assert_result_fails(result, 130, INTERRUPTED)
    assert_nothing_partial(home, before)


def test_ctrl_c_in_try_kernel_tears_the_substitution_down(home, tmp_path):
    run = softmax_run(home)
    before = latest_text(home)
    result = invoke("try-kernel", str(SOFTMAX_MODEL), "--device", "cpu", "--impl",
                    f"{B}/user_kernels.py:interrupting_softmax", "--op", "aten::_softmax", "--no-compile",
                    "--reps", "3", "--draws", "1")
    assert_result_fails(result, 130, INTERRUPTED)
    assert_nothing_partial(home, before)
    assert not (run / "try_kernel.json").exists()
    marker = tmp_path / "marker"
    calls = marker.read_text()
    x = torch.randn(3, 7, generator=torch.Generator().manual_seed(0))
    e = torch.exp(x.double() - x.double().amax(-1, keepdim=True))
    want = (e / e.sum(-1, keepdim=True)).float()
    for out in (torch.softmax(x, -1), F.softmax(x, dim=-1), x.softmax(-1), torch.nn.Softmax(dim=-1)(x)):
        torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-7)
    assert marker.read_text() == calls  # the original softmax ran: the candidate saw none of these


# ---------------------------------------------------------------- crashes mid-write

def crash_writing(monkeypatch, name: str, exc: BaseException) -> None:
    """The next write of a file whose name contains `name` gets half its bytes out, then fails."""
    original = Path.write_bytes

    def half_then_fail(self, data):
        if name not in self.name:
            return original(self, data)
        original(self, data[: len(data) // 2])
        raise exc

    monkeypatch.setattr(Path, "write_bytes", half_then_fail)


def disk_full() -> OSError:
    return OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("exc, code", [(KeyboardInterrupt(), 130), (disk_full(), 2)], ids=["ctrl-c", "disk-full"])
def test_run_dir_crash_mid_write(home, monkeypatch, exc, code):
    previous_run(home)
    before = latest_text(home)
    crash_writing(monkeypatch, "run.json", exc)  # the last file of the run
    result = invoke("import", DATA / "cuda_gpt_inference.json.gz")
    assert_result_fails(result, code)
    assert_nothing_partial(home, before)
    assert sorted(p.name for p in (home / "runs").iterdir()) == ["latest", "prev-run"]


def test_run_dir_disk_full_while_copying_the_trace(home, monkeypatch):
    import shutil

    previous_run(home)
    before = latest_text(home)

    def half_copy_then_full_disk(src, dst, **kw):
        data = Path(src).read_bytes()
        Path(dst).write_bytes(data[: len(data) // 2])
        raise disk_full()

    monkeypatch.setattr(shutil, "copyfile", half_copy_then_full_disk)
    result = invoke("import", DATA / "cuda_gpt_inference.json.gz")  # gzipped: copied as it is
    assert_result_fails(result, 2, ("cannot write", "No space left on device"))
    assert_nothing_partial(home, before)


@pytest.mark.parametrize("artifact, command", [
    ("report.html", ["report"]),
    ("recommendations.json", ["recommend"]),
])
def test_run_artifact_crash_mid_write_keeps_the_old_file(home, monkeypatch, artifact, command):
    run = previous_run(home)
    (run / artifact).write_text("the previous, complete version\n")
    crash_writing(monkeypatch, artifact, disk_full())
    result = invoke(*command)
    assert_result_fails(result, 2, (f"cannot write {run / artifact}", "No space left on device"))
    assert (run / artifact).read_text() == "the previous, complete version\n"
    assert sorted(p.name for p in run.iterdir()) == sorted(["run.json", "ops.csv", "sequence.csv", artifact])


def test_try_kernel_json_crash_mid_write(home, monkeypatch):
    run = softmax_run(home)
    crash_writing(monkeypatch, "try_kernel.json", disk_full())
    result = invoke("try-kernel", str(SOFTMAX_MODEL), "--device", "cpu", "--impl", f"{B}/user_kernels.py:good_softmax",
                    "--op", "aten::_softmax", "--check-only", "--draws", "1", "--no-compile")
    assert_result_fails(result, 2, ("try_kernel.json", "No space left on device"))
    assert sorted(p.name for p in run.iterdir()) == ["ops.csv", "run.json", "sequence.csv"]


def test_calibration_cache_crash_mid_write(home, tmp_path, monkeypatch):
    from kernel_advisor.analyze import calibrate as K

    monkeypatch.setattr(K, "CPU_SIZES", K.CalibrationSizes(copy_bytes=2**20, matmul_n=32, fp32_matmul_n=64,
                                                           fp64_matmul_n=32, warmup=1, reps=3, flush_bytes=2**20))
    first = invoke("calibrate", "--device", "cpu", "--json")
    assert first.exit_code == 0, first.stderr
    cache = Path(json.loads(first.stdout)["cache_file"])
    complete = cache.read_text()

    def half_then_full_disk(obj, f, **kw):
        text = json.dumps(obj, **kw)
        f.write(text[: len(text) // 2])
        raise disk_full()

    monkeypatch.setattr(K, "json", SimpleNamespace(**{**vars(json), "dump": half_then_full_disk}))
    result = invoke("calibrate", "--device", "cpu", "--force")
    assert_result_fails(result, 2, ("cannot write", "No space left on device"))
    assert cache.read_text() == complete
    assert [p.name for p in cache.parent.iterdir()] == [cache.name]
