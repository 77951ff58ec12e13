"""Finding collectives in traces: synthetic kineto-shaped traces, and real rank traces.

tests/data/ddp_gloo_rank{0,1}.json.gz: tests/data/ddp_tiny_buckets.py on 2 CPU ranks (gloo,
torch 2.13, 0.25 MB buckets: 4 all-reduces of one 256x256 layer per step, 2 steps).
tests/data/ddp_rank{0,1}.json.gz: the same model on 2 H200s (NCCL 2.28.9, torch 2.11), and
ddp_fsdp_rank{0,1}.json.gz: tests/data/ddp_tiny.py under --fsdp there; captured
by benchmarks/bench_ddp.py.
"""
import gzip
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kernel_advisor.collect.nesting import step_windows
from kernel_advisor.collect.trace import is_comm_op, read_trace
from kernel_advisor.distributed.comms import (comm_calls, comm_overlap, compute_intervals_us, in_windows,
                                              is_comm_kernel, windows_array)
from kernel_advisor.distributed.merge import merge_ranks
from kernel_advisor.distributed.rank_output import call_spans_us

DATA = Path(__file__).parent / "data"
LAYER_BYTES = (256 * 256 + 256) * 4  # one Linear(256, 256) in fp32: 263168 bytes


def kernel(name, ts, dur, device=0, **args):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": 20, "ts": ts, "dur": dur,
            "args": {"External id": args.pop("ext", 1), "device": device, "stream": 20, **args}}


def nccl_args(collective, nelems, dtype="Float", group=2):
    return {"Collective name": collective, "In msg nelems": nelems, "Out msg nelems": nelems,
            "Group size": group, "dtype": dtype}


def kineto_text(events):
    """The layout kineto writes: one event per "  {" ... "  }" block."""
    blocks = ",\n".join("  {\n    " + json.dumps(e)[1:-1] + "\n  }" for e in events)
    return '{\n  "schemaVersion": 1,\n  "traceEvents": [\n' + blocks + "\n  ],\n  \"traceName\": \"t\"\n}"


STEP = {"ph": "X", "cat": "user_annotation", "name": "advisor::step#1", "pid": 1, "tid": 1, "ts": 100.0,
        "dur": 900.0, "args": {}}
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
EVENTS = [
    STEP,
    kernel(AR, 200.0, 50.0, **nccl_args("allreduce", 1823 * 781)),
    kernel(AR, 300.0, 20.0, ext=7),  # no args: record_param_comms with External id 7 describes it
    {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 290.0, "dur": 5.0,
     "args": {"External id": 7, **nccl_args("_allgather_base", 127, dtype="BFloat16")}},
    kernel("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(x)", 400.0, 10.0, ext=99),  # nothing describes it
    kernel(AR, 500.0, 30.0, device=1, **nccl_args("allreduce", 7)),  # another GPU's kernel
    kernel(AR, 1500.0, 30.0, **nccl_args("allreduce", 7)),  # after the profiled step
    kernel("void at::native::{lambda(float)#1}", 210.0, 100.0),  # compute, braces in the name
]


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "rank0.json.gz"
    with gzip.open(path, "wt") as f:
        f.write(kineto_text(EVENTS))
    return path


def test_the_collectives_table_holds_only_the_communication(trace_file):
    names = sorted(read_trace(trace_file).collectives["name"])
    # 5 NCCL kernels + the record_param_comms that describes one of them; not the step or the compute kernel
    assert names == sorted([AR] * 4 + ["ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(x)", "record_param_comms"])


def test_a_trace_in_another_layout_gives_the_same_collectives(tmp_path, trace_file):
    other = tmp_path / "compact.json"
    other.write_text(json.dumps({"traceEvents": EVENTS}))  # one line: no kineto blocks, the json path
    pd.testing.assert_frame_equal(read_trace(other).collectives, read_trace(trace_file).collectives)


def test_comm_calls_on_one_device_in_the_steps(trace_file):
    windows = np.array([[100.0, 1000.0]])
    calls = comm_calls(read_trace(trace_file), world_size=2, windows=windows, device_index=0)
    assert calls["collective"].tolist() == ["all_reduce", "all_gather", "reduce_scatter"]
    assert calls["bytes"].iloc[0] == 1823 * 781 * 4  # fp32 all-reduce: 5_694_852 bytes
    assert calls["bytes"].iloc[1] == 127 * 2  # bf16, from record_param_comms: in = out = 127
    assert math.isnan(calls["bytes"].iloc[2])  # nothing recorded its size
    assert calls["group_size"].tolist() == [2, 2, 2]
    assert calls["dur_us"].tolist() == [50.0, 20.0, 10.0]
    every_device = comm_calls(read_trace(trace_file), 2, windows)
    assert len(every_device) == 4  # + GPU 1's kernel; the one after the step stays out


def test_comm_calls_come_from_the_trace_read_once(trace_file, monkeypatch):
    import builtins

    from kernel_advisor.collect.trace import read

    reads = []
    stream = read.decompressed_chunks
    monkeypatch.setattr(read, "decompressed_chunks", lambda path: reads.append(path) or stream(path))
    trace = read_trace(trace_file)
    assert reads == [trace_file]
    trace_file.unlink()  # comms has no file to go back to

    def no_open(*args, **kwargs):
        raise AssertionError(f"comms opened {args[0] if args else kwargs}")

    monkeypatch.setattr(builtins, "open", no_open)
    calls = comm_calls(trace, world_size=2, windows=np.array([[100.0, 1000.0]]), device_index=0)
    assert calls["collective"].tolist() == ["all_reduce", "all_gather", "reduce_scatter"]
    assert reads == [trace_file]


def test_windows_and_predicates():
    windows = np.array([[0.0, 10.0], [20.0, 30.0]])
    assert in_windows(np.array([-1.0, 0.0, 9.9, 10.0, 15.0, 25.0, 30.0]), windows).tolist() == [
        False, True, True, False, False, True, False]
    assert in_windows(np.array([5.0]), np.empty((0, 2))).tolist() == [True]
    assert is_comm_kernel("ncclKernel_AllReduce_RING_LL_Sum_float") and not is_comm_kernel("void gemm")
    assert is_comm_op("c10d::allreduce_") and is_comm_op("record_param_comms") and not is_comm_op("aten::mm")


def rank_calls(name):
    path = DATA / f"{name}.json.gz"
    trace = read_trace(path)
    windows = windows_array(step_windows(trace))
    return trace, windows, comm_calls(trace, 2, windows)


@pytest.mark.parametrize("rank", [0, 1])
def test_gloo_rank_trace(rank):
    trace, windows, calls = rank_calls(f"ddp_gloo_rank{rank}")
    assert len(windows) == 2  # advisor::step#1 and #2
    assert calls["collective"].tolist() == ["all_reduce"] * 8  # 4 buckets x 2 steps
    assert (calls["bytes"] == LAYER_BYTES).all() and (calls["source"] == "gloo").all()
    assert (calls["dtype"] == "float").all()
    compute = compute_intervals_us(trace, windows, "cpu")
    assert len(compute) > 100  # aten ops of forward and backward
    ov = comm_overlap(call_spans_us(calls), compute)
    assert 0 <= ov.overlapped_s <= ov.comm_busy_s <= ov.comm_s
    assert ov.exposed_s == pytest.approx(ov.comm_busy_s - ov.overlapped_s)


def test_gloo_ranks_merge():
    from kernel_advisor.distributed.merge import RankResult

    results = []
    for rank in (0, 1):
        trace, windows, calls = rank_calls(f"ddp_gloo_rank{rank}")
        ov = comm_overlap(call_spans_us(calls), compute_intervals_us(trace, windows, "cpu"))
        results.append(RankResult(rank, 2, (0.05, 0.05), 0.01, calls, ov))
    m = merge_ranks(results)
    assert m.calls_aligned
    ar = m.collectives.set_index("collective").loc["all_reduce"]
    assert ar["calls_per_step"] == 4 and ar["bytes_per_call"] == LAYER_BYTES
    assert ar["busbw_bytes_per_s"] == pytest.approx(ar["algbw_bytes_per_s"])  # n = 2: factor 1
    assert ar["transfer_per_step_s"] <= ar["time_per_step_s"]  # shortest per call <= mean per call


# ---------------------------------------------------------------- real NCCL traces (2 x H200)


@pytest.mark.parametrize("rank", [0, 1])
def test_nccl_ddp_rank_trace(rank):
    path = DATA / f"ddp_rank{rank}.json.gz"
    trace = read_trace(path)
    windows = windows_array(step_windows(trace))
    calls = comm_calls(trace, 2, windows, device_index=rank)
    # 4 buckets of one layer each (bucket_cap_mb=0.25) x 2 steps; the kernels' own args give the size
    assert calls["collective"].tolist() == ["all_reduce"] * 8
    assert (calls["bytes"] == LAYER_BYTES).all() and (calls["dtype"] == "Float").all()
    assert (calls["group_size"] == 2).all() and (calls["source"] == "nccl_kernel").all()
    assert comm_calls(trace, 2, windows, device_index=1 - rank).empty  # a rank sees its GPU only
    compute = compute_intervals_us(trace, windows, "cuda", rank)
    assert len(compute) > 50
    ov = comm_overlap(call_spans_us(calls), compute)
    assert ov.comm_s == pytest.approx(calls["dur_us"].sum() * 1e-6)
    assert 0.0 <= ov.overlap_frac <= 1.0


def test_nccl_kernels_belong_to_the_c10d_op():
    from kernel_advisor.collect.attribute import attribute

    ops = attribute(read_trace(DATA / "ddp_rank0.json.gz"), "cuda").ops
    row = ops[ops["name"] == "c10d::allreduce_"].iloc[0]
    assert row["kind"] == "op" and row["calls"] == 8 and row["kernel_count"] == 8
    assert json.loads(row["kernels"])[0]["name"].startswith("ncclDevKernel_AllReduce_Sum_f32")


def test_nccl_fsdp_gathers_and_scatters():
    path = DATA / "ddp_fsdp_rank0.json.gz"
    trace = read_trace(path)
    calls = comm_calls(trace, 2, windows_array(step_windows(trace)), device_index=0)
    counts = calls["collective"].value_counts().to_dict()
    assert counts == {"all_gather": 16, "reduce_scatter": 8}  # per step: 4 forward + 4 backward gathers, 4 scatters
    # all-gather: In 32896 -> Out 65792 floats; reduce-scatter: In 65792 -> Out 32896; both size 263168 bytes
    assert (calls["bytes"] == LAYER_BYTES).all()


def test_nccl_ranks_merge():
    from kernel_advisor.distributed.merge import RankResult

    results = []
    for rank in (0, 1):
        path = DATA / f"ddp_rank{rank}.json.gz"
        trace = read_trace(path)
        windows = windows_array(step_windows(trace))
        calls = comm_calls(trace, 2, windows, device_index=rank)
        ov = comm_overlap(call_spans_us(calls), compute_intervals_us(trace, windows, "cuda", rank))
        results.append(RankResult(rank, 2, (2e-3, 2e-3), 3e-4, calls, ov))
    m = merge_ranks(results, ceiling_bytes_per_s=450e9)
    assert m.calls_aligned
    ar = m.collectives.set_index("collective").loc["all_reduce"]
    assert ar["calls_per_step"] == 4 and ar["bytes_per_step"] == 4 * LAYER_BYTES
    # 263 kB all-reduces are latency-bound: far from NVLink's 450 GB/s
    assert 0 < ar["busbw_frac_of_ceiling"] < 0.5


def test_the_fsdp_straggler_shows_in_peer_waits():
    from kernel_advisor.distributed.merge import RankResult

    results = []
    for rank, step_s in ((0, 8.939e-3), (1, 8.879e-3)):  # the run's median steps: 1.007 apart
        path = DATA / f"ddp_fsdp_rank{rank}.json.gz"
        trace = read_trace(path)
        windows = windows_array(step_windows(trace))
        results.append(RankResult(rank, 2, (step_s,), 0.0, comm_calls(trace, 2, windows, rank)))
    m = merge_ranks(results)
    assert m.straggler_ratio < 1.05
    # rank 0's collectives last 4.49 ms per step, rank 1's 0.07 ms: rank 0 waits 4.42 ms (49 %) for rank 1
    assert m.ranks["comm_wait_per_step_s"].tolist() == pytest.approx([4.4234e-3, 0.0], abs=1e-6)
    assert m.evidence["waited_for_rank"] == 1 and m.evidence["straggler_ranks"] == [1]
