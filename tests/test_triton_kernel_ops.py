"""The Triton kernels as torch.library operators: no graph breaks, compiled = eager, opcheck.

On CPU the kernels run in Triton's interpreter and the operators are opaque custom ops; on a
GPU they are triton_ops (reference_kernels/triton/_ops.py), and the same tests run there.
"""
import os

import pytest
import torch

from reference_kernels.registry import all_kernels
from reference_kernels.triton import _ops
from reference_kernels.triton.cases import FAMILIES, family_name

pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")]
DEV = "cuda" if torch.cuda.is_available() else "cpu"
TRITON_SPECS = [s for s in all_kernels() if s.capability.backend == "triton"]
_ops.register_all()
# Odd shapes: a row of 781 (not a power of two, several short rows per program) and a vocab of
# 20011 (the cross-entropy's chunked path on CPU); (M, K, N) for the matmul.
ODD_ROWS, ODD_FLAT, ODD_CE, ODD_MM = (5, 781), (3, 5, 127), (3, 20011), (67, 33, 45)


def _shape(family: str):
    if family == "matmul":
        return ODD_MM
    if family == "cross_entropy":
        return ODD_CE
    return ODD_FLAT if family in ("gelu", "silu", "swiglu") else ODD_ROWS


def _call(spec, variant: str, dtype: torch.dtype, seed: int = 0):
    """(function of the tensor args, tensor args, which args take gradients) from cases.py."""
    family = FAMILIES[family_name(spec.id)]
    call = family.make(_shape(family_name(spec.id)), dtype, variant,
                       torch.Generator().manual_seed(seed))
    fn = spec.load()
    tensors = [i for i, a in enumerate(call.args) if isinstance(a, torch.Tensor)]

    def f(*ts):
        args = list(call.args)
        for i, t in zip(tensors, ts):
            args[i] = t
        return fn(*args, **call.kwargs)

    args = [call.args[i].to(DEV) for i in tensors]
    grads = tuple(tensors.index(i) for i in call.grad_positions)
    return f, args, grads


def _dtype(spec) -> torch.dtype:
    return torch.float16 if "float32" not in spec.dtypes else torch.float32


def _cases():
    return [pytest.param(s, v, id=f"{s.id}-{v}" if v else s.id)
            for s in TRITON_SPECS for v in FAMILIES[family_name(s.id)].variants]


def test_every_triton_kernel_is_covered():
    assert len(TRITON_SPECS) == 11
    assert {family_name(s.id) for s in TRITON_SPECS} <= set(FAMILIES)


@pytest.mark.parametrize("spec, variant", _cases())
def test_dynamo_traces_the_kernel_without_graph_breaks(spec, variant):
    f, args, _ = _call(spec, variant, _dtype(spec))
    torch._dynamo.reset()
    explained = torch._dynamo.explain(f)(*args)
    assert explained.graph_break_count == 0, [str(r.reason) for r in explained.break_reasons]
    assert explained.graph_count == 1
    # the kernel is a node of the graph (an advisor_kernels operator), not run while tracing
    targets = [n.target for g in explained.graphs for n in g.graph.nodes if n.op == "call_function"]
    ops = [t for t in targets if isinstance(t, torch._ops.OpOverload)
           and t.namespace == _ops.NAMESPACE]
    assert [op.name() for op in ops] == [f"{_ops.NAMESPACE}::{family_name(spec.id)}"]


def _leaves(out):
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("spec, variant", _cases())
def test_compiled_function_matches_eager_with_gradients(spec, variant, dtype):
    if family_name(spec.id) == "matmul":
        dtype = torch.float16 if dtype == torch.float32 else dtype
    f, args, grads = _call(spec, variant, dtype, seed=3)
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)  # fullgraph: a break raises
    runs = []
    for fn in (f, compiled):
        leaves = [a.detach().clone().requires_grad_(i in grads) for i, a in enumerate(args)]
        outs = _leaves(fn(*leaves))
        g = torch.Generator().manual_seed(7)
        ups = [torch.randn(o.shape, generator=g, dtype=torch.float64).to(DEV, o.dtype)
               for o in outs]
        ins = [leaves[i] for i in grads]
        runs.append((outs, torch.autograd.grad(outs, ins, ups) if ins else ()))
    (eager_outs, eager_grads), (comp_outs, comp_grads) = runs
    # the same kernels on the same inputs: bitwise equal, forward and backward
    assert len(eager_outs) == len(comp_outs) and len(eager_grads) == len(grads)
    for a, b in zip(eager_outs + eager_grads, comp_outs + comp_grads):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b), float((a.double() - b.double()).abs().max())


def test_compiled_module_with_kernels_and_torch_ops_trains_like_eager():
    # the kernels between torch ops, under Inductor (on CPU the kernels stay opaque calls)
    from reference_kernels.triton.cross_entropy import cross_entropy
    from reference_kernels.triton.rms_norm import add_rms_norm
    from reference_kernels.triton.swiglu import swiglu

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.Linear(33, 2 * 47)
            self.down = torch.nn.Linear(47, 33)
            self.norm = torch.nn.Parameter(torch.rand(33) + 0.5)
            self.head = torch.nn.Linear(33, 19)

        def forward(self, x, target):
            a, b = self.up(x).chunk(2, dim=-1)
            h, residual = add_rms_norm(self.down(swiglu(a.contiguous(), b.contiguous())), x,
                                       (33,), self.norm, 1e-6)
            return cross_entropy(self.head(h + residual).view(-1, 19), target.view(-1))

    torch.manual_seed(0)
    model = Block().to(DEV)
    x, target = torch.randn(3, 7, 33, device=DEV), torch.randint(0, 19, (3, 7), device=DEV)
    target[0, 1] = -100
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    losses, grads = [], []
    for m in (model, compiled):
        model.zero_grad()
        loss = m(x, target)
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in model.parameters()])
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def _r(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(DEV, dtype)


def _stats():
    return torch.ops.advisor_kernels.layer_norm(_r(5, 127), [127], _r(127, seed=1), None, 1e-5)


_TARGET = [1, -100, 300, 0, 7, 2]
OPCHECK = {  # operator -> its arguments, made when the test runs
    "softmax": lambda: (_r(5, 127),),
    "log_softmax": lambda: (_r(5, 127),),
    "softmax_backward": lambda: (torch.softmax(_r(5, 127), -1), _r(5, 127, seed=1), False),
    "layer_norm": lambda: (_r(5, 127), [127], _r(127, seed=1), _r(127, seed=2), 1e-5),
    "layer_norm-bias-only": lambda: (_r(5, 127), [127], None, _r(127, seed=2), 1e-5),
    "rms_norm": lambda: (_r(5, 127), [127], _r(127, seed=1), 1e-6),
    "rms_norm-two-dims": lambda: (_r(3, 4, 7), [4, 7], None, 1e-6),
    "add_layer_norm": lambda: (_r(5, 127), _r(5, 127, seed=3), [127], _r(127, seed=1),
                               _r(127, seed=2), 1e-5),
    "add_rms_norm": lambda: (_r(5, 127), _r(5, 127, seed=3), [127], _r(127, seed=1), 1e-6),
    "norm_backward": lambda: (_r(5, 127), _r(127, seed=1), *_stats()[1:], _r(5, 127, seed=4),
                              None, 127, True, False),
    "norm_backward-rms-fused": lambda: (_r(5, 127), None, None, _stats()[2], _r(5, 127, seed=4),
                                        _r(5, 127, seed=5), 127, False, False),
    "gelu": lambda: (_r(5, 127), "none"),
    "gelu-tanh": lambda: (_r(5, 127), "tanh"),
    "gelu_backward": lambda: (_r(5, 127), _r(5, 127, seed=1), "tanh"),
    "silu": lambda: (_r(5, 127),),
    "silu_backward": lambda: (_r(5, 127), _r(5, 127, seed=1)),
    "swiglu": lambda: (_r(5, 127), _r(5, 127, seed=1)),
    "swiglu_backward": lambda: (_r(5, 127), _r(5, 127, seed=1), _r(5, 127, seed=2)),
    "cross_entropy": lambda: (_r(6, 301), torch.tensor(_TARGET, device=DEV), -100, "mean"),
    "cross_entropy-none": lambda: (_r(6, 301), torch.tensor(_TARGET, device=DEV), -100, "none"),
    "cross_entropy_backward": lambda: (_r(6, 301), torch.tensor(_TARGET, device=DEV),
                                       torch.logsumexp(_r(6, 301), -1), _r(6), -100),
    "matmul": lambda: (_r(7, 33, dtype=torch.float16), _r(45, 33, dtype=torch.float16).t()),
}
DIFFERENTIABLE = ("softmax", "log_softmax", "layer_norm", "rms_norm", "add_layer_norm",
                  "add_rms_norm", "gelu", "silu", "swiglu", "cross_entropy")


@pytest.mark.parametrize("case", sorted(OPCHECK))
def test_opcheck(case):
    """torch.library.opcheck: schema, fake implementation (shapes, dtypes, strides) against the
    real one, autograd registration, and AOTAutograd with dynamic shapes."""
    name = case.split("-")[0]
    op = getattr(torch.ops.advisor_kernels, name).default
    args = tuple(a.detach().requires_grad_(name in DIFFERENTIABLE and a.is_floating_point()
                                           and a.dim() > 0)
                 if isinstance(a, torch.Tensor) else a for a in OPCHECK[case]())
    torch.library.opcheck(op, args)


def _kernel_ops() -> list:
    import importlib

    mods = [importlib.import_module(f"reference_kernels.triton.{m}") for m in _ops.KERNEL_MODULES]
    return [v for m in mods for v in vars(m).values() if isinstance(v, _ops.KernelOp)]


@pytest.mark.parametrize("spec, variant", _cases())
def test_eager_calls_skip_the_operator(spec, variant, monkeypatch):
    """In eager the launchers run directly (a torch.library call costs ~100 µs of host time);
    the gradient still flows, through a plain autograd.Function."""
    def refuse(*_args):
        raise AssertionError("an eager call went through the torch.library operator")

    for kop in _kernel_ops():
        monkeypatch.setattr(kop, "op", refuse)
    f, args, grads = _call(spec, variant, _dtype(spec))
    leaves = [a.detach().requires_grad_(i in grads) for i, a in enumerate(args)]
    out = f(*leaves)
    outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o.is_floating_point()]
    if grads:
        total = sum(o.float().sum() for o in outs)
        found = torch.autograd.grad(total, [leaves[i] for i in grads])
        assert all(g is not None and g.shape == leaves[i].shape for g, i in zip(found, grads))
    with torch.no_grad():
        f(*args)


def test_traced_calls_use_the_operator():
    from torch.fx.experimental.proxy_tensor import make_fx

    from reference_kernels.triton.silu import silu

    # make_fx traces under a dispatch mode: the operator appears as one node, not its launches
    gm = make_fx(lambda x: silu(x))(torch.randn(3, 5, device=DEV))
    seen = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert any("advisor_kernels.silu" in t for t in seen), seen


def test_launch_settings_are_computed_once_per_shape():
    from reference_kernels.triton import norm
    from reference_kernels.triton.rms_norm import rms_norm

    norm.fwd_config.cache_clear()
    norm._bwd_launch.cache_clear()
    x = torch.randn(9, 301, device=DEV, requires_grad=True)
    for _ in range(3):
        rms_norm(x, (301,), eps=1e-6).sum().backward()
    assert norm.fwd_config.cache_info().misses == 1 and norm.fwd_config.cache_info().hits == 2
    assert norm._bwd_launch.cache_info().misses == 1 and norm._bwd_launch.cache_info().hits == 2
    rms_norm(x[:4], (301,), eps=1e-6)  # another shape: one more entry
    assert norm.fwd_config.cache_info().misses == 2


def test_operators_live_in_one_namespace():
    names = {n for n in dir(torch.ops.advisor_kernels) if not n.startswith("_")}
    forward = {family_name(s.id) for s in TRITON_SPECS}
    backward = {"softmax_backward", "norm_backward", "gelu_backward", "silu_backward",
                "swiglu_backward", "cross_entropy_backward"}
    assert forward | backward <= names
    assert _ops.USE_TRITON_OP == (DEV == "cuda" and os.environ.get("ADVISOR_TRITON_OP", "1") != "0")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.skipif(not _ops.USE_TRITON_OP, reason="ADVISOR_TRITON_OP=0: opaque custom ops")
def test_inductor_calls_the_triton_op_kernels_directly():
    # triton_op: AOTAutograd decomposes the operator into its wrap_triton launches, so the
    # Inductor graph holds the kernels, not a call back into the Python launcher
    from torch._inductor.utils import run_and_get_code

    from reference_kernels.triton.rms_norm import rms_norm

    x = torch.randn(257, 781, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(781, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.reset()
    f = torch.compile(lambda x, w: rms_norm(x, (781,), w, 1e-6) * 2, fullgraph=True)
    out, code = run_and_get_code(f, x, w)
    assert "_norm_fwd" in "\n".join(code) and "advisor_kernels.rms_norm" not in "\n".join(code)
    torch.testing.assert_close(out, rms_norm(x, (781,), w, 1e-6) * 2, rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("spec, variant", _cases())
def test_inductor_with_dynamic_shapes_matches_eager_gpu(spec, variant):
    f, args, grads = _call(spec, variant, torch.bfloat16 if spec.id != "triton.matmul"
                           else torch.float16, seed=5)
    torch._dynamo.reset()
    compiled = torch.compile(f, dynamic=True, fullgraph=True)
    for a, b in zip(_leaves(f(*args)), _leaves(compiled(*args))):
        torch.testing.assert_close(b, a, rtol=0, atol=0)
