"""The correctness gate's reference run: float64 where memory allows, something smaller where not.

The ladder, best first. Memory need is estimated before anything is allocated, and a rung
that runs out of memory anyway (or raises) steps down to the next one, so a large input
never ends the run:
1. a float64 copy of the model on every batch item;
2. float64 on a sample of batch items (inputs sliced along dim 0; outputs compared on the
   sample, gradients against eager only, since a sample's gradients are not the batch's);
3. a float32 copy, when the model computes in 16 bits (cast, or under --autocast), then
   float32 on a sample;
4. none: the gate compares with eager only.
The reference always runs without autocast: it is the numbers autocast approximates.
"""
from __future__ import annotations

import copy
import dataclasses
import gc
import os
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.user_code import map_tensors, tensor_leaves
from kernel_advisor.trykernel.capture import Captured, capture_step

FULL_FLOAT64 = "float64"
# NB: a forward keeps a few input-sized activations alive at once and training keeps each
# layer's for backward. Rough on purpose: an underestimate is caught as out-of-memory.
ACTIVATION_FACTOR = {"inference": 8, "train": 16}
HEADROOM = 0.8  # share of free memory to plan for: the allocator fragments, the estimate is rough
FLOAT32_TOLERANCE = "tolerance: 2 × eager's own error against float32 + the kernel's rtol"
SIXTEEN_BITS = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class _Rung:
    dtype: torch.dtype
    sample: int | None = None  # batch items kept; None: all of them


@dataclass
class Reference:
    reason: str  # for people: how the reference is computed, or "none: why not"
    rungs: list[_Rung] = field(default_factory=list, repr=False)  # rungs[0] is in use
    batch: int = 0  # the batch size the inputs share along dim 0 (0: not sliceable)
    mode: str = "inference"
    _twin: nn.Module | None = field(default=None, repr=False)

    def capture(self, loaded: LoadedModel, inputs: list, mode: str) -> Captured | None:
        """The reference's outputs (and gradients) on `inputs`; None with no reference left."""
        while self.rungs:
            try:
                return self._run(self.rungs[0], loaded, inputs, mode)
            except Exception as e:  # noqa: BLE001 - any failure only costs this rung, never the run
                oom, message = _is_oom(e), _first_line(e)
            self._step_down(oom, message)  # outside `except`: the traceback no longer pins tensors
        return None

    def _run(self, rung: _Rung, loaded: LoadedModel, inputs: list, mode: str) -> Captured:
        if self._twin is None:
            self._twin = _copy_without_grads(loaded.model).to(rung.dtype)
        ref_loaded = dataclasses.replace(loaded, model=self._twin, autocast=None)
        if rung.sample is None:
            return capture_step(ref_loaded, self._twin, self._twin, _cast(inputs, rung.dtype), mode)
        index = _spread(self.batch, rung.sample)
        rows = _cast(_take(inputs, index, self.batch), rung.dtype)
        return _forward_only(self._twin, rows, mode, index, self.batch)

    def _step_down(self, oom: bool, message: str) -> None:
        failed = self.rungs.pop(0)
        name = _name(failed.dtype)
        if oom and failed.sample is not None and failed.sample > 1:
            self.rungs.insert(0, _Rung(failed.dtype, failed.sample // 2))
        elif not oom and failed.sample is not None:  # the model takes no other batch size: no sample will do
            self.rungs = [r for r in self.rungs if r.sample is None]
            name = f"{name} on {failed.sample} of {self.batch} batch items"
        elif not oom:  # the model does not run in this dtype: no sample of it will either
            self.rungs = [r for r in self.rungs if r.dtype != failed.dtype]
        same_dtype = bool(self.rungs) and self.rungs[0].dtype == failed.dtype
        if not same_dtype:
            self._twin = None
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        cause = f"the model does not run in {name}: {message}" if not oom else (
            "out of memory" if same_dtype else f"out of memory in {name}")
        self.reason = _describe(self.rungs[0], self.batch, self.mode, cause) if self.rungs else f"none: {cause}"


def prepare_reference(loaded: LoadedModel, mode: str) -> Reference:
    """Choose the best reference the free memory allows; nothing is allocated yet."""
    unusable = _unusable(loaded)
    if unusable:
        return Reference(f"none: {unusable}", mode=mode)
    batch = _batch_size(loaded.inputs)
    sampleable = batch > 1 and not (mode == "train" and _has_batch_norm(loaded.model))
    free = free_memory_bytes(loaded.device)
    dtypes = [torch.float64] + ([torch.float32] if _computes_in_16_bits(loaded) else [])
    ladder = [r for d in dtypes for r in [_Rung(d)] + ([_sampled(loaded, d, free, batch)] if sampleable else [])]
    rungs = [r for r in ladder if _fits(loaded, mode, r, batch, free)]
    if not rungs:
        need = need_bytes(loaded, mode, torch.float64) / 2**30
        return Reference(f"none: no memory for a reference (float64 needs ~{need:.1f} GiB, "
                         f"{free / 2**30:.1f} GiB free)", mode=mode)
    skipped = ladder[0].dtype  # the best rung is float64: if it is not rungs[0], memory ruled it out
    cause = "memory" if rungs[0].dtype == skipped else f"no memory for {_name(skipped)}"
    return Reference(_describe(rungs[0], batch, mode, cause), rungs, batch, mode)


def _fits(loaded: LoadedModel, mode: str, rung: _Rung, batch: int, free: int | None) -> bool:
    if rung.sample == 0:
        return False
    if free is None:
        return True  # unknown: try it, an out-of-memory error steps down
    if rung.sample is None:
        return need_bytes(loaded, mode, rung.dtype) <= HEADROOM * free
    # a sample runs forward only (no gradients): inference's need, on its share of the batch
    return need_bytes(loaded, "inference", rung.dtype, rung.sample / batch) <= HEADROOM * free


def need_bytes(loaded: LoadedModel, mode: str, dtype: torch.dtype, share: float = 1.0) -> int:
    """Estimated memory of a `dtype` copy running `share` of the batch: parameters (and their
    gradients in training) plus input-sized activations."""
    size = torch.empty((), dtype=dtype).element_size()
    model = loaded.model if isinstance(loaded.model, nn.Module) else nn.Module()
    params = sum(_bytes_as(t, size) for t in [*model.parameters(), *model.buffers()])
    inputs = sum(_bytes_as(t, size) for _, t in tensor_leaves(loaded.inputs))
    return int(params * (2 if mode == "train" else 1) + inputs * share * ACTIVATION_FACTOR[mode])


def free_memory_bytes(device: torch.device) -> int | None:
    """Memory free for a new allocation on `device`; None when it cannot be read."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None


def _describe(rung: _Rung, batch: int, mode: str, cause: str) -> str:
    name = _name(rung.dtype)
    if rung.sample is None:
        text = FULL_FLOAT64 if rung.dtype == torch.float64 else f"float32 reference ({cause})"
    else:
        text = f"{name} on {rung.sample} of {batch} batch items ({cause})"
        text += "; gradients against eager only" if mode == "train" else ""
    return text if rung.dtype == torch.float64 else f"{text}; {FLOAT32_TOLERANCE}"


def _sampled(loaded: LoadedModel, dtype: torch.dtype, free: int | None, batch: int) -> _Rung:
    """The most batch items (fewer than all) whose forward fits; 0 when not even one does."""
    if free is None:
        return _Rung(dtype, batch // 2)
    fixed = need_bytes(loaded, "inference", dtype, 0.0)
    per_item = (need_bytes(loaded, "inference", dtype) - fixed) / batch
    fit = int((HEADROOM * free - fixed) // per_item) if per_item > 0 else batch - 1
    return _Rung(dtype, max(0, min(fit, batch - 1)))


def _unusable(loaded: LoadedModel) -> str:
    model = loaded.model
    if not isinstance(model, nn.Module):
        return "the model is a callable, not an nn.Module, so it cannot be copied to float64"
    floats = [p for p in model.parameters() if p.is_floating_point()]
    if floats and all(p.dtype == torch.float64 for p in floats):
        return "the model already computes in float64"
    return ""


def _computes_in_16_bits(loaded: LoadedModel) -> bool:
    if loaded.autocast is not None:
        return True
    floats = [p for p in loaded.model.parameters() if p.is_floating_point()]
    floats = floats or [t for _, t in tensor_leaves(loaded.inputs) if t.is_floating_point()]
    return bool(floats) and floats[0].dtype in SIXTEEN_BITS


def _has_batch_norm(model: nn.Module) -> bool:
    # NB: in training, batch norm mixes batch items: a sample's outputs are not the batch's.
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def _batch_size(inputs: list) -> int:
    """The size every batched (≥ 1-D) input shares along dim 0; 0 when they do not share one."""
    sizes = {t.shape[0] for _, t in tensor_leaves(inputs) if t.ndim >= 1}
    return sizes.pop() if len(sizes) == 1 else 0


def _spread(batch: int, k: int) -> tuple[int, ...]:
    """k batch items spread over the batch (first and last included), not just the first k."""
    step = (batch - 1) / max(k - 1, 1)  # ≥ 1 since k < batch: the items are distinct
    return tuple(int(i * step + 0.5) for i in range(k))


def _take(inputs: list, index: tuple[int, ...], batch: int) -> list:
    def take(t: torch.Tensor) -> torch.Tensor:
        return t.index_select(0, torch.tensor(index, device=t.device)) if t.ndim >= 1 and t.shape[0] == batch else t
    return map_tensors(inputs, take)


def _cast(inputs: list, dtype: torch.dtype) -> list:
    return map_tensors(inputs, lambda t: t.to(dtype) if t.is_floating_point() else t)


def _forward_only(twin: nn.Module, inputs: list, mode: str, index: tuple[int, ...], batch: int) -> Captured:
    twin.train(mode == "train")  # dropout and friends as in the gated step; no backward to hold memory for
    with torch.no_grad():
        out = twin(*inputs)
    leaves = tuple((path, t.detach().clone()) for path, t in tensor_leaves(out))
    return Captured(leaves, batch_index=index, batch_size=batch)


def _copy_without_grads(model: nn.Module) -> nn.Module:
    """A deep copy that leaves the gradients behind: they would double the copy's size."""
    params = list(model.parameters())
    grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    try:
        return copy.deepcopy(model)
    finally:
        for p, g in zip(params, grads):
            p.grad = g


def _bytes_as(t: torch.Tensor, size: int) -> int:
    return t.numel() * size if t.is_floating_point() else t.numel() * t.element_size()


def _is_oom(e: BaseException | None) -> bool:
    """Out of memory, also when the runner re-raised it as an EnvironmentCapabilityError."""
    while e is not None:
        if isinstance(e, torch.OutOfMemoryError) or "can't allocate memory" in str(e):  # CPU allocator
            return True
        e = e.__cause__
    return False


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _first_line(e: BaseException) -> str:
    while e.__cause__ is not None:  # the runner wraps the model's own error: name that one
        e = e.__cause__
    text = f"{type(e).__name__}: {e}".strip()
    return text.splitlines()[0][:300] if text else type(e).__name__
