"""Where the advisor relies on an upstream internal, the exact behaviour it relies on, checked on
the installed torch, triton and typer, and the public fallback taken when that behaviour changes
(docs/architecture.md, "Upstream internals")."""
from __future__ import annotations

import importlib
import inspect
import json
import re
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
import typer
from typer.testing import CliRunner

from kernel_advisor.collect.trace import TABLE_COLUMNS, TABLE_OF_CATEGORY, columns, fast_paths, pool, read_trace, split

# ---------------------------------------------------------------- kineto's text layout


def _write_trace(path, device: str, activities: list):
    """A chrome trace as the installed torch writes it: aten ops with shapes, a user annotation
    and, on CUDA, kernels and runtime calls."""
    from torch.profiler import profile, record_function

    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.GELU(), torch.nn.Linear(8, 4)).to(device)
    with profile(activities=activities, record_shapes=True) as prof:
        with record_function("region"):
            model(torch.randn(3, 16, device=device)).sum().backward()
        if device == "cuda":
            torch.cuda.synchronize()
    prof.export_chrome_trace(str(path))
    return path


@pytest.fixture(scope="module")
def torch_trace(tmp_path_factory):
    from torch.profiler import ProfilerActivity

    return _write_trace(tmp_path_factory.mktemp("kineto") / "trace.json", "cpu", [ProfilerActivity.CPU])


def _same_tables(a, b) -> None:
    for table in [*TABLE_COLUMNS, "collectives"]:
        pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table), obj=table)


def _json_only(monkeypatch) -> None:
    """The public path for every block: the stdlib JSON parser."""
    monkeypatch.setattr(pool, "fast_rows", lambda block: None)


def _assert_fast_path_reads(path, patterns: dict) -> None:
    """Every event of the trace but the last travels in blocks cut at kineto's separator; every
    kept event's header matches _HEADER; every row of the tables in `patterns` has its args read
    by the table's pattern, none by json."""
    raw = path.read_bytes()
    blocks = [bytes(payload) for kind, _, payload in split.Splitter("t").items([raw]) if kind == "block"]
    assert sum(len(json.loads(b"[" + block + b"]")) for block in blocks) == len(json.loads(raw)["traceEvents"]) - 1
    kept_cat = re.compile(rb'"ph": "X",\s*"cat": "(%s)"' % "|".join(TABLE_OF_CATEGORY).encode())
    kept = [text for block in blocks for text in block[1:-1].split(split.SEP) if kept_cat.search(text)]
    assert kept and all(fast_paths._HEADER.search(b"{" + text + b"\n  }") for text in kept)
    per_block = [fast_paths.fast_rows(block) for block in blocks]
    assert None not in per_block
    for table, pattern in patterns.items():
        rows = [row for block_rows in per_block for row in block_rows[table]]
        assert rows, f"no {table} rows"
        assert not any(fast_paths.args_columns(rows, pattern, pattern.groups)[-1]), f"{table}: args only json read"


def test_kineto_layout_is_what_the_fast_path_reads(torch_trace):
    _assert_fast_path_reads(torch_trace, {"cpu_ops": fast_paths.CPU_ARGS})


@pytest.mark.gpu
def test_kineto_cuda_layout_is_what_the_fast_path_reads(tmp_path):
    from torch.profiler import ProfilerActivity

    path = _write_trace(tmp_path / "cuda.json", "cuda", [ProfilerActivity.CPU, ProfilerActivity.CUDA])
    _assert_fast_path_reads(path, {"cpu_ops": fast_paths.CPU_ARGS, "gpu": fast_paths.GPU_ARGS,
                                   "runtime": fast_paths.RUNTIME_ARGS})


def test_fast_path_gives_the_json_path_tables(torch_trace, monkeypatch):
    fast = read_trace(torch_trace)
    _json_only(monkeypatch)
    _same_tables(fast, read_trace(torch_trace))
    assert "region" in set(fast.annotations.name) and len(fast.cpu_ops)


@pytest.mark.parametrize("change", ["header", "cpu_args"])
def test_a_changed_kineto_layout_falls_back_to_json(torch_trace, monkeypatch, change):
    _json_only(monkeypatch)
    expected = read_trace(torch_trace)
    monkeypatch.undo()
    by_json = []
    if change == "header":  # no event header in the layout _HEADER knows: every event through json
        monkeypatch.setattr(fast_paths, "_HEADER", re.compile(rb"(?!)"))
        spied, module = fast_paths._headers_event_by_event, fast_paths
    else:  # an args layout CPU_ARGS does not know: its catch-all branch hands each args text to json
        monkeypatch.setattr(columns, "CPU_ARGS", re.compile(rb"(?!)()()()()()|([^\x01]*)\x01"))
        spied, module = columns.unread_args, columns
    monkeypatch.setattr(module, spied.__name__, lambda *a: by_json.append(list(spied(*a))) or iter(by_json[-1]))
    _same_tables(read_trace(torch_trace), expected)
    assert any(by_json), "the fallback read the events"


# ---------------------------------------------------------------- Triton's cached launch

triton = pytest.importorskip("triton")
from triton.runtime.jit import JITFunction  # noqa: E402

from reference_kernels.triton import _launch  # noqa: E402


def _probe(x_ptr, n, alpha=2.0, BLOCK: "tl.constexpr" = 128):  # noqa: F821 - never compiled
    pass


@pytest.fixture
def launch_check():
    _launch.triton_launches_as_expected.cache_clear()
    yield _launch.triton_launches_as_expected
    _launch.triton_launches_as_expected.cache_clear()


def test_triton_launches_the_way_fast_launch_repeats(launch_check):
    fn = JITFunction(_probe)
    assert _launch._readable_params(fn)
    assert [(p.name, p.has_default) for p in fn.params] == [
        ("x_ptr", False), ("n", False), ("alpha", True), ("BLOCK", True)]
    assert [p.default for p in fn.params[2:]] == [2.0, 128]
    assert callable(fn[(1,)])
    assert launch_check(), "JITFunction.run no longer ends in the launcher call FastLaunch repeats"
    hooks = triton.knobs.runtime.launch_enter_hook
    assert not _launch._hooked(hooks)  # an empty HookChain: no hook to honour
    probe = lambda metadata: None  # noqa: E731
    hooks.add(probe)
    try:
        assert _launch._hooked(hooks)
    finally:
        hooks.remove(probe)
    from triton.compiler.compiler import CompiledKernel

    assert isinstance(inspect.getattr_static(CompiledKernel, "run"), property)
    init = inspect.getsource(CompiledKernel.__init__)
    assert re.search(r"self\.packed_metadata\s*=", init) and re.search(r"self\.function\s*=", init)


def _changed_run(self, *args, grid, warmup, **kwargs):  # an upstream release launching otherwise
    kernel = None
    kernel.run(grid[0], 1, 1, None, kernel.function, kernel.packed_metadata, None, *args)


@pytest.mark.parametrize("change", ["run", "knobs", "params"])
def test_fast_launch_steps_aside_when_triton_changes(monkeypatch, launch_check, change):
    monkeypatch.setattr(_launch, "ENABLED", True)  # as on a GPU; nothing is launched here
    monkeypatch.setattr(_launch, "_LAUNCHERS", {})
    fn = JITFunction(_probe)
    assert isinstance(_launch.fast(fn), _launch.FastLaunch)
    monkeypatch.setattr(_launch, "_LAUNCHERS", {})
    launch_check.cache_clear()
    if change == "run":
        monkeypatch.setattr(JITFunction, "run", _changed_run)
    elif change == "knobs":
        monkeypatch.setattr(_launch, "_knobs", SimpleNamespace(runtime=SimpleNamespace()))
    else:
        monkeypatch.delattr(fn, "params")
    assert _launch.fast(fn) is fn  # every call through JITFunction.run


class _FakeJIT:
    """What FastLaunch reads of a JITFunction, recording the launches that go through it."""

    def __init__(self, kernel):
        self.params = [SimpleNamespace(name="x", default=None, has_default=False),
                       SimpleNamespace(name="BLOCK", default=64, has_default=True)]
        self.kernel, self.calls = kernel, []

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.calls.append((grid, args, kwargs))
            return self.kernel
        return run


@pytest.mark.parametrize("cached", [True, False], ids=["compiled kernel", "no packed_metadata"])
def test_fast_launch_caches_only_a_kernel_it_can_launch(monkeypatch, cached):
    launches = []
    kernel = SimpleNamespace(run=lambda *a: launches.append(a), function="fn")
    if cached:
        kernel.packed_metadata = "meta"
    monkeypatch.setattr(_launch.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(_launch.torch._C, "_cuda_getCurrentRawStream", lambda device: 7, raising=False)
    jit = _FakeJIT(kernel)
    fast = _launch.FastLaunch(jit)
    for _ in range(3):
        fast[(5, 2)](1.5)
    if cached:  # the first call through JITFunction.run, the others through the kernel's launcher
        assert len(jit.calls) == 1
        assert launches == [(5, 2, 1, 7, "fn", "meta", None, None, None, 1.5, 64)] * 2
    else:
        assert len(jit.calls) == 3 and not launches and not fast.compiled


# ---------------------------------------------------------------- typer's (vendored) click

cli_app = importlib.import_module("kernel_advisor.cli.app")
runner = CliRunner()


def _raw_usage_errors(monkeypatch, *args_lists) -> list:
    """(exception, typer's own message) of each command line's usage error."""
    import kernel_advisor.cli  # noqa: F401 - registers the commands

    seen, usage_line = [], cli_app._usage_line

    def recording(e, command):
        seen.append((e, e.format_message()))
        return usage_line(e, command)

    monkeypatch.setattr(cli_app, "_usage_line", recording)
    for args in args_lists:
        result = runner.invoke(cli_app.app, args)
        assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, result.output
    return seen


def test_typer_usage_errors_share_clicks_usage_error(monkeypatch):
    named = [c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"]
    assert named and named[0].exit_code == 2 and cli_app.UsageError is named[0]
    seen = _raw_usage_errors(monkeypatch, ["profile", "m.py", "--nope"], ["profile"], ["nocmd"])
    assert all(isinstance(e, cli_app.UsageError) for e, _ in seen)
    assert {"NoSuchOption", "MissingParameter"} <= {type(e).__name__ for e, _ in seen}


def test_usage_error_class_falls_back_without_the_name(monkeypatch):
    assert cli_app.usage_error_class(typer.BadParameter, name="Renamed") is cli_app.UsageError  # by exit code 2

    class Base(Exception):
        exit_code = 1

    class Bad(Base):
        pass

    assert cli_app.usage_error_class(Bad) is Bad
    monkeypatch.setattr(cli_app, "UsageError", typer.BadParameter)  # the last resort, end to end
    import kernel_advisor.cli  # noqa: F401

    result = runner.invoke(cli_app.app, ["profile", "m.py", "--dtype", "float64"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "advisor: error: invalid --dtype 'float64' — use one of keep, float32, bfloat16, float16"]


def test_typer_prints_the_wording_usage_line_rewrites(monkeypatch):
    (_, choice), (_, extra) = _raw_usage_errors(
        monkeypatch, ["profile", "m.py", "--dtype", "float64"], ["profile", "m.py", "--json", "true"])
    assert cli_app.PYDANTIC_VALUE_ERROR in choice
    assert cli_app.GIVEN_CHOICE.search(choice).group(1) == "'float64'"
    assert cli_app.EXTRA_ARGUMENTS.fullmatch(extra).group(1) == "true"


def test_other_wording_keeps_typers_text(monkeypatch):
    import kernel_advisor.cli  # noqa: F401

    profile = typer.main.get_command(cli_app.app).commands["profile"]
    dtype = next(p for p in profile.params if p.name == "dtype")
    changed = typer.BadParameter("'float64' is no choice", param=dtype)
    assert cli_app._usage_line(changed, "advisor profile") == (
        "invalid --dtype value — use one of keep, float32, bfloat16, float16")
    extra = cli_app.UsageError("Unexpected arguments: true")
    assert cli_app._usage_line(extra, "advisor profile") == (
        "Unexpected arguments: true — see `advisor profile --help`")
