"""`recommend --measure` as a process on CPU: the compilers never reach the user's stderr, and
Ctrl-C keeps what was measured."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / "tests" / "data" / "llama_naive.py"

pytestmark = pytest.mark.slow


def _advisor(*args, cwd):
    return subprocess.run([sys.executable, "-m", "kernel_advisor", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("quiet")
    done = _advisor("profile", MODEL, "--device", "cpu", "--steps", "2", "--warmup", "1", "--out", tmp / "run",
                    cwd=tmp)
    assert done.returncode == 0, done.stderr
    return tmp / "run"


def test_stderr_carries_only_our_lines_while_the_search_compiles(profiled):
    done = _advisor("recommend", profiled, "--measure", "--budget-s", "15", "--format", "json", cwd=profiled.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    json.loads(done.stdout)
    foreign = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("advisor:")]
    assert not foreign, foreign[:5]
    log = (profiled / "measure.log").read_text()
    assert log.strip()  # what inductor and dynamo said is kept, in the run directory


def test_ctrl_c_halfway_leaves_a_partial_record_that_parses(profiled):
    record = profiled / "experiments.json"
    record.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "kernel_advisor", "recommend", str(profiled), "--measure",
                             "--budget-s", "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=profiled.parent, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (record.is_file() and json.loads(record.read_text())["trials"]):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("advisor: error: interrupted — what was measured so far")
    doc = json.loads(record.read_text())
    assert doc["complete"] is False and doc["trials"][0]["status"]
