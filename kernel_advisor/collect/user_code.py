"""Around every call into the model file's code: the process as `python MODEL.py` has it, and
ours again afterwards.

While the model's code runs (its import, get_inputs(), Model(...), the --entry function, each
step):
- its directory is first on `sys.path`, so `from layers import Block` finds the `layers.py`
  beside it, as it does for a script;
- its `print()` goes to stderr: stdout carries only the advisor's own output (`--json`);
- a `chdir` it makes is its own: the advisor's working directory (where `.advisor` and a
  relative `--out` are) comes back when the call returns, and the model's comes back on its
  next call;
- `atexit.register` registers a guarded handler: an exception in it at exit is one warning
  line, never a traceback after our output.

Between models (tests, notebooks, `compare`): the modules a model file imported from its own
directory are forgotten before another model file is imported, so two models that each bring
a `layers.py` get their own.
"""
from __future__ import annotations

import atexit
import contextlib
import copy
import dataclasses
import importlib
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

import torch

from kernel_advisor.errors import UserInputError, exception_text

# name -> module: what earlier model files imported from their own directories.
_SIBLINGS: dict[str, ModuleType] = {}


class UserCode:
    """`with user_code:` around each call into one model file's code (module docstring)."""

    def __init__(self, path: Path) -> None:
        self.directory = str(Path(path).parent)
        self.cwd: str | None = None  # the model's own working directory, once it changed ours

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        ours = os.getcwd()
        if self.cwd is not None:
            _chdir(self.cwd)
        sys.path.insert(0, self.directory)
        saved_register, saved_unregister = atexit.register, atexit.unregister
        atexit.register, atexit.unregister = _register, _unregister
        try:
            with contextlib.redirect_stdout(sys.stderr):
                yield
        finally:
            atexit.register, atexit.unregister = saved_register, saved_unregister
            _remove_first(sys.path, self.directory)
            self._restore_cwd(ours)

    def stepping(self):
        """Around each step after the first: `running()` costs ~5 µs, half of a small CPU step, so
        a step only sends prints to stderr, unless the model keeps a working directory of its own."""
        return self.running() if self.cwd is not None else _StdoutToStderr()

    def _restore_cwd(self, ours: str) -> None:
        try:
            theirs = os.getcwd()
        except OSError:  # the model removed the directory it was in
            theirs = None
        if theirs != ours:
            self.cwd = theirs
            _chdir(ours)


class _StdoutToStderr:
    """contextlib.redirect_stdout(sys.stderr), without its bookkeeping (steps are timed)."""

    __slots__ = ("saved",)

    def __enter__(self) -> None:
        self.saved = sys.stdout
        sys.stdout = sys.stderr

    def __exit__(self, *exc) -> None:
        sys.stdout = self.saved


def _chdir(path: str) -> None:
    try:
        os.chdir(path)
    except OSError as e:
        raise UserInputError(f"cannot return to the working directory {path}: {e.strerror} (the model's code "
                             "moved or removed it)", "leave the working directory in place in the model file") from None


def _remove_first(items: list, value: Any) -> None:
    # The model may have edited sys.path itself: take out our one entry, keep its own.
    if items and items[0] == value:
        del items[0]
    elif value in items:
        items.remove(value)


def import_isolated(path: Path, run: Callable[[], None]) -> None:
    """Run the import `run()` after forgetting earlier model files' sibling modules; remember
    the ones this file brings (module docstring)."""
    for name, module in list(_SIBLINGS.items()):
        if sys.modules.get(name) is module:
            del sys.modules[name]
    _SIBLINGS.clear()
    importlib.invalidate_caches()  # a layers.py written a moment ago (the finder caches listings)
    before = set(sys.modules)
    try:
        run()
    finally:
        _SIBLINGS.update(_siblings_added(before, Path(path).parent))


def _siblings_added(before: set, directory: Path) -> dict[str, ModuleType]:
    """Top-level modules new since `before` that live beside the model file (`layers.py`,
    `blocks/__init__.py`), with their submodules. Only top-level ones: a package we already
    use (kernel_advisor, torch) imported further by the model is not the model's."""
    new = set(sys.modules) - before
    tops = {name for name in new if "." not in name and _beside(sys.modules.get(name), directory)}
    return {name: sys.modules[name] for name in new
            if name.split(".", 1)[0] in tops and name in sys.modules}


def _beside(module: Any, directory: Path) -> bool:
    origin = getattr(module, "__file__", None)
    if not isinstance(origin, str):
        return False
    where = Path(os.path.abspath(origin)).parent
    return where == directory or (Path(origin).name == "__init__.py" and where.parent == directory)


# ---------------------------------------------------------------- exit handlers

_GUARDS: dict[int, list[Callable[[], None]]] = {}  # id(func) -> the guards registered for it
_real_register, _real_unregister = atexit.register, atexit.unregister


def _register(func: Callable, *args, **kwargs) -> Callable:
    """atexit.register for the model's code: the handler runs guarded (module docstring)."""
    guard = _exit_guard(func, args, kwargs)
    _GUARDS.setdefault(id(func), []).append(guard)
    _real_register(guard)
    return func  # as atexit.register does, so it works as a decorator


def _unregister(func: Callable) -> None:
    for guard in _GUARDS.pop(id(func), []):
        _real_unregister(guard)
    _real_unregister(func)


def _exit_guard(func: Callable, args: tuple, kwargs: dict) -> Callable[[], None]:
    def guard() -> None:
        try:
            with contextlib.redirect_stdout(sys.stderr):
                func(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - at exit nothing is left to stop; say it in one line
            name = getattr(func, "__qualname__", None) or type(func).__name__
            _warn(f"the model's exit handler {name} raised {exception_text(e)}; ignored")

    return guard


def _warn(message: str) -> None:
    # The CLI's warning line, written here: the collect layer does not import the CLI. Control
    # characters (the model's exception text) are escaped as cli/console.py escapes them.
    shown = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in message)
    print(f"advisor: warning: {shown}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- torch.profiler patched by the model


def profiler_surface() -> dict[str, tuple[Any, dict]]:
    """What the advisor profiles through: torch's profiler modules and classes, each with a copy
    of its namespace."""
    import torch.autograd.profiler as autograd_profiler
    import torch.profiler
    import torch.profiler.profiler as profiler_impl

    owners = {"torch.profiler": torch.profiler, "torch.autograd.profiler": autograd_profiler,
              "torch.profiler.profile": profiler_impl.profile,
              "torch.profiler.profiler._KinetoProfile": profiler_impl._KinetoProfile,
              "torch.autograd.profiler.record_function": autograd_profiler.record_function,
              "torch.autograd.profiler.profile": autograd_profiler.profile}
    return {name: (obj, dict(vars(obj))) for name, obj in owners.items()}


def check_profiler_untouched(before: dict[str, tuple[Any, dict]], model_name: str) -> None:
    """Refuse a model that replaced part of torch.profiler: the profile would fail or lie.

    The originals are put back first, so the process (a notebook, the next model) is sane.
    """
    changed = [f"{owner}.{name}" for owner, (obj, names) in before.items() for name in _restored(obj, names)]
    if changed:
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise UserInputError(
            f"{model_name} replaces {changed[0]}{more}, part of torch.profiler, which the advisor profiles with",
            "remove the monkeypatch, or make it only when the file runs as a script "
            "(under `if __name__ == \"__main__\":`)")


def _restored(obj: Any, names: dict) -> list[str]:
    """Names of `obj` whose value changed since `names` was copied, each put back. A module may
    gain names (a submodule imported later); a class gains one only by a patch (it shadows
    the inherited method)."""
    now = vars(obj)
    # NB: functions and classes only: a module's flags and counters change as torch runs
    changed = [n for n, v in names.items()
               if now.get(n, _MISSING) is not v and (callable(v) or isinstance(v, (classmethod, property)))]
    added = [n for n in now if n not in names] if isinstance(obj, type) else []
    for n in changed:
        setattr(obj, n, names[n])
    for n in added:
        delattr(obj, n)
    return changed + added


_MISSING = object()


def is_out_of_memory(e: BaseException) -> bool:
    """The device's or the host's allocator gave up (CUDA, MemoryError, torch's CPU allocator)."""
    import torch

    if isinstance(e, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(e, RuntimeError) and "DefaultCPUAllocator" in exception_text(e)


# ------------------------------------------------------------
# Walk outputs of any structure: tensor, tuple, list, dict, namedtuple, dataclass.
#
# The structures come from the user's model, so the walk is bounded: a container nested more
# than MAX_DEPTH deep, or one that holds itself, is one UserInputError (Python's own recursion
# limit would end it as a RecursionError, an internal error). Paths are built only for the
# leaves, since a path rebuilt at every level of a deep structure costs quadratic time.

MAX_DEPTH = 100  # containers within containers; a real model's inputs or outputs nest a few


def tensor_leaves(obj: Any, path: str = "output") -> list[tuple[str, torch.Tensor]]:
    """Every tensor in `obj` with a readable path (`output[1]['logits']`), in a stable order."""
    leaves: list[tuple[str, torch.Tensor]] = []
    _collect(obj, [path], set(), leaves)
    return leaves


def _collect(obj: Any, keys: list[str], open_ids: set[int], leaves: list) -> None:
    if isinstance(obj, torch.Tensor):
        leaves.append(("".join(keys), obj))
        return
    children = _children(obj)
    if children is None:
        return
    with _entered(obj, keys, open_ids):
        for key, child in children:
            keys.append(key)
            _collect(child, keys, open_ids, leaves)
            keys.pop()


def _children(obj: Any) -> list[tuple[str, Any]] | None:
    if isinstance(obj, dict):
        return [(f"[{k!r}]", v) for k, v in obj.items()]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [(f".{f.name}", getattr(obj, f.name)) for f in dataclasses.fields(obj)]
    if isinstance(obj, (list, tuple)):
        return [(f"[{i}]", v) for i, v in enumerate(obj)]
    return None


class _entered:
    """Marks `obj` open while its children are walked: met again inside itself, it is a cycle."""

    def __init__(self, obj: Any, keys: list[str], open_ids: set[int]) -> None:
        self.id, self.open_ids = id(obj), open_ids
        depth = len(keys)  # the root's name plus one key per level
        if self.id in open_ids:
            raise UserInputError(f"{_shown(keys)} holds itself (a container that contains itself, a cycle)",
                                 "return inputs and outputs without reference cycles: lists, tuples and dicts "
                                 "of tensors")
        if depth > MAX_DEPTH:
            raise UserInputError(f"{_shown(keys)} is nested more than {MAX_DEPTH} containers deep",
                                 "return flatter inputs and outputs: lists, tuples and dicts of tensors")

    def __enter__(self) -> None:
        self.open_ids.add(self.id)

    def __exit__(self, *exc) -> None:
        self.open_ids.discard(self.id)


def _shown(keys: list[str]) -> str:
    """The path of a container, its middle elided when it is long (a deep structure)."""
    if len(keys) <= 8:
        return "".join(keys)
    return "".join(keys[:4]) + "…" + "".join(keys[-3:])


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor], path: str = "inputs") -> Any:
    """`obj` rebuilt with `fn` applied to every tensor (bounded as tensor_leaves is)."""
    return _mapped(obj, fn, [path], set())


def _mapped(obj: Any, fn: Callable, keys: list[str], open_ids: set[int]) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if _children(obj) is None:
        return obj
    with _entered(obj, keys, open_ids):
        return _rebuilt(obj, lambda key, v: _mapped_child(v, fn, keys, key, open_ids), keys)


def _mapped_child(value: Any, fn: Callable, keys: list[str], key: str, open_ids: set[int]) -> Any:
    keys.append(key)
    try:
        return _mapped(value, fn, keys, open_ids)
    finally:
        keys.pop()


def _rebuilt(obj: Any, child: Callable[[str, Any], Any], keys: list[str]) -> Any:
    try:
        if isinstance(obj, dict):
            return _rebuilt_dict(obj, {k: child(f"[{k!r}]", v) for k, v in obj.items()})
        if dataclasses.is_dataclass(obj):
            return dataclasses.replace(obj, **{f.name: child(f".{f.name}", getattr(obj, f.name))
                                               for f in dataclasses.fields(obj) if f.init})
        items = [child(f"[{i}]", v) for i, v in enumerate(obj)]
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
            return type(obj)(*items)
        return type(obj)(items)
    except UserInputError:
        raise
    except Exception as e:  # noqa: BLE001 - a container class whose constructor takes other arguments
        raise UserInputError(f"{_shown(keys)} is a {type(obj).__name__} the advisor cannot rebuild with its "
                             f"tensors moved ({type(e).__name__} from its constructor)",
                             "use plain lists, tuples, dicts, namedtuples or dataclasses for the inputs") from e


def _rebuilt_dict(obj: dict, values: dict) -> dict:
    """A dict of the same class: a copy, then its values replaced, so a defaultdict keeps its
    default_factory and an OrderedDict its order (their constructors take other arguments)."""
    if type(obj) is dict:
        return values
    out = copy.copy(obj)
    for k, v in values.items():
        out[k] = v
    return out
