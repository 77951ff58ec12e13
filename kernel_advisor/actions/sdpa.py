"""`sdpa`: written-out attention swapped for F.scaled_dot_product_attention, module by module.

The model's forward is captured with torch._dynamo.export (it handles `b, t, d = x.shape`,
which symbolic FX tracing cannot), the attention in the graph is rewritten
(attention_graph.py), and the module's forward is swapped for the rewritten graph while the
variant runs. The root is tried first; a module that cannot be captured (a graph break) is
skipped and its children are tried, with arguments recorded from one real step. A causal
mask built from shapes alone (`ones(t, t).triu(1)`) becomes `is_causal=True`, which lets
SDPA pick FlashAttention.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.fx as fx

from kernel_advisor.actions.attention_graph import Site, combine_masks, find_sites, rewrite
from kernel_advisor.actions.base import Action, NotApplicable, Variant, instance_forwards
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.runner import make_step
from kernel_advisor.collect.user_code import tensor_leaves

MAX_DEPTH = 6  # modules deeper than this are not tried on their own


@dataclass
class Swap:
    module: torch.nn.Module
    graph: fx.GraphModule
    sites: int
    shapes: tuple  # the input shapes it was captured at; other shapes run the original


def prepare_sdpa(loaded: LoadedModel, mode: str) -> Variant:
    if not isinstance(loaded.model, torch.nn.Module):
        raise NotApplicable("the model is a callable, not an nn.Module")
    swaps, misses = _swaps(loaded, mode)
    if not swaps:
        why = misses[0] if misses else "no softmax attention was found in a capturable forward"
        raise NotApplicable(f"no attention could be rewritten: {why}")
    tally = [0, 0]
    patches = [(s.module, _forward(s, tally)) for s in swaps]
    sites = sum(s.sites for s in swaps)
    return Variant("sdpa", loaded.model, f"{sites} attention site(s) in {len(swaps)} module(s) through SDPA",
                   context=lambda: instance_forwards(patches), counters=lambda: (tally[0], tally[1]))


def _swaps(loaded: LoadedModel, mode: str) -> tuple[list[Swap], list[str]]:
    swaps, misses = [], []
    todo = [(loaded.model, tuple(loaded.inputs), {}, 0)]
    while todo:
        module, args, kwargs, depth = todo.pop(0)
        gm = _export(module, args, kwargs, mode == "train")
        if gm is None:
            if depth < MAX_DEPTH:
                todo += [(child, a, k, depth + 1) for child, (a, k) in _child_args(loaded, module, mode).items()]
            continue
        sites, why = find_sites(gm.graph)
        misses += why
        for site in sites:
            rewrite(gm, site, _is_causal(gm, site, args, kwargs))
        if sites:
            gm.graph.lint()
            gm.recompile()
            swaps.append(Swap(module, gm, len(sites), _shapes(args, kwargs)))
    return swaps, misses


def _export(module: torch.nn.Module, args: tuple, kwargs: dict, grad: bool) -> fx.GraphModule | None:
    try:
        with warnings.catch_warnings(), torch.set_grad_enabled(grad):
            warnings.simplefilter("ignore")
            return torch._dynamo.export(module)(*args, **kwargs).graph_module
    except Exception:  # noqa: BLE001 - a forward dynamo cannot capture whole: try its children
        return None
    finally:
        torch._dynamo.reset()


def _child_args(loaded: LoadedModel, module: torch.nn.Module, mode: str) -> dict:
    """The first call's (args, kwargs) of each direct child, from one real step."""
    seen: dict = {}

    def hook(child, args, kwargs):
        seen.setdefault(child, (tuple(args), dict(kwargs)))

    handles = [c.register_forward_pre_hook(hook, with_kwargs=True) for c in module.children()]
    try:
        with torch.no_grad():
            make_step(loaded, "inference")()
    finally:
        for h in handles:
            h.remove()
    return seen


def _shapes(args: tuple, kwargs: dict) -> tuple:
    return tuple((p, tuple(t.shape)) for p, t in tensor_leaves((args, kwargs)))


def _forward(swap: Swap, tally: list[int]):
    original = swap.module.forward

    def forward(*args, **kwargs):
        if _shapes(args, kwargs) != swap.shapes:  # captured at one set of shapes: stay exact elsewhere
            tally[1] += 1
            return original(*args, **kwargs)
        tally[0] += 1
        return swap.graph(*args, **kwargs)

    return forward


def _is_causal(gm: fx.GraphModule, site: Site, args: tuple, kwargs: dict) -> bool:
    """True when every mask is built from shapes alone and together they are the causal one."""
    if not site.masks or any(kind == "add" for kind, _ in site.masks):
        return False
    if not all(_shape_only(m) for _, m in site.masks):
        return False
    values = _node_values(gm, [m for _, m in site.masks], args, kwargs)
    if values is None:
        return False
    keep = combine_masks([(kind, values[m]) for kind, m in site.masks], torch.float32)
    if keep is None or keep.dim() < 2 or keep.shape[-1] != keep.shape[-2]:
        return False
    n = keep.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool, device=keep.device).tril()
    return bool(torch.equal(keep.expand(*keep.shape[:-2], n, n), causal.expand(*keep.shape[:-2], n, n)))


def _shape_only(node: fx.Node) -> bool:
    """No input data flows into `node`: only input shapes, constants and buffers."""
    todo, seen = [node], set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op == "placeholder":
            return False
        if (n.op == "call_method" and n.target == "size") or "sym_size" in str(n.target):
            continue  # reads a shape, not values
        todo += n.all_input_nodes
    return True


def _node_values(gm: fx.GraphModule, nodes: list[fx.Node], args: tuple, kwargs: dict) -> dict | None:
    wanted, found = set(nodes), {}

    class Recorder(fx.Interpreter):
        def run_node(self, n):
            value = super().run_node(n)
            if n in wanted:
                found[n] = value
            return value

    try:
        with torch.no_grad():
            flat = [t for _, t in tensor_leaves((args, kwargs))]
            Recorder(gm).run(*flat)
    except Exception:  # noqa: BLE001 - no values: treat the mask as an ordinary mask
        return None
    return found if len(found) == len(wanted) else None


SDPA = Action("sdpa", "F.scaled_dot_product_attention for written-out attention", "library", prepare_sdpa)


# ------------------------------------------------------------
# `sdpa_cudnn`, `sdpa_flash`: F.scaled_dot_product_attention tries one fused backend first.
#
# Which fused attention kernel is fastest depends on the GPU and the shape (head size, sequence
# length, mask), and PyTorch's default order is one fixed guess. On Hopper, cuDNN's attention
# is a FlashAttention-3-style kernel (warp-specialised, TMA); FlashAttention-2 is the other
# candidate. The variant runs each step under `torch.nn.attention.sdpa_kernel(order,
# set_priority=True)` with the chosen backend first: a call it cannot take (a mask or head size
# it does not support) falls through to the next backend instead of failing, so the variant
# changes only the calls the backend accepts.

MIN_CAPABILITY = (8, 0)  # cuDNN's fused attention and FlashAttention-2: Ampere and newer
BACKENDS = {"sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_flash": "FLASH_ATTENTION"}
_ALL = ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")


def priority(first: str) -> list[str]:
    """The backend order with `first` in front, the rest in PyTorch's fused-first order."""
    return [first, *(b for b in _ALL if b != first)]


def _context(first: str):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    order = [getattr(SDPBackend, b) for b in priority(first)]
    return lambda: sdpa_kernel(order, set_priority=True)


def _preparer(name: str):
    first = BACKENDS[name]

    def prepare_backend(loaded: LoadedModel, mode: str) -> Variant:
        if loaded.device.type != "cuda":
            raise NotApplicable("the fused attention backends run on CUDA devices only; this run is on the CPU")
        if torch.cuda.get_device_capability(loaded.device) < MIN_CAPABILITY:
            raise NotApplicable("the fused attention backends need compute capability 8.0 or newer")
        if first == "CUDNN_ATTENTION" and not torch.backends.cudnn.is_available():
            raise NotApplicable("this PyTorch build has no cuDNN")
        applied = f"sdpa_kernel([{', '.join(priority(first))}], set_priority=True) around the step"
        return Variant(name, loaded.model, applied, context=_context(first))

    return prepare_backend


# effort 0: one context manager around the step, no change to the model's code.
BACKEND_ACTIONS = tuple(Action(name, f"SDPA through {first.split('_')[0].lower()} attention first", "library",
                       _preparer(name), effort=0)
                for name, first in BACKENDS.items())
