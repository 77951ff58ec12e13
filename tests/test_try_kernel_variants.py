"""try_candidates end to end on a small model: FAILED, not applied, passed, train-mode gradients."""
import textwrap

import pytest
import torch
import torch.nn.functional as F

from kernel_advisor.collect.loader import load_model
from kernel_advisor.trykernel.candidates import Candidate, CandidateSet, TryOptions, default_tolerance
from kernel_advisor.trykernel.driver import try_candidates
from kernel_advisor.trykernel.patterns import find_patterns
from kernel_advisor.trykernel.results import RunEvidence
from kernel_advisor.trykernel.substitute_aten import reference_adapter

MODEL = textwrap.dedent("""
    import torch, torch.nn as nn, torch.nn.functional as F

    class Norm(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.eps = 1e-6
            self.weight = nn.Parameter(torch.rand(d) + 0.5)

        def forward(self, x):
            v = x.float().pow(2).mean(-1, keepdim=True)
            return self.weight * (x.float() * torch.rsqrt(v + self.eps)).to(x.dtype)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(32, 32)
            self.norm = Norm(32)

        def forward(self, x):
            h = self.fc(x)
            return self.norm(F.softmax(h, dim=-1) * 8.0 + F.layer_norm(h, (32,)))

    def get_inputs():
        return [torch.randn(3, 7, 32)]
""")
ALL = ("float32", "float16", "bfloat16")


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.py"
    path.write_text(MODEL)
    return path


def aten_candidate(cid, fn, aten, has_backward=False):
    return Candidate(cid, cid, "reference", "python", fn, (reference_adapter(aten, ALL, has_backward),), (), ALL,
                     has_backward, default_tolerance)


def good_softmax(x, dim=-1):
    return torch.softmax(x.double(), dim).to(x.dtype)


def wrong_softmax(x, dim=-1):
    return torch.softmax(x, dim) * 1.05


def empty_softmax(x, dim=-1):
    return torch.empty_like(x)  # "writes nothing"


OPTIONS = TryOptions(draws=2, reps=3, warmup=1, profile_steps=1, compile=False)


def run(path, cands, mode="inference", **kw):
    loaded = load_model(path, device="cpu")
    sets = [CandidateSet(c.id, (c,)) for c in cands]
    options = TryOptions(**{**OPTIONS.__dict__, "mode": mode, **kw})
    return {v.name: v for v in try_candidates(loaded, sets, options, RunEvidence()).variants}


def test_correct_wrong_empty_and_absent_candidates(tiny):
    res = run(tiny, [aten_candidate("good", good_softmax, "aten::_softmax"),
                     aten_candidate("wrong", wrong_softmax, "aten::_softmax"),
                     aten_candidate("empty", empty_softmax, "aten::_softmax"),
                     aten_candidate("gelu", F.gelu, "aten::gelu")])
    good, wrong, empty, gelu = res["good"], res["wrong"], res["empty"], res["gelu"]
    assert good.status == "passed" and good.calls == 2  # one softmax per step, two draws
    assert good.timing_label .startswith("back-to-back") and good.step_s is not None and good.speedup is not None
    assert good.op is not None and good.op.baseline_s > 0 and good.op.variant_s > 0
    assert wrong.status == "FAILED" and "relative error 0.05 exceeds 1e-05" in wrong.reason
    assert wrong.step_s is None and wrong.speedup is None and wrong.verdict == ""  # never listed as faster
    # whatever the unwritten memory holds (NaN poison, zero pages, stale bytes), it is not the softmax
    assert empty.status == "FAILED" and any(w in empty.reason for w in ("NaN", "constant", "relative error"))
    assert gelu.status == "not applied" and gelu.reason == "the model never called aten::gelu"
    assert gelu.step_s is None
    assert res["eager"].status == "baseline" and res["eager"].step_s is not None


def test_every_call_falling_back_is_not_applied(tiny):
    only_fp16 = Candidate("fp16", "fp16", "reference", "python", good_softmax,
                          (reference_adapter("aten::_softmax", ("float16",), False),), (), ("float16",), False,
                          default_tolerance)
    res = run(tiny, [only_fp16])["fp16"]
    assert res.status == "not applied"
    assert res.reason == ("every call fell back to PyTorch: dtype float32 is not supported "
                          "(kernel takes float16) (×2)")


def test_check_only_gates_without_timing(tiny):
    res = run(tiny, [aten_candidate("good", good_softmax, "aten::_softmax")], check_only=True)
    assert res["good"].status == "passed" and res["good"].step_s is None
    assert res["good"].timing_label == "not timed: --check-only"
    assert res["good"].gate.draws == 2 and res["good"].gate.ref_rel_err < 1e-6


def _plain_layer_norm(x, eps):
    # native_layer_norm, not F.layer_norm: the backward below runs while aten::layer_norm is overridden
    return torch.ops.aten.native_layer_norm(x, [x.shape[-1]], None, None, eps)[0]


class _DoubledGradLayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, eps):
        ctx.save_for_backward(x)
        ctx.eps = eps
        return _plain_layer_norm(x, eps)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            xd = x.detach().requires_grad_()
            y = _plain_layer_norm(xd, ctx.eps)
        return 2.0 * torch.autograd.grad(y, xd, dy)[0], None  # twice the true gradient


def doubled_grad_layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    return _DoubledGradLayerNorm.apply(x, eps)


def test_train_mode_compares_gradients(tiny):
    cand = aten_candidate("ln", doubled_grad_layer_norm, "aten::layer_norm", has_backward=True)
    res = run(tiny, [cand], mode="train", check_only=True)["ln"]
    # the forward is right (the per-call check passes); the input gradient feeding fc is not
    assert res.status == "FAILED" and res.reason.startswith("grad[")
    assert res.calls == 2


def test_module_pattern_candidate_on_the_model(tiny):
    loaded = load_model(tiny, device="cpu")
    matches = find_patterns(loaded.model)
    assert [m.pattern for m in matches] == ["rmsnorm-module", "residual-rmsnorm"]  # softmax*8 + ln feeds norm
    matches = matches[:1]

    def rms(x, shape, weight, eps):
        return (x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + eps) * weight.double()).to(x.dtype)

    cand = Candidate("rms", "rms", "reference", "python", rms, (), tuple(matches), ALL, False, default_tolerance)
    report = try_candidates(loaded, [CandidateSet("rms", (cand,))], OPTIONS, RunEvidence())
    res = {v.name: v for v in report.variants}["rms"]
    assert res.status == "passed" and res.calls == 2
    assert res.op.names == ("try_kernel::rmsnorm-module",) and res.op.baseline_s > 0
    assert res.prediction is not None and "share measured here" in res.prediction.source


def test_the_model_gives_baseline_results_after_the_run(tiny):
    loaded = load_model(tiny, device="cpu")
    x = loaded.make_inputs(7)
    with torch.no_grad():
        before = loaded.model(*x)
    try_candidates(loaded, [CandidateSet("wrong", (aten_candidate("wrong", wrong_softmax, "aten::_softmax"),))],
                   OPTIONS, RunEvidence())
    with torch.no_grad():
        assert torch.equal(loaded.model(*x), before)  # no override, no swap left behind


def test_all_together_runs_every_member_and_leaves_out_clashes(tiny):
    from kernel_advisor.trykernel.results import build_sets

    loaded = load_model(tiny, device="cpu")
    ln = aten_candidate("ln", doubled_grad_layer_norm, "aten::layer_norm", has_backward=True)
    cands = [aten_candidate("good", good_softmax, "aten::_softmax"), ln,
             aten_candidate("good2", good_softmax, "aten::_softmax")]
    sets, notes = build_sets(cands, together=True)
    assert [s.name for s in sets] == ["good", "ln", "good2", "all together"]
    assert notes == ["good2 left out of the combined run: it replaces what an earlier kernel replaces"]
    report = try_candidates(loaded, sets, TryOptions(**{**OPTIONS.__dict__, "check_only": True}), RunEvidence())
    together = {v.name: v for v in report.variants}["all together"]
    assert together.status == "passed" and together.member_calls == (("good", 2), ("ln", 2))
