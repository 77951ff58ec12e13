"""Headless chromium for the report tests: a profile, HOME and XDG dirs under the test's tmp dir,
so the browser writes nothing (crash reports, dconf) into the user's home."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")


def run_chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    home = tmp_path / "chromium-home"
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_CACHE_HOME": str(home / ".cache"), "XDG_RUNTIME_DIR": str(home / "run")}
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}", *args],
                          capture_output=True, text=True, timeout=120, env=env)
