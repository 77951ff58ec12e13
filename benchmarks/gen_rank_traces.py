"""Replicate a real 2-rank run's traces to N ranks: the input of `advisor import DIR/` at scale.

    python3 benchmarks/gen_rank_traces.py RUN_DIR OUT_DIR [--ranks 64] [--target-mb 50]
        [--straggler R] [--delay-us D] [--jitter-us J] [--seed 0] [--gzip]

RUN_DIR holds rank0/ and rank1/, each with one torch.profiler trace (`advisor profile
--nproc-per-node 2` writes rank<r>/trace.json.gz). Rank r of the output is source rank r % 2
with, edited in kineto's own text layout (the reader's fast path sees what kineto writes):

- distributedInfo: rank r, world size N, the default group's ranks 0..N-1;
- every collective call (gloo:* ranges, nccl* kernels) arrives a random 0..J µs later
  (jitter) and ends when it did; the straggler rank arrives a further D µs later, and every
  other rank waits for it: their calls last D µs longer. So the straggler waits least,
  its peers wait ~D per call, and each call's start spread is ~D plus the jitter and the
  sources' own skew (a call is never pushed past the end of its profiled step);
- padding to --target-mb per file: copies of the source's own complete events (collectives
  and step markers left out) moved before the first profiled step, so the reader parses
  them all and the step windows drop them, as any event recorded before a profiled step.

Deterministic for a given seed. Writes OUT_DIR/rank<r>.json (.json.gz with --gzip) and
OUT_DIR/manifest.json (the edits made). --target-mb is the size of the JSON text.
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path

SEP = "\n  },\n  {\n"  # kineto writes one event per "  {" ... "  }" at indent 2
_TS = re.compile(r'("ts": )(-?[\d.]+)')
_DUR = re.compile(r'("dur": )(-?[\d.]+)')
_NAME = re.compile(r'"name": "([^"]*)"')
_CAT = re.compile(r'"cat": "([^"]*)"')
_INFO = re.compile(r'"distributedInfo": ')
_STEP = re.compile(r"^(ProfilerStep|advisor::step)#\d+$")


@dataclass(frozen=True)
class Source:
    head: str  # up to and including the first event's "{"
    events: list[str]  # event bodies between separators
    tail: str  # from the last event's closing "}" to the end
    padding: list[tuple[str, float, str]]  # (text before ts, ts, text after ts) of the events to copy
    span_us: float  # first event start to last event end


def source_trace(rank_dir: Path) -> Path:
    found = sorted(p for p in rank_dir.iterdir()
                   if p.name.endswith((".json", ".json.gz")) and p.name != "rank.json")  # advisor's rank record
    if len(found) != 1:
        raise SystemExit(f"{rank_dir} should hold one trace (*.json or *.json.gz), holds {len(found)}")
    return found[0]


def read_text(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode("utf-8")


def is_collective(event: str) -> bool:
    name, cat = _NAME.search(event), _CAT.search(event)
    if name is None or cat is None:
        return False
    return name.group(1).startswith("gloo:") or (cat.group(1) == "kernel" and name.group(1).lower().startswith("nccl"))


def parse_source(path: Path) -> Source:
    text = read_text(path)
    start = text.index('"traceEvents": [')
    first = text.index("{", start)
    last = text.rindex("\n  }")
    events = text[first + 1:last].split(SEP)
    spans, padding = [], []
    for event in events:
        ts, dur = _TS.search(event), _DUR.search(event)
        if '"ph": "X"' not in event or ts is None or dur is None:
            continue
        spans.append((float(ts.group(2)), float(ts.group(2)) + float(dur.group(2))))
        name = _NAME.search(event)
        if not is_collective(event) and not (name and _STEP.match(name.group(1))):
            padding.append((event[:ts.start(2)], float(ts.group(2)), event[ts.end(2):]))
    lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
    return Source(text[:first + 1], events, text[last:], padding, hi - lo + 1000.0)


def edited_head(head: str, rank: int, world: int) -> str:
    match = _INFO.search(head)
    if match is None:
        raise SystemExit("the source trace has no distributedInfo (was torch.distributed initialised?)")
    info, end = json.JSONDecoder().raw_decode(head, match.end())
    info.update(rank=rank, world_size=world)
    for group in info.get("pg_config") or []:
        if group.get("pg_desc") == "default_pg":
            group.update(ranks=list(range(world)), pg_size=world)
    return head[:match.end()] + json.dumps(info) + head[end:]


def shifted(event: str, start_us: float, longer_us: float) -> str:
    """The event starting `start_us` later and ending `longer_us` later than it did."""
    ts = _TS.search(event)
    dur = _DUR.search(event)
    new_ts = float(ts.group(2)) + start_us
    new_dur = max(float(dur.group(2)) - start_us + longer_us, 0.001)
    event = event[:dur.start(2)] + f"{new_dur:.3f}" + event[dur.end(2):]
    return event[:ts.start(2)] + f"{new_ts:.3f}" + event[ts.end(2):]


def padding_text(src: Source, target_bytes: int, base_bytes: int) -> str:
    """Copies of the padding events, each copy one trace span earlier, up to the target size."""
    pieces, size, copy = [], base_bytes, 0
    while size < target_bytes and src.padding:
        copy += 1
        for before, ts, after in src.padding:
            piece = SEP + before + f"{ts - copy * src.span_us:.3f}" + after
            pieces.append(piece)
            size += len(piece)
            if size >= target_bytes:
                break
    return "".join(pieces)


def step_windows_us(events: list[str]) -> list[tuple[float, float]]:
    """The profiled steps as the reader takes them: advisor::step#N ranges, else ProfilerStep#N."""
    windows: dict[str, list] = {"advisor::step": [], "ProfilerStep": []}
    for event in events:
        name = _NAME.search(event)
        match = _STEP.match(name.group(1)) if name else None
        if match and '"ph": "X"' in event:
            ts = float(_TS.search(event).group(2))
            windows[match.group(1)].append((ts, ts + float(_DUR.search(event).group(2))))
    return sorted(windows["advisor::step"] or windows["ProfilerStep"])


def headroom_us(ts: float, windows: list[tuple[float, float]]) -> float:
    """How much later a call starting at `ts` may start and stay in its step window (inf outside one)."""
    for start, end in windows:
        if start <= ts < end:
            return max(end - ts - 1.0, 0.0)
    return float("inf")


def rank_text(src: Source, rank: int, world: int, straggler: int, delay_us: float, jitter_us: float,
              rng: random.Random) -> tuple[str, list[float], int]:
    """The rank's trace text (no padding), each call's added lateness, and how many were clamped.

    NB: a call pushed past the end of its step would leave the profiled window (and the
    ranks' calls would no longer line up), so its lateness stops 1 µs short of the step's end.
    """
    events, arrivals, clamped = [], [], 0
    windows = step_windows_us(src.events)
    for event in src.events:
        if is_collective(event) and '"ph": "X"' in event:
            late = rng.uniform(0.0, jitter_us) + (delay_us if rank == straggler else 0.0)
            room = headroom_us(float(_TS.search(event).group(2)), windows)
            clamped += late > room
            late = min(late, room)
            arrivals.append(late)
            event = shifted(event, late, delay_us)
        events.append(event)
    return edited_head(src.head, rank, world) + SEP.join(events), arrivals, clamped


def write_ranks(run_dir: Path, out_dir: Path, ranks: int = 64, target_mb: float = 50.0, straggler: int | None = None,
                delay_us: float = 20_000.0, jitter_us: float = 200.0, seed: int = 0, gz: bool = False) -> dict:
    sources = [parse_source(source_trace(run_dir / f"rank{r}")) for r in (0, 1)]
    straggler = ranks // 2 + 1 if straggler is None else straggler
    if not 0 <= straggler < ranks:
        raise SystemExit(f"--straggler {straggler} is not a rank of {ranks}")
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    target = int(target_mb * 1e6)
    pads: dict[int, str] = {}
    manifest = {"ranks": ranks, "straggler": straggler, "delay_us": delay_us, "jitter_us": jitter_us, "seed": seed,
                "target_bytes": target, "source": str(run_dir), "files": {}}
    for rank in range(ranks):
        src = sources[rank % 2]
        body, arrivals, clamped = rank_text(src, rank, ranks, straggler, delay_us, jitter_us, rng)
        if rank % 2 not in pads:
            pads[rank % 2] = padding_text(src, target, len(body) + len(src.tail))
        text = (body + pads[rank % 2] + src.tail).encode("utf-8")
        path = out_dir / f"rank{rank}.json{'.gz' if gz else ''}"
        path.write_bytes(gzip.compress(text, compresslevel=1, mtime=0) if gz else text)
        manifest["files"][str(rank)] = {"file": path.name, "bytes": path.stat().st_size,
                                        "collective_calls": len(arrivals), "clamped_calls": clamped,
                                        "mean_lateness_us": sum(arrivals) / len(arrivals) if arrivals else None}
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--target-mb", type=float, default=50.0, help="size of each trace file, MB (1e6 bytes)")
    ap.add_argument("--straggler", type=int, default=None, help="the late rank (default ranks // 2 + 1)")
    ap.add_argument("--delay-us", type=float, default=20_000.0, help="how late the straggler reaches each call")
    ap.add_argument("--jitter-us", type=float, default=200.0, help="every rank's random lateness, 0..J µs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gzip", action="store_true", help="write .json.gz (the target size is the uncompressed JSON's)")
    ns = ap.parse_args(argv)
    manifest = write_ranks(ns.run_dir, ns.out_dir, ns.ranks, ns.target_mb, ns.straggler, ns.delay_us,
                           ns.jitter_us, ns.seed, ns.gzip)
    total = sum(f["bytes"] for f in manifest["files"].values())
    print(f"wrote {ns.ranks} traces ({total / 1e9:.2f} GB) to {ns.out_dir}; straggler rank {manifest['straggler']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
