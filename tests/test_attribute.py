"""Attribution of device time to ops, on real H200 traces (tests/data) and synthetic ones."""
import gzip
import json
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from kernel_advisor.collect.attribute import attribute, is_recognised
from kernel_advisor.collect.trace import read_trace

DATA = Path(__file__).parent / "data"
FIXTURES = ["cuda_gpt_inference", "cuda_gpt_train", "cuda_gpt_compiled"]


def raw_events(name):
    return json.load(gzip.open(DATA / f"{name}.json.gz"))["traceEvents"]


def gpu_total_us(events):
    return sum(e["dur"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))


@pytest.mark.parametrize("name", FIXTURES)
def test_rows_add_up_to_total_device_time(name):
    att = attribute(read_trace(DATA / f"{name}.json.gz"), "cuda")
    expected_s = gpu_total_us(raw_events(name)) * 1e-6  # every GPU event of these traces is in a step
    assert att.total_device_time_s == pytest.approx(expected_s, rel=1e-9)
    assert att.ops["device_time_total_s"].sum() == pytest.approx(att.total_device_time_s, rel=0.01)
    assert att.ops["share_pct"].sum() == pytest.approx(100.0, rel=1e-6)
    assert sum(att.step_device_time_s) == pytest.approx(att.total_device_time_s, rel=1e-9)
    # timestamps are ~4e12 µs, so interval ends carry ~1e-3 µs of rounding
    assert att.device_busy_s <= att.total_device_time_s * (1 + 1e-5)


def test_linear_owns_its_addmm_kernel():
    att = attribute(read_trace(DATA / "cuda_gpt_inference.json.gz"), "cuda")
    names = set(att.ops["name"])
    assert "aten::linear" in names
    assert "aten::addmm" not in names  # folded into aten::linear, not a second hotspot
    assert set(att.ops["kind"]) == {"op"}  # eager: every kernel has an op parent
    linear = att.ops[att.ops["name"] == "aten::linear"]
    assert (linear["kernel_count"] > 0).all() and (linear["max_blocks"] > 0).all()
    kernels = json.loads(linear.iloc[0]["kernels"])
    assert sum(k["time_total_s"] for k in kernels) == pytest.approx(linear.iloc[0]["device_time_total_s"])


def test_backward_ops_on_the_autograd_thread_are_attributed():
    att = attribute(read_trace(DATA / "cuda_gpt_train.json.gz"), "cuda")
    assert set(att.ops["kind"]) == {"op"}
    assert {"aten::mm", "aten::_softmax_backward_data", "aten::gelu_backward"} <= set(att.ops["name"])
    assert not any(n.startswith("autograd::") for n in att.ops["name"])


def test_inductor_kernels_are_rows_named_after_the_kernel():
    att = attribute(read_trace(DATA / "cuda_gpt_compiled.json.gz"), "cuda")
    triton = att.ops[att.ops["name"].str.startswith("triton_")]
    assert len(triton) == 7 and set(triton["kind"]) == {"kernel"}
    assert all(f.endswith(".py") for f in triton["kernel_file"])
    # aten ops Inductor calls from its wrapper (extern mm/bmm) stay aten rows
    assert {"aten::mm", "aten::bmm"} <= set(att.ops["name"])


def test_sequence_keeps_the_naive_attention_chain_in_order():
    att = attribute(read_trace(DATA / "cuda_gpt_inference.json.gz"), "cuda")
    seq = [n for n in att.sequence[att.sequence["step"] == 0]["name"] if n not in
           ("aten::view", "aten::transpose", "aten::reshape", "aten::split", "aten::to")]
    i = seq.index("aten::softmax")
    assert seq[i - 2:i + 2] == ["aten::matmul", "aten::mul", "aten::softmax", "aten::matmul"]
    assert list(att.sequence["seq"]) == sorted(att.sequence["seq"])


def test_two_profiled_steps_are_found():
    att = attribute(read_trace(DATA / "cuda_gpt_inference.json.gz"), "cuda")
    assert len(att.step_wall_s) == 2
    assert set(att.sequence["step"]) == {0, 1}


@pytest.mark.parametrize("name,expected", [
    ("aten::linear", True), ("mylib::fused_op", True), ("c10d::allreduce_", True),
    ("autograd::engine::evaluate_function: MmBackward0", False), ("MmBackward0", False),
    ("torch::autograd::AccumulateGrad", False), ("triton_poi_fused_add_0", False),
    ("Torch-Compiled Region: 0/0", False), ("ProfilerStep#3", False),
])
def test_which_names_users_recognise(name, expected):
    assert is_recognised(name) is expected


def cpu_trace(tmp_path, model, x, steps=2):
    path = tmp_path / "cpu_trace.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for i in range(steps):
            with record_function(f"advisor::step#{i}"):
                model(x)
    prof.export_chrome_trace(str(path))
    return path


def test_cpu_self_time_rolls_up_to_the_outermost_op(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    with torch.no_grad():
        trace = read_trace(cpu_trace(tmp_path, model, torch.randn(32, 64)))
    att = attribute(trace, "cpu")
    names = set(att.ops["name"])
    assert {"aten::linear", "aten::gelu"} <= names and "aten::addmm" not in names
    assert att.ops["device_time_total_s"].sum() == pytest.approx(att.total_device_time_s, rel=1e-9)
    linear = att.ops[att.ops["name"] == "aten::linear"]
    assert int(linear["calls"].sum()) == 4  # 2 layers * 2 steps
    assert len(att.step_wall_s) == 2


def synthetic_trace(tmp_path, events):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return read_trace(path)


def X(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def test_orphan_kernels_memcpy_and_out_of_step_work(tmp_path):
    events = [
        X("user_annotation", "ProfilerStep#1", 0, 100),
        X("cpu_op", "aten::add", 10, 5, **{"External id": 7, "Input Dims": [[4], [4]], "Input type": ["float", "float"]}),
        X("kernel", "add_kernel", 20, 3, tid=7, **{"External id": 7, "correlation": 1, "grid": [2, 1, 1]}),
        X("kernel", "ncclKernel_AllReduce", 30, 40, tid=8, **{"correlation": 2}),
        X("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 75, 6, tid=7, **{"correlation": 3}),
        X("kernel", "late_kernel_outside_steps", 150, 9, tid=7, **{"correlation": 4}),
    ]
    att = attribute(synthetic_trace(tmp_path, events), "cuda")
    rows = att.ops.set_index("name")
    assert rows.loc["aten::add", "device_time_total_s"] == pytest.approx(3e-6)
    assert rows.loc["aten::add", "max_blocks"] == 2
    assert rows.loc["ncclKernel_AllReduce", "kind"] == "kernel"
    assert rows.loc["Memcpy HtoD (Pageable -> Device)", "kind"] == "memcpy"
    assert "late_kernel_outside_steps" not in rows.index
    # 3 + 40 + 6 = 49 µs inside the step; the 9 µs after it is excluded
    assert att.total_device_time_s == pytest.approx(49e-6)
    # busy: [20,23) + [30,70) + [75,81) = 3 + 40 + 6 = 49 µs, no overlap
    assert att.device_busy_s == pytest.approx(49e-6)


def test_overlapping_streams_count_once_in_busy_time(tmp_path):
    events = [
        X("user_annotation", "ProfilerStep#1", 0, 100),
        X("kernel", "a", 10, 20, tid=7, **{"correlation": 1}),
        X("kernel", "b", 15, 20, tid=8, **{"correlation": 2}),
    ]
    att = attribute(synthetic_trace(tmp_path, events), "cuda")
    assert att.total_device_time_s == pytest.approx(40e-6)  # 20 + 20
    assert att.device_busy_s == pytest.approx(25e-6)  # union [10, 35)
