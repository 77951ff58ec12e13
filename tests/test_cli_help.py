"""What a new user sees first: the help, the bare command, and a mistyped value.

In-process through typer's CliRunner (stderr kept apart), as the console script runs.
"""
from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

import kernel_advisor.cli

runner = CliRunner()


def advisor(*args):
    return runner.invoke(kernel_advisor.cli.app, [str(a) for a in args])


def _command_paths() -> list[tuple[str, ...]]:
    paths, todo = [], [((), typer.main.get_command(kernel_advisor.cli.app))]
    while todo:
        path, command = todo.pop()
        paths.append(path)
        todo += [((*path, name), sub) for name, sub in getattr(command, "commands", {}).items()]
    return sorted(paths)


def _row(help_text: str, option: str) -> str:
    """The help row of `option` (its first line)."""
    rows = [line for line in help_text.splitlines() if re.search(rf"│ {re.escape(option)}\b", line)]
    assert rows, f"no row for {option} in:\n{help_text}"
    return rows[0]


@pytest.mark.parametrize("path", _command_paths(), ids=lambda p: " ".join(p) or "advisor")
def test_no_help_shows_a_bool_type(path):
    result = advisor(*path, "--help")
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.stdout and "BOOLEAN" not in result.stdout
    assert "<" not in _row(result.stdout, "--help")


def test_flags_show_no_value_and_options_keep_theirs():
    text = advisor("profile", "--help").stdout
    for flag in ("--json", "--fsdp", "--help"):
        row = _row(text, flag)
        assert "<" not in row.split("│")[1], row  # nothing between the flag and its help
    assert " N " in _row(text, "--steps")
    assert "auto|cuda|cpu" in _row(text, "--device")
    root = advisor("--help").stdout
    assert "<" not in _row(root, "--debug")


@pytest.mark.parametrize("args", [(), ("rules",)], ids=["advisor", "advisor rules"])
def test_a_bare_group_prints_its_help_and_exits_0(args):
    result = advisor(*args)
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.stdout and "Commands" in result.stdout
    assert result.stderr == ""


@pytest.mark.parametrize("args,line", [
    (("profile", "m.py", "--dtype", "float64"),
     "advisor: error: invalid --dtype 'float64' — use one of keep, float32, bfloat16, float16"),
    (("profile", "m.py", "--device", "gpu"), "advisor: error: invalid --device 'gpu' — use one of auto, cuda, cpu"),
    (("try-kernel", "m.py", "--autocast", "float64"),
     "advisor: error: invalid --autocast 'float64' — use one of bfloat16, float16"),
    (("recommend", "--format", "html"), "advisor: error: invalid --format 'html' — use one of table, json, markdown"),
])
def test_a_value_outside_the_choices_is_one_clean_line(args, line):
    result = advisor(*args)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [line]
    assert "Value error" not in result.stderr and result.stdout == ""


@pytest.mark.parametrize("value", ["true", "False", "1"])
def test_a_flag_given_a_value_says_flags_take_none(value):
    result = advisor("profile", "m.py", "--json", value)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"advisor: error: unexpected argument '{value}': flags such as --json take no value — pass the flag "
        "alone to turn it on, leave it out to keep it off"]


def test_other_usage_errors_keep_the_help_pointer_without_pydantic_wording():
    result = advisor("profile", "m.py", "--steps", "many")
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("advisor: error: Invalid value for '--steps'") and line.endswith(" profile --help`")
    assert "Value error" not in line
    extra = advisor("profile", "m.py", "extra.py")
    assert extra.exit_code == 1 and "unexpected extra argument" in extra.stderr
    assert extra.stderr.rstrip().endswith(" profile --help`")  # CliRunner's program name is not `advisor`


PYTHON_TYPE = re.compile(r"<[^>\n]*>|\brange\b|\[x\s*[<>]=|\b(?:INTEGER|FLOAT|TEXT)\b")


@pytest.mark.parametrize("path", _command_paths(), ids=lambda p: " ".join(p) or "advisor")
def test_help_shows_words_not_python_types(path):
    # `<list[Path]>`, `<int range> [x>=1]`, `<auto|cuda|cpu>`: a person reads FILE, N, auto|cuda|cpu.
    result = advisor(*path, "--help")
    assert result.exit_code == 0, result.output
    assert PYTHON_TYPE.findall(result.output) == [], result.output


@pytest.mark.parametrize("path, option, word", [
    (("profile",), "--threads", "N"), (("profile",), "--out", "DIR"), (("recommend",), "--rules", "FILE"),
    (("recommend",), "--top", "N [at least 1]"), (("profile",), "--device", "auto|cuda|cpu"),
])
def test_help_names_values_in_words(path, option, word):
    assert word in _row(advisor(*path, "--help").output, option)
