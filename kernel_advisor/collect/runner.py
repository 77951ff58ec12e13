"""One step of the user's model: inference (no_grad forward) or train (forward + backward).

Whatever the user's code raises while a step runs, BaseException included (`sys.exit()` in
forward, GeneratorExit, a custom autograd.Function's backward), is one UserInputError at their
own frame; only KeyboardInterrupt passes through, for the CLI's Ctrl-C handling (exit 130).
"""
from __future__ import annotations

import contextlib
import inspect
from typing import Any, Callable

import torch

from kernel_advisor.collect.loader import LoadedModel, code_site, user_code_error
from kernel_advisor.collect.loop_timing import TimedStep
from kernel_advisor.collect.user_code import tensor_leaves
from kernel_advisor.errors import UserInputError

MODES = ("inference", "train")


def make_step(loaded: LoadedModel, mode: str, optimizer: bool = True) -> Callable[[], Any]:
    """A zero-argument callable running one step and returning the model's output.

    A train step ends with the file's optimizer (`make_optimizer(model)`, built on the first
    step) when it defines one and `optimizer` is on; the correctness gate turns it off, so the
    gradients it compares are those of the weights every variant shares.
    """
    if mode not in MODES:
        raise UserInputError(f"unknown mode '{mode}'", "use --mode inference or --mode train")
    model, inputs = loaded.model, loaded.inputs
    if isinstance(model, torch.nn.Module):
        model.train(mode == "train")

    def inference_step():
        with torch.no_grad(), _autocast(loaded):
            return _call_forward(loaded, model, inputs)

    optimizers: list = []

    def optimizer_step() -> None:
        if not optimizer or loaded.make_optimizer is None:
            return
        if not optimizers:
            optimizers.append(_user_call(loaded, "calling make_optimizer(model)", loaded.make_optimizer, model))
        _user_call(loaded, "running the optimizer step", optimizers[0].step)

    def train_step():
        if isinstance(model, torch.nn.Module):
            model.zero_grad(set_to_none=True)
        with _autocast(loaded):  # forward and loss; backward runs outside, as torch.autocast asks
            out = _call_forward(loaded, model, inputs)
            loss = scalar_loss(loaded, out)
        try:
            loss.backward()
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - backward runs the model's own code too (autograd.Function)
            raise user_code_error(loaded.path, "running backward", e, loaded.dtype) from e
        optimizer_step()
        return out

    return _watched(loaded, inference_step if mode == "inference" else train_step)


def loop_step(loaded: LoadedModel, mode: str) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(activate, step) for timing the user's loop: what a `for` loop enters once around all its
    steps (inference's no_grad and autocast, the model file's process state) is in `activate`,
    entered once per window; `step` is what the loop body does. A train step keeps autocast per
    step, as torch.autocast asks for around forward and loss only."""
    if mode != "inference":
        stepping = loaded.user_code.stepping if loaded.user_code is not None else contextlib.nullcontext
        return stepping, _unwatched(make_step(loaded, mode))
    model, inputs = loaded.model, loaded.inputs
    if isinstance(model, torch.nn.Module):
        model.train(False)

    def activate():
        stack = contextlib.ExitStack()
        stack.enter_context(torch.no_grad())
        stack.enter_context(_autocast(loaded))
        if loaded.user_code is not None:
            stack.enter_context(loaded.user_code.stepping())
        return stack

    return activate, lambda: _call_forward(loaded, model, inputs)


def timed_loop(name: str, loaded: LoadedModel, mode: str,
               context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> TimedStep:
    """The user's loop of `loaded` (its model and inputs) as the harness times it, `context`
    (a variant's flags and substitutions) entered with the loop's own once per window."""
    activate, step = loop_step(loaded, mode)

    def both():
        stack = contextlib.ExitStack()
        stack.enter_context(context())
        stack.enter_context(activate())
        return stack

    return TimedStep(name, both, step)


def _unwatched(step: Callable[[], Any]) -> Callable[[], Any]:
    return getattr(step, "unwatched", step)


def _watched(loaded: LoadedModel, step: Callable[[], Any]) -> Callable[[], Any]:
    """`step` inside the model's own process state (collect/user_code.py); the first call also
    notes inputs the forward changed in place (`loaded.mutated_inputs`), since every step reuses
    the same input tensors."""
    user_code = loaded.user_code
    if user_code is None:  # an in-memory model (api.profile): no file, nothing to set up
        return step
    first = [True]

    def watched():
        if not first:
            with user_code.stepping():
                return step()
        first.clear()
        before = _input_versions(loaded.inputs)
        with user_code.running():
            out = step()
        loaded.mutated_inputs[:] = [path for path, t, version in before if _version(t) != version]
        return out

    watched.unwatched = step  # the bare step, for a caller that enters the process state itself
    return watched


def _input_versions(inputs: list) -> list[tuple[str, torch.Tensor, int | None]]:
    return [(path, t, _version(t)) for path, t in tensor_leaves(list(inputs), "inputs")]


def _version(t: torch.Tensor) -> int | None:
    """The tensor's in-place version counter (bumped by every in-place op on it or a view)."""
    try:
        return t._version
    except RuntimeError:  # an inference-mode tensor has none
        return None


def _user_call(loaded: LoadedModel, what: str, fn: Callable, *args):
    try:
        return fn(*args)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - the file's own optimizer code
        raise user_code_error(loaded.path, what, e, loaded.dtype) from e


def _autocast(loaded: LoadedModel):
    if loaded.autocast is None:
        return contextlib.nullcontext()
    return torch.autocast(loaded.device.type, dtype=loaded.autocast)


def _call_forward(loaded: LoadedModel, model, inputs):
    try:
        return model(*inputs)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - reported at the user's own frame, SystemExit included
        raise user_code_error(loaded.path, "running the forward pass", e, loaded.dtype) from e


def scalar_loss(loaded: LoadedModel, output: Any) -> torch.Tensor:
    """The file's loss_fn(output) if it has one, else the sum of every floating output."""
    if loaded.loss_fn is not None:
        try:
            loss = loaded.loss_fn(output)
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001 - SystemExit included
            raise user_code_error(loaded.path, "calling loss_fn(output)", e, loaded.dtype) from e
    else:
        floats = [t for _, t in tensor_leaves(output) if t.is_floating_point() and t.requires_grad]
        if not floats:
            raise UserInputError(
                f"{loaded.path.name}: --mode train needs a floating output that requires grad",
                "define loss_fn(output) in the model file, or use --mode inference")
        loss = sum(t.float().sum() for t in floats)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise UserInputError(f"{loaded.path.name}: loss_fn must return a scalar tensor",
                             "return e.g. output.sum() or a loss value from loss_fn")
    return loss


def no_operator_error(loaded: LoadedModel, mode: str) -> UserInputError:
    """A forward that ran no operator in the profiled steps: an empty table is no answer.

    Named at the forward's `def` when it is in the model file (`noop.py:6 in forward`).
    """
    where = code_site(loaded.path, _forward_function(loaded.model))
    what = "the forward pass and backward" if mode == "train" else "the forward pass"
    return UserInputError(
        f"{where}: {what} ran no PyTorch operator in the profiled steps (the model returns without computing, "
        "e.g. its input unchanged), so there is nothing to profile",
        "make forward compute its output from the inputs with torch operations; no run was kept")


def _forward_function(model: Any) -> Any:
    if isinstance(model, torch.nn.Module):
        return getattr(type(model), "forward", None)
    if inspect.isfunction(model) or inspect.ismethod(model):  # --entry returning a plain function
        return model
    return getattr(type(model), "__call__", None)


def nonfinite_outputs(output: Any) -> list[str]:
    """Paths of floating outputs that contain NaN or Inf (warned about, not fatal).

    A sparse output is checked on its stored values; a meta output (a shape without data)
    is refused: nothing downstream can compare or time what it never computed."""
    bad = []
    for path, t in tensor_leaves(output):
        if t.is_meta:
            raise UserInputError(f"the model's output {path} is on the meta device (a shape without data)",
                                 "return tensors with data from forward: compute them on the model's device")
        t = _stored_values(t)
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            n_nan = int(torch.isnan(t).sum())
            n_inf = int(torch.isinf(t).sum())
            bad.append(f"{path} ({n_nan} NaN, {n_inf} Inf of {t.numel()})")
    return bad


def _stored_values(t: torch.Tensor) -> torch.Tensor:
    """A sparse tensor's stored values (its zeros are finite), a dense one as it is."""
    if t.layout == torch.sparse_coo:
        return t._values()
    if t.layout in (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc):
        return t.values()
    return t


def mutated_inputs_warning(paths: list[str]) -> str | None:
    """One line for inputs the forward changed in place: the steps did not all compute the same thing."""
    if not paths:
        return None
    shown = ", ".join(paths[:3]) + (f" (and {len(paths) - 3} more)" if len(paths) > 3 else "")
    return (f"the forward pass changes its input {shown} in place, and every step reuses the same inputs, so "
            "each step computed on the values the previous one left (they can grow to Inf or NaN) — clone it in "
            "forward (x = x.clone()) or use an out-of-place op; profiling went on")
