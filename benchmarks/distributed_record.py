"""benchmarks/data/distributed.json: what one multi-GPU measurement found, as a versioned record.

Written by benchmarks/bench_distributed.py on the GPU host, read by
benchmarks/render_distributed.py for docs/distributed.md. Pure data and arithmetic: no torch,
no kernel_advisor, so the record can be checked and rendered anywhere.

Units: seconds, bytes, bytes/s; fractions in [0, 1]; `None` where a figure does not exist
(no ceiling on CPU, no calls to compare clocks with).
"""
from __future__ import annotations

import json
import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
DEFAULT_PATH = Path(__file__).resolve().parent / "data" / "distributed.json"


class RecordError(ValueError):
    """A distributed.json this code cannot read (another schema version, a missing key)."""


@dataclass(frozen=True)
class RunFigures:
    """One `advisor profile --nproc-per-node N` run, as its merged run.json and ranks.json say."""

    name: str
    model: str
    options: list[str]
    wall_s: float  # the whole CLI call, launch and analysis included
    step_s: float | None  # the run's step time (run.json step_s: unprofiled median)
    backend: str
    wrapper: str
    comm_time_s: float | None  # communication per step, mean over ranks
    comm_share_of_step: float | None  # comm_time_s / step_s
    exposed_comm_s: float | None
    exposed_comm_pct: float | None
    overlap_frac: float | None
    allreduce_count: float | None  # per step
    mean_allreduce_bytes: float | None
    busbw_bytes_per_s: float | None  # the tool's all-reduce busbw (shortest duration per call)
    bus_ceiling_bytes_per_s: float | None
    bus_ceiling_source: str
    busbw_frac_of_ceiling: float | None
    independent_busbw_bytes_per_s: float | None  # busbw_check at mean_allreduce_bytes (interpolated)
    busbw_vs_independent: float | None  # busbw_bytes_per_s / independent_busbw_bytes_per_s
    straggler: dict  # ratio, slowest_rank, fastest_rank, ranks, waited_for_rank, max_comm_wait_s/pct
    profiler_overhead: dict | None  # rank 0's run.json: value, low, high (profiled / unprofiled step)
    clock_skew_us: dict  # per rank: median end-time difference of matched NCCL calls vs rank 0
    ranks: list[dict]  # per rank: step, comm, exposed, waiting, overlap, trace bytes, overhead
    headline: list[str]  # the CLI's summary lines, as printed
    recommendations: list[str] = field(default_factory=list)  # rule ids `advisor recommend` gave
    # The same model profiled as one process on one device (no wrapper, no communication): what
    # data parallelism adds to the step is step_s / single_process_step_s.
    single_process_step_s: float | None = None
    # Per collective family (ranks.json "collectives"): calls_per_step, bytes_per_call, busbw, and
    # against busbw_check: the family's swept peak (ceiling) and its busbw at the run's message size.
    collectives: list[dict] = field(default_factory=list)
    allgather_overlap_frac: float | None = None  # FSDP prefetch: all-gather time hidden under compute
    # `recommend --measure` on the run, its data-parallel actions: action, predicted_gain_frac, measured
    # (status, speedup {value, low, high}, gain_frac, verdict, step_s)
    measured_actions: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class DistributedRecord:
    schema_version: int
    date_utc: str
    commit: str
    command: str
    gpus: dict  # name, count, driver, topology (nvidia-smi topo -m lines)
    world_size: int
    versions: dict  # torch, cuda, nccl, triton, python, kernel_advisor
    env: dict  # the NVLink-multicast switches the runs had
    busbw_check: dict  # benchmarks/busbw_check.py's document (rows, settings)
    ceiling: dict  # the tool's calibrated all-reduce busbw against busbw_check at the same size
    runs: list[RunFigures]
    primary_run: str  # the run the headline figures come from

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(data: dict) -> "DistributedRecord":
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version != SCHEMA_VERSION:
            raise RecordError(f"distributed.json has schema_version {version!r}; this code reads "
                              f"{SCHEMA_VERSION}: regenerate it with benchmarks/bench_distributed.py")
        _require(data, DistributedRecord, "record")
        runs = []
        for i, run in enumerate(data["runs"]):
            _require(run, RunFigures, f"runs[{i}]")
            runs.append(RunFigures(**{f.name: run[f.name] for f in fields(RunFigures) if f.name in run}))
        return DistributedRecord(**{**{f.name: data[f.name] for f in fields(DistributedRecord)}, "runs": runs})

    def primary(self) -> RunFigures:
        for run in self.runs:
            if run.name == self.primary_run:
                return run
        raise RecordError(f"primary_run {self.primary_run!r} is not among the runs")


def _require(doc: dict, cls, where: str) -> None:
    required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
    missing = [k for k in required if k not in doc]
    if missing:
        raise RecordError(f"distributed.json {where} lacks {', '.join(missing)}")


def write_record(record: DistributedRecord, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(clean(record.to_json()), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def read_record(path: Path) -> DistributedRecord:
    """The record of the fewest GPUs in `path` (the headline measurement)."""
    return read_records(path)[0]


def read_records(path: Path) -> list[DistributedRecord]:
    """Every record in `path`, fewest GPUs first: one record, or {"records": [...]}, one per GPU count."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    docs = doc["records"] if isinstance(doc, dict) and "records" in doc else [doc]
    return sorted((DistributedRecord.from_json(d) for d in docs), key=lambda r: r.world_size)


def upsert_record(record: DistributedRecord, path: Path) -> list[DistributedRecord]:
    """Fold `record` into the file at `path`, replacing the one of the same GPU count."""
    kept = [r for r in read_records(path) if r.world_size != record.world_size] if Path(path).is_file() else []
    records = sorted([*kept, record], key=lambda r: r.world_size)
    if len(records) == 1:
        write_record(record, path)
        return records
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps({"records": [clean(r.to_json()) for r in records]}, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return records


def main(argv: list[str] | None = None) -> int:
    """`python3 benchmarks/distributed_record.py OUT/distributed.json [DATA]`: fold a device run's
    record into benchmarks/data/distributed.json (one record per GPU count)."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    ap.add_argument("record", type=Path)
    ap.add_argument("data", type=Path, nargs="?", default=DEFAULT_PATH)
    args = ap.parse_args(argv)
    records = upsert_record(read_record(args.record), args.data)
    print(f"{args.data}: records for {', '.join(str(r.world_size) for r in records)} GPUs")
    return 0



def clean(value: Any) -> Any:
    """NaN/inf → None, recursively: the record stays strict JSON."""
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# ---------------------------------------------------------------- arithmetic on the figures


def busbw_factor(world_size: int) -> float:
    """All-reduce: 2(n-1)/n (nccl-tests' PERFORMANCE.md)."""
    return 2 * (world_size - 1) / world_size


def family_rows(rows: list[dict], collective: str) -> list[dict]:
    """busbw_check's rows of one collective (rows without the key are all-reduce: the first schema)."""
    return [r for r in rows if r.get("collective", "all_reduce") == collective]


def family_ceiling(rows: list[dict], collective: str) -> float | None:
    """The largest busbw busbw_check measured for `collective`: that family's ceiling on this host."""
    values = [r["busbw_bytes_per_s"] for r in family_rows(rows, collective) if r.get("busbw_bytes_per_s")]
    return max(values) if values else None


def busbw_at(rows: list[dict], size_bytes: float | None, collective: str = "all_reduce") -> float | None:
    """busbw_check's busbw of `collective` at `size_bytes`: linear in log(size) between the two nearest
    sizes, the end row's value outside the measured range (busbw flattens at both ends)."""
    points = sorted((r["size_bytes"], r["busbw_bytes_per_s"]) for r in family_rows(rows, collective)
                    if r.get("busbw_bytes_per_s"))
    if not points or not size_bytes or size_bytes <= 0:
        return None
    if size_bytes <= points[0][0]:
        return points[0][1]
    if size_bytes >= points[-1][0]:
        return points[-1][1]
    for (s0, b0), (s1, b1) in zip(points, points[1:]):
        if s0 <= size_bytes <= s1:
            t = (math.log(size_bytes) - math.log(s0)) / (math.log(s1) - math.log(s0))
            return b0 + t * (b1 - b0)
    return None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def clock_skew_us(ends_by_rank: dict[int, list[float]]) -> dict:
    """Per rank, the median of (its end time − rank 0's) over matched collective calls, µs.

    An NCCL collective finishes at nearly the same instant on every rank (the last data
    arrives everywhere together), so a steady offset between the ranks' end times is the
    offset between their trace clocks, not waiting. `ends_by_rank[r]` lists rank r's call
    end times in issue order; only as many calls as every rank has are compared.
    """
    if 0 not in ends_by_rank or len(ends_by_rank) < 2:
        return {"per_rank": {}, "max_abs_us": None, "calls": 0}
    n = min(len(v) for v in ends_by_rank.values())
    per_rank = {}
    for rank, ends in sorted(ends_by_rank.items()):
        diffs = sorted(e - e0 for e, e0 in zip(ends[:n], ends_by_rank[0][:n]))
        per_rank[str(rank)] = _median(diffs) if diffs else None
    known = [abs(v) for v in per_rank.values() if v is not None]
    return {"per_rank": per_rank, "max_abs_us": max(known) if known else None, "calls": n}


def _median(values: list[float]) -> float:
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


if __name__ == "__main__":
    raise SystemExit(main())
