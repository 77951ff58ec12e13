"""`advisor import DIR/`: a directory of per-rank torch.profiler traces as one run.

As HTA's multi-rank TraceAnalysis: find each file's rank (rank_files), reduce every trace
to a small summary in worker processes (summary_pool: never two traces per worker, never
all of them in memory), then merge: stragglers, communication per rank, and the skew of
each collective call across ranks. Rank 0's trace is imported whole as the run's main
tables (as `advisor profile --nproc-per-node` makes rank 0's tables the run's), so
recommend, report and compare read the run unchanged.
"""
from __future__ import annotations

from pathlib import Path

from kernel_advisor.collect.rundir import write_json_atomic, write_table
from kernel_advisor.distributed.assemble import RANKS_FILE, json_clean, merged_sections, rank_dir_name
from kernel_advisor.distributed.interconnect import bus_ceiling
from kernel_advisor.distributed.merge import Merged, merge_ranks, numbered_calls
from kernel_advisor.distributed.rank_files import RankFile, rank_files
from kernel_advisor.distributed.rank_summary import RankSummary
from kernel_advisor.distributed.skew import call_spreads, lateness_table, skew_frame
from kernel_advisor.distributed.summary_pool import Progress, summarize_ranks
from kernel_advisor.pipeline import import_to_run
from kernel_advisor.records.run import RunMeta

COMMS_FILE = "comms.csv"


def backend_of(files: list[RankFile], summaries: list[RankSummary]) -> str:
    named = next((f.backend for f in files if f.backend), "")
    return named or ("nccl" if summaries[0].device_type == "cuda" else "gloo")


def skew_document(summaries: list[RankSummary]) -> dict:
    """Per collective start/end spread across ranks and per rank lateness; empty when calls do not line up."""
    numbered, aligned = numbered_calls([s.result() for s in summaries])
    if not aligned or not len(numbered):
        return {"calls_aligned": aligned, "collectives": [], "ranks": []}
    spreads = call_spreads(numbered)
    late = lateness_table(numbered, spreads, [s.rank for s in summaries])
    return {"calls_aligned": True, "collectives": skew_frame(spreads).to_dict("records"),
            "ranks": late.to_dict("records")}


def import_document(merged: Merged, files: list[RankFile], summaries: list[RankSummary], backend: str,
                    ceiling, directory: Path) -> dict:
    ranks = []
    for row, f, s in zip(merged.ranks.to_dict("records"), files, summaries):
        ranks.append({**row, "device": s.device_type, "device_name": s.device_name, "step_wall_s": s.step_wall_s,
                      "source_trace": str(f.path.relative_to(directory)), "rank_from": f.rank_from,
                      "files": {"comms": f"{rank_dir_name(s.rank)}/{COMMS_FILE}"}})
    return json_clean({"world_size": merged.world_size, "backend": backend, "wrapper": "unknown", "source": "import",
                       "source_dir": str(directory), **merged_sections(merged, ranks, ceiling),
                       "skew": skew_document(summaries)})


def import_rank_dir(directory: Path, args: dict, out_dir: Path, workers: int | None = None,
                    progress: Progress | None = None) -> tuple[Path, dict]:
    """Merge the per-rank traces of `directory` into a run at `out_dir`; returns (run dir, run.json)."""
    directory = Path(directory)
    files = rank_files(directory)
    summaries = summarize_ranks(files, len(files), workers, progress)
    first = summaries[0]
    ceiling = bus_ceiling(first.device_type, first.device_name, "")
    merged = merge_ranks([s.result() for s in summaries], ceiling.bytes_per_s)
    backend = backend_of(files, summaries)
    doc = import_document(merged, files, summaries, backend, ceiling, directory)

    def finish(tmp: Path, meta: dict) -> None:
        for s in summaries:
            (tmp / rank_dir_name(s.rank)).mkdir()
            write_table(tmp / rank_dir_name(s.rank) / COMMS_FILE, s.calls_frame())
        write_json_atomic(tmp / RANKS_FILE, doc)
        meta.update(distributed=json_clean({**merged.evidence, "backend": backend, "wrapper": "unknown",
                                            "bus_ceiling_source": ceiling.source, "bus_link": ceiling.link}),
                    files={**RunMeta.of(meta).files, "ranks": RANKS_FILE})

    args = {**args, "source_trace": str(files[0].path), "source_dir": str(directory), "world_size": len(files)}
    return import_to_run(files[0].path, args, out_dir, finish)
