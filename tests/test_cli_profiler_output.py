"""torch.profiler's own output stays off the user's stderr; everything else it writes gets through.

Kineto writes `USDT: … profiler_start` / `profiler_stop` from C++ straight to file
descriptor 2, and torch warns once per process that the profiler "clears events at the end
of each cycle". collect/profiler_output.py filters both around every profiler call.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from kernel_advisor.collect.profiler_output import CYCLE_WARNING, profiler_output_filtered, quietly, without_noise

REPO = Path(__file__).resolve().parents[1]
USDT = b"USDT:2026-11-25 10:50:05 19650:19650 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
STAGE = b"STAGE:2024-01-02 03:04:05 123:456 ActivityProfilerController.cpp:312] Completed Stage: Warm Up\n"
CYCLE_MESSAGE = ("Warning: Profiler clears events at the end of each cycle. Only events from the current "
                 "cycle will be reported. To keep events across cycles, set acc_events=True.")


def test_without_noise_drops_only_the_known_lines():
    real = b"[W something.cpp:12] Warning: a real problem\n"
    progress = b"\r\x1b[2K profiling \xe2\x94\x81\xe2\x94\x81 1/1"
    assert without_noise(USDT + real + STAGE + USDT.replace(b"start", b"stop") + progress) == real + progress
    assert without_noise(b"USDT: not kineto's format\n") == b"USDT: not kineto's format\n"
    assert without_noise(USDT.replace(b"profiler_start", b"profiler_start failed: disk full")) != b""


def test_fd_2_is_filtered_then_restored(capfd):
    before = os.fstat(2)
    with profiler_output_filtered():
        os.write(2, USDT + b"kineto: a real error\n" + STAGE)
        print("python stderr", file=sys.stderr)
    after = os.fstat(2)
    assert (before.st_dev, before.st_ino) == (after.st_dev, after.st_ino)
    err = capfd.readouterr().err
    # (pytest's sys.stderr does not write through fd 2, so the two lines' order is pytest's)
    assert sorted(err.splitlines()) == ["kineto: a real error", "python stderr"]
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"


def test_fd_2_is_restored_when_the_profiler_raises(capfd):
    before = os.fstat(2)
    with pytest.raises(RuntimeError, match="boom"):
        with profiler_output_filtered():
            os.write(2, b"said before failing\n" + USDT)
            raise RuntimeError("boom")
    after = os.fstat(2)
    assert (before.st_dev, before.st_ino) == (after.st_dev, after.st_ino)
    assert capfd.readouterr().err == "said before failing\n"


def test_only_the_cycle_warning_is_silenced():
    assert re.match(CYCLE_WARNING, CYCLE_MESSAGE)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with profiler_output_filtered():
            warnings.warn(CYCLE_MESSAGE, UserWarning)
            warnings.warn("another warning", UserWarning)
    assert [str(w.message) for w in seen] == ["another warning"]


def test_a_real_profiler_prints_nothing_through_quietly(capfd):
    with quietly(profile(activities=[ProfilerActivity.CPU])) as prof:
        torch.randn(16, 16) @ torch.randn(16, 16)
    assert any(e.name == "aten::mm" for e in prof.events())
    err = capfd.readouterr().err
    assert "USDT" not in err and "profiler_st" not in err, err


def test_every_torch_profiler_in_the_package_goes_through_quietly():
    calls = 0
    for path in (REPO / "kernel_advisor").rglob("*.py"):
        for line in path.read_text(encoding="utf-8").splitlines():
            if re.search(r"\bprofile\(activities", line):
                calls += 1
                assert "quietly(profile(" in line, f"{path}: {line.strip()}"
    assert calls >= 3  # collect/profiler.py, trykernel/timing.py, trykernel/results.py


TINY_MODEL = """
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x))


def get_inputs():
    return [torch.randn(4, 8)]
"""


def test_a_cpu_profile_prints_no_profiler_lines(tmp_path):
    model = tmp_path / "tiny.py"
    model.write_text(TINY_MODEL)
    env = dict(os.environ, ADVISOR_HOME=str(tmp_path / ".advisor"), ADVISOR_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONWARNINGS="default",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "kernel_advisor", "profile", str(model), "--device", "cpu",
                           "--steps", "1", "--warmup", "1", "--out", str(tmp_path / "run")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Top hotspots" in proc.stdout
    assert "USDT" not in proc.stderr and "profiler_start" not in proc.stderr, proc.stderr
    assert "clears events" not in proc.stderr, proc.stderr
    assert (tmp_path / "run" / "trace.json.gz").is_file()
