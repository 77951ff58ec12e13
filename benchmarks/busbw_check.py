"""An nccl-tests-style all-reduce bus-bandwidth check, independent of kernel_advisor.

    python3 benchmarks/busbw_check.py --nproc 2 --json OUT/busbw_check.json      # NCCL, one GPU a rank
    python3 benchmarks/busbw_check.py --nproc 2 --backend gloo --device cpu --min-bytes 4K --max-bytes 256K

It exists to check the advisor's communication figures against a number it did not compute:
it imports nothing from kernel_advisor and shares no code with it. The method is
nccl-tests' all_reduce_perf (doc/PERFORMANCE.md in NVIDIA/nccl-tests):

  - one process per rank (torch.multiprocessing), rank r on cuda:r; torch.distributed all_reduce
    (sum, in place: torch has no out-of-place all_reduce);
  - per message size: `--warmup` untimed calls, a barrier, then `--iters` back-to-back calls
    timed with CUDA events on the rank's stream (perf_counter on CPU); a rank's time is the
    mean over the calls, and the reported time is the largest over ranks (the collective
    ends when its last rank does);
  - algbw = size / time; busbw = algbw x 2(n-1)/n (the bytes each rank's link carries per
    direction, comparable across rank counts and with the link's speed);
  - #wrong: one separate call on known values (rank r holds r+1 everywhere; the sum is
    n(n+1)/2, exact in bf16 for n <= 16), elements that differ.

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


def message_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """min, min*f, min*f^2, ... up to max (nccl-tests' -b/-e/-f)."""
    if factor < 2 or min_bytes <= 0 or max_bytes < min_bytes:
        raise ValueError("need 0 < min <= max and factor >= 2")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def busbw_factor(world_size: int) -> float:
    """All-reduce: each rank sends and receives 2(n-1)/n of the buffer (ring or tree alike)."""
    return 2 * (world_size - 1) / world_size


def bandwidths(size_bytes: int, time_s: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes/s for one all-reduce of `size_bytes` taking `time_s`."""
    algbw = size_bytes / time_s
    return algbw, algbw * busbw_factor(world_size)


# ---------------------------------------------------------------- inside each rank


def _device(device_type: str, rank: int) -> torch.device:
    if device_type == "cuda":
        torch.cuda.set_device(rank)
        return torch.device("cuda", rank)
    return torch.device("cpu")


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def count_wrong(buf: torch.Tensor, rank: int, world_size: int) -> int:
    """One all-reduce of r+1 on every rank: every element must read n(n+1)/2."""
    buf.fill_(rank + 1)
    dist.all_reduce(buf)
    expected = world_size * (world_size + 1) / 2
    return int((buf != expected).sum().item())


def time_one_size(buf: torch.Tensor, warmup: int, iters: int) -> float:
    """This rank's mean time of one all-reduce over `iters` back-to-back calls, s."""
    # Random values, not zeros (zeros can run faster than real data). In-place sums grow by n per
    # call: n**(warmup+iters) stays finite in bf16/fp32 for the defaults and n <= 8.
    buf.uniform_(-1, 1)
    for _ in range(warmup):
        dist.all_reduce(buf)
    dist.barrier()
    _sync(buf.device)
    if buf.device.type == "cuda":
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            dist.all_reduce(buf)
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) * 1e-3 / iters
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    return (time.perf_counter() - t0) / iters


def slowest_rank_time(time_s: float, dev: torch.device) -> float:
    """The largest of the ranks' times (nccl-tests reports the max over ranks)."""
    t = torch.tensor([time_s], dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def measure_rows(dev: torch.device, sizes: list[int], dtype: torch.dtype, warmup: int, iters: int) -> list[dict]:
    rank, world = dist.get_rank(), dist.get_world_size()
    itemsize = torch.empty((), dtype=dtype).element_size()
    rows = []
    for size in sizes:
        count = max(size // itemsize, 1)
        buf = torch.empty(count, dtype=dtype, device=dev)
        wrong = count_wrong(buf, rank, world)
        time_s = slowest_rank_time(time_one_size(buf, warmup, iters), dev)
        wrong = int(slowest_rank_time(float(wrong), dev))  # any rank's errors count
        algbw, busbw = bandwidths(count * itemsize, time_s, world)
        rows.append({"size_bytes": count * itemsize, "count": count, "time_s": time_s,
                     "algbw_bytes_per_s": algbw, "busbw_bytes_per_s": busbw, "wrong": wrong})
        del buf
    return rows


def rank_main(rank: int, args: argparse.Namespace, port: int, result_path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dev = _device(args.device, rank)
    init = {"device_id": dev} if dev.type == "cuda" else {}  # NCCL: the communicator binds to this GPU
    dist.init_process_group(args.backend, rank=rank, world_size=args.nproc, **init)
    try:
        rows = measure_rows(dev, message_sizes(args.min_bytes, args.max_bytes, args.factor),
                            DTYPES[args.dtype], args.warmup, args.iters)
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
    """nccl-tests' closing 'Avg bus bandwidth': the plain mean over sizes."""
    return sum(r["busbw_bytes_per_s"] for r in rows) / len(rows)


def table_text(doc: dict) -> str:
    """all_reduce_perf's layout (in-place columns), GB/s = 1e9 B/s."""
    lines = [f"# busbw_check: all_reduce sum, {doc['world_size']} ranks, {doc['backend']}, {doc['dtype']}, "
             f"{doc['device_name']}, warmup {doc['warmup']}, iters {doc['iters']}",
             f"# {'size':>12} {'count':>12} {'type':>9} {'redop':>6} {'time':>10} {'algbw':>8} {'busbw':>8} "
             f"{'#wrong':>7}",
             f"# {'(B)':>12} {'(elements)':>12} {'':>9} {'':>6} {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8}"]
    for r in doc["rows"]:
        lines.append(f"  {r['size_bytes']:>12} {r['count']:>12} {doc['dtype']:>9} {'sum':>6} "
                     f"{r['time_s'] * 1e6:>10.2f} {r['algbw_bytes_per_s'] / 1e9:>8.2f} "
                     f"{r['busbw_bytes_per_s'] / 1e9:>8.2f} {r['wrong']:>7}")
    lines.append(f"# Out of bounds values : {sum(r['wrong'] for r in doc['rows'])} "
                 f"{'OK' if not any(r['wrong'] for r in doc['rows']) else 'FAILED'}")
    lines.append(f"# Avg bus bandwidth    : {doc['avg_busbw_bytes_per_s'] / 1e9:.3f} GB/s")
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
    return {"schema": SCHEMA, "collective": "all_reduce", "op": "sum", "in_place": True,
            "backend": args.backend, "device": args.device, "device_name": device_name(args.device),
            "world_size": args.nproc, "dtype": args.dtype, "warmup": args.warmup, "iters": args.iters,
            "busbw_factor": busbw_factor(args.nproc), "env": {k: os.environ.get(k) for k in SAFE_ENV},
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
