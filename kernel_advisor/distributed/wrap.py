"""Wrap the user's model for data-parallel training: their own wrapping, DDP, or FSDP2.

A model file may define `wrap_distributed(model) -> model` (called on every rank after
the process group exists and the model is on the rank's device); it wins over DDP/FSDP
and runs in both modes. Otherwise train mode wraps in DistributedDataParallel, or with
--fsdp shards with FSDP2 `fully_shard`; inference runs the bare model on every rank.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from kernel_advisor.actions.data_parallel import repeated_blocks, shard_blocks
from kernel_advisor.collect.loader import LoadedModel, out_of_memory_error, user_code_error
from kernel_advisor.errors import UserInputError

USER_HOOK = "wrap_distributed"


def wrap_model(loaded: LoadedModel, mode: str, fsdp: bool) -> tuple[Any, str]:
    """(model to run, how it was wrapped: "user", "ddp", "fsdp" or "none")."""
    hook = getattr(loaded.module, USER_HOOK, None)
    if hook is not None:
        return _user_wrapped(loaded, hook), "user"
    if mode != "train":
        return loaded.model, "none"
    model = _trainable_module(loaded)
    try:
        if fsdp:
            return shard_fsdp(model, loaded.device.type), "fsdp"
        return wrap_ddp(model, loaded.device), "ddp"
    except torch.OutOfMemoryError as e:
        raise out_of_memory_error("wrapping the model for data parallelism") from e


def _user_wrapped(loaded: LoadedModel, hook: Any) -> Any:
    name = loaded.path.name
    if not callable(hook):
        raise UserInputError(f"{name}: {USER_HOOK} is not callable",
                             f"define `def {USER_HOOK}(model): return wrapped_model`")
    try:
        wrapped = hook(loaded.model)
    except Exception as e:  # noqa: BLE001 - reported at the user's own frame
        raise user_code_error(loaded.path, f"calling {USER_HOOK}(model)", e) from e
    if not callable(wrapped):
        raise UserInputError(f"{name}: {USER_HOOK}(model) returned {type(wrapped).__name__}, not a model",
                             "return the wrapped model (e.g. DistributedDataParallel(model))")
    return wrapped


def _trainable_module(loaded: LoadedModel) -> nn.Module:
    model = loaded.model
    if not isinstance(model, nn.Module):
        raise UserInputError(f"{loaded.path.name}: the model is a {type(model).__name__}; DDP needs an nn.Module",
                             f"return an nn.Module, or define {USER_HOOK}(model) in the file")
    if not any(p.requires_grad for p in model.parameters()):
        raise UserInputError(f"{loaded.path.name}: the model has no trainable parameters, so there is "
                             "nothing for data parallelism to synchronise",
                             "use --mode inference, or profile a model with parameters")
    return model


def wrap_ddp(model: nn.Module, device: torch.device) -> nn.Module:
    """DistributedDataParallel with PyTorch's defaults (25 MiB gradient buckets)."""
    ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids)


def shard_fsdp(model: nn.Module, device_type: str) -> nn.Module:
    """FSDP2: each repeated block is its own shard group (all-gathered just before use), then the root."""
    shard_blocks(model, device_type)
    return model
