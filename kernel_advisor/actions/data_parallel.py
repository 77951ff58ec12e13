"""Data-parallel fixes: DDP's bucket size, gradient views and bf16 compression; FSDP2's prefetch
and resharding. Measured on the ranks of a distributed run (kernel_advisor/distributed/measure_worker.py).

Each action wraps a copy of the user's bare model (same weights, its own parameters) the way
the run's wrapper did, with one option changed, so the baseline and every variant live side
by side and are timed interleaved. They apply only where the run's own wrapper is the one
they change (`WRAPPER`), and only inside a process group: a single-process search reports
them as not measurable.
"""
from __future__ import annotations

import copy
from typing import Callable

import torch
import torch.distributed as dist
from torch import nn

from kernel_advisor.actions.base import Action, NotApplicable, NotMeasurable, Variant
from kernel_advisor.collect.loader import LoadedModel

DDP_DEFAULT_BUCKET_MB = 25
BUCKET_CAP_MB = 4 * DDP_DEFAULT_BUCKET_MB  # NB: one documented step up; the measurement says whether it pays
PREFETCH_DEPTH = 2  # blocks all-gathered ahead (FSDP2's implicit prefetch is one)
BF16_UNIT_ROUNDOFF = 2.0 ** -8
# NB: bf16 compression rounds each gradient to bf16 before the all-reduce, the reduction rounds
# its partial sums in bf16 and the result is cast back: a few bf16 roundings of the gradient,
# ~2^-8 each. Four of them bound what the hook legitimately changes; anything larger is a bug.
BF16_COMPRESS_RTOL = 4 * BF16_UNIT_ROUNDOFF


def repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """Items of every nn.ModuleList / nn.Sequential that own parameters: the layers to shard.

    NB: a heuristic for the usual "stack of blocks" model; files with another structure
    define wrap_distributed(model) and shard as they see fit.
    """
    candidates: dict[int, nn.Module] = {}
    for module in model.modules():
        if isinstance(module, (nn.ModuleList, nn.Sequential)):
            candidates.update({id(m): m for m in module if any(True for _ in m.parameters())})
    # Only the outermost blocks: FSDP2 cannot shard a module whose parent it already manages.
    inner = {id(sub) for block in candidates.values() for sub in block.modules() if sub is not block}
    return [block for key, block in candidates.items() if key not in inner]


def _bare_copy(loaded: LoadedModel, mode: str) -> nn.Module:
    if not (dist.is_available() and dist.is_initialized()):
        raise NotMeasurable("a data-parallel option is measured on the ranks of a distributed run: profile with "
                            "--nproc-per-node N, then `advisor recommend --measure` on that run")
    if mode != "train":
        raise NotApplicable("data-parallel options change gradient synchronisation, which inference has none of")
    if not isinstance(loaded.model, nn.Module):
        raise NotApplicable("the model is not an nn.Module")
    return copy.deepcopy(loaded.model)  # same weights, own parameters: the baseline keeps the original


def _ddp(model: nn.Module, device: torch.device, **options) -> nn.Module:
    ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids, **options)


def _ddp_preparer(name: str, applied: str, options: dict, hook: Callable | None = None,
                  tolerance=None) -> Callable[[LoadedModel, str], Variant]:
    def prepare(loaded: LoadedModel, mode: str) -> Variant:
        bare = _bare_copy(loaded, mode)
        wrapped = _ddp(bare, loaded.device, **options)
        if hook is not None:
            _register(wrapped, hook, loaded.device)
        return Variant(name, wrapped, applied, params_of=bare, tolerance=tolerance)

    return prepare


def _register(wrapped: nn.Module, hook: Callable, device: torch.device) -> None:
    try:
        wrapped.register_comm_hook(None, hook)
    except TypeError as e:  # DDP refuses the bf16 hook without NCCL (gloo on CPU)
        raise NotMeasurable(f"the bf16 compression hook needs NCCL on CUDA ({device.type} here): {e}") from None


def _bf16_hook() -> Callable:
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook

    return bf16_compress_hook


def _bf16_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    # atol applies only where the baseline gradient is all zero: there compression changes nothing.
    return BF16_COMPRESS_RTOL, 1e-6 if dtype != torch.bfloat16 else 1e-3


def _prepare_bf16(loaded: LoadedModel, mode: str) -> Variant:
    params = [p for p in loaded.model.parameters() if p.requires_grad] if isinstance(loaded.model, nn.Module) else []
    if params and all(p.dtype == torch.bfloat16 for p in params):
        raise NotApplicable("the gradients are bfloat16 already: compressing them to bf16 moves the same bytes")
    return _ddp_preparer("ddp:bf16_compress", "DDP comm hook default_hooks.bf16_compress_hook", {},
                         _bf16_hook(), _bf16_tolerance)(loaded, mode)


def shard_blocks(model: nn.Module, device_type: str, reshard_after_forward: bool = True) -> list[nn.Module]:
    """FSDP2: each repeated block its own shard group (all-gathered just before use), then the root."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device_type, (dist.get_world_size(),))
    blocks = repeated_blocks(model)
    for block in blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return blocks


def _prepare_prefetch(loaded: LoadedModel, mode: str) -> Variant:
    bare = _bare_copy(loaded, mode)
    blocks = repeated_blocks(bare)
    if len(blocks) < 3:
        raise NotApplicable(f"{len(blocks)} sharded blocks: FSDP2's implicit one-block prefetch already covers them")
    shard_blocks(bare, loaded.device.type)
    for i, block in enumerate(blocks):
        block.set_modules_to_forward_prefetch(blocks[i + 1:i + 1 + PREFETCH_DEPTH])
        block.set_modules_to_backward_prefetch(blocks[max(0, i - PREFETCH_DEPTH):i][::-1])
    return Variant("fsdp:prefetch", bare, f"explicit FSDP2 prefetch of {PREFETCH_DEPTH} blocks ahead "
                                          "(set_modules_to_forward_prefetch / set_modules_to_backward_prefetch)",
                   params_of=bare)


def _prepare_no_reshard(loaded: LoadedModel, mode: str) -> Variant:
    bare = _bare_copy(loaded, mode)
    if not repeated_blocks(bare):
        raise NotApplicable("no repeated blocks to shard")
    shard_blocks(bare, loaded.device.type, reshard_after_forward=False)
    return Variant("fsdp:no_reshard_after_forward", bare, "fully_shard(..., reshard_after_forward=False): "
                   "parameters stay gathered from forward to backward (more memory, no backward all-gather)",
                   params_of=bare)


ACTIONS = (
    Action("ddp:bucket_cap_mb", f"DDP bucket_cap_mb={BUCKET_CAP_MB}", "library",
           _ddp_preparer("ddp:bucket_cap_mb", f"DistributedDataParallel(bucket_cap_mb={BUCKET_CAP_MB})",
                         {"bucket_cap_mb": BUCKET_CAP_MB}), exclusive="ddp", distributed=True),
    Action("ddp:gradient_as_bucket_view", "DDP gradient_as_bucket_view=True", "library",
           _ddp_preparer("ddp:gradient_as_bucket_view", "DistributedDataParallel(gradient_as_bucket_view=True)",
                         {"gradient_as_bucket_view": True}), exclusive="ddp", distributed=True),
    Action("ddp:bf16_compress", "DDP bf16 gradient compression hook", "library", _prepare_bf16,
           exclusive="ddp", distributed=True),
    Action("fsdp:prefetch", "FSDP2 explicit prefetch", "library", _prepare_prefetch, exclusive="fsdp",
           distributed=True),
    Action("fsdp:no_reshard_after_forward", "FSDP2 reshard_after_forward=False", "library", _prepare_no_reshard,
           exclusive="fsdp", distributed=True),
)
# The wrapper each action changes: it applies only to runs that wrapper profiled.
WRAPPER = {a.name: a.name.split(":")[0] for a in ACTIONS}
