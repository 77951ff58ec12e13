"""Load a user's model file: KernelBench convention or an `--entry` function.

The model file is Python the user runs on purpose (docs/trust.md): we import it like any
script. Everything that can go wrong in it is reported as one UserInputError naming the
file, the line in *their* code and the fix.
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import inspect
import os
import re
import stat
import sys
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import torch

from kernel_advisor.collect.options import resolve_device
from kernel_advisor.collect.user_code import map_tensors, tensor_leaves
from kernel_advisor.collect.user_code import (UserCode, check_profiler_untouched, import_isolated, is_out_of_memory,
                                              profiler_surface)
from kernel_advisor.errors import AdvisorError, EnvironmentCapabilityError, UserInputError, exception_text

DTYPES = {"keep": None, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
AUTOCAST_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    """A model ready to run: module on its device, inputs drawn, and how to draw more."""

    path: Path
    sha256: str
    entry: str | None
    module: ModuleType
    model: torch.nn.Module | Callable
    inputs: list
    loss_fn: Callable[[Any], torch.Tensor] | None
    device: torch.device
    dtype: torch.dtype | None
    make_inputs: Callable[[int], list]  # seed -> a fresh draw of inputs, on device and cast
    autocast: torch.dtype | None = None  # steps run under torch.autocast(device, autocast)
    make_optimizer: Callable[[Any], Any] | None = None  # the file's make_optimizer(model), for train steps
    user_code: UserCode | None = None  # entered around every call into the file's code (collect/user_code.py)
    mutated_inputs: list[str] = field(default_factory=list)  # inputs the first step changed in place


def load_model(path: str | Path, entry: str | None = None, device: str = "auto",
               dtype: str = "keep", seed: int = 0, autocast: str | None = None) -> LoadedModel:
    path = _check_path(Path(path))
    if dtype not in DTYPES:
        raise UserInputError(f"unknown dtype '{dtype}'", f"use one of {', '.join(DTYPES)}")
    _check_autocast(autocast, dtype)
    dev = resolve_device(device)
    cast = DTYPES[dtype]
    user_code = UserCode(path)
    profiler_before = profiler_surface()
    module = import_model_file(path, user_code)
    make_model_and_inputs = _entry_factory(module, path, entry)
    torch.manual_seed(seed)
    with user_code.running():
        model, raw_inputs = make_model_and_inputs()
        model = _place_model(model, dev, cast, path)

    def make_inputs(draw_seed: int) -> list:
        torch.manual_seed(draw_seed)
        with user_code.running():
            _, fresh = make_model_and_inputs(inputs_only=True)
            return _place_inputs(fresh, dev, cast, path)

    with user_code.running():
        inputs = _place_inputs(raw_inputs, dev, cast, path)
    check_profiler_untouched(profiler_before, path.name)
    loss_fn = getattr(module, "loss_fn", None)
    if loss_fn is not None and not callable(loss_fn):
        raise UserInputError(f"{path.name}: loss_fn is not callable", "define `def loss_fn(output): ...`")
    make_optimizer = getattr(module, "make_optimizer", None)
    if make_optimizer is not None and not callable(make_optimizer):
        raise UserInputError(f"{path.name}: make_optimizer is not callable",
                             "define `def make_optimizer(model): return torch.optim.AdamW(model.parameters())`")
    return LoadedModel(path=path, sha256=file_sha256(path), entry=entry, module=module, model=model,
                       inputs=inputs, loss_fn=loss_fn, device=dev, dtype=cast, make_inputs=make_inputs,
                       autocast=AUTOCAST_DTYPES[autocast] if autocast else None, make_optimizer=make_optimizer,
                       user_code=user_code)


def _check_autocast(autocast: str | None, dtype: str) -> None:
    if autocast is None:
        return
    if autocast not in AUTOCAST_DTYPES:
        raise UserInputError(f"unknown --autocast '{autocast}'", f"use one of {', '.join(AUTOCAST_DTYPES)}")
    if DTYPES[dtype] in AUTOCAST_DTYPES.values():
        # autocast keeps the weights in float32 and casts per op; a 16-bit model leaves it nothing to do
        raise UserInputError(f"--autocast {autocast} with --dtype {dtype}: autocast needs the model in float32, "
                             f"--dtype {dtype} casts it", f"drop --dtype {dtype}; --autocast {autocast} runs the "
                             f"matmuls and convolutions in {autocast}")


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check_path(path: Path) -> Path:
    if not path.exists():
        raise UserInputError(f"model file {path} does not exist", "check the path")
    if path.is_dir():
        raise UserInputError(f"{path} is a directory, not a model file",
                             "pass the .py file that defines Model and get_inputs()")
    if path.suffix != ".py":
        raise UserInputError(f"{path} is not a Python file",
                             "pass a .py file that defines Model and get_inputs()")
    _check_regular_file(path)
    return path.resolve()


def _check_regular_file(path: Path) -> None:
    """A FIFO would block the read forever, a device (/dev/zero) never end: only regular files,
    a symbolic link to one included."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise UserInputError(f"cannot read the model file {path}: {e.strerror}", "check the path") from None
    if not stat.S_ISREG(mode):
        what = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) \
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
        raise UserInputError(f"{path} is {what}, not a regular file",
                             "pass the .py source file that defines Model and get_inputs()")


def import_model_file(path: Path, user_code: UserCode | None = None) -> ModuleType:
    """Run the file as a module, `user_code` entered (collect/user_code.py)."""
    user_code = user_code or UserCode(path)
    name = f"advisor_model_{path.stem}_{uuid.uuid4().hex[:8]}"
    # The loader named explicitly: the file is Python source whatever its name (a `model.py`
    # symlink to a file without .py), where spec_from_file_location guesses by the suffix.
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserInputError(f"{path.name} is not a text Python file",
                             "pass a .py source file") from None
    try:
        code = compile(source, str(path), "exec")
    except SyntaxError as e:
        raise UserInputError(f"{path.name}:{e.lineno}: syntax error: {e.msg}",
                             "fix the model file so `python FILE` runs") from None
    try:
        with user_code.running():
            import_isolated(path, lambda: exec(code, module.__dict__))  # noqa: S102 - running the user's file is the point
    except AdvisorError:
        raise
    except BaseException as e:  # noqa: BLE001 - includes SystemExit from a script's main()
        if isinstance(e, KeyboardInterrupt):
            raise
        raise user_code_error(path, "importing the model file", e) from e
    return module


# NB: what PyTorch says when a float32 tensor made inside forward meets a cast 16-bit one.
DTYPE_MISMATCH = re.compile(r"same dtype|expected .*dtype|expected scalar type|Input type \(.*\) and (bias|weight) type",
                            re.IGNORECASE)


def user_code_error(path: Path, doing: str, exc: BaseException, cast: torch.dtype | None = None) -> AdvisorError:
    """An error raised in the user's code, located at their innermost frame in their file.

    `cast` is the --dtype the model was cast to: a dtype mismatch under a 16-bit cast is
    usually float32 state made in forward, which --autocast handles. Running out of memory
    (the device's or the host's) is the environment's error, exit 2.
    """
    if is_out_of_memory(exc):
        return out_of_memory_error(doing, host=not isinstance(exc, torch.OutOfMemoryError))
    frame = _innermost_user_frame(path, exc)
    where = f"{path.name}:{frame.lineno} in {frame.name}" if frame else path.name
    msg = exception_text(exc).rstrip(":")
    fix = "fix the model file (rerun with --debug for the full traceback)"
    if isinstance(exc, SystemExit):
        # `sys.exit(0)` must not end the advisor with 0 and no output, nor `sys.exit(3)` with 3.
        msg = f"SystemExit({exc.code!r}): the model's code exits the process"
        fix = ("remove the sys.exit()/exit() call: the advisor calls the model's code, "
               "and an exit would end it without a result")
    elif not isinstance(exc, Exception):  # GeneratorExit and other BaseExceptions
        msg = f"{msg} (a BaseException, not an Exception)"
    if isinstance(exc, ModuleNotFoundError):
        fix = f"install the missing module '{exc.name}' or remove the import"
    elif cast in AUTOCAST_DTYPES.values() and DTYPE_MISMATCH.search(msg):
        name = str(cast).replace("torch.", "")
        fix = (f"the model makes tensors of another dtype in forward: use --autocast {name} "
               f"instead of --dtype {name}")
    return UserInputError(f"{where}: {msg} (while {doing})", fix)


def _innermost_user_frame(path: Path, exc: BaseException):
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
    return frames[-1] if frames else None


def code_site(path: Path, fn: Any) -> str:
    """`file.py:LINE in NAME` for a function defined in the model file, else the file's name."""
    try:
        code = inspect.unwrap(fn).__code__
    except (AttributeError, TypeError, ValueError):
        return path.name
    return f"{path.name}:{code.co_firstlineno} in {code.co_name}" if Path(code.co_filename) == path else path.name


def check_no_meta_model(model: Any, where: str) -> None:
    """Parameters and buffers on the meta device hold no data: refused before `.to(device)` fails."""
    if not isinstance(model, torch.nn.Module):
        return
    named = [("parameter", n, t) for n, t in model.named_parameters()] + \
            [("buffer", n, t) for n, t in model.named_buffers()]
    meta = [(kind, name) for kind, name, t in named if t.is_meta]
    if meta:
        kind, name = meta[0]
        more = f" (and {len(meta) - 1} more)" if len(meta) > 1 else ""
        raise UserInputError(
            f"{where}: the model's {kind} '{name}'{more} is on the meta device (a shape without data), "
            "so it cannot run or be profiled",
            "create the model on a real device (drop device='meta'), or materialise it with "
            "model.to_empty(device='cpu') and initialise its weights before returning it")


def check_no_meta_inputs(inputs: list, where: str, what: str) -> None:
    meta = [p for p, t in tensor_leaves(list(inputs), "inputs") if t.is_meta]
    if meta:
        more = f" (and {len(meta) - 1} more)" if len(meta) > 1 else ""
        raise UserInputError(f"{where}: a tensor from {what} is on the meta device ({meta[0]}{more}), "
                             "a shape without data, so the model cannot run on it",
                             "create the inputs with data, e.g. torch.randn(...) without device='meta'")


def _entry_factory(module: ModuleType, path: Path, entry: str | None):
    if entry is not None:
        return _entry_function_factory(module, path, entry)
    return _kernelbench_factory(module, path)


def _entry_function_factory(module: ModuleType, path: Path, entry: str):
    fn = getattr(module, entry, None)
    if fn is None or not callable(fn):
        raise UserInputError(f"{path.name} has no function '{entry}'",
                             f"define `def {entry}(): return model, inputs` or drop --entry")

    def factory(inputs_only: bool = False):
        result = _call_user(path, f"calling {entry}()", fn)
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise UserInputError(f"{path.name}: {entry}() must return (model, inputs)",
                                 f"return a pair: `return model, [x, ...]` from {entry}()")
        model, inputs = result
        return model, _as_input_list(path, inputs, f"{entry}()", code_site(path, fn))

    return factory


def _kernelbench_factory(module: ModuleType, path: Path):
    model_cls = getattr(module, "Model", None)
    get_inputs = getattr(module, "get_inputs", None)
    if model_cls is None:
        raise _no_model_class_error(module, path)
    if get_inputs is None or not callable(get_inputs):
        raise UserInputError(f"{path.name} defines Model but no get_inputs()",
                             "add `def get_inputs(): return [torch.randn(...)]`")
    get_init = getattr(module, "get_init_inputs", None)

    def factory(inputs_only: bool = False):
        model = None
        if not inputs_only:
            init = _call_user(path, "calling get_init_inputs()", get_init) if get_init else []
            init = list(init) if isinstance(init, (list, tuple)) else [init]
            model = _call_user(path, "constructing Model", model_cls, *init)
        inputs = _call_user(path, "calling get_inputs()", get_inputs)
        return model, _as_input_list(path, inputs, "get_inputs()", code_site(path, get_inputs))

    return factory


def _module_classes(module: ModuleType) -> list[str]:
    """Names of the nn.Module subclasses the model file itself defines, in file order."""
    names, seen = [], set()
    for name, obj in vars(module).items():  # insertion order: the order the file defines them
        if (inspect.isclass(obj) and issubclass(obj, torch.nn.Module) and obj.__module__ == module.__name__
                and not name.startswith("_") and id(obj) not in seen):
            seen.add(id(obj))
            names.append(name)
    return names


def _no_model_class_error(module: ModuleType, path: Path) -> UserInputError:
    """No `Model`: name the nn.Module classes the file does define and how to expose one."""
    classes = _module_classes(module)
    if not classes:
        return UserInputError(f"{path.name} defines no `Model` class",
                              "define `class Model(nn.Module)` and `get_inputs()`, or pass --entry FUNCTION")
    shown = ", ".join(f"`{c}`" for c in classes[:5]) + (f" (and {len(classes) - 5} more)" if len(classes) > 5 else "")
    pick = classes[-1]  # the model usually comes last: its building blocks are defined above it
    which = "" if len(classes) == 1 else " (the class that is the whole model)"
    return UserInputError(
        f"{path.name} defines no `Model` class; it defines the nn.Module "
        f"{'class' if len(classes) == 1 else 'classes'} {shown}, and the KernelBench contract "
        "looks the model up by the name `Model`",
        f"add `Model = {pick}`{which} at the end of the file (or rename the class to Model), "
        "or pass --entry FUNCTION")


def _call_user(path: Path, doing: str, fn: Callable, *args):
    try:
        return fn(*args)
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, (KeyboardInterrupt, AdvisorError)):  # ours: already the line to print
            raise
        raise user_code_error(path, doing, e) from e


def out_of_memory_error(doing: str, host: bool = False) -> EnvironmentCapabilityError:
    what = "the machine's memory ran out" if host else "the device ran out of memory"
    return EnvironmentCapabilityError(
        f"{what} while {doing}",
        "use smaller inputs in get_inputs() or --dtype bfloat16")


def _as_input_list(path: Path, inputs: Any, what: str, where: str) -> list:
    if isinstance(inputs, torch.Tensor):
        inputs = [inputs]
    if not isinstance(inputs, (list, tuple)):
        raise UserInputError(f"{path.name}: {what} returned {type(inputs).__name__}, not a list",
                             f"return a list of tensors from {what}")
    if not tensor_leaves(list(inputs), "inputs"):
        raise UserInputError(f"{path.name}: {what} returned no tensors",
                             f"return at least one torch.Tensor from {what}")
    check_no_meta_inputs(inputs, where, what)
    return list(inputs)


def _place_model(model: Any, dev: torch.device, cast: torch.dtype | None, path: Path):
    if not callable(model):
        raise UserInputError(f"{path.name}: the model is a {type(model).__name__}, not callable",
                             "return an nn.Module (or a callable) as the model")
    if isinstance(model, torch.nn.Module):
        check_no_meta_model(model, code_site(path, getattr(type(model), "__init__", None)))
        model = _call_user(path, "moving the model to the device (model.to)", _moved, model, dev, cast)
    return model


def _moved(model: torch.nn.Module, dev: torch.device, cast: torch.dtype | None):
    model = model.to(dev)
    return model.to(cast) if cast is not None else model


def _place_inputs(inputs: list, dev: torch.device, cast: torch.dtype | None, path: Path) -> list:
    def place(t: torch.Tensor) -> torch.Tensor:
        t = t.to(dev)
        if cast is not None and t.is_floating_point():
            t = t.to(cast)
        return t

    return _call_user(path, "moving the inputs to the device", map_tensors, inputs, place)
