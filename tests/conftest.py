"""Shared test setup: GPU tests skip without CUDA; Triton runs in its CPU interpreter."""
import os

import pytest


def _one_gpu_per_worker() -> None:
    """ADVISOR_TEST_GPUS=N under pytest-xdist: worker gwK sees GPU K mod N alone, so a machine of
    N GPUs runs the GPU suite N times wider. Must run before CUDA initialises (is_available below)."""
    gpus = int(os.environ.get("ADVISOR_TEST_GPUS") or 0)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if gpus > 1 and worker.startswith("gw") and "CUDA_VISIBLE_DEVICES" not in os.environ:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(int(worker[2:]) % gpus)


_one_gpu_per_worker()
import torch  # noqa: E402 - after the worker's GPU is chosen

if not torch.cuda.is_available():
    # Must be set before triton is imported anywhere.
    os.environ.setdefault("TRITON_INTERPRET", "1")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def advisor_home(tmp_path, monkeypatch):
    """Runs and `latest` go to a fresh directory; the working directory is tmp_path."""
    home = tmp_path / ".advisor"
    monkeypatch.setenv("ADVISOR_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    return home


@pytest.fixture
def examples_dir():
    return os.path.join(REPO, "examples")


@pytest.fixture(autouse=True)
def _isolated_advisor_home(tmp_path_factory, monkeypatch):
    """No test reads or writes the user's `.advisor` or calibration cache: each gets its own."""
    home = tmp_path_factory.mktemp("advisor-home")
    monkeypatch.setenv("ADVISOR_HOME", str(home / ".advisor"))  # a test's own fixture may override it
    monkeypatch.setenv("ADVISOR_CACHE_DIR", str(home / "cache"))
    # Hand-worked gains are the gain model's own; the fitted scales are tested on their own
    # (tests/test_recommend_calibration.py), so a refit never moves other tests' numbers.
    monkeypatch.setenv("ADVISOR_GAIN_CALIBRATION", "off")


@pytest.fixture(scope="session", autouse=True)
def _session_advisor_home(tmp_path_factory):
    """As _isolated_advisor_home, for module- and session-scoped fixtures, which run before it."""
    home = tmp_path_factory.mktemp("session-advisor-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ADVISOR_HOME", str(home / ".advisor"))
        mp.setenv("ADVISOR_CACHE_DIR", str(home / "cache"))
        mp.setenv("ADVISOR_GAIN_CALIBRATION", "off")
        yield


@pytest.fixture(scope="session", autouse=True)
def _compile_caches_in_tmp(tmp_path_factory):
    """torch.compile's, Triton's and matplotlib's caches go under this session's tmp dir, not
    /tmp/torchinductor_<user>, ~/.triton or ~/.config/matplotlib. A cache the user points at is kept.

    NB: inductor's precompiled C++ headers still go to <system tmp>/torchinductor_<user>: torch fixes
    that path when torch._inductor.codecache is imported, from tempfile.gettempdir(), not the setting.
    """
    base = tmp_path_factory.mktemp("compile-caches")
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "MPLCONFIGDIR"):  # matplotlib's font cache too
        os.environ.setdefault(name, str(base / name.lower()))
