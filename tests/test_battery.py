"""The bad-input battery: every bad input gets one clear line and a documented code.

Each case runs through the real CLI in-process (typer's CliRunner: the console script's
code path, stderr kept apart) with a complete earlier run as `latest`, and must end with:
the documented exit code, exactly one `advisor: error: <problem> — <fix>` line naming the
problem, no traceback, nothing partial under ADVISOR_HOME, `latest` unchanged. A subset
runs again as real `python -m kernel_advisor` subprocesses, all started at once: each one
spends seconds importing torch, so one after the other would dominate the suite.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import pytest
import torch

import kernel_advisor
from battery import damage
from battery.checks import (BATTERY, REPO, assert_clean_failure, assert_nothing_partial, assert_result_fails,
                            invoke, latest_text, previous_run)

B = str(BATTERY)
PACKAGE_DIR = Path(kernel_advisor.__file__).resolve().parent
Setup = Callable[[Path, Path], None]
SOFTMAX = ("try-kernel", f"{B}/softmax_model.py", "--device", "cpu", "--op", "aten::_softmax",
           "--check-only", "--draws", "1", "--no-compile", "--impl")


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]  # "{tmp}" is the test's scratch dir, "{run}" the complete run that is latest
    code: int
    says: tuple[str, ...]  # must all be in the error line
    setup: Optional[Setup] = None
    with_previous_run: bool = True
    stdout_says: tuple[str, ...] = ()
    needs_no_gpu: bool = False


def profile(model: str, *extra: str) -> tuple[str, ...]:
    return ("profile", model if model.startswith("{") else f"{B}/{model}", "--device", "cpu",
            "--steps", "1", "--warmup", "0", *extra)


MODEL_CASES = [
    Case("model-missing", profile("does_not_exist.py"), 1, ("does_not_exist.py does not exist",)),
    Case("model-is-a-directory", ("profile", B, "--device", "cpu"), 1, ("is a directory",)),
    Case("model-not-python", profile("rules_bad_yaml.yaml"), 1, ("is not a Python file",)),
    Case("model-binary", profile("{tmp}/binary.py"), 1, ("not a text Python file",), damage.binary_model),
    Case("model-syntax-error", profile("syntax_error.py"), 1, ("syntax_error.py:5: syntax error",)),
    Case("model-import-error", profile("import_error.py"), 1,
         ("import_error.py:3", "install the missing module 'advisor_battery_no_such_module'")),
    Case("no-model-no-entry", profile("no_model.py"), 1, ("defines no `Model` class", "--entry")),
    Case("entry-missing", profile("no_model.py", "--entry", "nothere"), 1, ("has no function 'nothere'",)),
    Case("get-inputs-missing", profile("no_get_inputs.py"), 1, ("no get_inputs()",)),
    Case("get-inputs-raises", profile("get_inputs_raises.py"), 1,
         ("get_inputs_raises.py:11 in get_inputs", "ValueError: battery: no inputs today")),
    Case("get-inputs-not-tensors", profile("get_inputs_not_tensors.py"), 1, ("returned no tensors",)),
    Case("constructor-raises", profile("ctor_raises.py"), 1,
         ("ctor_raises.py:7 in __init__", "constructing Model")),
    # The user's frame (line 7, in their helper), not the advisor's.
    Case("forward-raises", profile("forward_raises.py"), 1,
         ("forward_raises.py:7 in helper", "mat1 and mat2 shapes cannot be multiplied")),
    Case("out-of-memory", profile("oom.py"), 2, ("ran out of memory", "smaller inputs", "--dtype bfloat16")),
    Case("cuda-without-gpu", ("profile", f"{B}/softmax_model.py", "--device", "cuda"), 2,
         ("no CUDA device is visible", "--device cpu"), needs_no_gpu=True),
    Case("steps-zero", profile("softmax_model.py", "--steps", "0"), 1, ("--steps must be at least 1 (got 0)",)),
    Case("steps-negative", profile("softmax_model.py", "--steps", "-3"), 1, ("(got -3)",)),
    Case("warmup-negative", profile("softmax_model.py", "--warmup", "-1"), 1, ("--warmup cannot be negative",)),
    Case("out-under-a-file", profile("softmax_model.py", "--out", "{tmp}/a-file/run"), 1,
         ("a-file is a file, not a directory",), damage.file_as_parent),
    Case("out-not-empty", profile("softmax_model.py", "--out", "{tmp}/taken"), 1,
         ("already exists and is not empty",), damage.non_empty_out),
    Case("unknown-option", profile("softmax_model.py", "--stepz", "3"), 1,
         ("No such option: --stepz", "profile --help")),
    Case("bad-choice", profile("softmax_model.py", "--dtype", "float8"), 1, ("--dtype", "float8")),
]

RUN_CASES = [
    Case("recommend-no-run-yet", ("recommend",), 1, ("no run yet", "advisor profile"), with_previous_run=False),
    Case("report-no-run-yet", ("report",), 1, ("no run yet",), with_previous_run=False),
    Case("older-schema", ("report", "{tmp}/old-run"), 1, ("run schema 0", "profile the model again"),
         damage.older_schema),
    Case("corrupted-run-json", ("recommend", "{tmp}/corrupt-run"), 1, ("run.json is corrupted",),
         damage.corrupted_run_json),
    Case("half-written-run", ("roofline", "{tmp}/half-run"), 1, ("not a complete run", "ops.csv"),
         damage.half_written_run),
    Case("truncated-table", ("compare", "{run}", "{tmp}/truncated-run"), 1, ("ops.csv is truncated",),
         damage.truncated_ops),
    Case("garbage-table", ("recommend", "{tmp}/garbage-run"), 1, ("is not a run table",), damage.garbage_ops),
    Case("damaged-cell", ("report", "{tmp}/damaged-cell-run"), 1, ("non-numeric values in device_time_total_s",),
         damage.damaged_cell),
    Case("latest-points-nowhere", ("recommend",), 1, ("no longer exists",), damage.stale_latest),
    Case("partial-dir-by-hand", ("report", "{tmp}/.mlp-20260101-000000.partial-4242"), 1,
         ("not a complete run",), damage.partial_dir),
    Case("run-missing", ("compare", "{run}", "{tmp}/nope"), 1, ("run directory", "does not exist")),
    Case("report-dir-missing", ("report", "{run}", "-o", "{tmp}/no/such/dir/r.html"), 1, ("does not exist",)),
    Case("roofline-bad-suffix", ("roofline", "{run}", "-o", "{tmp}/chart.jpg"), 1, (".png or .svg",)),
    Case("import-missing", ("import", "{tmp}/nope.json"), 1, ("does not exist",)),
    Case("import-not-json", ("import", f"{B}/trace_not_json.json"), 1, ("has no traceEvents",)),
    Case("import-truncated", ("import", f"{B}/trace_truncated.json"), 1, ("is truncated",)),
    Case("import-no-ops", ("import", f"{B}/trace_empty.json"), 1, ("holds no operator events",)),
    Case("calibrate-cuda-without-gpu", ("calibrate", "--device", "cuda"), 2, ("no CUDA device",),
         needs_no_gpu=True),
]

RULE_CASES = [
    Case("rules-bad-yaml", ("rules", "validate", f"{B}/rules_bad_yaml.yaml"), 1,
         ("rules_bad_yaml.yaml:7: invalid YAML",)),
    Case("rules-unknown-key", ("rules", "validate", f"{B}/rules_unknown_key.yaml"), 1,
         ("rules_unknown_key.yaml:7: unknown key 'severity'",)),
    Case("rules-bad-type", ("rules", "validate", f"{B}/rules_bad_type.yaml"), 1,
         ("rules_bad_type.yaml:9", "must be numbers")),
    Case("rules-duplicate-id", ("rules", "validate", f"{B}/rules_duplicate_id.yaml"), 1,
         ("duplicate rule id 'team-twice'", "rules_duplicate_id.yaml:4")),
    Case("rules-python-tag", ("rules", "validate", f"{B}/rules_python_tag.yaml"), 1, ("is not allowed",)),
    Case("recommend-bad-rules", ("recommend", "--rules", f"{B}/rules_unknown_key.yaml"), 1,
         ("unknown key 'severity'",)),
    Case("rules-path-missing", ("recommend", "--rules", "{tmp}/nope.yaml"), 1, ("does not exist",)),
]

KERNEL_CASES = [
    Case("kernel-id-unknown", ("kernels", "verify", "nosuchkernel", "--device", "cpu"), 1,
         ("unknown kernel id 'nosuchkernel'", "choose one of")),
    Case("try-kernel-id-unknown", ("try-kernel", f"{B}/softmax_model.py", "nosuchkernel", "--device", "cpu"), 1,
         ("unknown kernel id 'nosuchkernel'",)),
    # Which kernel, and why it cannot run here.
    Case("capability-not-met", ("kernels", "verify", "cuda.softmax", "--device", "cpu"), 2,
         ("cuda.softmax cannot run on cpu", "need a CUDA GPU")),
    Case("try-capability-not-met", ("try-kernel", f"{B}/softmax_model.py", "cuda.softmax", "--device", "cpu"), 2,
         ("cuda.softmax cannot run here",)),
    Case("impl-file-missing", (*SOFTMAX, f"{B}/nope.py:good_softmax"), 1, ("nope.py does not exist",)),
    Case("impl-function-missing", (*SOFTMAX, f"{B}/user_kernels.py:nope"), 1, ("has no function 'nope'",)),
    Case("impl-not-callable", (*SOFTMAX, f"{B}/user_kernels.py:NOT_A_FUNCTION"), 1,
         ("has no function 'NOT_A_FUNCTION'",)),
    Case("impl-not-file-colon-function", (*SOFTMAX, f"{B}/user_kernels.py"), 1, ("is not FILE.py:FUNCTION",)),
    Case("impl-without-op", ("try-kernel", f"{B}/softmax_model.py", "--device", "cpu", "--impl",
                             f"{B}/user_kernels.py:good_softmax"), 1, ("--impl and --op go together",)),
    Case("op-unknown", ("try-kernel", f"{B}/softmax_model.py", "--device", "cpu", "--op", "aten::nosuch",
                        "--impl", f"{B}/user_kernels.py:good_softmax"), 1, ("unknown aten op 'aten::nosuch'",)),
    Case("reps-too-few", ("try-kernel", f"{B}/softmax_model.py", "--device", "cpu", "--reps", "2"), 1,
         ("--reps must be at least 3",)),
    # A candidate that cannot be called is FAILED before it runs (exit 3), with the reason.
    Case("impl-wrong-signature", (*SOFTMAX, f"{B}/user_kernels.py:wrong_signature_softmax"), 3,
         ("FAILED the correctness gate", "wrong_signature_softmax"),
         stdout_says=("cannot take the 3 arguments of aten::_softmax",)),
    Case("impl-raises", (*SOFTMAX, f"{B}/user_kernels.py:raising_softmax"), 3, ("FAILED",),
         stdout_says=("raised RuntimeError: battery: kernel launch failed",)),
    Case("impl-wrong-shape", (*SOFTMAX, f"{B}/user_kernels.py:wrong_shape_softmax"), 3, ("FAILED",),
         stdout_says=("shape [4, 15], expected [4, 16]",)),
    Case("impl-wrong-dtype", (*SOFTMAX, f"{B}/user_kernels.py:wrong_dtype_softmax"), 3, ("FAILED",),
         stdout_says=("dtype float64, expected float32",)),
    Case("impl-writes-nothing", (*SOFTMAX, f"{B}/user_kernels.py:writes_nothing_softmax"), 3, ("FAILED",),
         stdout_says=("writes_nothing_softmax: FAILED",)),
]

CASES = MODEL_CASES + RUN_CASES + RULE_CASES + KERNEL_CASES


def test_the_battery_is_big_enough_and_ids_are_unique():
    assert len(CASES) >= 25 and len({c.id for c in CASES}) == len(CASES)


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / ".advisor"
    monkeypatch.setenv("ADVISOR_HOME", str(home))
    monkeypatch.setenv("ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ADVISOR_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    return home


def prepared_args(case: Case, tmp: Path, home: Path) -> list[str]:
    run = previous_run(home) if case.with_previous_run else home / "runs" / "none"
    if case.setup is not None:
        case.setup(tmp, run)
    return [a.replace("{tmp}", str(tmp)).replace("{run}", str(run)) for a in case.args]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input_gets_one_clear_line(case, home, tmp_path):
    if case.needs_no_gpu and torch.cuda.is_available():
        pytest.skip("checks the no-GPU answer")
    args = prepared_args(case, tmp_path, home)
    before = latest_text(home)
    result = invoke(*args)
    line = assert_result_fails(result, case.code, case.says)
    # the user's frame, never one of ours
    assert str(PACKAGE_DIR) not in line and not re.search(r"\b(loader|runner|profiler)\.py:\d", line)
    for text in case.stdout_says:
        assert text in result.stdout, result.stdout
    assert_nothing_partial(home, before)


def test_python_tag_in_rules_never_runs(home):
    invoke("rules", "validate", f"{B}/rules_python_tag.yaml")
    assert not Path("/tmp/advisor-battery-pwned").exists()


def test_nvcc_missing_says_so(home, monkeypatch):
    import reference_kernels.registry as registry

    monkeypatch.setenv("PATH", str(home))  # a PATH without nvcc
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(registry, "_cuda_home", lambda: None)  # torch found /usr/local/cuda at import
    result = invoke("kernels", "verify", "cuda.softmax", "--device", "cpu")
    assert_result_fails(result, 2, ("cuda.softmax cannot run on cpu", "nvcc was not found"))


def test_nan_outputs_warn_name_the_output_and_profiling_goes_on(home):
    previous_run(home)
    before = latest_text(home)
    result = invoke(*profile("nan_output.py"))
    assert result.exit_code == 0, result.stderr
    assert not [line for line in result.stderr.splitlines() if "advisor: error:" in line]
    # 8*16 = 128 elements of log(-|x| - 1): all NaN
    assert "non-finite values: output['bad'] (128 NaN, 0 Inf of 128); profiling went on" in result.stderr
    assert latest_text(home) != before and "nan_output-" in latest_text(home)


@pytest.mark.parametrize("how", [["--debug"], []])
def test_debug_shows_the_traceback_once_asked(home, monkeypatch, how):
    if not how:
        monkeypatch.setenv("ADVISOR_DEBUG", "1")
    result = invoke(*how, *profile("forward_raises.py"))
    assert result.exit_code == 1
    assert "Traceback" in result.stderr and 'forward_raises.py", line 7, in helper' in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith("advisor: error:")]) == 1


def test_debug_does_not_leak_into_the_next_command(home):
    invoke("--debug", *profile("forward_raises.py"))
    assert "Traceback" not in invoke(*profile("forward_raises.py")).stderr


# ---------------------------------------------------------------- the same, as real processes

# One per exit code and per kind of input (model file, run dir, option, user kernel); the
# Ctrl-C cases are in test_interrupt.py.
SUBPROCESS_CASES = ["forward-raises", "out-of-memory", "impl-wrong-shape", "older-schema", "unknown-option"]
# `import triton` fails in the child: a module set to None in sys.modules raises ImportError.
NO_TRITON = ("import sys; sys.modules['triton'] = None; sys.argv[0] = 'advisor'; "
             "from kernel_advisor.cli import main; main()")


def _child_env(home: Path, tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "ADVISOR_DEBUG"}
    env.update(ADVISOR_HOME=str(home), ADVISOR_CACHE_DIR=str(tmp / "cache"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])))
    return env


@pytest.fixture(scope="module")
def children(tmp_path_factory):
    """Every subprocess case started at once (torch's import dominates), then collected."""
    started = {}
    for case in [c for c in CASES if c.id in SUBPROCESS_CASES] + [None]:
        tmp = tmp_path_factory.mktemp(case.id if case else "no-triton")
        home = tmp / ".advisor"
        if case is None:
            previous_run(home)
            command = [sys.executable, "-c", NO_TRITON, "kernels", "verify", "triton.softmax", "--device", "cpu"]
        else:
            command = [sys.executable, "-m", "kernel_advisor", *prepared_args(case, tmp, home)]
        before = latest_text(home)
        proc = subprocess.Popen(command, cwd=tmp, env=_child_env(home, tmp), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        started[case.id if case else "no-triton"] = (proc, home, before)
    done = {}
    for key, (proc, home, before) in started.items():
        out, err = proc.communicate(timeout=300)
        done[key] = (proc.returncode, out, err, home, before)
    return done


@pytest.mark.slow  # every case as a real process: ~10 s of process starts
@pytest.mark.parametrize("case_id", SUBPROCESS_CASES)
def test_subprocess_gives_the_same_answer(children, case_id):
    case = next(c for c in CASES if c.id == case_id)
    code, out, err, home, before = children[case_id]
    assert_clean_failure(case.code, code, out, err, case.says)
    assert_nothing_partial(home, before)


@pytest.mark.slow  # it shares the subprocess cases' fixture: ~10 s of process starts
def test_triton_missing_is_an_environment_error(children):
    code, out, err, home, before = children["no-triton"]
    assert_clean_failure(2, code, out, err, ("triton.softmax cannot run on cpu", "triton is not installed"))
    assert_nothing_partial(home, before)


# ---------------------------------------------------------------- --help and docs/cli.md

def command_paths() -> list[tuple[tuple[str, ...], object]]:
    """Every command and sub-command of the real app, with its click command."""
    import typer

    import kernel_advisor.cli

    out, todo = [], [((), typer.main.get_command(kernel_advisor.cli.app))]
    while todo:
        path, command = todo.pop()
        out.append((path, command))
        for name, sub in getattr(command, "commands", {}).items():
            todo.append(((*path, name), sub))
    return sorted(out, key=lambda pc: pc[0])


def squeeze(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("path", [p for p, _ in command_paths()], ids=lambda p: " ".join(p) or "advisor")
def test_every_help_ends_with_the_exit_codes(path):
    from kernel_advisor.errors import EXIT_CODE_HELP

    result = invoke(*path, "--help")
    assert result.exit_code == 0, result.output
    assert squeeze(EXIT_CODE_HELP) in squeeze(result.stdout)


def test_cli_md_documents_every_command_option_and_exit_code():
    text = (REPO / "docs" / "cli.md").read_text()
    sections = {s.split("`", 2)[1]: s for s in text.split("\n### ")[1:]}
    for path, command in command_paths():
        if not path or getattr(command, "commands", None) and path != ("kernels",):
            continue  # the app and `rules`: nothing of their own beyond their sub-commands
        heading = "advisor " + " ".join(path)
        assert heading in sections, f"docs/cli.md has no section for `{heading}`: regenerate it from --help"
        options = [o for p in command.params for o in p.opts if o.startswith("--") and o != "--help"]
        missing = [o for o in options if f"`{o}" not in sections[heading]]
        assert not missing, f"docs/cli.md does not list {missing} of `{heading}`: regenerate it from --help"
    for code in (0, 1, 2, 3, 4, 5, 130):
        assert f"\n| {code} |" in text


# ---------------------------------------------------------------- nothing executes code from data

PRODUCT_DIRS = ("kernel_advisor", "reference_kernels")
# (regex, files allowed to match it, why) - a new match anywhere else fails this test.
FORBIDDEN = [
    (r"(?<![\w.])(eval|exec)\s*\(", {"kernel_advisor/collect/loader.py"},
     "exec of the model file the user runs on purpose (docs/trust.md)"),
    (r"\byaml\.(load|load_all|unsafe_load|unsafe_load_all|full_load|full_load_all)\s*\(", set(),
     "YAML goes through yaml.SafeLoader / safe_load"),
    (r"\byaml\.(?!Safe|CSafe)\w*Loader\b", set(), "only SafeLoader builds Python objects from YAML safely"),
    (r"^\s*(import|from)\s+(pickle|cPickle|dill|cloudpickle|shelve|marshal|joblib)\b",
     {"kernel_advisor/collect/trace/pool.py"},
     "the trace reader pickles batches over pipes to worker processes it started; never from a file"),
    (r"\btorch\.load\s*\(|\b(np|numpy)\.load\s*\(|read_pickle|allow_pickle", set(), "no pickle from run directories"),
    (r"shell\s*=\s*True|\bos\.(system|popen)\s*\(", set(), "no shell: arguments are passed as lists"),
    (r"spec_from_file_location|exec_module|\brunpy\b", {"kernel_advisor/collect/loader.py"},
     "only the model loader imports a file by path"),
]


def code_lines():
    for top in PRODUCT_DIRS:
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if not line.lstrip().startswith("#"):
                    yield rel, number, line


@pytest.mark.parametrize("pattern, allowed, why", FORBIDDEN, ids=[f[0][:30] for f in FORBIDDEN])
def test_no_code_runs_from_data(pattern, allowed, why):
    regex = re.compile(pattern)
    hits = [f"{rel}:{n}: {line.strip()}" for rel, n, line in code_lines()
            if regex.search(line) and rel not in allowed and "SafeLoader" not in line]
    assert not hits, f"{why}:\n" + "\n".join(hits)


@pytest.mark.parametrize("line, caught", [
    ("exec(code, module.__dict__)", True), ("x = eval(text)", True), ("model.eval()", False),
    ("yaml.load(text)", True), ("yaml.load(text, Loader=yaml.FullLoader)", True), ("yaml.unsafe_load(f)", True),
    ("yaml.safe_load(text)", False), ("loader = yaml.SafeLoader(text)", False),
    ("import pickle", True), ("from dill import loads", True), ("state = torch.load(path)", True),
    ("subprocess.run(cmd, shell=True)", True), ("os.system('nvcc ...')", True), ("torch.compile(model)", False),
])
def test_the_forbidden_patterns_catch_what_they_should(line, caught):
    hits = [p for p, _, _ in FORBIDDEN if re.search(p, line) and "SafeLoader" not in line]
    assert bool(hits) is caught, hits


def test_report_escapes_what_the_model_and_trace_named(home):
    from run_factory import OpSpec, write_run

    evil_op = "<script>alert('op')</script>"
    ops = [OpSpec(evil_op, [[4, 4]], ["float32"], 2, 1e-3, region='<img src=x onerror="alert(1)">', flops=32.0,
                  bytes=128.0, compute_path="fp32", verdict="memory-bound")]
    run = write_run(home / "runs" / "evil", ops, model={"file": "<b>model</b>.py", "sha256": None, "entry": None})
    result = invoke("report", run, "-o", home / "evil.html")
    assert result.exit_code == 0, result.stderr
    page = (home / "evil.html").read_text()
    for raw in (evil_op, 'onerror="alert(1)"', "<b>model</b>"):
        assert raw not in page
    assert "&lt;script&gt;alert(&#x27;op&#x27;)&lt;/script&gt;" in page
