"""Code, tests and docs describe the product, not the history of its making: no issue, item or
round numbers, no commit hashes. Provenance (commit, date, GPU, versions) lives in the data
files (benchmarks/data/*.csv and .json, kernel_advisor/data/*), which these checks skip."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCANNED = ("kernel_advisor", "reference_kernels", "tests", "docs", "benchmarks", "examples", "rules", "scripts",
           "tools", "README.md")
DATA_DIRS = ("kernel_advisor/data", "reference_kernels/data", "benchmarks/data", "benchmarks/results")
TEXT_SUFFIXES = {".py", ".md", ".sh", ".cu", ".cuh", ".h", ".cpp", ".yaml", ".yml", ".toml", ".txt",
                 ".html", ".js", ".css", ".cfg", ".ini"}
HISTORY = re.compile(r"\b(?:issue|item|round)s? ?#?\d+\b|\bdone[- ]whens?\b", re.IGNORECASE)
# A commit-like token: 7-40 hex digits holding both a letter and a digit, not part of a longer
# word, path, version or colour (#1f77b4).
HEXISH = re.compile(r"(?<![\w#./+-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w])")
FLOAT = re.compile(r"\d+e\d+")  # 1979e12 is a number
SHA256_LABEL = re.compile(r"sha256[\s:=(`]*$")  # a data file's content hash, labelled as such
# Fake commit ids of test fixtures (rows fed to renderers and record readers); they name no commit.
FIXTURE_IDS = {"abc1234", "def5678"}


def scanned_files() -> list[Path]:
    skip = {REPO / d for d in DATA_DIRS}
    files = []
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*")) if (REPO / top).is_dir() else [REPO / top]:
            if (path.suffix in TEXT_SUFFIXES and path.is_file() and "__pycache__" not in path.parts
                    and not any(p in skip for p in path.parents) and path != Path(__file__).resolve()):
                files.append(path)
    return files


def commit_like(line: str) -> list[str]:
    return [m.group() for m in HEXISH.finditer(line)
            if not FLOAT.fullmatch(m.group()) and m.group() not in FIXTURE_IDS
            and not SHA256_LABEL.search(line[max(0, m.start() - 12):m.start()])]


def findings(path: Path) -> list[str]:
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        found = [m.group() for m in HISTORY.finditer(line)] + commit_like(line)
        out += [f"{path.relative_to(REPO)}:{n}: {f!r}" for f in found]
    return out


def test_no_history_in_code_tests_or_docs():
    files = scanned_files()
    assert len(files) > 100, "the scan found too few files: are the scanned folders where it looks?"
    bad = [f for path in files for f in findings(path)]
    assert not bad, ("history in code, tests or docs; move commits to benchmarks/data/provenance.csv "
                     "or a data file's commit column, and reword the rest:\n" + "\n".join(bad))


@pytest.mark.parametrize("line, flagged", [
    ("results committed with `73f9fc8` · raw", ["73f9fc8"]),
    ("commit 3331237, 33da0fc", ["33da0fc"]),  # 3331237 has no letter: a number, not flagged
    ("at 1d6103b (git history)", ["1d6103b"]),
    ("(sha256 9473057d9f2b), fit on grid", []),
    ("colour #1f77b4cc, peak 1979e12 FLOP/s, path runs/abc123f0/trace", []),
    ("torch 2.11.0+cu130 · deadbeef", []),  # all letters: a word
    ("commit=abc1234", []),  # a fixture id
])
def test_commit_like_tokens(line, flagged):
    assert commit_like(line) == flagged


@pytest.mark.parametrize("line, hit", [
    ("the row shapes (issue 8)", True), ("see item 1", True), ("round 2 of review", True),
    ("the done-when says", True), ("30 rounds of back-to-back windows", False),
    ("issue-bound kernels", False), ("items[0]", False),
])
def test_history_words(line, hit):
    assert bool(HISTORY.search(line)) is hit
