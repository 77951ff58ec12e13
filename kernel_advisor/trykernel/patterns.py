"""Find composed patterns that no single aten op names: by structure, then by a probe.

- `rmsnorm-module`: a leaf module with one 1-D parameter, an eps attribute and a forward
  whose FX graph takes a mean and an rsqrt (or calls rms_norm); confirmed by a probe
  against x * rsqrt(mean(x²) + eps) * w with a random weight and an input whose mean is
  not zero (so a LayerNorm cannot pass for one). nn.RMSNorm counts too.
- `swiglu-mlp`: a module whose whole forward is down(silu(gate(x)) * up(x)) over three
  nn.Linear children.
- `residual-rmsnorm` / `residual-layernorm`: inside a module's forward, a norm child
  applied to the sum of two tensors (`h = x + attn(...); norm(h)`).

Tracing is one level deep (every child is a leaf), so a forward FX cannot trace simply
matches nothing.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

PATTERN_NAMES = ("rmsnorm-module", "swiglu-mlp", "residual-rmsnorm", "residual-layernorm")
EPS_ATTRIBUTES = ("eps", "variance_epsilon", "epsilon")
# NB: probe tolerance per dtype: one rounding of the output plus one of the weight product.
PROBE_RTOL = {torch.float32: 1e-4, torch.float64: 1e-8, torch.float16: 5e-3, torch.bfloat16: 3e-2}
_RMSNORM_CLASS = getattr(nn, "RMSNorm", None)


@dataclass(frozen=True, eq=False)
class RMSNormMatch:
    path: str
    module: nn.Module
    weight: nn.Parameter
    eps: float | None  # None: torch.finfo(dtype).eps, as nn.RMSNorm
    pattern: str = "rmsnorm-module"


@dataclass(frozen=True, eq=False)
class SwiGLUMatch:
    path: str
    module: nn.Module
    gate: nn.Linear
    up: nn.Linear
    down: nn.Linear
    pattern: str = "swiglu-mlp"


@dataclass(frozen=True, eq=False)
class ResidualNormMatch:
    path: str  # the module whose forward holds the add and the norm call
    module: nn.Module
    add_node: str  # FX node names in the one-level trace of `module`
    norm_node: str
    norm_path: str  # the norm child, relative to `module`
    norm: nn.Module
    weight: torch.Tensor
    bias: torch.Tensor | None
    eps: float | None  # None: torch.finfo(dtype).eps, as nn.RMSNorm
    pattern: str = "residual-rmsnorm"


PatternMatch = RMSNormMatch | SwiGLUMatch | ResidualNormMatch


class _OneLevelTracer(fx.Tracer):
    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return True  # the module being traced is the root; its children stay opaque


def trace_one_level(module: nn.Module) -> fx.Graph | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _OneLevelTracer().trace(module)
    except Exception:  # noqa: BLE001 - untraceable forward: no structural match, by design
        return None


def find_patterns(model: nn.Module) -> list[PatternMatch]:
    """Every match in the model, in module order; norms first so residual matches can use them."""
    norms = [m for p, mod in model.named_modules() if (m := rmsnorm_match(p, mod)) is not None]
    mlps = [m for p, mod in model.named_modules() if (m := swiglu_match(p, mod)) is not None]
    by_id = {id(m.module): m for m in norms}
    residuals = [r for p, mod in model.named_modules() for r in residual_matches(p, mod, by_id)]
    return [*norms, *mlps, *residuals]


def rmsnorm_match(path: str, module: nn.Module) -> RMSNormMatch | None:
    params = list(module.named_parameters(recurse=False))
    if list(module.children()) or len(params) != 1 or params[0][1].dim() != 1:
        return None
    name, weight = params[0]
    if _RMSNORM_CLASS is not None and isinstance(module, _RMSNORM_CLASS):
        return RMSNormMatch(path, module, weight, module.eps) if len(module.normalized_shape) == 1 else None
    eps = next((getattr(module, a) for a in EPS_ATTRIBUTES if isinstance(getattr(module, a, None), float)), None)
    if eps is None or not _computes_rms(module) or not _probe_rmsnorm(module, name, weight, eps):
        return None
    return RMSNormMatch(path, module, weight, eps)


def _computes_rms(module: nn.Module) -> bool:
    graph = trace_one_level(module)
    if graph is None:
        return False
    names = {_node_op_name(n) for n in graph.nodes}
    return "rms_norm" in names or ({"rsqrt", "mean"} <= names)


def _probe_rmsnorm(module: nn.Module, name: str, weight: torch.Tensor, eps: float) -> bool:
    """Run the module on a shifted random input with a random weight; compare with RMSNorm."""
    dim = weight.shape[0]
    gen = torch.Generator(device="cpu").manual_seed(1234)
    x = (torch.randn(4, dim, generator=gen) + 1.5).to(weight.device, weight.dtype)
    w = (torch.rand(dim, generator=gen) + 0.5).to(weight.device, weight.dtype)
    try:
        with torch.no_grad():
            got = torch.func.functional_call(module, {name: w}, (x,))
    except Exception:  # noqa: BLE001 - a forward that needs other arguments is not a norm
        return False
    if not isinstance(got, torch.Tensor) or got.shape != x.shape:
        return False
    x32, w32 = x.double(), w.double()
    want = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps) * w32
    rel = float(torch.linalg.vector_norm(got.double() - want) / torch.linalg.vector_norm(want))
    return rel <= PROBE_RTOL.get(weight.dtype, 1e-4)


def swiglu_match(path: str, module: nn.Module) -> SwiGLUMatch | None:
    children = dict(module.named_children())
    if sum(isinstance(c, nn.Linear) for c in children.values()) < 3:
        return None
    graph = trace_one_level(module)
    if graph is None:
        return None
    found = _swiglu_nodes(graph, children)
    if found is None:
        return None
    gate, up, down = (children[t] for t in found)
    if not (gate.out_features == up.out_features == down.in_features
            and gate.in_features == up.in_features == down.out_features):
        return None
    return SwiGLUMatch(path, module, gate, up, down)


def _swiglu_nodes(graph: fx.Graph, children: dict) -> tuple[str, str, str] | None:
    """(gate, up, down) child names when the forward is exactly down(silu(gate(x)) * up(x))."""
    nodes = list(graph.nodes)
    inputs = [n for n in nodes if n.op == "placeholder"]
    out = nodes[-1].args[0] if nodes and nodes[-1].op == "output" else None
    if len(inputs) != 1 or not _is_linear_call(out, children):
        return None
    mul = out.args[0]
    if not (isinstance(mul, fx.Node) and _node_op_name(mul) == "mul" and len(mul.args) == 2 and not mul.kwargs):
        return None
    for act, lin in (mul.args, mul.args[::-1]):
        silu_in = _silu_input(act, children)
        if _is_linear_call(silu_in, children, inputs[0]) and _is_linear_call(lin, children, inputs[0]):
            expected = 7 + (act.op == "call_module")  # nothing else may happen in forward
            return (silu_in.target, lin.target, out.target) if len(nodes) <= expected else None
    return None


def _is_linear_call(node, children: dict, arg: fx.Node | None = None) -> bool:
    if not (isinstance(node, fx.Node) and node.op == "call_module"):
        return False
    ok = isinstance(children.get(node.target), nn.Linear) and len(node.args) == 1 and not node.kwargs
    return ok and (arg is None or node.args[0] is arg)


def _silu_input(node, children: dict):
    if not isinstance(node, fx.Node) or len(node.args) != 1:
        return None
    if node.op == "call_function" and node.target is F.silu and not node.kwargs.get("inplace", False):
        return node.args[0]
    if node.op == "call_module" and isinstance(children.get(node.target), nn.SiLU):
        return node.args[0]
    return None


def residual_matches(path: str, module: nn.Module, norms: dict[int, RMSNormMatch]) -> list[ResidualNormMatch]:
    children = dict(module.named_modules())
    if len(children) <= 1:
        return []
    graph = trace_one_level(module)
    if graph is None:
        return []
    found = []
    for node in graph.nodes:
        if node.op != "call_module" or len(node.args) != 1 or node.kwargs or not _is_tensor_add(node.args[0]):
            continue
        norm = children.get(node.target)
        rms = norms.get(id(norm))
        if rms is not None:
            found.append(ResidualNormMatch(path, module, node.args[0].name, node.name, node.target, norm,
                                           rms.weight, None, rms.eps, pattern="residual-rmsnorm"))
        elif isinstance(norm, nn.LayerNorm) and len(norm.normalized_shape) == 1 and norm.elementwise_affine:
            found.append(ResidualNormMatch(path, module, node.args[0].name, node.name, node.target, norm,
                                           norm.weight, norm.bias, norm.eps, pattern="residual-layernorm"))
    return found


def _is_tensor_add(node) -> bool:
    return (isinstance(node, fx.Node) and _node_op_name(node) == "add" and len(node.args) == 2
            and all(isinstance(a, fx.Node) for a in node.args) and not node.kwargs)


def _node_op_name(node: fx.Node) -> str:
    if node.op == "call_method":
        return str(node.target)
    if node.op == "call_function":
        return getattr(node.target, "__name__", str(node.target)).lstrip("_")
    return ""


__all__ = ["PATTERN_NAMES", "PatternMatch", "RMSNormMatch", "ResidualNormMatch", "SwiGLUMatch",
           "find_patterns", "trace_one_level"]
