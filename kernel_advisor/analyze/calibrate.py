"""Measure what this machine achieves: copy bandwidth and matmul FLOP/s per compute path,
and, with several GPUs, the all-reduce bus bandwidth between them.

Datasheet peaks are upper bounds nobody reaches (an H200 copies at ~89% of its 4.8 TB/s);
judging kernels against them overstates headroom. `calibrate` measures the achievable
ceilings once per device + driver and caches them; `ceilings.resolve_ceilings` prefers them.
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import torch

from kernel_advisor.analyze.ceilings import (
    MeasuredCeilings, cache_file, read_cache,
)
from kernel_advisor.collect.run_meta import device_info
from kernel_advisor.collect.options import resolve_device
from kernel_advisor.analyze.ceilings import algbw_bytes_per_s, busbw_bytes_per_s
from kernel_advisor.errors import EnvironmentCapabilityError

MIB = 2**20
GIB = 2**30


@dataclass(frozen=True)
class CalibrationSizes:
    """How big each benchmark is; tests pass tiny ones."""

    copy_bytes: int  # source buffer; one copy reads and writes this many bytes each
    matmul_n: int  # n of the n x n x n bf16 / fp16 / tf32 matmuls
    fp32_matmul_n: int
    fp64_matmul_n: int
    warmup: int
    reps: int
    flush_bytes: int | None = None  # None: 3 x L2, so every timed rep starts with a cold L2


# 1 GiB -> 1 GiB keeps HBM busy ~0.5 ms on an H200, far longer than launch latency;
# 8192^3 bf16 is 1.1 TFLOP, enough tiles (4096 of 128x128) to fill every SM many times.
GPU_SIZES = CalibrationSizes(copy_bytes=1 * GIB, matmul_n=8192, fp32_matmul_n=8192,
                             fp64_matmul_n=4096, warmup=3, reps=10)
# 256 MiB dwarfs any CPU last-level cache; 2048^3 fp32 (17 GFLOP) keeps every core's FMA
# units busy in oneDNN/MKL. The whole CPU run takes ~3 s of CPU time on 2 cores.
CPU_SIZES = CalibrationSizes(copy_bytes=256 * MIB, matmul_n=0, fp32_matmul_n=2048,
                             fp64_matmul_n=1536, warmup=1, reps=5, flush_bytes=64 * MIB)


@dataclass(frozen=True)
class Measurement:
    step: str  # "copy", "matmul bf16", ...
    path: str | None  # compute path; None for the bandwidth step
    size: str  # human description of the problem size
    work: float  # bytes moved (read + written) or FLOPs, per rep
    median_s: float
    rate_per_s: float  # work / median_s: bytes/s or FLOP/s
    # Half the range of the timed reps over their median: ±spread_frac around the median.
    # None in caches written before it was recorded.
    spread_frac: float | None = None
    reps: int | None = None


@dataclass(frozen=True)
class AllReduceMeasurement:
    """One all-reduce across every visible GPU (NCCL), in nccl-tests' terms."""

    world_size: int
    size_bytes: int  # message size: the buffer each GPU reduces
    median_s: float  # one all-reduce
    algbw_bytes_per_s: float  # size / time
    busbw_bytes_per_s: float  # algbw x 2(n-1)/n: comparable with the per-direction link speed


@dataclass(frozen=True)
class Calibration:
    measured: MeasuredCeilings
    measurements: tuple[Measurement, ...]
    created: str
    torch_version: str
    allreduce: AllReduceMeasurement | None = None  # None: fewer than two GPUs

    def to_json(self) -> dict:
        return {**self.measured.to_json(), "created": self.created,
                "torch": self.torch_version,
                "measurements": [asdict(m) for m in self.measurements],
                "allreduce": asdict(self.allreduce) if self.allreduce else None}

    @staticmethod
    def from_json(data: dict) -> "Calibration":
        allreduce = data.get("allreduce")  # absent in caches written before it was measured
        return Calibration(
            measured=MeasuredCeilings.from_json(data),
            measurements=tuple(Measurement(**m) for m in data["measurements"]),
            created=str(data["created"]), torch_version=str(data["torch"]),
            allreduce=AllReduceMeasurement(**allreduce) if allreduce else None)


@dataclass(frozen=True)
class DeviceIdentity:
    """The name + driver that key the cache (the same strings run.json records)."""

    type: str
    name: str
    driver: str
    sm_count: int | None
    l2_bytes: int | None
    capability: tuple[int, int] | None


# ---------------------------------------------------------------- which device


def local_device_identity(device_type: str) -> DeviceIdentity:
    """Name and driver exactly as `advisor profile` records them in run.json, so the
    cache written here is the one `resolve_ceilings` finds for that run."""
    info = device_info(torch.device(device_type))
    if device_type == "cuda":
        return DeviceIdentity("cuda", info["name"], info["driver"], info["sm_count"],
                              info["l2_bytes"] or None, tuple(info["capability"]))
    # NB: CPU FLOP/s scale with torch's thread count, which the key does not hold:
    # recalibrate (--force) after changing it.
    return DeviceIdentity("cpu", info["name"], info["driver"], torch.get_num_threads(),
                          None, None)


# ---------------------------------------------------------------- timing


def _synchronize(device_type: str) -> None:
    if device_type == "cuda":
        torch.cuda.synchronize()


def spread_frac(times_s: list[float]) -> float:
    """±: half the range of the reps over their median (0.05 = the reps lie within ±5 %).

    The range, not a standard deviation: with 5 reps one slow rep (another process took the
    cores, a GPU clocked down) is exactly what this number must show."""
    median_s = statistics.median(times_s)
    return (max(times_s) - min(times_s)) / (2 * median_s) if median_s > 0 else 0.0


def median_time_s(fn: Callable[[], object], device_type: str, warmup: int, reps: int,
                  flush: Callable[[], object]) -> float:
    """Median of `reps` timed calls after `warmup`; `flush` runs untimed before each rep."""
    return statistics.median(rep_times_s(fn, device_type, warmup, reps, flush))


def rep_times_s(fn: Callable[[], object], device_type: str, warmup: int, reps: int,
                flush: Callable[[], object]) -> list[float]:
    """Each of `reps` timed calls after `warmup`; `flush` runs untimed before each rep."""
    for _ in range(warmup):
        fn()
    _synchronize(device_type)
    times_s = []
    for _ in range(reps):
        flush()
        if device_type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times_s.append(start.elapsed_time(end) / 1e3)  # elapsed_time is in ms
        else:
            t0_s = time.perf_counter()
            fn()
            times_s.append(time.perf_counter() - t0_s)
    return times_s


# ---------------------------------------------------------------- the benchmarks

# path -> (dtype, float32 matmul precision to hold while timing; None = leave it)
_MATMUL_DTYPES = {
    "bf16_tc": (torch.bfloat16, None), "fp16_tc": (torch.float16, None),
    "tf32": (torch.float32, "high"),  # "high" lets cuBLAS use TF32 tensor cores
    "fp32": (torch.float32, "highest"),  # and "highest" forbids it: plain FP32 FMA
    "fp64": (torch.float64, None),
}


def measure_copy(device_type: str, sizes: CalibrationSizes, flush: Callable) -> Measurement:
    numel = max(sizes.copy_bytes // 4, 1)
    # ones, not empty: untouched host pages read as the shared zero page, far too fast.
    src = torch.ones(numel, dtype=torch.float32, device=device_type)
    dst = torch.empty_like(src)
    moved_bytes = 2.0 * numel * 4  # every byte is read once and written once
    times_s = rep_times_s(lambda: dst.copy_(src), device_type, sizes.warmup, sizes.reps, flush)
    t_s = statistics.median(times_s)
    return Measurement("copy", None, f"{numel * 4 / MIB:g} MiB", moved_bytes, t_s,
                       moved_bytes / t_s, spread_frac(times_s), len(times_s))


class _Float32MatmulPrecision:
    """Hold torch's float32 matmul precision for a block and restore it after."""

    def __init__(self, precision: str | None) -> None:
        self.precision = precision
        self.previous = torch.get_float32_matmul_precision()

    def __enter__(self) -> None:
        if self.precision:
            torch.set_float32_matmul_precision(self.precision)

    def __exit__(self, *exc) -> None:
        torch.set_float32_matmul_precision(self.previous)


def measure_matmul(path: str, n: int, device_type: str, sizes: CalibrationSizes,
                   flush: Callable) -> Measurement:
    dtype, precision = _MATMUL_DTYPES[path]
    a = torch.randn(n, n, device=device_type).to(dtype)
    b = torch.randn(n, n, device=device_type).to(dtype)
    out = torch.empty(n, n, device=device_type, dtype=dtype)
    flops = 2.0 * n**3  # one multiply + one add per multiply-accumulate
    with _Float32MatmulPrecision(precision):
        times_s = rep_times_s(lambda: torch.mm(a, b, out=out), device_type,
                              sizes.warmup, sizes.reps, flush)
    t_s = statistics.median(times_s)
    return Measurement(f"matmul {path}", path, f"{n}^3 {str(dtype).removeprefix('torch.')}",
                       flops, t_s, flops / t_s, spread_frac(times_s), len(times_s))


def plan_steps(identity: DeviceIdentity, sizes: CalibrationSizes) -> list[tuple[str, Callable]]:
    """(description, run(flush) -> Measurement) per benchmark this device supports."""
    dev = identity.type

    def matmul(path: str, n: int) -> tuple[str, Callable]:
        return (f"{path} matmul {n}^3", lambda flush: measure_matmul(path, n, dev, sizes, flush))

    steps = [(f"copy {sizes.copy_bytes / MIB:g} MiB",
              lambda flush: measure_copy(dev, sizes, flush))]
    cap = identity.capability or (0, 0)
    if dev == "cuda":
        # Tensor-core paths only where the hardware has them: bf16/TF32 need sm_80,
        # fp16 tensor cores sm_70. fp8 is left to the datasheet (no portable torch API).
        if cap >= (8, 0):
            steps.append(matmul("bf16_tc", sizes.matmul_n))
        if cap >= (7, 0):
            steps.append(matmul("fp16_tc", sizes.matmul_n))
        if cap >= (8, 0):
            steps.append(matmul("tf32", sizes.matmul_n))
    steps.append(matmul("fp32", sizes.fp32_matmul_n))
    steps.append(matmul("fp64", sizes.fp64_matmul_n))
    return steps


# 256 MiB per GPU: far past the message size where NCCL's ring reaches its plateau
# (~tens of MiB), ~0.7 ms per all-reduce over H200 NVLink.
ALLREDUCE_BYTES = 256 * MIB
# The GPU hosts need NVLink SHARP (multicast) off; harmless elsewhere.
NCCL_SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}


def measure_allreduce(n_gpus: int, size_bytes: int = ALLREDUCE_BYTES, warmup: int = 3,
                      reps: int = 5, batch: int = 10) -> AllReduceMeasurement:
    """Median time of a bf16 sum all-reduce over GPUs 0..n-1, from one process.

    torch.cuda.nccl drives one NCCL communicator over all the GPUs, so no process group is
    needed. Each rep times `batch` back-to-back all-reduces between synchronisations, so
    launch and synchronisation cost is spread over many calls.
    """
    from torch.cuda import nccl  # CUDA builds only; imported when there are GPUs to use

    for key, value in NCCL_SAFE_ENV.items():
        os.environ.setdefault(key, value)  # read by NCCL when the communicator is created
    numel = max(size_bytes // 2, 1)
    buffers = [torch.zeros(numel, dtype=torch.bfloat16, device=f"cuda:{i}") for i in range(n_gpus)]

    def sync_all() -> None:
        for i in range(n_gpus):
            torch.cuda.synchronize(i)

    for _ in range(warmup):
        nccl.all_reduce(buffers)
    sync_all()
    times_s = []
    for _ in range(reps):
        t0_s = time.perf_counter()
        for _ in range(batch):
            nccl.all_reduce(buffers)
        sync_all()
        times_s.append((time.perf_counter() - t0_s) / batch)
    median_s = statistics.median(times_s)
    size_bytes = numel * 2
    return AllReduceMeasurement(n_gpus, size_bytes, median_s, algbw_bytes_per_s(size_bytes, median_s),
                                busbw_bytes_per_s("all_reduce", size_bytes, median_s, n_gpus))


def _maybe_allreduce(device_type: str, on_step: Callable[[int, int, str], None]) -> AllReduceMeasurement | None:
    n_gpus = torch.cuda.device_count() if device_type == "cuda" else 0
    if n_gpus < 2:
        return None
    on_step(0, 1, f"all-reduce {n_gpus} GPUs")
    result = measure_allreduce(n_gpus)
    on_step(1, 1, "done")
    return result


def _run_steps(identity: DeviceIdentity, sizes: CalibrationSizes,
               on_step: Callable[[int, int, str], None]) -> list[Measurement]:
    flush_bytes = sizes.flush_bytes or 3 * (identity.l2_bytes or 64 * MIB)
    flush_buffer = torch.empty(flush_bytes, dtype=torch.uint8, device=identity.type)
    steps = plan_steps(identity, sizes)
    results = []
    for i, (description, run) in enumerate(steps):
        on_step(i, len(steps), description)
        results.append(run(flush_buffer.zero_))
    on_step(len(steps), len(steps), "done")
    return results


def calibrate(device: str = "auto", sizes: CalibrationSizes | None = None,
              on_step: Callable[[int, int, str], None] | None = None) -> Calibration:
    """Measure copy bandwidth and matmul peaks on `device` ("auto" | "cuda" | "cpu"), and
    the all-reduce bus bandwidth when two or more GPUs are visible."""
    device_type = resolve_device(device).type
    identity = local_device_identity(device_type)
    sizes = sizes or (GPU_SIZES if device_type == "cuda" else CPU_SIZES)
    on_step = on_step or (lambda *_: None)
    try:
        results = _run_steps(identity, sizes, on_step)
        allreduce = _maybe_allreduce(device_type, on_step)
    except torch.OutOfMemoryError as e:
        need_gib = (2 * sizes.copy_bytes + 3 * 8 * sizes.fp32_matmul_n**2) / GIB
        raise EnvironmentCapabilityError(
            f"the GPU ran out of memory during calibration (needs ~{need_gib:.1f} GiB free)",
            "stop other processes on the GPU and rerun `advisor calibrate`") from e
    peaks = {m.path: m.rate_per_s for m in results if m.path}
    bandwidth = next(m.rate_per_s for m in results if m.path is None)
    created = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    measured = MeasuredCeilings(
        device_type=device_type, device_name=identity.name, driver=identity.driver,
        peak_flops_per_s=peaks, bandwidth_bytes_per_s=bandwidth,
        l2_bytes=identity.l2_bytes, sm_count=identity.sm_count, created=created,
        spread_frac=max(m.spread_frac for m in results))  # the noisiest benchmark speaks for all
    return Calibration(measured, tuple(results), created, torch.__version__, allreduce)


# ---------------------------------------------------------------- the cache


def write_cache(calibration: Calibration, cache_dir: Path | str | None = None) -> Path:
    """Write atomically (temp file + rename): a reader never sees half a file."""
    m = calibration.measured
    path = cache_file(m.device_name, m.driver, cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(calibration.to_json(), f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_calibration(device_name: str, driver: str,
                     cache_dir: Path | str | None = None) -> Calibration | None:
    """The full cached calibration (with per-step details), or None."""
    return read_cache(device_name, driver, Calibration.from_json, cache_dir)
