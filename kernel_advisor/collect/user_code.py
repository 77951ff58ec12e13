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
import importlib
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

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
