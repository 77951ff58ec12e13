"""What every bad input must look like from outside, shared by the battery and the Ctrl-C tests.

One `advisor: error: <problem> — <fix>` line on stderr, the documented exit code, no
traceback, nothing partial under ADVISOR_HOME and `latest` where it was.
"""
from __future__ import annotations

import sys
from pathlib import Path

from typer.testing import CliRunner

BATTERY = Path(__file__).resolve().parent
REPO = BATTERY.parents[1]
ERROR_PREFIX = "advisor: error: "
PARTIAL_MARKS = (".partial-", ".tmp-")  # RunWriter's and the atomic writers' temporary names

sys.path.insert(0, str(BATTERY.parent))  # run_factory lives in tests/
from run_factory import gpt_like_ops, write_run  # noqa: E402


_runner = CliRunner()


def invoke(*args):
    """The real CLI in-process: the same click/typer path as the console script."""
    import kernel_advisor.cli

    return _runner.invoke(kernel_advisor.cli.app, [str(a) for a in args])


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ERROR_PREFIX.strip() in line]


def one_error_line(stderr: str) -> str:
    lines = error_lines(stderr)
    assert len(lines) == 1, f"want exactly one error line, got {len(lines)}:\n{stderr}"
    line = lines[0]
    assert line.startswith(ERROR_PREFIX), line
    return line


def assert_clean_failure(code: int, exit_code: int, stdout: str, stderr: str,
                         says: tuple[str, ...] = ()) -> str:
    """The documented code, one `problem — fix` line naming `says`, no traceback."""
    assert exit_code == code, f"exit {exit_code}, want {code}\nstderr:\n{stderr}\nstdout:\n{stdout[-2000:]}"
    assert "Traceback" not in stderr and "Traceback" not in stdout, stderr
    line = one_error_line(stderr)
    problem, sep, fix = line[len(ERROR_PREFIX):].rpartition(" — ")
    assert sep and problem.strip() and fix.strip(), f"not '<problem> — <fix>': {line}"
    for text in says:
        assert text in line, f"{text!r} not in {line!r}"
    return line


def assert_result_fails(result, code: int, says: tuple[str, ...] = ()) -> str:
    # An exception that escaped the CLI would show up here, with exit code 1.
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return assert_clean_failure(code, result.exit_code, result.stdout, result.stderr, says)


def leftovers(home: Path) -> list[Path]:
    return [p for p in Path(home).rglob("*") if any(m in p.name for m in PARTIAL_MARKS)]


def latest_text(home: Path) -> str | None:
    latest = Path(home) / "runs" / "latest"
    return latest.read_text() if latest.is_file() else None


def assert_nothing_partial(home: Path, latest_before: str | None) -> None:
    assert leftovers(home) == [], leftovers(home)
    assert latest_text(home) == latest_before


def previous_run(home: Path, name: str = "prev-run", **meta) -> Path:
    """A complete run made `latest`, as if an earlier `advisor profile` had finished."""
    path = write_run(Path(home) / "runs" / name, gpt_like_ops(), **meta)
    # Under `home`, whatever ADVISOR_HOME says: module-scoped fixtures run outside a test's
    # environment, and set_latest would write the working directory's .advisor.
    (Path(home) / "runs" / "latest").write_text(f"{name}\n")
    return path
