"""The timing pass's kernel durations laid onto the shapes pass's trace (collect/kernel_timing.py),
on a real H200 trace (tests/data) and on hand-built event tables."""
import dataclasses
from pathlib import Path

import pandas as pd
import pytest

from kernel_advisor.collect.attribute import attribute
from kernel_advisor.collect.kernel_timing import PASS_KERNELS_ONLY, PASS_SHAPES, relaid_starts_us, with_kernel_timings
from kernel_advisor.collect.loader import load_model
from kernel_advisor.collect.profiler import Capture
from kernel_advisor.collect.run_meta import profile_meta, run_json
from kernel_advisor.collect.trace import read_trace
from kernel_advisor.render.profile_render import run_warnings, summary_line

DATA = Path(__file__).parent / "data"
EXAMPLES = Path(__file__).parent.parent / "examples"


def _timing_pass_of(trace, scale=1.0, drop=0, rename=None):
    """What a CUDA-only pass of the same steps records: the GPU events alone, under other
    correlation ids (CUPTI keeps counting), each duration times `scale`."""
    gpu = trace.gpu.sort_values("correlation", kind="stable").reset_index(drop=True)
    gpu = gpu.assign(correlation=gpu["correlation"] + 1_000_000, dur_us=gpu["dur_us"] * scale,
                     ts_us=gpu["ts_us"] + 5e6)
    if drop:
        gpu = gpu.iloc[:-drop]
    if rename is not None:
        gpu.loc[rename, "name"] = "some_other_kernel"
    empty = trace.cpu_ops.iloc[:0]
    return dataclasses.replace(trace, gpu=gpu, cpu_ops=empty, annotations=trace.annotations.iloc[:0])


@pytest.fixture(scope="module")
def gpt_trace():
    return read_trace(DATA / "cuda_gpt_inference.json.gz")


def test_every_kernel_takes_the_timing_pass_duration(gpt_trace):
    merged, timing = with_kernel_timings(gpt_trace, _timing_pass_of(gpt_trace, scale=0.8))
    assert timing.source == PASS_KERNELS_ONLY and timing.events == len(gpt_trace.gpu) and timing.reason is None
    before, after = attribute(gpt_trace, "cuda"), attribute(merged, "cuda")
    assert after.total_device_time_s == pytest.approx(0.8 * before.total_device_time_s, rel=1e-9)
    rows = before.ops.merge(after.ops, on="row_id", suffixes=("_a", "_b"))
    assert len(rows) == len(before.ops) == len(after.ops)  # the same rows, each 0.8 of its time
    assert list(rows["device_time_total_s_b"]) == pytest.approx(list(0.8 * rows["device_time_total_s_a"]), rel=1e-9)
    assert after.device_busy_s <= before.device_busy_s


@pytest.mark.parametrize("change,words", [
    (dict(drop=1), "GPU events, the shapes pass"),
    (dict(rename=7), "GPU event 8 of"),
])
def test_passes_that_launched_different_work_keep_the_shapes_pass_times(gpt_trace, change, words):
    merged, timing = with_kernel_timings(gpt_trace, _timing_pass_of(gpt_trace, scale=0.5, **change))
    assert merged is gpt_trace
    assert timing.source == PASS_SHAPES and timing.events == 0 and words in timing.reason
    assert "different work from step to step" in timing.reason


def test_an_empty_timing_pass_is_said(gpt_trace):
    empty = dataclasses.replace(gpt_trace, gpu=gpt_trace.gpu.iloc[:0])
    assert with_kernel_timings(gpt_trace, empty)[1].reason == "the timing pass recorded no GPU work"


def _events(rows):
    return pd.DataFrame(rows, columns=["device", "stream", "ts_us", "dur_us"])


def test_a_longer_kernel_pushes_the_next_on_its_stream_only():
    # stream 7: [0, 15) now overlaps the next kernel at 10, which moves to 15; [30, 35) keeps its start.
    # stream 8 (same start as the second): untouched. Device 1, stream 7: its own stream.
    gpu = _events([(0, 7, 0.0, 15.0), (0, 7, 10.0, 10.0), (0, 7, 30.0, 5.0), (0, 8, 10.0, 1.0),
                   (1, 7, 5.0, 2.0)])
    assert list(relaid_starts_us(gpu)) == [0.0, 15.0, 30.0, 10.0, 5.0]


def test_a_chain_of_pushes_accumulates():
    # 0+12 = 12 > 10: second starts 12, ends 24 > 20: third starts 24.
    gpu = _events([(0, 7, 0.0, 12.0), (0, 7, 10.0, 12.0), (0, 7, 20.0, 1.0)])
    assert list(relaid_starts_us(gpu)) == [0.0, 12.0, 24.0]


def _capture(trace_path, timing_walls):
    # NB: hand-picked step times: shapes pass 2 ms a step, the unprofiled steps before it 1 ms;
    # timing pass 2.2 ms, the unprofiled steps around it 2.0 ms (2.2 / 2.0 = 1.1).
    return Capture(trace_path=trace_path, step_wall_s=(2e-3,) * 6, unprofiled_step_wall_s=(1e-3,) * 6,
                   profiler_overhead_ratio=2.0, peak_memory_bytes=1, peak_memory_kind="cuda_max_allocated",
                   nonfinite_outputs=(), timing_trace_path=trace_path, timing_step_wall_s=timing_walls,
                   timing_unprofiled_step_wall_s=(2e-3,) * 12)


def _meta(gpt_trace, timing_source):
    loaded = load_model(EXAMPLES / "gpt_block.py", device="cpu")
    merged, timing = with_kernel_timings(gpt_trace, _timing_pass_of(gpt_trace, **timing_source))
    attr = attribute(merged, "cuda")
    args = {"mode": "inference", "dtype": "keep", "warmup": 1, "steps": 6}
    return run_json(profile_meta(loaded, args, _capture(DATA / "cuda_gpt_inference.json.gz", (2.2e-3,) * 6), attr,
                                 timing)), attr


def test_run_json_quotes_the_timing_pass_overhead_and_keeps_the_shapes_pass_one(gpt_trace):
    meta, attr = _meta(gpt_trace, {})
    # against the unprofiled steps timed around the timing pass, not those before the shapes pass
    assert meta["step_wall_s"] == [2.2e-3] * 6 and meta["step_s"]["value"] == pytest.approx(1e-3)
    assert meta["profiler_overhead"]["value"] == pytest.approx(1.1)
    assert meta["profiler_overhead_ratio"] == pytest.approx(1.1)
    timing = meta["kernel_timing"]
    assert timing["source"] == PASS_KERNELS_ONLY and timing["shapes_pass_step_wall_s"] == [2e-3] * 6
    assert timing["unprofiled_step_wall_s"] == [2e-3] * 12
    assert timing["shapes_pass_overhead"]["value"] == pytest.approx(2.0)
    assert meta["device_busy_frac"] == pytest.approx(min(attr.device_busy_s / 13.2e-3, 1.0))
    line = summary_line(meta, "RUN")
    assert "profiler overhead 1.10×" in line
    assert "kernels timed with CUDA activity only; the shapes pass 2.00×" in line
    assert not any("kernel times" in w for w in run_warnings(meta))


def test_run_json_says_why_the_timing_pass_was_not_used(gpt_trace):
    meta, _ = _meta(gpt_trace, {"drop": 2})
    assert meta["step_wall_s"] == [2e-3] * 6 and meta["profiler_overhead"]["value"] == pytest.approx(2.0)
    assert meta["kernel_timing"]["source"] == PASS_SHAPES
    warning = [w for w in run_warnings(meta) if w.startswith("kernel times come from the shapes pass")]
    assert len(warning) == 1 and "GPU events" in warning[0]
    assert "CUDA activity only" not in summary_line(meta, "RUN")


@pytest.mark.parametrize("steps", [1, 4])
def test_one_window_records_every_step_but_the_warm_up(tmp_path, steps):
    # The timing pass's recording: one profiler step holds all timed steps. On CPU the same
    # schedule records CPU ops: 3 aten::mm a step, so 3 * steps of them, none from the warm-up.
    import torch
    from torch.profiler import ProfilerActivity

    from kernel_advisor.collect.profiler import _record

    a = torch.randn(8, 8)
    calls = []

    def step():
        calls.append(1)
        return a @ a @ a @ a

    walls = _record(step, steps, lambda: None, tmp_path / "t.json", [ProfilerActivity.CPU],
                    lambda *args: None, record_shapes=False, one_window=True)
    assert len(walls) == steps and len(calls) == steps + 1
    mm = read_trace(tmp_path / "t.json").cpu_ops
    assert (mm["name"] == "aten::mm").sum() == 3 * steps
