"""try-kernel's "torch.compile + <kernel>" variants on CPU: graph breaks, call sites, gate, timing.

The kernels run in Triton's CPU interpreter here (conftest sets TRITON_INTERPRET=1 without
CUDA), under Inductor, as opaque torch.library operators.
"""
import textwrap
from pathlib import Path

import pytest
import torch

from kernel_advisor.collect.loader import load_model
from kernel_advisor.trykernel import compiled as kernel_compiled
from kernel_advisor.trykernel.candidates import Candidate, CandidateSet, TryOptions, default_tolerance
from kernel_advisor.trykernel.driver import try_candidates
from kernel_advisor.trykernel.timing import INTERPRETED, VS_COMPILE
from kernel_advisor.trykernel.patterns import find_patterns
from kernel_advisor.trykernel.results import RunEvidence
from kernel_advisor.trykernel.results import build_sets, load_candidates
from kernel_advisor.trykernel.substitute_aten import reference_adapter
from reference_kernels.registry import all_kernels, get_kernel

pytestmark = [
    pytest.mark.skipif(torch.cuda.is_available(), reason="CPU test: the kernels run in Triton's interpreter"),
    pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
]

MODEL = textwrap.dedent("""
    import torch, torch.nn as nn, torch.nn.functional as F

    class Norm(nn.Module):  # an RMSNorm written out: the rmsnorm-module pattern
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
            self.fc = nn.Linear(33, 33)
            self.norm = Norm(33)
            self.act = nn.GELU(approximate="tanh")

        def forward(self, x):
            h = self.act(self.fc(x))
            BREAK
            return self.norm(h.softmax(dim=-1) * 8.0 + F.softmax(h, -1) + x)

    def get_inputs():
        return [torch.randn(3, 7, 33)]
""")
OPTIONS = TryOptions(draws=1, reps=3, warmup=1, profile_steps=1)
KERNELS = ("triton.softmax", "triton.gelu", "triton.rms_norm")


def _model(tmp_path, graph_break: bool = False):
    path = tmp_path / "tiny.py"
    path.write_text(MODEL.replace("BREAK", "torch._dynamo.graph_break()" if graph_break else "pass"))
    return load_model(path, device="cpu")


def _run(loaded, kernel_ids=KERNELS, together=False, **kw):
    cands = load_candidates([get_kernel(k) for k in kernel_ids], find_patterns(loaded.model))
    sets, _ = build_sets(cands, together)
    options = TryOptions(**{**OPTIONS.__dict__, **kw})
    report = try_candidates(loaded, sets, options, RunEvidence())
    return report, {v.name: v for v in report.variants}


def test_kernels_compile_without_graph_breaks(tmp_path):
    report, res = _run(_model(tmp_path))
    plain = res["torch.compile"]
    assert plain.status == "passed" and plain.graph_breaks == 0 and plain.break_reasons == ()
    # per forward: softmax twice (Tensor.softmax and F.softmax), gelu (nn.GELU) once, the norm once
    sites = {"triton.softmax": 2, "triton.gelu": 1, "triton.rms_norm": 1}
    for kid, n in sites.items():
        v = res[f"torch.compile + {kid}"]
        assert v.kind == "compile+kernel" and v.kernel_ids == (kid,)
        assert v.status == "passed", v.reason
        assert v.graph_breaks == 0 and v.calls == n and v.member_calls == ((kid, n),)
        assert v.gate.draws == 1 and v.gate.leaves == 1 and v.compile_s > 0
        # interpreted on CPU: gated, never timed, and it says why
        assert v.timing_label == f"not timed: {INTERPRETED}" and v.step_s is None
        assert v.speedup is None and v.speedup_vs_compile is None
        assert f"{v.name}: 0 graph break(s) (torch.compile alone: 0); the kernel is called at {n} site(s) " \
            "of the compiled graphs" in report.notes


def test_graph_breaks_of_the_model_itself_are_counted_for_both(tmp_path):
    report, res = _run(_model(tmp_path, graph_break=True), ("triton.softmax",))
    plain, with_kernel = res["torch.compile"], res["torch.compile + triton.softmax"]
    assert plain.graph_breaks == 1 and with_kernel.graph_breaks == 1
    assert with_kernel.break_reasons == plain.break_reasons and "graph_break" in plain.break_reasons[0]
    # the two softmax calls sit in the graph after the break: still counted
    assert with_kernel.status == "passed" and with_kernel.calls == 2


def test_train_mode_gates_the_compiled_kernel_backward(tmp_path):
    _, res = _run(_model(tmp_path), ("triton.rms_norm", "triton.softmax"), together=True, mode="train")
    v = res["torch.compile + all together"]
    assert v.status == "passed", v.reason
    assert v.member_calls == (("triton.rms_norm", 1), ("triton.softmax", 2))
    assert v.gate.leaves == 1 + 3  # the output, then the gradients of fc.weight, fc.bias, norm.weight


def test_kernel_that_takes_no_call_is_not_applied(tmp_path):
    path = tmp_path / "dim0.py"
    path.write_text(textwrap.dedent("""
        import torch, torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return torch.softmax(x, 0) * 2  # over dim 0: the kernel normalises the last dim

        def get_inputs():
            return [torch.randn(5, 9)]
    """))
    _, res = _run(load_model(path, device="cpu"), ("triton.softmax",))
    v = res["torch.compile + triton.softmax"]
    assert v.status == "not applied" and v.calls == 0 and v.graph_breaks == 0
    assert "hold no call of triton.softmax" in v.reason


def _python_softmax(x, dim=-1):
    return torch.softmax(x.double(), dim).to(x.dtype)


def test_only_bundled_kernels_get_a_compiled_variant(tmp_path):
    dtypes = ("float32",)
    user = Candidate("mine.py:softmax", "user", "user", "python", _python_softmax,
                     (reference_adapter("aten::_softmax", dtypes, False),), (), dtypes, False, default_tolerance)
    report = try_candidates(_model(tmp_path), [CandidateSet(user.id, (user,))], OPTIONS, RunEvidence())
    assert [v.name for v in report.variants] == ["eager", "torch.compile", "mine.py:softmax"]
    assert any(n.startswith("torch.compile + mine.py:softmax left out: mine.py:softmax is not a bundled "
                            "kernel") for n in report.notes)


def test_each_bundled_kernel_names_the_operator_its_compiled_graph_holds():
    from kernel_advisor.trykernel.compiled import op_name

    assert op_name("triton.rms_norm") == "advisor_kernels::rms_norm"
    assert op_name("cuda.rms_norm") == "advisor_cuda::rms_norm"
    assert op_name("cuda.log_softmax") == "advisor_cuda::softmax"
    assert op_name("cuda.silu") == "advisor_cuda::act" and op_name("cuda.bias_gelu") == "advisor_cuda::bias_act"
    # every CUDA kernel's operator is one library.cpp defines
    library = (Path(__file__).resolve().parents[1] / "reference_kernels" / "cuda" / "library.cpp").read_text()
    for spec in all_kernels():
        if spec.id.startswith("cuda."):
            assert f'm.def("{op_name(spec.id).split("::")[1]}(' in library, spec.id


def test_timed_against_torch_compile_where_the_kernel_can_be_timed(tmp_path, monkeypatch):
    # on a GPU the variant is timed with the others; here the interpreter is timed instead
    monkeypatch.setattr(CandidateSet, "interpreted_on_cpu", property(lambda self: False))
    report, res = _run(_model(tmp_path), ("triton.gelu",), reps=3)
    v = res["torch.compile + triton.gelu"]
    assert v.timing_label .startswith("back-to-back") and v.step_s is not None and v.speedup is not None
    e = v.speedup_vs_compile
    assert e is not None and 0 < e.low <= e.value <= e.high
    assert v.verdict_vs_compile in VS_COMPILE
    assert any(n.startswith(f"{v.name}: {e.value:.2f}× [") and "against torch.compile alone" in n
               for n in report.notes)


RESIDUAL = textwrap.dedent("""
    import torch, torch.nn as nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(33, 33)
            self.norm = nn.LayerNorm(33)

        def forward(self, x):
            return self.norm(self.fc(x) + x) * 2  # the residual-layernorm pattern

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.b1, self.b2 = Block(), Block()

        def forward(self, x):
            return self.b2(self.b1(x))

    def get_inputs():
        return [torch.randn(3, 7, 33)]
""")


def test_residual_rewrite_compiles_once_and_without_breaks(tmp_path):
    # Dynamo guards on the code of the rewritten forwards (a new fx.GraphModule each time the
    # set were installed afresh): the installer builds them once, so steps never recompile
    path = tmp_path / "residual.py"
    path.write_text(RESIDUAL)
    loaded = load_model(path, device="cpu")
    cands = load_candidates([get_kernel("triton.add_layer_norm")], find_patterns(loaded.model))
    activate = kernel_compiled.installer(cands)
    seen = []
    for _ in range(2):
        with activate():
            seen.append(loaded.model.b1.__dict__["forward"])
    assert seen[0] is seen[1] and "forward" not in loaded.model.b1.__dict__
    x = loaded.inputs[0]
    summary = kernel_compiled.explain_graphs(loaded, [x], "inference", activate)
    assert summary.breaks == 0 and summary.op_sites == (("advisor_kernels::add_layer_norm", 2),)
    compiled = torch.compile(loaded.model)
    with torch._dynamo.config.patch(error_on_recompile=True), torch.no_grad():
        for _ in range(3):
            with activate():
                out = compiled(x)
    with torch.no_grad():
        torch.testing.assert_close(out, loaded.model(x), rtol=1e-5, atol=1e-5)
