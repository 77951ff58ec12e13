"""An nccl-tests-style bus-bandwidth check of the collective families, independent of kernel_advisor.

    python3 benchmarks/busbw_check.py --nproc 2 --json OUT/busbw_check.json      # NCCL, one GPU a rank
    python3 benchmarks/busbw_check.py --nproc 2 --collectives all_reduce,all_gather,reduce_scatter
    python3 benchmarks/busbw_check.py --nproc 2 --backend gloo --device cpu --min-bytes 4K --max-bytes 256K

It exists to check the advisor's communication figures against a number it did not compute:
it imports nothing from kernel_advisor and shares no code with it. The method is
nccl-tests' all_reduce_perf, all_gather_perf and reduce_scatter_perf (doc/PERFORMANCE.md in
NVIDIA/nccl-tests):

  - one process per rank (torch.multiprocessing), rank r on cuda:r; torch.distributed all_reduce
    (sum, in place: torch has no out-of-place all_reduce), all_gather_into_tensor and
    reduce_scatter_tensor (sum); a size is the larger buffer, as nccl-tests counts it: the
    all-gather's output, the reduce-scatter's input;
  - per message size: `--warmup` untimed calls, a barrier, then `--iters` back-to-back calls
    timed with CUDA events on the rank's stream (perf_counter on CPU); a rank's time is the
    mean over the calls, and the reported time is the largest over ranks (the collective
    ends when its last rank does);
  - algbw = size / time; busbw = algbw x 2(n-1)/n for all-reduce, x (n-1)/n for all-gather and
    reduce-scatter (the bytes each rank's link carries per direction, comparable across rank
    counts and with the link's speed); the largest busbw over sizes is the family's ceiling;
  - #wrong: one separate call on known values (rank r holds r+1 everywhere: a sum is
    n(n+1)/2, exact in bf16 for n <= 16; a gather holds k+1 in chunk k), elements that differ.

Sizes run from --min-bytes to --max-bytes, multiplied by --factor (default 4 KiB ... 1 GiB, x4:
10 sizes, 1 MiB, 16 MiB and 256 MiB among them). NVLink multicast (NVLS) stays off, as the
shared GPU hosts require. Prints a table like all_reduce_perf's and, with --json, writes it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SCHEMA = "busbw_check/1"
# NB: multicast over NVLink can take a shared host's GPUs out of service; these keep it off in
# NCCL, torch's symmetric memory and NVSHMEM, whatever the caller's environment says.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}
UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def parse_bytes(text: str) -> int:
    """'8K' -> 8192, '1G' -> 2**30, '4096' -> 4096 (binary units, as nccl-tests' -b/-e)."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:I?B)?\s*", text.upper())
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use 4096, 8K, 16M, 1G)")
    return int(match.group(1)) * UNITS[match.group(2)]


def collective_list(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    unknown = [n for n in names if n not in COLLECTIVES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown collective {unknown or text!r}: use {', '.join(COLLECTIVES)}")
    return names


def message_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """min, min*f, min*f^2, ... up to max (nccl-tests' -b/-e/-f)."""
    if factor < 2 or min_bytes <= 0 or max_bytes < min_bytes:
        raise ValueError("need 0 < min <= max and factor >= 2")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


def busbw_factor(world_size: int, collective: str = "all_reduce") -> float:
    """All-reduce: each rank sends and receives 2(n-1)/n of the buffer (ring or tree alike);
    all-gather and reduce-scatter: (n-1)/n of it (nccl-tests' PERFORMANCE.md)."""
    n = world_size
    return 2 * (n - 1) / n if collective == "all_reduce" else (n - 1) / n


def bandwidths(size_bytes: int, time_s: float, world_size: int, collective: str = "all_reduce") -> tuple[float, float]:
    """(algbw, busbw) in bytes/s for one call of `size_bytes` taking `time_s`."""
    algbw = size_bytes / time_s
    return algbw, algbw * busbw_factor(world_size, collective)


def ceilings(rows: list[dict]) -> dict[str, float]:
    """Per collective, the largest busbw over the sizes swept: what the links reach for that family."""
    best: dict[str, float] = {}
    for r in rows:
        name = r.get("collective", "all_reduce")
        best[name] = max(best.get(name, 0.0), r["busbw_bytes_per_s"])
    return best


# ---------------------------------------------------------------- inside each rank


def _device(device_type: str, rank: int) -> torch.device:
    if device_type == "cuda":
        torch.cuda.set_device(rank)
        return torch.device("cuda", rank)
    return torch.device("cpu")


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


class Buffers:
    """One collective's buffers for a message of `count` elements (the larger side), and its call."""

    def __init__(self, collective: str, count: int, world_size: int, dtype: torch.dtype, dev: torch.device):
        self.collective, self.n = collective, world_size
        small = count // world_size
        if collective == "all_reduce":
            self.inp = self.out = torch.empty(count, dtype=dtype, device=dev)
        elif collective == "all_gather":
            self.inp, self.out = torch.empty(small, dtype=dtype, device=dev), torch.empty(count, dtype=dtype, device=dev)
        else:
            self.inp, self.out = torch.empty(count, dtype=dtype, device=dev), torch.empty(small, dtype=dtype, device=dev)

    def call(self) -> None:
        if self.collective == "all_reduce":
            dist.all_reduce(self.out)
        elif self.collective == "all_gather":
            dist.all_gather_into_tensor(self.out, self.inp)
        else:
            dist.reduce_scatter_tensor(self.out, self.inp)


def count_wrong(bufs: Buffers, rank: int, world_size: int) -> int:
    """One call on rank r's r+1: a sum reads n(n+1)/2 everywhere, a gather k+1 in chunk k."""
    bufs.inp.fill_(rank + 1)
    bufs.call()
    if bufs.collective == "all_gather":
        expected = torch.arange(1, world_size + 1, dtype=bufs.out.dtype, device=bufs.out.device)
        expected = expected.repeat_interleave(bufs.out.numel() // world_size)
        return int((bufs.out != expected).sum().item())
    return int((bufs.out != world_size * (world_size + 1) / 2).sum().item())


def time_one_size(bufs: Buffers, warmup: int, iters: int) -> float:
    """This rank's mean time of one call over `iters` back-to-back calls, s."""
    # Random values, not zeros (zeros can run faster than real data). In-place sums grow by n per
    # call: n**(warmup+iters) stays finite in bf16/fp32 for the defaults and n <= 8.
    bufs.inp.uniform_(-1, 1)
    for _ in range(warmup):
        bufs.call()
    dist.barrier()
    dev = bufs.out.device
    _sync(dev)
    if dev.type == "cuda":
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            bufs.call()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) * 1e-3 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        bufs.call()
    return (time.perf_counter() - t0) / iters


def slowest_rank_time(time_s: float, dev: torch.device) -> float:
    """The largest of the ranks' times (nccl-tests reports the max over ranks)."""
    t = torch.tensor([time_s], dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def measure_rows(dev: torch.device, sizes: list[int], dtype: torch.dtype, warmup: int, iters: int,
                 collectives: tuple[str, ...] = ("all_reduce",)) -> list[dict]:
    rank, world = dist.get_rank(), dist.get_world_size()
    itemsize = torch.empty((), dtype=dtype).element_size()
    rows = []
    for collective in collectives:
        for size in sizes:
            # a whole number of elements per rank, at least one (gather and scatter split the buffer)
            count = max(size // itemsize // world, 1) * world
            bufs = Buffers(collective, count, world, dtype, dev)
            wrong = count_wrong(bufs, rank, world)
            time_s = slowest_rank_time(time_one_size(bufs, warmup, iters), dev)
            wrong = int(slowest_rank_time(float(wrong), dev))  # any rank's errors count
            algbw, busbw = bandwidths(count * itemsize, time_s, world, collective)
            rows.append({"collective": collective, "size_bytes": count * itemsize, "count": count, "time_s": time_s,
                         "algbw_bytes_per_s": algbw, "busbw_bytes_per_s": busbw, "wrong": wrong})
            del bufs
    return rows


def rank_main(rank: int, args: argparse.Namespace, port: int, result_path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dev = _device(args.device, rank)
    init = {"device_id": dev} if dev.type == "cuda" else {}  # NCCL: the communicator binds to this GPU
    dist.init_process_group(args.backend, rank=rank, world_size=args.nproc, **init)
    try:
        rows = measure_rows(dev, message_sizes(args.min_bytes, args.max_bytes, args.factor),
                            DTYPES[args.dtype], args.warmup, args.iters, args.collectives)
        if rank == 0:
            Path(result_path).write_text(json.dumps(rows))
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------- the launcher


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def versions() -> dict:
    nccl = None
    if torch.cuda.is_available() and hasattr(torch.cuda, "nccl"):
        try:
            found = torch.cuda.nccl.version()  # a tuple in current torch, an int in old ones
            nccl = ".".join(map(str, found)) if isinstance(found, tuple) else str(found)
        except Exception:  # noqa: BLE001 - a build without NCCL: recorded as unknown
            nccl = None
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl,
            "python": sys.version.split()[0]}


def device_name(device_type: str) -> str:
    return torch.cuda.get_device_name(0) if device_type == "cuda" else "cpu"


def avg_busbw(rows: list[dict]) -> float:
    """nccl-tests' closing 'Avg bus bandwidth': the plain mean over sizes (and families)."""
    return sum(r["busbw_bytes_per_s"] for r in rows) / len(rows)


def table_text(doc: dict) -> str:
    """all_reduce_perf's layout (in-place columns), GB/s = 1e9 B/s."""
    lines = [f"# busbw_check: {', '.join(doc.get('collectives', ['all_reduce']))}, {doc['world_size']} ranks, {doc['backend']}, {doc['dtype']}, "
             f"{doc['device_name']}, warmup {doc['warmup']}, iters {doc['iters']}",
             f"# {'collective':>14} {'size':>12} {'count':>12} {'type':>9} {'redop':>6} {'time':>10} {'algbw':>8} "
             f"{'busbw':>8} {'#wrong':>7}",
             f"# {'':>14} {'(B)':>12} {'(elements)':>12} {'':>9} {'':>6} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8}"]
    for r in doc["rows"]:
        name = r.get("collective", "all_reduce")
        lines.append(f"  {name:>14} {r['size_bytes']:>12} {r['count']:>12} {doc['dtype']:>9} "
                     f"{'none' if name == 'all_gather' else 'sum':>6} "
                     f"{r['time_s'] * 1e6:>10.2f} {r['algbw_bytes_per_s'] / 1e9:>8.2f} "
                     f"{r['busbw_bytes_per_s'] / 1e9:>8.2f} {r['wrong']:>7}")
    lines.append(f"# Out of bounds values : {sum(r['wrong'] for r in doc['rows'])} "
                 f"{'OK' if not any(r['wrong'] for r in doc['rows']) else 'FAILED'}")
    lines.append(f"# Avg bus bandwidth    : {doc['avg_busbw_bytes_per_s'] / 1e9:.3f} GB/s")
    for name, peak in doc.get("ceiling_busbw_bytes_per_s", {}).items():
        lines.append(f"# Peak busbw {name:<14}: {peak / 1e9:.3f} GB/s")
    return "\n".join(lines)


def run_check(args: argparse.Namespace) -> dict:
    """Spawn the ranks, measure, and return the document (rows from rank 0 after the max over ranks)."""
    os.environ.update(SAFE_ENV)  # inherited by the spawned ranks, before NCCL reads it
    if args.device == "cuda" and torch.cuda.device_count() < args.nproc:
        raise SystemExit(f"busbw_check: --nproc {args.nproc} needs {args.nproc} GPUs, "
                         f"{torch.cuda.device_count()} visible")
    with tempfile.TemporaryDirectory(prefix="busbw-check-") as tmp:
        result = Path(tmp) / "rows.json"
        t0 = time.perf_counter()
        mp.start_processes(rank_main, args=(args, free_port(), str(result)), nprocs=args.nproc,
                           join=True, start_method="spawn")
        rows = json.loads(result.read_text())
    return {"schema": SCHEMA, "collective": args.collectives[0], "collectives": list(args.collectives),
            "op": "sum", "in_place": True,
            "backend": args.backend, "device": args.device, "device_name": device_name(args.device),
            "world_size": args.nproc, "dtype": args.dtype, "warmup": args.warmup, "iters": args.iters,
            "busbw_factor": busbw_factor(args.nproc),
            "busbw_factors": {c: busbw_factor(args.nproc, c) for c in args.collectives},
            "ceiling_busbw_bytes_per_s": ceilings(rows), "env": {k: os.environ.get(k) for k in SAFE_ENV},
            "versions": versions(), "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "wall_s": time.perf_counter() - t0, "rows": rows, "avg_busbw_bytes_per_s": avg_busbw(rows)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nproc", type=int, default=2, help="ranks (one GPU each on cuda)")
    p.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--dtype", default="bfloat16", choices=tuple(DTYPES))
    p.add_argument("--min-bytes", type=parse_bytes, default=4 * 2**10)
    p.add_argument("--max-bytes", type=parse_bytes, default=2**30)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--collectives", type=collective_list, default=("all_reduce",),
                   help=f"comma-separated, of {', '.join(COLLECTIVES)} (default all_reduce)")
    p.add_argument("--json", type=Path, help="write the table and settings here")
    args = p.parse_args(argv)
    if args.nproc < 2:
        p.error("--nproc must be at least 2")
    if (args.backend == "nccl") != (args.device == "cuda"):
        p.error("NCCL runs on cuda, gloo here on cpu")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    doc = run_check(args)
    print(table_text(doc), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2))
    return 1 if any(r["wrong"] for r in doc["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
