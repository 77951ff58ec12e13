"""Past the bf16 roof: the FP8 rules fire on GEMMs/attention at the roof of an fp8-capable GPU,
and the `float8` action says why it does not apply (CPU, old GPU, no torchao, no 16-aligned Linear)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from test_actions import loaded_of, seeded
from test_recommend_support import op_row, op_table, run_meta, sequence_from

from kernel_advisor import actions
from kernel_advisor.actions import NotApplicable, get_action, precision
from kernel_advisor.actions.base import instance_forwards
from kernel_advisor.experiment.variant import conflicts
from kernel_advisor.recommend.report import recommend
from kernel_advisor.recommend.schema import builtin_rules_dir, load_rule_file, load_rules

RULES = load_rules()
DOCS = Path(__file__).resolve().parents[1] / "docs" / "rules.md"
BF16 = "bfloat16"
# H200 datasheet ceilings (kernel_advisor/data/devices.yaml), as run.json stores them
H200_BW = 4.8e12
H200_PEAKS = {"fp64": 67e12, "fp32": 67e12, "tf32": 494.5e12, "fp16_tc": 989.5e12, "bf16_tc": 989.5e12,
              "fp8_tc": 1979e12}
H200_CEILINGS = {"peak_flops_per_s": H200_PEAKS, "bandwidth_bytes_per_s": H200_BW, "source": "datasheet"}
# A100: no fp8 unit, so fp8_tc falls back to fp16_tc (analyze/ceilings.py FALLBACK)
A100_PEAKS = {"fp64": 19.5e12, "fp32": 19.5e12, "tf32": 156e12, "fp16_tc": 312e12, "bf16_tc": 312e12,
              "fp8_tc": 312e12}
A100_CEILINGS = {"peak_flops_per_s": A100_PEAKS, "bandwidth_bytes_per_s": 2.0e12, "source": "datasheet"}

M = N = K = 8192
GEMM_FLOPS = 2.0 * M * N * K
GEMM_BYTES = 2.0 * (M * K + K * N + M * N)
LINEAR = ("aten::linear", [[M, K], [N, K]], [BF16, BF16])


def _gemm_row(efficiency: float, peak: float, verdict: str = "compute-bound", calls: int = 4):
    """A bf16 linear at `efficiency` of its roofline (compute-bound: FLOPs / peak)."""
    roof = max(GEMM_FLOPS / peak, GEMM_BYTES / H200_BW)
    return op_row(0, *LINEAR, calls, calls * roof / efficiency, flops=GEMM_FLOPS, nbytes=GEMM_BYTES,
                  verdict=verdict, compute_path="bf16_tc", peak=peak, bw=H200_BW)


def _report(rows, *, capability, ceilings, mode="inference"):
    ops = op_table(rows)
    total = float(ops["device_time_total_s"].sum())
    meta = run_meta(total_device_time_s=total, step_wall_s=total / 2 * 1.05, capability=capability,
                    ceilings=ceilings, mode=mode)
    return recommend(ops, sequence_from([]), meta, RULES)


def _recs(report, rule_id):
    return [r for f in report.findings if f.rule_id == rule_id for r in f.recommendations]


# ---------------------------------------------------------------- the rules


def test_fp8_rule_fires_on_a_gemm_at_90_percent_of_the_bf16_roof_on_hopper():
    report = _report([_gemm_row(0.9, H200_PEAKS["bf16_tc"])], capability=[9, 0], ceilings=H200_CEILINGS)
    (rec,) = _recs(report, "lib-fp8-gemm")
    assert rec.tier == "library" and rec.action == "float8:compile" and rec.gain_model == "precision"
    assert "convert_to_float8_training" in rec.message and "Float8DynamicActivationFloat8WeightConfig" in rec.message
    assert "90 %" in rec.message
    # the compute roof halves (1979 / 989.5 fp8 / bf16 TFLOP/s), the efficiency is kept: half the time
    time_per_step = float(rec.evidence["time_per_step_s"])
    assert rec.saving_per_step_s == pytest.approx(time_per_step / 2, rel=1e-3)
    assert "bf16_tc 990 → fp8_tc 1.98e+03 TFLOP/s" in rec.gain_basis
    caveats = " ".join(rec.caveats)
    assert "numerics" in caveats and "2:4" in caveats and "torch-tensorrt" in caveats and "upper bound" in caveats
    # the leave-it verdict on the same op stays (it is about kernels), the library rung is still offered
    assert {f.rule_id for f in report.findings} >= {"leave-gemm-at-roof", "lib-fp8-gemm"}


def test_fp8_rule_names_the_train_recipe_in_train_mode():
    report = _report([_gemm_row(0.9, H200_PEAKS["bf16_tc"])], capability=[9, 0], ceilings=H200_CEILINGS,
                     mode="train")
    (rec,) = _recs(report, "lib-fp8-gemm")
    assert "This run is train" in rec.message


@pytest.mark.parametrize("capability,ceilings", [([8, 0], A100_CEILINGS), ([8, 0], H200_CEILINGS),
                                                 ([8, 6], H200_CEILINGS)])
def test_fp8_rule_is_silent_without_fp8_tensor_cores(capability, ceilings):
    peak = ceilings["peak_flops_per_s"]["bf16_tc"]
    report = _report([_gemm_row(0.9, peak)], capability=capability, ceilings=ceilings)
    assert not _recs(report, "lib-fp8-gemm")


def test_fp8_rule_fires_on_ada():
    report = _report([_gemm_row(0.9, H200_PEAKS["bf16_tc"])], capability=[8, 9], ceilings=H200_CEILINGS)
    assert _recs(report, "lib-fp8-gemm")


def test_fp8_rule_is_silent_on_a_memory_bound_op():
    # a skinny GEMM (M = 16) is memory-bound: only the bytes roof matters, fp8 compute would not move it
    row = _gemm_row(0.9, H200_PEAKS["bf16_tc"], verdict="memory-bound")
    add = op_row(1, "aten::add", [[M, N], [M, N]], [BF16, BF16], 4, 4 * 2 * M * N * 2 * 3 / H200_BW / 0.9,
                 flops=float(M * N), nbytes=3.0 * M * N * 2, verdict="memory-bound", bw=H200_BW)
    report = _report([row, add], capability=[9, 0], ceilings=H200_CEILINGS)
    assert not _recs(report, "lib-fp8-gemm")


def test_fp8_rule_is_silent_below_the_threshold():
    # at 50 % of the roof a better kernel is still the cheaper rung
    report = _report([_gemm_row(0.5, H200_PEAKS["bf16_tc"])], capability=[9, 0], ceilings=H200_CEILINGS)
    assert not _recs(report, "lib-fp8-gemm")


def test_fp8_attention_rule_fires_and_names_why_nothing_is_measured():
    q = [8, 32, 4096, 128]
    flops = 4.0 * 8 * 32 * 4096 * 4096 * 128
    nbytes = 4.0 * 8 * 32 * 4096 * 128 * 2
    roof = flops / H200_PEAKS["bf16_tc"]
    row = op_row(0, "aten::_scaled_dot_product_flash_attention", [q, q, q], [BF16] * 3, 2, 2 * roof / 0.75,
                 flops=flops, nbytes=nbytes, verdict="compute-bound", compute_path="bf16_tc",
                 peak=H200_PEAKS["bf16_tc"], bw=H200_BW)
    report = _report([row], capability=[9, 0], ceilings=H200_CEILINGS)
    (rec,) = _recs(report, "lib-fp8-attention")
    assert rec.action == "none" and "nn.Linear only" in rec.action_reason
    assert rec.saving_per_step_s and rec.saving_per_step_s > 0
    assert not _recs(_report([row], capability=[8, 0], ceilings=A100_CEILINGS), "lib-fp8-attention")


def test_precision_rules_load_with_their_action():
    rules = {r.id: r for r in load_rule_file(builtin_rules_dir() / "precision.yaml")}
    assert rules["lib-fp8-gemm"].action == "float8:compile"
    assert rules["lib-fp8-gemm"].gain.target_path == "fp8_tc"
    assert rules["lib-fp8-attention"].action == "none" and rules["lib-fp8-attention"].action_reason
    assert {"lib-fp8-gemm", "lib-fp8-attention"} <= {r.id for r in RULES}


# ---------------------------------------------------------------- the action


def _mlp(dims=(64, 128, 64)):
    layers = []
    for a, b in zip(dims, dims[1:]):
        layers += [nn.Linear(a, b), nn.GELU()]
    return nn.Sequential(*layers[:-1])


def _on_fake_cuda(loaded, monkeypatch, capability=(9, 0)):
    """The same model, said to be on an fp8-capable GPU: the device checks pass on a CPU machine."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA Fake")
    loaded.device = torch.device("cuda")
    return loaded


def test_registry_knows_float8_and_keeps_one_precision_per_plan():
    assert {"float8", "float8:compile"} <= set(actions.action_names())
    action, compiled = get_action("float8"), get_action("float8:compile")
    assert action.stage == "library" and compiled.stage == "compile"
    assert conflicts(action, get_action("bf16_autocast"))
    assert not conflicts(action, get_action("compile"))
    # float8:compile is one compile mode and one number format
    for other in ("float8", "bf16_autocast", "compile", "compile:reduce-overhead"):
        assert conflicts(compiled, get_action(other)), other
    assert not conflicts(compiled, get_action("tf32")) and not conflicts(compiled, get_action("sdpa"))
    assert actions.fixed_by("float8:compile") == {"float8:compile", "float8", "compile", "pad_gemm"}


@pytest.mark.parametrize("name", ["float8", "float8:compile"])
@pytest.mark.parametrize("mode", ["inference", "train"])
def test_float8_is_not_applicable_on_cpu(name, mode):
    loaded = loaded_of(_mlp(), seeded(4, 64))
    with pytest.raises(NotApplicable, match=r"CUDA device of compute capability 8\.9 or newer; this run is on the cpu"):
        get_action(name).prepare(loaded, mode)


def test_float8_compile_is_not_applicable_to_a_compiled_model(monkeypatch):
    loaded = _on_fake_cuda(loaded_of(torch.compile(_mlp()), seeded(4, 64)), monkeypatch)
    with pytest.raises(NotApplicable, match="already compiled"):
        get_action("float8:compile").prepare(loaded, "inference")


def test_float8_is_not_applicable_before_ada(monkeypatch):
    loaded = _on_fake_cuda(loaded_of(_mlp(), seeded(4, 64)), monkeypatch, capability=(8, 0))
    with pytest.raises(NotApplicable, match=r"compute capability 8\.9 or newer .*NVIDIA Fake is 8\.0"):
        get_action("float8").prepare(loaded, "train")


def test_float8_is_not_applicable_without_torchao(monkeypatch):
    loaded = _on_fake_cuda(loaded_of(_mlp(), seeded(4, 64)), monkeypatch)
    for name in ("torchao", "torchao.float8", "torchao.quantization"):
        monkeypatch.setitem(sys.modules, name, None)  # `import` raises ImportError
    with pytest.raises(NotApplicable, match=r"torchao is not installed.*pip install torchao"):
        get_action("float8").prepare(loaded, "inference")


def test_float8_is_not_applicable_without_a_16_aligned_linear(monkeypatch):
    loaded = _on_fake_cuda(loaded_of(_mlp((24, 40, 10)), seeded(4, 24)), monkeypatch)
    with pytest.raises(NotApplicable, match=r"divisible by 16 .*found 24x40, 40x10"):
        get_action("float8").prepare(loaded, "inference")
    conv = loaded_of(nn.Sequential(nn.Conv2d(3, 16, 3)), seeded(1, 3, 8, 8))
    with pytest.raises(NotApplicable, match="no nn.Linear"):
        get_action("float8").prepare(_on_fake_cuda(conv, monkeypatch), "inference")


def test_float8_refuses_a_model_whose_forwards_another_action_swapped(monkeypatch):
    model = _mlp()
    loaded = _on_fake_cuda(loaded_of(model, seeded(4, 64)), monkeypatch)
    first = model[0]
    with instance_forwards([(first, lambda x: first.__class__.forward(first, x))]):
        with pytest.raises(NotApplicable, match="a float8 copy would run the originals"):
            get_action("float8").prepare(loaded, "inference")


class _FakeTorchao:
    """Stands in for torchao: records what the action asked it to convert."""

    def __init__(self):
        self.converted: list[str] = []
        self.config = None

    def entry_points(self) -> dict:
        def convert(model, module_filter_fn):
            self.converted = [n for n, m in model.named_modules() if module_filter_fn(m, n)]
            return model

        def quantize_(model, config, filter_fn):
            self.config = config
            self.converted = [n for n, m in model.named_modules() if filter_fn(m, n)]

        return {"convert_to_float8_training": convert, "quantize_": quantize_,
                "Float8DynamicActivationFloat8WeightConfig": lambda **kw: kw,
                "PerRow": lambda: "per-row", "PerTensor": lambda: "per-tensor"}


@pytest.mark.parametrize("mode,dtype,granularity", [("train", torch.float32, None),
                                                     ("inference", torch.bfloat16, "per-row"),
                                                     ("inference", torch.float32, "per-tensor")])
def test_float8_converts_a_copy_of_the_aligned_linears(monkeypatch, mode, dtype, granularity):
    fake = _FakeTorchao()
    monkeypatch.setattr(precision, "_import_torchao", fake.entry_points)
    model = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64), nn.Linear(64, 10)).to(dtype)
    loaded = _on_fake_cuda(loaded_of(model, seeded(4, 64, dtype=dtype)), monkeypatch)
    v = get_action("float8").prepare(loaded, mode)
    assert fake.converted == ["0", "2"]  # 64x10 is off 16: left alone
    assert v.model is not model and v.params_of is v.model  # a deep copy; its gradients are read
    assert v.tolerance is precision.float8_tolerance
    assert "2 Linear layer(s)" in v.applied and "1 Linear(s) with dims off 16" in v.applied
    if granularity:
        assert fake.config == {"granularity": granularity, "set_inductor_config": False}


def test_float8_compile_compiles_the_float8_copy(monkeypatch):
    fake = _FakeTorchao()
    monkeypatch.setattr(precision, "_import_torchao", fake.entry_points)
    model = _mlp()
    loaded = _on_fake_cuda(loaded_of(model, seeded(4, 64)), monkeypatch)
    v = get_action("float8:compile").prepare(loaded, "train")
    try:
        assert isinstance(v.model, torch._dynamo.eval_frame.OptimizedModule)
        assert v.params_of is v.model._orig_mod.inner and v.params_of is not model  # gradients of the float8 copy
        assert v.stage == "compile" and v.tolerance is precision.float8_tolerance
        assert v.applied.endswith("; torch.compile(model)")
    finally:
        v.close()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_float8_tolerance_is_what_the_docs_say(dtype):
    assert precision.float8_tolerance(dtype) == precision.FLOAT8_TOLERANCE == (0.125, 0.125)
    docs = DOCS.read_text(encoding="utf-8")
    row = next(line for line in docs.splitlines() if line.startswith("| `float8` |"))
    assert re.search(r"gate tolerance 0\.125\b", row)
    assert "`float8` 0.125" in docs  # the tolerance list in docs/measure.md's words, repeated in rules.md


def test_float8_gate_on_cpu_through_torchao_emulation(monkeypatch):
    """With torchao installed, the train path runs on the CPU (torch._scaled_mm has a CPU kernel)
    and the gate reports its error: the JSON record holds rel_err beside the speedup."""
    pytest.importorskip("torchao.float8")
    from kernel_advisor.experiment.engine import measure_actions
    from kernel_advisor.experiment.search import SearchOptions
    monkeypatch.setattr(precision, "_require_fp8_device", lambda device: None)
    torch.manual_seed(0)
    model = _mlp((64, 128, 64)).to(torch.bfloat16)
    loaded = loaded_of(model, seeded(32, 64, dtype=torch.bfloat16))
    try:
        m = measure_actions(loaded, "train", ["float8"], SearchOptions(short_windows=2, long_windows=0, warmup=1,
                                                                      compile_modes=(), combinations=False))
    except RuntimeError as e:  # a torch build without CPU fp8 matmuls
        pytest.skip(f"no CPU float8 matmul here: {e}")
    doc = m.outcomes["float8"].to_json()
    if doc["status"] == "error":
        pytest.skip(f"no CPU float8 matmul here: {doc['reason']}")
    assert doc["status"] == "passed", doc
    assert 0 < doc["gate"]["rel_err"] < 0.125 and doc["speedup"]["value"] > 0
