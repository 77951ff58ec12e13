"""Ctrl-C while torch.profiler stops and exports waits for the export, then exits 130; and the
interrupt line is true: "nothing partial was kept" before the run is complete, "it was kept as
<dir>" once it is renamed into place and `latest`.

The real-process tests stop `advisor profile` at a named point (ADVISOR_TEST_HOLD_AT) and send
a real SIGINT once the marker file says it is there.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from battery.checks import (BATTERY, REPO, assert_clean_failure, assert_nothing_partial, assert_result_fails,
                            invoke, latest_text, leftovers, previous_run)
from battery.signals import default_sigint, default_sigint_in_child  # noqa: F401 - autouse fixture
from kernel_advisor.collect import interrupts as I
from kernel_advisor.collect.rundir import RunWriter, runs_root

MARKER_TIMEOUT_S = 120

MODEL = """
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(8))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x.softmax(-1)


def get_inputs():
    return [torch.randn(4, 16)]
"""


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / ".advisor"
    monkeypatch.setenv("ADVISOR_HOME", str(home))
    monkeypatch.setenv("ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ADVISOR_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    return home


def profile_interrupted_at(point: str, tmp_path: Path) -> tuple[int, str, str, str]:
    """`advisor profile` held at `point`, sent SIGINT there: (exit code, stdout, stderr, marker text)."""
    model = tmp_path / "many_ops.py"
    model.write_text(MODEL)
    marker = tmp_path / "marker"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
               ADVISOR_TEST_HOLD_AT=point, ADVISOR_TEST_HOLD_MARKER=str(marker))
    proc = subprocess.Popen([sys.executable, "-m", "kernel_advisor", "profile", str(model), "--device", "cpu",
                             "--steps", "2", "--warmup", "1"], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=default_sigint_in_child)
    deadline = time.monotonic() + MARKER_TIMEOUT_S
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), f"never reached {point} (exit {proc.poll()}): {proc.stderr.read() if proc.poll() else ''}"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err, marker.read_text()


def test_ctrl_c_during_the_trace_export_waits_for_it_then_exits_130(home, tmp_path):
    previous_run(home)
    before = latest_text(home)
    code, out, err, marker = profile_interrupted_at("profiler-export", tmp_path)
    assert code == 130, f"exit {code} (a negative code is death by a signal)\n{err}"
    # The handler held the signal: the export section went on to its end instead of raising inside it.
    assert marker == "profiler-export\nheld\n"
    line = assert_clean_failure(130, code, out, err, ("interrupted", "nothing partial was kept",
                                                      "the last complete run is unchanged"))
    assert "kept as" not in line
    assert_nothing_partial(home, before)
    assert sorted(p.name for p in (home / "runs").iterdir()) == ["latest", "prev-run"]


def test_ctrl_c_after_the_run_is_kept_says_so(home, tmp_path):
    previous_run(home)
    before = latest_text(home)
    code, out, err, marker = profile_interrupted_at("run-kept", tmp_path)
    assert marker == "run-kept\n"  # outside any deferral: the interrupt was raised at once
    line = assert_clean_failure(130, code, out, err, ("interrupted after the run was complete", "kept as",
                                                      "is now `latest`"))
    assert "nothing partial was kept" not in line
    runs = sorted(p.name for p in (home / "runs").iterdir())
    assert len(runs) == 3 and "prev-run" in runs and "latest" in runs
    new = next(home / "runs" / name for name in runs if name not in ("latest", "prev-run"))
    assert str(new) in line
    assert latest_text(home) != before and latest_text(home).strip() == new.name
    assert {"run.json", "ops.csv", "sequence.csv", "trace.json.gz"} <= {p.name for p in new.iterdir()}
    assert leftovers(home) == []


def test_ctrl_c_during_the_rename_is_held_until_latest_is_written(home, monkeypatch):
    """In-process: SIGINT arrives between the rename and `latest`; both still happen, then 130."""
    from kernel_advisor.collect import rundir

    previous_run(home)
    real_set_latest = rundir.set_latest

    def set_latest_interrupted(run_dir):
        os.kill(os.getpid(), signal.SIGINT)  # delivered to the deferral's handler at once
        real_set_latest(run_dir)

    monkeypatch.setattr(rundir, "set_latest", set_latest_interrupted)
    result = invoke("import", Path(__file__).parent / "data" / "cuda_gpt_inference.json.gz")
    line = assert_result_fails(result, 130, ("kept as", "is now `latest`"))
    kept = I.kept_runs()[-1]
    assert kept.latest and kept.path.is_dir() and str(kept.path) in line
    assert latest_text(home).strip() == kept.path.name
    assert leftovers(home) == []


def test_ctrl_c_while_recording_still_says_nothing_partial(home):
    """The model's own step is not held: an interrupt there ends the run before anything is kept."""
    previous_run(home)
    before = latest_text(home)
    result = invoke("profile", f"{BATTERY}/interrupt_model.py", "--device", "cpu", "--steps", "2", "--warmup", "0")
    assert_result_fails(result, 130, ("nothing partial was kept",))
    assert_nothing_partial(home, before)


# ---------------------------------------------------------------- deferred_sigint itself


def test_sigint_is_raised_after_the_block_not_inside_it():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with I.deferred_sigint():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            assert I.sigint_recorded()
            done.append("the block ran to its end")
    assert done == ["the block ran to its end"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert not I.sigint_recorded()


def test_two_signals_raise_once_and_nested_blocks_raise_at_the_outer_end():
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with I.deferred_sigint():
            with I.deferred_sigint():
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
            steps.append("after the inner block")
    assert steps == ["after the inner block"]


def test_no_signal_no_interrupt_and_the_handler_is_restored():
    with I.deferred_sigint():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_sigint_stays_ignored_and_a_custom_handler_is_called_after():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with I.deferred_sigint():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        calls = []
        signal.signal(signal.SIGINT, lambda signum, frame: calls.append(signum))
        with I.deferred_sigint():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            assert calls == []
        assert calls == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_worker_thread_gets_a_plain_block():
    seen = []

    def work():
        with I.deferred_sigint():
            seen.append(signal.getsignal(signal.SIGINT))

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen == [signal.default_int_handler]


def test_the_block_s_own_error_goes_on_unchanged():
    with pytest.raises(ValueError, match="boom"):
        with I.deferred_sigint():
            raise ValueError("boom")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_interrupted_message_names_the_kept_run(tmp_path):
    start = len(I.kept_runs())
    assert I.interrupted_message(start).startswith("interrupted — nothing partial was kept")
    with RunWriter(tmp_path / "runs" / "one", update_latest=False) as tmp:
        (tmp / "run.json").write_text("{}")
    message = I.interrupted_message(start)
    assert f"kept as {tmp_path / 'runs' / 'one'} —" in message and "latest" not in message
    with RunWriter(tmp_path / "runs" / "two") as tmp:
        (tmp / "run.json").write_text("{}")
    message = I.interrupted_message(start)
    assert f"kept as {tmp_path / 'runs' / 'two'} (the last of 2 this command completed) and is now `latest`" in message
    assert runs_root().joinpath("latest").is_file()
