"""Run the model under torch.profiler: warm-up outside, then profiled steps.

The step time every command quotes is the user's loop's: windows of back-to-back steps
between two synchronizes (collect/loop_timing.py), timed after the synchronized steps the
steady-state check and the overhead use.

Warm-up steps run before the profiler exists, so torch.compile, lazy initialisation and
cuDNN autotuning never show up as hotspots. The same number of steps is also timed without
the profiler, and the ratio of medians is the profiler's overhead.

On a GPU the profiled steps run twice: the shapes pass records CPU ops with their shapes and
the kernels they launch (the trace), the timing pass CUDA activity only. The timing pass's
kernel durations replace the shapes pass's (collect/kernel_timing.py), and its steps are the
ones the overhead compares: recording every op's shapes costs host time on each op, which a
host-bound step cannot hide. The overhead compares the timing pass with unprofiled steps timed
right before and right after it: a GPU machine's host speed wanders by tens of percent within
seconds, so steps timed long before (ahead of the shapes pass) would compare two hosts, and
the bracket cancels a drift either way.
"""
from __future__ import annotations

import contextlib
import resource
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch._C._profiler import _ExperimentalConfig
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from kernel_advisor.collect.options import validate_counts
from kernel_advisor.collect.interrupts import deferred_sigint, hold_for_tests
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.loop_timing import in_distributed_run, max_over_ranks, steps_per_window, window_s
from kernel_advisor.collect.noise import Load, LoadSampler, step_too_wide
from kernel_advisor.collect.nvtx_ranges import mirror_user_nvtx
from kernel_advisor.collect.nvtx_ranges import nvtx_range
from kernel_advisor.collect.profiler_output import profiler_output_filtered, quietly
from kernel_advisor.collect.runner import loop_step, make_step, nonfinite_outputs
from kernel_advisor.collect.step_time import SteadyState, is_drifting, time_until_steady

Progress = Callable[[str, int, int], None]  # (phase, done, total)
MIN_LOOP_WINDOWS = 3
# Noisy windows (collect/noise.py): more are timed, up to this many times the planned ones and
# this much extra wall time, so a busy machine narrows the interval without a profile running away.
NOISY_WINDOWS_FACTOR = 4
NOISY_EXTRA_BUDGET_S = 10.0


@dataclass(frozen=True)
class Capture:
    trace_path: Path
    step_wall_s: tuple[float, ...]
    unprofiled_step_wall_s: tuple[float, ...]
    profiler_overhead_ratio: float
    peak_memory_bytes: int
    peak_memory_kind: str  # "cuda_max_allocated" or "process_max_rss"
    nonfinite_outputs: tuple[str, ...]
    steady_state: SteadyState | None = None  # the unprofiled steps' drift check (extra warm-up)
    timing_trace_path: Path | None = None  # the timing pass's trace (GPU runs)
    timing_step_wall_s: tuple[float, ...] = ()  # its steps
    timing_unprofiled_step_wall_s: tuple[float, ...] = ()  # unprofiled steps timed right before and after it
    loop_step_s: tuple[float, ...] = ()  # back-to-back windows: the mean step of each (collect/loop_timing.py)
    loop_window_steps: int = 0  # steps per window
    load: Load | None = None  # threads wanting a core while the windows ran (collect/noise.py)
    extra_windows: int = 0  # windows timed beyond the planned ones because they were noisy


def capture(loaded: LoadedModel, mode: str, warmup: int, steps: int, workdir: Path,
            progress: Progress | None = None, with_stack: bool = False, timing_pass: bool = True) -> Capture:
    """Warm up, time `steps` unprofiled steps (until steady), then profile `steps` more (and,
    on a GPU with `timing_pass`, `steps` more with CUDA activity only).

    `with_stack` records Python call stacks in the trace (for Perfetto / HTA): off unless
    asked for, since it costs host time on every op (on a GPU, in the shapes pass only)."""
    validate_counts(warmup, steps)
    step = make_step(loaded, mode)
    report = progress or (lambda phase, done, total: None)
    sync = _synchronizer(loaded.device)
    trace_path = workdir / "trace.json"
    with mirror_user_nvtx(), inductor_kernel_metadata():
        nonfinite = _warm_up(step, warmup, sync, report)
        # Steps still speeding up are warm-up: timed again, up to a cap (collect/step_time.py).
        unprofiled, steady = time_until_steady(lambda: _timed_steps(step, steps, sync, report),
                                               drifting=_drifting_on_any_rank(loaded.device))
        window = agreed_window(unprofiled, loaded.device)
        sampler = LoadSampler()
        activate, loop_body = loop_step(loaded, mode)  # the user's loop: its contexts once, not per step
        with activate():
            loop = _loop_windows(loop_body, steps, window, loaded.device, report, sampler)
            loop, extra = _more_windows_while_noisy(loop_body, loop, window, loaded.device, report, sampler)
        if loaded.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(loaded.device)
        profiled = _profiled_steps(step, steps, sync, trace_path, loaded.device, report, with_stack)
        timing_path, timed, around = None, [], []
        if timing_pass and loaded.device.type == "cuda":
            timing_path = workdir / "timing_trace.json"
            around = _timed_steps(step, steps, sync, report)
            timed = _record(step, steps, sync, timing_path, [ProfilerActivity.CUDA],
                            _phase(report, "timing kernels"), record_shapes=False, one_window=True)
            around += _timed_steps(step, steps, sync, report)
    if not trace_path.is_file() or (timing_path is not None and not timing_path.is_file()):
        raise RuntimeError("torch.profiler produced no trace")
    ratio = statistics.median(profiled) / max(statistics.median(unprofiled), 1e-12)
    peak, kind = _peak_memory(loaded.device)
    return Capture(trace_path=trace_path, step_wall_s=tuple(profiled), unprofiled_step_wall_s=tuple(unprofiled),
                   profiler_overhead_ratio=ratio, peak_memory_bytes=peak, peak_memory_kind=kind,
                   nonfinite_outputs=tuple(nonfinite), steady_state=steady,
                   timing_trace_path=timing_path, timing_step_wall_s=tuple(timed),
                   timing_unprofiled_step_wall_s=tuple(around), loop_step_s=tuple(loop), loop_window_steps=window,
                   load=sampler.load(), extra_windows=extra)


def _phase(report: Progress, phase: str) -> Progress:
    """`report` with its phase renamed (the timing pass reports as itself, not as "profiling")."""
    return lambda _phase, done, total: report(phase, done, total)


@contextlib.contextmanager
def inductor_kernel_metadata():
    """Have Inductor write each generated kernel's byte count (`kernel_num_gb`) into its file.

    Inductor only records it when `benchmark_kernel` is on; it changes what the kernel file
    contains (a benchmark harness), not the kernel. The models compile during warm-up, inside this.
    """
    try:
        from torch._inductor import config
    except Exception:  # noqa: BLE001 - no Inductor, nothing to annotate
        yield
        return
    with config.patch(benchmark_kernel=True):
        yield


def agreed_window(unprofiled_s: list[float], dev: torch.device) -> int:
    """Steps per back-to-back window for steps like `unprofiled_s`: the longest any rank needs,
    so every rank runs the same number of steps (and of collectives)."""
    return int(max_over_ranks(steps_per_window(statistics.median(unprofiled_s)), dev))


def _drifting_on_any_rank(dev: torch.device) -> Callable[[list[float]], bool]:
    """The warm-up check, agreed across ranks under torch.distributed (else this process's own):
    the ranks time another round when any rank still drifts (loop_timing.max_over_ranks)."""
    if not in_distributed_run():
        return is_drifting
    return lambda times: bool(max_over_ranks(int(is_drifting(times)), dev))


def _synchronizer(dev: torch.device) -> Callable[[], None]:
    if dev.type == "cuda":
        return lambda: torch.cuda.synchronize(dev)
    return lambda: None


def _warm_up(step, warmup: int, sync, report: Progress) -> list[str]:
    nonfinite: list[str] = []
    with nvtx_range("advisor/warmup"):
        # One step always runs first so NaN outputs are caught even with --warmup 0.
        for i in range(max(warmup, 1)):
            out = step()
            sync()
            if i == 0:
                nonfinite = nonfinite_outputs(out)
            report("warm-up", i + 1, max(warmup, 1))
    return nonfinite


def _timed_steps(step, steps: int, sync, report: Progress) -> list[float]:
    walls = []
    with nvtx_range("advisor/unprofiled"):
        for i in range(steps):
            walls.append(_one_timed(step, sync))
            report("timing without profiler", i + 1, steps)
    return walls


def _loop_windows(step, steps: int, window: int, dev: torch.device, report: Progress,
                  sampler: LoadSampler | None = None) -> list[float]:
    """The user's loop: `max(steps, MIN_LOOP_WINDOWS)` windows of `window` back-to-back steps."""
    windows = max(steps, MIN_LOOP_WINDOWS)
    out = []
    with nvtx_range("advisor/back-to-back"):
        for i in range(windows):
            out.append(window_s(step, window, dev))
            if sampler is not None:  # between windows: the sample's own cost stays out of the timing
                sampler.sample()
            report("timing back-to-back steps", i + 1, windows)
    return out


def _more_windows_while_noisy(step, loop: list[float], window: int, dev: torch.device, report: Progress,
                              sampler: LoadSampler) -> tuple[list[float], int]:
    """While the windows' median interval is wider than ±25 % or other threads want the cores,
    time more windows (capped), so the step's interval narrows. Returns (windows, extra count).

    Not under torch.distributed: each window runs the model's collectives, and a rank that
    decided alone to time more would leave its peers' collectives unmatched."""
    if in_distributed_run():
        return loop, 0
    out = list(loop)
    cap = len(loop) * NOISY_WINDOWS_FACTOR
    deadline = time.monotonic() + NOISY_EXTRA_BUDGET_S
    with nvtx_range("advisor/back-to-back"):
        while len(out) < cap and time.monotonic() < deadline and (step_too_wide(out) or _oversubscribed(sampler)):
            out.append(window_s(step, window, dev))
            sampler.sample()
            report("timing more steps (noisy machine)", len(out) - len(loop), cap - len(loop))
    return out, len(out) - len(loop)


def _oversubscribed(sampler: LoadSampler) -> bool:
    load = sampler.load()
    return load is not None and load.oversubscribed()


def _one_timed(step, sync) -> float:
    t0 = time.perf_counter()
    step()
    sync()
    return time.perf_counter() - t0


def _profiled_steps(step, steps: int, sync, trace_path: Path, dev: torch.device,
                    report: Progress, with_stack: bool = False) -> list[float]:
    activities = [ProfilerActivity.CPU]
    if dev.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    # The trace is exported from on_trace_ready: the profiler drops its events when the cycle ends.
    # That is also what torch warns about on every run; we export the one cycle we need, so the
    # warning is filtered with kineto's start/stop lines (collect/profiler_output.py).
    return _record(step, steps, sync, trace_path, activities, report, with_stack)


def _record(step, steps: int, sync, trace_path: Path, activities: list, report: Progress,
            with_stack: bool = False, record_shapes: bool = True, one_window: bool = False) -> list[float]:
    """The profiled steps' times. `one_window`: all steps in one profiler step, so no
    prof.step() runs between them (the open ProfilerStep range it leaves costs the next step
    host time: 6 % of a 0.4 ms step on an H200 host), and no per-step marker is recorded."""
    walls: list[float] = []
    abandoned = False  # the steps raised (Ctrl-C, the model's error): their trace is thrown away

    def export(p) -> None:
        if abandoned:  # the profiler's exit stops a cycle mid-way and would export it: no need
            return
        hold_for_tests("profiler-export")
        p.export_chrome_trace(str(trace_path))

    # Ctrl-C waits while the profiler starts, steps, stops and exports (collect/interrupts.py):
    # a KeyboardInterrupt raised inside kineto's stop or the export has crashed the process
    # with SIGSEGV on models with many ops. The model's own steps stay interruptible.
    # NB: the timing pass (one_window) matches kernels by CUPTI's own correlation ids; with no op
    # events to link them to, the per-op external correlation push is work for nothing.
    extra = {"experimental_config": _ExperimentalConfig(disable_external_correlation=True)} if one_window else {}
    with _Uninterrupted(quietly(profile(activities=activities, record_shapes=record_shapes, with_stack=with_stack,
                                        schedule=schedule(wait=0, warmup=1, active=1 if one_window else steps),
                                        on_trace_ready=export, **extra))) as prof:
        try:
            for i in range(steps + 1):  # step 0 is the profiler's own warm-up, discarded
                with nvtx_range(f"advisor/step#{i}"), record_function(f"advisor::step#{i}"):
                    wall = _one_timed(step, sync)
                if i > 0:
                    walls.append(wall)
                    report("profiling", i, steps)
                if one_window and 0 < i < steps:
                    continue
                # A cycle's end: stop, export the trace, start the next.
                with deferred_sigint(), profiler_output_filtered():
                    prof.step()
        except BaseException:
            abandoned = True
            raise
    return walls


class _Uninterrupted:
    """A context manager whose enter and exit run with SIGINT deferred (its body does not)."""

    def __init__(self, cm) -> None:
        self.cm = cm

    def __enter__(self):
        entered = False
        try:
            with deferred_sigint():
                value = self.cm.__enter__()
                entered = True
        except BaseException:  # a Ctrl-C held over the start lands here: stop what was started
            if entered:
                self.__exit__(*sys.exc_info())
            raise
        return value

    def __exit__(self, *exc) -> bool:
        with deferred_sigint():
            return bool(self.cm.__exit__(*exc))


def _peak_memory(dev: torch.device) -> tuple[int, str]:
    if dev.type == "cuda":
        return int(torch.cuda.max_memory_allocated(dev)), "cuda_max_allocated"
    # NB: process-wide peak RSS (Linux reports KiB), the closest CPU analogue.
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "process_max_rss"


def effective_dtype(loaded: LoadedModel) -> str:
    """The floating dtype the model actually computes in (its first floating parameter or input)."""
    if loaded.autocast is not None:  # float32 weights, but the matmuls and convolutions run in this
        return str(loaded.autocast).replace("torch.", "")
    model: Any = loaded.model
    if isinstance(model, torch.nn.Module):
        for p in model.parameters():
            if p.is_floating_point():
                return str(p.dtype).replace("torch.", "")
    for t in loaded.inputs:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            return str(t.dtype).replace("torch.", "")
    return ""
