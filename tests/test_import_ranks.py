"""`advisor import DIR/`: per-rank traces merged as one job (stragglers, skew), and bad directories.

The ranks are replicated from tests/data/ddp_gloo_rank{0,1}.json.gz (a real 2-rank gloo DDP
run) by benchmarks/gen_rank_traces.py, with one deliberately late rank. The skew the import
reports is checked against a separate reading of the same files with json.
"""
from __future__ import annotations

import gzip
import json
import shutil
import statistics
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kernel_advisor.cli
from kernel_advisor.distributed.rank_files import rank_files
from kernel_advisor.errors import UserInputError

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
sys.path.insert(0, str(REPO / "benchmarks"))
from gen_rank_traces import write_ranks  # noqa: E402

RANKS, STRAGGLER, DELAY_US, JITTER_US = 4, 2, 3_000.0, 100.0
runner = CliRunner()


def advisor(*args):
    return runner.invoke(kernel_advisor.cli.app, [str(a) for a in args])


@pytest.fixture(scope="module")
def source_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("gloo-run")
    for r in (0, 1):
        (run / f"rank{r}").mkdir()
        shutil.copy(DATA / f"ddp_gloo_rank{r}.json.gz", run / f"rank{r}" / "trace.json.gz")
    return run


@pytest.fixture(scope="module")
def replicated(source_run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ranks")
    write_ranks(source_run, out, ranks=RANKS, target_mb=0.3, straggler=STRAGGLER, delay_us=DELAY_US,
                jitter_us=JITTER_US, seed=1)
    return out


def starts_by_call(path: Path) -> dict[tuple[str, int], float]:
    """(collective, k) -> start of the k-th gloo call inside a ProfilerStep, read with json."""
    events = json.loads(path.read_text())["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name", "").startswith("ProfilerStep#")]
    calls = sorted((e["ts"], e["name"]) for e in events if e.get("ph") == "X" and e.get("name", "").startswith("gloo:")
                   and any(a <= e["ts"] < b for a, b in steps))
    seen: dict[str, int] = {}
    out = {}
    for ts, name in calls:
        k = seen[name] = seen.get(name, -1) + 1
        out[(name, k)] = ts
    return out


@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_import_finds_the_straggler_and_the_skew(replicated, advisor_home, workers):
    """--workers 1 reads in this process; 2 starts worker processes (each imports torch: slow)."""
    res = advisor("import", replicated, "--out", advisor_home / "job", "--json", "--workers", workers)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)["ranks"]
    assert doc["world_size"] == RANKS and doc["source"] == "import" and doc["calls_aligned"]
    assert doc["straggler"]["waited_for_rank"] == STRAGGLER and STRAGGLER in doc["straggler"]["ranks"]
    late = max(doc["skew"]["ranks"], key=lambda r: r["mean_lateness_us"])
    assert late["rank"] == STRAGGLER
    starts = [starts_by_call(replicated / f"rank{r}.json") for r in range(RANKS)]
    spreads = [max(s[key] for s in starts) - min(s[key] for s in starts) for key in starts[0]]
    (allreduce,) = doc["skew"]["collectives"]
    assert allreduce["calls"] == len(spreads)
    assert allreduce["start_spread_median_us"] == pytest.approx(statistics.median(spreads), abs=0.01)
    assert allreduce["start_spread_max_us"] == pytest.approx(max(spreads), abs=0.01)
    assert min(spreads) >= DELAY_US - JITTER_US  # the late rank sets every call's spread
    ranks_json = json.loads((advisor_home / "job" / "ranks.json").read_text())
    assert [r["rank_from"] for r in ranks_json["ranks"]] == ["distributedInfo"] * RANKS
    assert (advisor_home / "job" / f"rank{RANKS - 1}" / "comms.csv").is_file()


def _trace(rank: int, world: int = 2, info: bool = True) -> str:
    """A minimal kineto-shaped trace of one rank."""
    head = {"schemaVersion": 1}
    if info:
        head["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": world}
    head["traceEvents"] = [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10.0,
                            "dur": 5.0, "args": {}}]
    return json.dumps(head)


def _write(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(exist_ok=True)
    for name, text in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)
    return directory


@pytest.mark.parametrize("files,text", [
    ({}, "holds no trace files"),
    ({"manifest.json": "{}"}, "only other JSON documents"),
    ({"a.json": _trace(0), "b.json": _trace(0)}, "rank 0 has two traces: a.json and b.json"),
    ({"a.json": _trace(0, 2), "b.json": _trace(1, 4)}, "different jobs"),
    ({"a.json": _trace(0, 4), "b.json": _trace(1, 4)}, "2 of 4 ranks have no trace: rank 2, 3"),
    ({"x.json": _trace(0, info=False)}, "cannot tell the rank of x.json"),
    ({"rank0.json": _trace(0, info=False)}, "holds the trace of one rank only"),
    ({"rank0.json": _trace(0), "rank1.json": "garbage"}, "rank1.json is not a chrome trace"),
    ({"rank0.json": _trace(0), "rank1.json.gz": "not gzip"}, "rank1.json.gz is not a chrome trace"),
])
def test_bad_directories_are_one_line(tmp_path, advisor_home, files, text):
    directory = _write(tmp_path / "traces", files)
    res = advisor("import", directory)
    assert res.exit_code == 1, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("advisor: error: ") and text in lines[0], res.stderr
    assert not list((advisor_home / "runs").glob("*")) if (advisor_home / "runs").exists() else True


def test_rank_from_the_file_name_when_the_trace_has_none(tmp_path):
    directory = _write(tmp_path / "t", {"rank1/trace.json": _trace(0, info=False),
                                        "rank0/trace.json": _trace(0, info=False)})
    files = rank_files(directory)
    assert [(f.rank, f.rank_from, f.path.parent.name) for f in files] == [(0, "file name", "rank0"),
                                                                         (1, "file name", "rank1")]


def test_a_damaged_rank_trace_names_the_rank(replicated, tmp_path, advisor_home):
    directory = tmp_path / "damaged"
    shutil.copytree(replicated, directory)
    text = (directory / "rank3.json").read_bytes()
    (directory / "rank3.json").write_bytes(text[: len(text) // 2])  # cut mid-file
    res = advisor("import", directory, "--workers", 1)
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "rank 3 (rank3.json): rank3.json is truncated" in lines[0], res.stderr
    runs = advisor_home / "runs"
    assert not runs.exists() or not [p for p in runs.iterdir() if p.name != "latest"]


def test_gzipped_rank_traces(source_run, tmp_path):
    out = tmp_path / "gz"
    write_ranks(source_run, out, ranks=2, target_mb=0.1, straggler=1, gz=True)
    assert [f.rank for f in rank_files(out)] == [0, 1]
    with gzip.open(out / "rank1.json.gz") as f:
        assert json.load(f)["distributedInfo"]["rank"] == 1


def test_steps_is_refused_with_a_directory(replicated, advisor_home):
    with pytest.raises(UserInputError, match="one trace file"):
        from kernel_advisor import api

        api.import_trace(replicated, steps=3)
