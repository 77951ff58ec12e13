"""Turn the ranks' rank<r>/ directories into a run: rank 0's tables as the main ones,
ranks.json with the per-rank and per-collective summary, run.json with a "distributed" key.

Runs inside RunWriter's temporary directory, so a failure here leaves nothing behind.
"""
from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any, Mapping

from kernel_advisor.collect.run_meta import FILES, run_json
from kernel_advisor.collect.rundir import read_table, write_json_atomic
from kernel_advisor.distributed.comms import Overlap
from kernel_advisor.distributed.links import BusCeiling, bus_ceiling
from kernel_advisor.distributed.merge import STRAGGLER_MIN_RATIO, WAIT_MIN_PCT, Merged, RankResult, merge_ranks
from kernel_advisor.distributed.rank_output import RANK_FILES
from kernel_advisor.errors import AdvisorError, UserInputError
from kernel_advisor.records.run import RunMeta

RANKS_FILE = "ranks.json"


def rank_dir_name(rank: int) -> str:
    return f"rank{rank}"


def overlap_from_json(doc: dict) -> Overlap:
    return Overlap(**{k: math.nan if v is None else v for k, v in doc.items()})


def load_rank(rank_dir: Path) -> tuple[RunMeta, RankResult]:
    """(rank.json, the merge's view of it) for one rank directory."""
    meta = RunMeta.of(json.loads((rank_dir / RANK_FILES["rank"]).read_text(encoding="utf-8")))
    info = meta.rank
    overlap = overlap_from_json(info["overlap"])
    calls = read_table(rank_dir / RANK_FILES["comms"])
    by_collective = {k: overlap_from_json(v) for k, v in (info.get("overlap_by_collective") or {}).items()}
    result = RankResult(rank=int(info["rank"]), steps=int(meta.steps),
                        step_wall_s=tuple(meta.step_wall_s), device_busy_s=float(meta.device_busy_s),
                        calls=calls, overlap=overlap, overlap_by_collective=by_collective)
    return meta, result


def json_clean(value: Any) -> Any:
    """NaN → null and numpy scalars → Python, recursively: ranks.json stays strict JSON."""
    if isinstance(value, dict):
        return {k: json_clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_clean(v) for v in value]
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def ranks_document(merged: Merged, metas: list[Mapping[str, Any]], ceiling: BusCeiling) -> dict:
    metas = [RunMeta.of(m) for m in metas]
    info = metas[0].rank
    ranks = []
    for row, meta in zip(merged.ranks.to_dict("records"), metas):
        files = {k: f"{rank_dir_name(row['rank'])}/{v}" for k, v in RANK_FILES.items()}
        ranks.append({**row, "device": meta.rank["device"], "device_name": meta.device_name,
                      "step_wall_s": meta.step_wall_s, "unprofiled_step_wall_s": meta.unprofiled_step_wall_s,
                      "files": files})
    return json_clean({"world_size": merged.world_size, "backend": info["backend"], "wrapper": info["wrapper"],
                       **merged_sections(merged, ranks, ceiling)})


def merged_sections(merged: Merged, ranks: list[dict], ceiling: BusCeiling) -> dict:
    """What ranks.json says of the merged ranks, whether they were profiled here or imported."""
    return {
        "straggler": {"ratio": merged.straggler_ratio, "slowest_rank": merged.slowest_rank,
                      "fastest_rank": merged.fastest_rank, "min_ratio": STRAGGLER_MIN_RATIO,
                      "ranks": merged.evidence["straggler_ranks"], "waited_for_rank": merged.evidence["waited_for_rank"],
                      "max_comm_wait_s": merged.evidence["max_comm_wait_s"], "wait_min_pct": WAIT_MIN_PCT},
        "ranks": ranks, "collectives": merged.collectives.to_dict("records"),
        "calls_aligned": merged.calls_aligned, "interconnect": ceiling.to_json(), "summary": merged.evidence,
    }


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)  # the same bytes twice would double a large trace on disk
    except OSError:
        shutil.copyfile(src, dst)


def assemble_run(run_tmp: Path, world_size: int) -> RunMeta:
    """Merge rank0..rank{n-1} in `run_tmp` and write the run's main files; returns run.json."""
    loaded = [load_rank(run_tmp / rank_dir_name(r)) for r in range(world_size)]
    metas = [meta for meta, _ in loaded]
    device = metas[0].device
    ceiling = bus_ceiling(device["type"], device["name"], device.get("driver", ""))
    merged = merge_ranks([result for _, result in loaded], ceiling.bytes_per_s)
    rank0 = run_tmp / rank_dir_name(0)
    for key in ("ops", "sequence", "trace"):
        _link_or_copy(rank0 / RANK_FILES[key], run_tmp / FILES[key])
    write_json_atomic(run_tmp / RANKS_FILE, ranks_document(merged, metas, ceiling))
    info = metas[0].rank
    meta = RunMeta({k: v for k, v in metas[0].items() if k != "rank"}).with_keys(
        distributed=json_clean({**merged.evidence, "backend": info["backend"], "wrapper": info["wrapper"],
                                "bus_ceiling_source": ceiling.source, "bus_link": ceiling.link}),
        files={**FILES, "ranks": RANKS_FILE})
    write_json_atomic(run_tmp / "run.json", run_json(meta))
    return meta


def check_ranks_complete(run_tmp: Path, world_size: int) -> None:
    missing = [r for r in range(world_size) if not (run_tmp / rank_dir_name(r) / RANK_FILES["rank"]).is_file()]
    if missing:
        raise AdvisorError(f"ranks {missing} exited without writing their results",
                           "rerun with --debug and report it")


def load_ranks_document(run_dir: Path) -> dict:
    """ranks.json of a distributed run."""
    path = Path(run_dir) / RANKS_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise UserInputError(f"{path} is missing or unreadable ({e})",
                             "profile again with --nproc-per-node to write a fresh run") from None
