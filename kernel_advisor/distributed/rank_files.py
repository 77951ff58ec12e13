"""Which trace in a directory is which rank: `advisor import DIR/`'s first step.

A trace file is `*.json` or `*.json.gz` in DIR or one directory down (rank<r>/trace.json.gz,
as `advisor profile --nproc-per-node` writes them; tensorboard_trace_handler's
`<worker>.<time>.pt.trace.json`). Its rank is the trace's own `distributedInfo.rank`
(torch.profiler writes it, with world_size and backend, into the keys before traceEvents,
as HTA reads it); failing that, the last `rank<N>` in its path. Only the head of each file
is read here; the events are read later, one rank per worker process.
"""
from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

from kernel_advisor.errors import UserInputError

HEAD_BYTES = 1 << 20  # decompressed bytes searched for distributedInfo (kineto writes it first)
_INFO = re.compile(rb'"distributedInfo"\s*:\s*')
_RANK_IN_NAME = re.compile(r"rank[_\-\[]?(\d+)", re.IGNORECASE)
SUFFIXES = (".json", ".json.gz")


@dataclass(frozen=True)
class RankFile:
    rank: int
    path: Path
    world_size: int | None  # distributedInfo's; None when the file has none
    backend: str  # distributedInfo's; "" when unknown
    rank_from: str  # "distributedInfo" or "file name"


def trace_files(directory: Path) -> list[Path]:
    """The trace files in `directory` and its direct subdirectories, sorted."""
    found = [p for pattern in ("*", "*/*") for p in directory.glob(pattern)
             if p.is_file() and p.name.endswith(SUFFIXES) and not p.name.startswith(".")]
    return sorted(found)


def head_bytes(path: Path, limit: int = HEAD_BYTES) -> bytes:
    """Up to `limit` decompressed bytes from the start of a .json or .json.gz file."""
    try:
        with open(path, "rb") as f:
            raw = f.read(limit)
    except OSError as e:
        raise UserInputError(f"cannot read trace file {path}: {e.strerror}", "check its permissions") from None
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, limit)
    except zlib.error as e:
        raise UserInputError(f"{path.name} is not a valid gzip file ({e})",
                             "re-export the trace, or remove the file from the directory") from None


def distributed_info(head: bytes) -> dict | None:
    """The `distributedInfo` object of a trace's head, None when it has none."""
    match = _INFO.search(head)
    if match is None:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(head[match.end():].decode("utf-8", "replace"))
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def rank_in_name(path: Path, root: Path) -> int | None:
    """The last `rank<N>` (rank_N, rank-N, rank[N]) in the path below `root`."""
    hits = _RANK_IN_NAME.findall(str(path.relative_to(root)))
    return int(hits[-1]) if hits else None


def _int_or_none(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def other_json(head: bytes, limit: int = HEAD_BYTES) -> bool:
    """A whole, valid JSON document with no traceEvents (run.json, a manifest): not a trace, skipped."""
    if b'"traceEvents"' in head or len(head) >= limit:
        return False
    try:
        json.loads(head)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return False
    return True


def rank_file(path: Path, root: Path) -> RankFile | None:
    """The rank of one trace file; None for a JSON file that is no trace."""
    head = head_bytes(path)
    if other_json(head):
        return None
    if not head.lstrip().startswith(b"{") or b'"traceEvents"' not in head:
        raise UserInputError(f"{path.relative_to(root)} is not a chrome trace (no traceEvents at its start)",
                             "keep only torch.profiler traces in the directory")
    info = distributed_info(head) or {}
    rank = _int_or_none(info.get("rank"))
    source = "distributedInfo"
    if rank is None:
        rank, source = rank_in_name(path, root), "file name"
    if rank is None:
        raise UserInputError(f"cannot tell the rank of {path.relative_to(root)}: no distributedInfo.rank "
                             "in the trace and no rank<N> in its name",
                             "profile with torch.distributed initialised, or name the file rank<N>.json")
    return RankFile(rank, path, _int_or_none(info.get("world_size")), str(info.get("backend") or ""), source)


def rank_files(directory: Path) -> list[RankFile]:
    """One RankFile per rank 0..n-1 of `directory`, or one UserInputError saying what is wrong."""
    directory = Path(directory)
    if not directory.is_dir():
        raise UserInputError(f"{directory} is not a directory", "pass a directory of per-rank traces")
    paths = trace_files(directory)
    if not paths:
        raise UserInputError(f"{directory} holds no trace files (*.json, *.json.gz, here or one directory down)",
                             "pass the directory torch.profiler wrote the per-rank traces to")
    files = [f for f in (rank_file(p, directory) for p in paths) if f is not None]
    if not files:
        raise UserInputError(f"{directory} holds no trace files, only other JSON documents",
                             "pass the directory torch.profiler wrote the per-rank traces to")
    check_one_job(files, directory)
    return sorted(files, key=lambda f: f.rank)


def check_one_job(files: list[RankFile], root: Path) -> None:
    """Every rank once, 0..n-1, from one job: duplicates, gaps and mixed jobs are refused."""
    name = {id(f): str(f.path.relative_to(root)) for f in files}
    by_rank: dict[int, RankFile] = {}
    for f in files:
        if f.rank in by_rank:
            raise UserInputError(f"rank {f.rank} has two traces: {name[id(by_rank[f.rank])]} and {name[id(f)]}",
                                 "keep one trace per rank (one profiled window of one job) in the directory")
        by_rank[f.rank] = f
    sizes = {f.world_size for f in files if f.world_size is not None}
    if len(sizes) > 1:
        a, b = (next(f for f in files if f.world_size == s) for s in sorted(sizes)[:2])
        raise UserInputError(f"the traces come from different jobs: {name[id(a)]} has world size {a.world_size}, "
                             f"{name[id(b)]} {b.world_size}", "import one job's traces at a time")
    backends = {f.backend for f in files if f.backend}
    if len(backends) > 1:
        raise UserInputError(f"the traces mix backends ({', '.join(sorted(backends))})",
                             "import one job's traces at a time")
    world = sizes.pop() if sizes else max(by_rank) + 1
    missing = sorted(set(range(world)) - set(by_rank))
    extra = sorted(r for r in by_rank if r >= world)
    if extra:
        raise UserInputError(f"rank {extra[0]} ({name[id(by_rank[extra[0]])]}) is outside world size {world}",
                             "import one job's traces at a time")
    if missing:
        shown = ", ".join(map(str, missing[:8])) + (" …" if len(missing) > 8 else "")
        raise UserInputError(f"{len(missing)} of {world} ranks have no trace: rank {shown}",
                             "copy every rank's trace into the directory")
    if world < 2:
        raise UserInputError(f"{root} holds the trace of one rank only",
                             "import that file itself: advisor import FILE")
