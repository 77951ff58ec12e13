"""examples/notebook_api.py runs end to end and writes only inside the directory it is run in."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "notebook_api.py"

# Runs the example under an audit hook that lists every file the process opens for writing,
# creates, renames or removes outside `root`. NB: per process, so another process writing in
# the same tree at the same time does not count; compile workers write under TMPDIR (in root).
RUN_AUDITED = r"""
import json, os, runpy, sys
root, example, log = sys.argv[1:4]
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
outside = set()

def writes(event, args):
    if event == "open":
        path, mode, flags = args
        return (mode is not None and any(c in mode for c in "wax+")) or (mode is None and flags & WRITE_FLAGS)
    return event in ("os.mkdir", "os.rename", "os.remove", "os.rmdir", "os.symlink", "os.link", "os.truncate",
                     "shutil.copyfile", "shutil.move", "shutil.rmtree")

def hook(event, args):
    if not args or not isinstance(args[0], (str, bytes, os.PathLike)) or not writes(event, args):
        return
    path = os.path.abspath(os.fsdecode(args[0]))
    if not (path == root or path.startswith(root + os.sep) or path.startswith(("/dev/", "/proc/"))):
        outside.add(f"{event} {path}")

sys.addaudithook(hook)
try:
    sys.argv = [example]
    runpy.run_path(example, run_name="__main__")
finally:
    with open(log, "w") as f:
        json.dump(sorted(outside), f)
"""


@pytest.mark.slow  # about a minute on 2 CPU cores: it profiles, then measures three actions
def test_notebook_api_example_runs_and_writes_only_under_its_directory(tmp_path):
    root = tmp_path.resolve()
    (root / "tmp").mkdir()
    # the test session's cache settings (tests/conftest.py; inductor also writes its own into
    # os.environ once this process compiled anything) are not the user's
    inherited = {k: v for k, v in os.environ.items()
                 if k not in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "MPLCONFIGDIR")}
    env = {**inherited, "ADVISOR_HOME": str(root / ".advisor"), "ADVISOR_CACHE_DIR": str(root / "cache"),
           "HOME": str(root / "home"),  # matplotlib's and torch's per-user caches
           "TMPDIR": str(root / "tmp"),  # the example's mkdtemp and torch.compile's cache
           "PYTHONDONTWRITEBYTECODE": "1"}  # no .pyc beside the package's sources
    log = root / "outside.json"
    done = subprocess.run([sys.executable, "-c", RUN_AUDITED, str(root), str(EXAMPLE), str(log)], cwd=root,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads(log.read_text()) == []
    report = Path(next(line for line in done.stdout.splitlines() if line.startswith("report:")).split(" ", 1)[1])
    assert report.is_file() and report.is_relative_to(root)
    assert (report.parent / "run" / "run.json").is_file()
    assert "lib-sdpa" in done.stdout  # the written-out attention is found and its sdpa fix measured
