"""The gate's reference ladder (trykernel/reference.py): float64, a float64 sample of the batch,
float32, none — chosen from free memory, and stepped down on out-of-memory, never a crash."""
import re
import textwrap

import pytest
import torch

from kernel_advisor.collect.loader import load_model
from kernel_advisor.trykernel import reference
from kernel_advisor.trykernel.candidates import Candidate, CandidateSet, TryOptions, default_tolerance
from kernel_advisor.trykernel.capture import Captured, compare_captures
from kernel_advisor.trykernel.driver import gate_candidates, try_candidates
from kernel_advisor.trykernel.reference import HEADROOM, need_bytes, prepare_reference
from kernel_advisor.trykernel.results import RunEvidence
from kernel_advisor.trykernel.substitute_aten import reference_adapter

MODEL = textwrap.dedent("""
    import torch, torch.nn as nn, torch.nn.functional as F

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.up = nn.Linear(16, 256)
            self.down = nn.Linear(256, 16)

        def forward(self, x):
            if x.dtype == torch.float64 and getattr(self, "no_float64", False):
                raise RuntimeError("this model has no float64 path")
            if x.shape[0] != 8 and getattr(self, "fixed_batch", False):
                raise RuntimeError("this model takes batches of 8")
            return F.softmax(self.down(torch.relu(self.up(x))), dim=-1) * 4.0 + x

    def get_inputs():
        return [torch.randn(8, 16)]

    def loss_fn(out):  # not the plain sum: a softmax's sum has no gradient
        return (out.float() ** 2).sum()
""")
ALL = ("float32", "bfloat16", "float16")


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.py"
    path.write_text(MODEL)
    return path


def free_memory(monkeypatch, nbytes):
    monkeypatch.setattr(reference, "free_memory_bytes", lambda device: nbytes)


def softmax_candidate(cid, scale=1.0, backward=False):
    def softmax(x, dim=-1):
        return (torch.softmax(x.double(), dim) * scale).to(x.dtype)
    adapter = reference_adapter("aten::_softmax", ALL, backward)
    return Candidate(cid, cid, "reference", "python", softmax, (adapter,), (), ALL, backward, default_tolerance)


def gate(path, *cands, dtype="keep", mode="inference"):
    loaded = load_model(path, device="cpu", dtype=dtype)
    sets = [CandidateSet(c.id, (c,)) for c in cands]
    options = TryOptions(mode=mode, draws=2, compile=False, check_only=True)
    report = try_candidates(loaded, sets, options, RunEvidence())
    return report.float64_reference, {v.name: v for v in report.variants}


def test_plenty_of_memory_is_full_float64(tiny, monkeypatch):
    free_memory(monkeypatch, 2**40)
    ref = prepare_reference(load_model(tiny, device="cpu", dtype="bfloat16"), "inference")
    assert ref.reason == "float64"
    why, res = gate(tiny, softmax_candidate("good"), dtype="bfloat16")
    assert why == "" and res["good"].status == "passed" and res["good"].gate.ref_rel_err < 1e-2


def test_float64_on_a_sample_of_the_batch(tiny, monkeypatch):
    loaded = load_model(tiny, device="cpu", dtype="bfloat16")
    free_memory(monkeypatch, int(need_bytes(loaded, "inference", torch.float64, 0.5) / HEADROOM) + 1)
    ref = prepare_reference(loaded, "inference")
    assert re.fullmatch(r"float64 on [1-7] of 8 batch items \(memory\)", ref.reason), ref.reason
    got = ref.capture(loaded, loaded.inputs, "inference")
    assert got.batch_size == 8 and got.leaves[0][1].shape[0] == len(got.batch_index) < 8
    assert got.leaves[0][1].dtype == torch.float64
    why, res = gate(tiny, softmax_candidate("good"), dtype="bfloat16")
    assert why == ref.reason and res["good"].status == "passed"
    assert res["good"].gate.ref_rel_err == res["good"].gate.ref_rel_err  # compared with the sample (not NaN)


def test_float32_reference_when_no_float64_fits(tiny, monkeypatch):
    loaded = load_model(tiny, device="cpu", dtype="bfloat16")
    free_memory(monkeypatch, int(need_bytes(loaded, "inference", torch.float32) / HEADROOM) + 1)
    ref = prepare_reference(loaded, "inference")
    assert ref.reason.startswith("float32 reference (no memory for float64); tolerance")
    why, res = gate(tiny, softmax_candidate("good"), dtype="bfloat16")
    assert why == ref.reason and res["good"].status == "passed"


def test_no_memory_for_any_reference_compares_with_eager_only(tiny, monkeypatch):
    free_memory(monkeypatch, 0)
    loaded = load_model(tiny, device="cpu", dtype="bfloat16")
    ref = prepare_reference(loaded, "inference")
    assert ref.reason.startswith("none: no memory for a reference")
    assert ref.capture(loaded, loaded.inputs, "inference") is None
    why, res = gate(tiny, softmax_candidate("good"), dtype="bfloat16")
    assert why == ref.reason and res["good"].status == "passed"
    assert res["good"].gate.ref_rel_err != res["good"].gate.ref_rel_err  # NaN: no reference


def test_a_float32_model_has_no_float32_rung(tiny, monkeypatch):
    loaded = load_model(tiny, device="cpu")
    free_memory(monkeypatch, int(need_bytes(loaded, "inference", torch.float32) / HEADROOM) + 1)
    assert prepare_reference(loaded, "inference").reason.startswith("none: no memory")


def test_out_of_memory_in_float64_steps_down_and_the_gate_passes(tiny, monkeypatch):
    free_memory(monkeypatch, 2**40)  # the estimate says it fits; the run says otherwise
    real, calls = reference.capture_step, []

    def first_float64_run_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 56.00 GiB")
        return real(*args, **kwargs)

    monkeypatch.setattr(reference, "capture_step", first_float64_run_fails)
    why, res = gate(tiny, softmax_candidate("good"))
    assert re.fullmatch(r"float64 on 7 of 8 batch items \(out of memory\)", why), why
    assert res["good"].status == "passed" and res["good"].gate.draws == 2


def test_out_of_memory_everywhere_ends_in_none_not_a_crash(tiny, monkeypatch):
    free_memory(monkeypatch, 2**40)

    def oom(*args, **kwargs):
        raise torch.OutOfMemoryError("out of memory")

    monkeypatch.setattr(reference, "capture_step", oom)
    monkeypatch.setattr(reference, "_forward_only", oom)
    why, res = gate(tiny, softmax_candidate("good"), dtype="bfloat16")
    assert why == "none: out of memory in float32"  # float64, its samples (halved to 1), float32, its samples
    assert res["good"].status == "passed"


def test_a_model_without_a_float64_path_gets_a_float32_reference(tiny, monkeypatch):
    free_memory(monkeypatch, 2**40)
    loaded = load_model(tiny, device="cpu", dtype="bfloat16")
    loaded.model.no_float64 = True
    ref = prepare_reference(loaded, "inference")
    assert ref.capture(loaded, loaded.inputs, "inference") is not None
    assert ref.reason.startswith("float32 reference (the model does not run in float64: RuntimeError: this model")


def test_a_model_that_takes_one_batch_size_gets_no_sample(tiny, monkeypatch):
    loaded = load_model(tiny, device="cpu", dtype="bfloat16")
    loaded.model.fixed_batch = True
    free_memory(monkeypatch, int(need_bytes(loaded, "inference", torch.float64, 0.5) / HEADROOM) + 1)
    ref = prepare_reference(loaded, "inference")
    assert "batch items" in ref.reason
    assert ref.capture(loaded, loaded.inputs, "inference").batch_index is None
    assert ref.reason.startswith("float32 reference (the model does not run in float64 on 4 of 8 batch items: "
                                 "RuntimeError: this model takes batches of 8)")


def test_sampled_comparison_catches_a_wrong_variant(tiny, monkeypatch):
    loaded = load_model(tiny, device="cpu")
    free_memory(monkeypatch, int(need_bytes(loaded, "inference", torch.float64, 0.5) / HEADROOM) + 1)
    wrong = softmax_candidate("wrong", scale=1.05)
    states, _, why = gate_candidates(loaded, [CandidateSet("wrong", (wrong,))], None,
                              TryOptions(draws=1, compile=False, check_only=True), lambda *a: None)
    assert "batch items" in why
    out = states["wrong"].comparisons[0]  # the model's output, beyond the per-call check
    assert not out.ok and "vs the float64 result exceeds" in out.problem


def test_sampled_reference_in_train_mode_checks_gradients_against_eager(tiny, monkeypatch):
    loaded = load_model(tiny, device="cpu")
    free_memory(monkeypatch, int(need_bytes(loaded, "inference", torch.float64, 0.5) / HEADROOM) + 1)
    why, res = gate(tiny, softmax_candidate("good", backward=True), mode="train")
    assert why.endswith("batch items (memory); gradients against eager only"), why
    assert res["good"].status == "passed" and res["good"].gate.leaves == 5  # the output and 4 gradients


def test_compare_with_a_sampled_reference_slices_the_batch():
    base = torch.randn(8, 4)
    rows = (0, 7)
    ref = Captured((("out", base[list(rows)].double()), ("loss", torch.tensor(1.0, dtype=torch.float64))),
                   batch_index=rows, batch_size=8)
    eager = Captured((("out", base), ("loss", base.sum())))

    def check(got_out):
        return compare_captures(Captured((("out", got_out), ("loss", base.sum()))), eager, ref, default_tolerance)

    out, loss = check(base.clone())
    assert out.ok and out.ref_rel_err < 1e-6
    assert loss.ok and loss.ref_rel_err != loss.ref_rel_err  # no batch dim: held against eager only
    assert not check(base * 1.05)[0].ok
    poisoned = base.clone()
    poisoned[3] = float("nan")  # an item outside the sample
    bad = check(poisoned)[0]
    assert not bad.ok and "NaN" in bad.problem


def test_leaf_errors_are_the_same_a_chunk_at_a_time(monkeypatch):
    from kernel_advisor.trykernel import gate
    torch.manual_seed(0)
    base = torch.randn(5, 9, 11)
    got = base + 1e-3 * torch.randn_like(base)
    base[1, 2, 3] = got[1, 2, 3] = float("nan")  # NaN on both sides: not an error
    whole = gate.compare_leaf("out", got, base, base.double(), (1e-2, 1e-2))
    monkeypatch.setattr(gate, "CHUNK_ELEMENTS", 7)
    chunked = gate.compare_leaf("out", got, base, base.double(), (1e-2, 1e-2))
    assert chunked.ok and chunked.max_abs_err == whole.max_abs_err
    assert chunked.rel_err == pytest.approx(whole.rel_err, rel=1e-12)
    assert gate._is_constant(torch.full((20,), 3.0)) and not gate._is_constant(torch.arange(20.0))
