"""Model files and run directories that fight back: each ends in one clear line, exit 1, nothing kept.

A forward that calls sys.exit(), raises GeneratorExit, a backward that raises, tensors on the
meta device, a forward that runs no operator; run directories damaged after they were written
(a column gone, a header without rows, JSON nested past Python's recursion limit). Each must
end with one `advisor: error: <problem> — <fix>` line naming the file (and the line in the
user's code where there is one), no traceback, nothing partial under ADVISOR_HOME, no new run,
and `latest` unchanged. A few run again as real processes, where SystemExit means what it
means to a console script.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from battery.checks import (REPO, assert_clean_failure, assert_nothing_partial, assert_result_fails, invoke,
                            latest_text, previous_run)
from run_factory import gpt_like_ops, recommendations_doc, write_run

HEADER = "import sys\nimport torch\nfrom torch import nn\n\n\n"
INPUTS = "\n\ndef get_inputs():\n    return [torch.randn(4, 8)]\n"
LINEAR = ("class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
          "        self.lin = nn.Linear(8, 8)\n\n    def forward(self, x):\n        return self.lin(x)\n")


def forward_doing(body: str) -> str:
    """A model whose forward (line 8 of the file) is `body`."""
    return HEADER + "class Model(nn.Module):\n    def forward(self, x):\n        " + body + "\n" + INPUTS


MODELS = {
    "exit0.py": forward_doing("sys.exit(0)"),
    "exit3.py": forward_doing("sys.exit(3)"),
    "exit_message.py": forward_doing('raise SystemExit("bye from forward")'),
    "generator_exit.py": forward_doing("raise GeneratorExit"),
    "keyboard.py": forward_doing("raise KeyboardInterrupt"),
    "identity.py": forward_doing("return x"),
    "loss_exits.py": HEADER + LINEAR + "\n\ndef loss_fn(output):\n    sys.exit(0)\n" + INPUTS,
    "bad_backward.py": HEADER + textwrap.dedent("""\
        class Double(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                raise ValueError("fight-back: no gradient today")


        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(8, 8)

            def forward(self, x):
                return Double.apply(self.lin(x))
        """) + INPUTS,
    "meta_input.py": HEADER + LINEAR + "\n\ndef get_inputs():\n    return [torch.randn(4, 8, device='meta')]\n",
    "meta_param.py": HEADER + textwrap.dedent("""\
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(8, 8, device="meta")

            def forward(self, x):
                return self.lin(x)
        """) + INPUTS,
    "meta_buffer.py": HEADER + textwrap.dedent("""\
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("scale", torch.ones(8, device="meta"))

            def forward(self, x):
                return x * self.scale
        """) + INPUTS,
    "identity_entry.py": HEADER + "def passthrough(x):\n    return x\n\n\ndef build():\n"
                         "    return passthrough, [torch.randn(4, 8)]\n",
    "good.py": HEADER + LINEAR + INPUTS,
}


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]  # "{m}/" is the directory of the model files, "{run}" the complete run, "{tmp}" scratch
    code: int
    says: tuple[str, ...]
    damage: str | None = None  # a function of this module that damages a copy of the run


def profile(model: str, *extra: str) -> tuple[str, ...]:
    return ("profile", f"{{m}}/{model}", "--device", "cpu", "--steps", "1", "--warmup", "0", *extra)


MODEL_CASES = [
    # sys.exit(0) used to end the advisor with 0 and no output, sys.exit(3) with 3 and no word.
    Case("forward-sys-exit-0", profile("exit0.py"), 1, ("exit0.py:8 in forward", "SystemExit(0)", "sys.exit()")),
    Case("forward-sys-exit-3", profile("exit3.py"), 1, ("exit3.py:8 in forward", "SystemExit(3)")),
    Case("forward-system-exit-message", profile("exit_message.py"), 1,
         ("exit_message.py:8 in forward", "SystemExit('bye from forward')")),
    Case("forward-generator-exit", profile("generator_exit.py"), 1,
         ("generator_exit.py:8 in forward", "GeneratorExit")),
    Case("loss-fn-sys-exit", profile("loss_exits.py", "--mode", "train"), 1,
         ("loss_exits.py:16 in loss_fn", "SystemExit(0)", "while calling loss_fn(output)")),
    # was exit 4 "internal error": the user's backward, at their line
    Case("custom-backward-raises", profile("bad_backward.py", "--mode", "train"), 1,
         ("bad_backward.py:13 in backward", "ValueError: fight-back: no gradient today", "while running backward")),
    # was exit 4 "Cannot copy out of meta tensor"
    Case("meta-input", profile("meta_input.py"), 1,
         ("meta_input.py:15 in get_inputs", "meta device", "inputs[0]", "without device='meta'")),
    Case("meta-parameter", profile("meta_param.py"), 1,
         ("meta_param.py:7 in __init__", "parameter 'lin.weight' (and 1 more) is on the meta device", "to_empty")),
    Case("meta-buffer", profile("meta_buffer.py"), 1, ("meta_buffer.py:7 in __init__", "buffer 'scale'")),
    # was exit 0 with an empty table, made `latest`
    Case("forward-runs-no-operator", profile("identity.py"), 1,
         ("identity.py:7 in forward", "ran no PyTorch operator", "nothing to profile")),
    Case("entry-runs-no-operator", profile("identity_entry.py", "--entry", "build"), 1,
         ("identity_entry.py:6 in passthrough", "ran no PyTorch operator")),
    # Ctrl-C keeps its own documented code
    Case("forward-keyboard-interrupt", profile("keyboard.py"), 130, ("interrupted", "last complete run is unchanged")),
]

RUN_CASES = [
    *[Case(f"ops-missing-column-{cmd}", (*args, "{tmp}/damaged"), 1,
           ("damaged/ops.csv is damaged: it lacks the column device_time_total_s", "profile again"), "drop_ops_column")
      for cmd, args in (("recommend", ("recommend",)), ("report", ("report",)), ("compare", ("compare", "{run}")))],
    Case("ops-missing-one-analysis-column", ("report", "{tmp}/damaged"), 1,
         ("ops.csv is damaged: it lacks the column verdict",), "drop_verdict"),
    Case("sequence-missing-column", ("recommend", "{tmp}/damaged"), 1,
         ("sequence.csv is damaged: it lacks the column step",), "drop_sequence_column"),
    # compare divided by the total device time of no rows: ZeroDivisionError, exit 4
    *[Case(f"ops-header-only-{cmd}", (*args,), 1, ("damaged/ops.csv is damaged: it has a header but no rows",),
           "header_only_ops")
      for cmd, args in (("compare-a", ("compare", "{tmp}/damaged", "{run}")),
                        ("compare-b", ("compare", "{run}", "{tmp}/damaged")),
                        ("recommend", ("recommend", "{tmp}/damaged")), ("report", ("report", "{tmp}/damaged")))],
    # json's parser raised RecursionError: exit 4
    *[Case(f"run-json-nested-too-deep-{cmd}", (*args, "{tmp}/damaged"), 1,
           ("damaged/run.json is corrupted (JSON nested too deeply to read)",), "deep_run_json")
      for cmd, args in (("recommend", ("recommend",)), ("report", ("report",)), ("compare", ("compare", "{run}")))],
    Case("run-json-wrong-type", ("report", "{tmp}/damaged"), 1,
         ("damaged/run.json is damaged: steps has the wrong type",), "steps_as_text"),
    Case("json-cell-nested-too-deep", ("recommend", "{tmp}/damaged"), 1,
         ("ops.csv: a input_shapes cell is JSON nested too deeply",), "deep_json_cell"),
    Case("recommendations-json-nested-too-deep", ("report", "{tmp}/damaged"), 1,
         ("recommendations.json is damaged (JSON nested too deeply to read)",), "deep_recommendations"),
    Case("try-kernel-json-nested-too-deep", ("report", "{tmp}/damaged"), 1,
         ("try_kernel.json is damaged (JSON nested too deeply to read)",), "deep_try_kernel"),
]

CASES = MODEL_CASES + RUN_CASES


# ---------------------------------------------------------------- ways to damage a copy of the run

def _rewrite_csv(path: Path, edit) -> None:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    with open(path, "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows(edit(rows))


def _without_column(name: str):
    def edit(rows):
        i = rows[0].index(name)
        return [r[:i] + r[i + 1:] for r in rows]
    return edit


def drop_ops_column(run: Path) -> None:
    _rewrite_csv(run / "ops.csv", _without_column("device_time_total_s"))


def drop_verdict(run: Path) -> None:
    _rewrite_csv(run / "ops.csv", _without_column("verdict"))


def drop_sequence_column(run: Path) -> None:
    _rewrite_csv(run / "sequence.csv", _without_column("step"))


def header_only_ops(run: Path) -> None:
    _rewrite_csv(run / "ops.csv", lambda rows: rows[:1])


DEEP = "[" * 200_000 + "]" * 200_000


def deep_run_json(run: Path) -> None:
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps(meta)[:-1] + ', "extra": ' + DEEP + "}")


def steps_as_text(run: Path) -> None:
    meta = json.loads((run / "run.json").read_text())
    meta["steps"] = "two"
    (run / "run.json").write_text(json.dumps(meta))


def deep_json_cell(run: Path) -> None:
    def edit(rows):
        i = rows[0].index("input_shapes")
        rows[1][i] = DEEP
        return rows
    _rewrite_csv(run / "ops.csv", edit)


def deep_recommendations(run: Path) -> None:
    (run / "recommendations.json").write_text('{"schema_version": 3, "x": ' + DEEP + "}")


def deep_try_kernel(run: Path) -> None:
    (run / "try_kernel.json").write_text(DEEP)


# ---------------------------------------------------------------- the cases, in-process

@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / ".advisor"
    monkeypatch.setenv("ADVISOR_HOME", str(home))
    monkeypatch.setenv("ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ADVISOR_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    return home


def write_models(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, source in MODELS.items():
        (directory / name).write_text(source)
    return directory


def prepared_args(case: Case, tmp: Path, home: Path) -> list[str]:
    models = write_models(tmp / "models")
    run = previous_run(home, recommendations=recommendations_doc())
    if case.damage is not None:
        damaged = tmp / "damaged"
        shutil.copytree(run, damaged)
        globals()[case.damage](damaged)
    return [a.replace("{m}", str(models)).replace("{run}", str(run)).replace("{tmp}", str(tmp)) for a in case.args]


def runs_kept(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "runs").iterdir())


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_fights_back_with_one_clear_line(case, home, tmp_path):
    args = prepared_args(case, tmp_path, home)
    before, kept = latest_text(home), runs_kept(home)
    result = invoke(*args)
    line = assert_result_fails(result, case.code, case.says)
    assert "internal error" not in line
    assert_nothing_partial(home, before)
    assert runs_kept(home) == kept  # no run written, not even an empty one


def test_the_cases_can_tell_a_good_model_from_a_bad_one(home, tmp_path):
    """The same harness, a model that does not fight back: exit 0 and a new run that is latest."""
    models = write_models(tmp_path / "models")
    previous_run(home)
    result = invoke("profile", models / "good.py", "--device", "cpu", "--steps", "1", "--warmup", "0")
    assert result.exit_code == 0, result.stderr
    assert "good-" in latest_text(home)


def test_the_undamaged_run_reads(home):
    """Every damaged copy starts from a run that recommend, report and compare accept as it is."""
    run = previous_run(home, recommendations=recommendations_doc())
    for args in (("recommend", run), ("report", run), ("compare", run, run)):
        result = invoke(*args)
        assert result.exit_code == 0, (args, result.stderr)


@pytest.mark.parametrize("command", ["recommend", "report", "compare"])
def test_a_run_without_the_optional_columns_still_reads(home, tmp_path, command):
    """Runs of schema 1 from before first_seq and max_blocks existed are old, not damaged."""
    run = previous_run(home)
    older = tmp_path / "older"
    shutil.copytree(run, older)
    for column in ("first_seq", "max_blocks", "input_strides", "concrete_inputs", "region"):
        _rewrite_csv(older / "ops.csv", _without_column(column))
    result = invoke(command, *((run, older) if command == "compare" else (older,)))
    assert result.exit_code == 0, result.stderr


def test_debug_shows_the_users_frame_of_a_system_exit(home, tmp_path):
    models = write_models(tmp_path / "models")
    result = invoke("--debug", *[a.replace("{m}", str(models)) for a in profile("exit3.py")])
    assert result.exit_code == 1
    assert "Traceback" in result.stderr and 'exit3.py", line 8, in forward' in result.stderr


def test_the_python_api_refuses_meta_tensors_too():
    import torch

    from kernel_advisor import api
    from kernel_advisor.errors import UserInputError

    with pytest.raises(UserInputError, match="parameter 'weight'.*meta device"):
        api.profile(torch.nn.Linear(8, 8, device="meta"), [torch.randn(2, 8)], device="cpu")
    with pytest.raises(UserInputError, match=r"meta device \(inputs\[0\]\)"):
        api.profile(torch.nn.Linear(8, 8), [torch.randn(2, 8, device="meta")], device="cpu")


# ---------------------------------------------------------------- the guard itself

@pytest.mark.parametrize("raised, shown", [(SystemExit(0), "SystemExit: 0"), (SystemExit(3), "SystemExit: 3"),
                                           (GeneratorExit(), "GeneratorExit")])
def test_the_guard_catches_base_exceptions_that_escape_everything_else(raised, shown, capsys, monkeypatch):
    """A BaseException from a path that does not wrap user code is still one line, exit 4."""
    import typer

    from kernel_advisor.cli.app import _STATE, guarded

    monkeypatch.setitem(_STATE, "debug", False)  # an earlier in-process `--debug` must not count

    def command():
        raise raised

    with pytest.raises(typer.Exit) as exit_info:
        guarded(command)()
    assert exit_info.value.exit_code == 4
    err = capsys.readouterr().err
    assert err == f"advisor: error: internal error: {shown} — rerun with --debug and report it\n"


def test_the_guard_leaves_ctrl_c_its_code(capsys):
    import typer

    from kernel_advisor.cli.app import guarded

    def command():
        raise KeyboardInterrupt

    with pytest.raises(typer.Exit) as exit_info:
        guarded(command)()
    assert exit_info.value.exit_code == 130
    assert "interrupted" in capsys.readouterr().err


# ---------------------------------------------------------------- the same, as real processes

# In a real process SystemExit is what ends it: sys.exit(0) in forward used to exit 0, silently.
SUBPROCESS_CASES = ["forward-sys-exit-0", "forward-sys-exit-3", "forward-generator-exit", "custom-backward-raises",
                    "forward-runs-no-operator"]


def child_env(home: Path, tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "ADVISOR_DEBUG"}
    env.update(ADVISOR_HOME=str(home), ADVISOR_CACHE_DIR=str(tmp / "cache"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])))
    return env


@pytest.fixture(scope="module")
def children(tmp_path_factory):
    """Every subprocess case started at once (torch's import dominates), then collected."""
    started = {}
    for case in [c for c in CASES if c.id in SUBPROCESS_CASES]:
        tmp = tmp_path_factory.mktemp(case.id)
        home = tmp / ".advisor"
        args = prepared_args(case, tmp, home)
        before, kept = latest_text(home), runs_kept(home)
        proc = subprocess.Popen([sys.executable, "-m", "kernel_advisor", *args], cwd=tmp, env=child_env(home, tmp),
                                text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        started[case.id] = (proc, home, before, kept)
    done = {}
    for key, (proc, home, before, kept) in started.items():
        out, err = proc.communicate(timeout=300)
        done[key] = (proc.returncode, out, err, home, before, kept)
    return done


@pytest.mark.slow  # every case as a real process: ~15 s of process starts
@pytest.mark.parametrize("case_id", SUBPROCESS_CASES)
def test_subprocess_gives_the_same_answer(children, case_id):
    case = next(c for c in CASES if c.id == case_id)
    code, out, err, home, before, kept = children[case_id]
    assert_clean_failure(case.code, code, out, err, case.says)
    assert_nothing_partial(home, before)
    assert runs_kept(home) == kept


# ---------------------------------------------------------------- default run names never collide

def test_a_default_name_taken_meanwhile_moves_to_the_next_free_one(home, monkeypatch):
    """Two profiles of one model finishing in the same second: the second gets `-2`, both are kept."""
    from kernel_advisor.collect import rundir

    monkeypatch.setattr(rundir, "time", SimpleNamespace(strftime=lambda fmt, *a: "20260101-000000"))
    first, second = rundir.default_run_dir("mlp"), rundir.default_run_dir("mlp")
    assert first == second == home / "runs" / "mlp-20260101-000000"  # neither written yet
    for name in (first, second):
        write_run(name, gpt_like_ops())  # write_run goes through RunWriter
    assert runs_kept(home) == ["mlp-20260101-000000", "mlp-20260101-000000-2"]


def test_a_name_the_user_chose_is_never_renamed(home, tmp_path):
    from kernel_advisor.errors import UserInputError

    out = tmp_path / "mine"
    write_run(out, gpt_like_ops())
    with pytest.raises(UserInputError, match="already exists and is not empty"):
        write_run(out, gpt_like_ops())


def test_the_profile_command_reports_where_the_run_went(home, tmp_path, monkeypatch):
    """profile's default name is taken while it runs: the run, its summary and `latest` say `-2`."""
    from kernel_advisor.collect import rundir

    models = write_models(tmp_path / "models")
    monkeypatch.setattr(rundir, "time", SimpleNamespace(strftime=lambda fmt, *a: "20260101-000000"))

    real = rundir.default_run_dir

    def taken_meanwhile(stem):
        path = real(stem)
        write_run(path, gpt_like_ops())  # another process finishing first under the same name
        return path

    from kernel_advisor import pipeline

    monkeypatch.setattr(pipeline, "default_run_dir", taken_meanwhile)  # the CLI profiles through it (api.py)
    result = invoke("profile", models / "good.py", "--device", "cpu", "--steps", "1", "--warmup", "0")
    assert result.exit_code == 0, result.stderr
    assert runs_kept(home) == ["good-20260101-000000", "good-20260101-000000-2", "latest"]
    assert latest_text(home).strip() == "good-20260101-000000-2"
    assert "good-20260101-000000-2" in result.stdout.replace("\n", "")


# Both processes pick their name, then wait for each other before profiling: without the
# rename-time check, the second one to finish failed ("Directory not empty") and lost its run.
RACER = """
import os, sys, time
from pathlib import Path
from types import SimpleNamespace
from kernel_advisor.collect import rundir

rundir.time = SimpleNamespace(strftime=lambda fmt, *a: "20260101-000000")
real = rundir.default_run_dir
barrier = Path(sys.argv[1])

def default_run_dir(stem):
    path = real(stem)
    Path(f"{barrier}-{os.getpid()}").touch()  # this one has its name; wait for the other
    deadline = time.monotonic() + 120
    while len(list(barrier.parent.glob(barrier.name + "-*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    return path

rundir.default_run_dir = default_run_dir  # profile imports it when it runs
sys.argv = ["advisor", *sys.argv[2:]]
from kernel_advisor.cli import main
main()
"""


def test_two_processes_finishing_under_one_name_both_keep_their_run(home, tmp_path):
    models = write_models(tmp_path / "models")
    env = child_env(home, tmp_path)
    command = [sys.executable, "-c", RACER, str(tmp_path / "ready"), "profile", str(models / "good.py"),
               "--device", "cpu", "--steps", "1", "--warmup", "0"]
    procs = [subprocess.Popen(command, cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE) for _ in range(2)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    assert runs_kept(home) == ["good-20260101-000000", "good-20260101-000000-2", "latest"]
    assert latest_text(home).strip() in ("good-20260101-000000", "good-20260101-000000-2")
    assert_nothing_partial(home, latest_text(home))
