"""Names from a trace, a model or the file system never drive the terminal.

An op name, a model's exception message or a file name may hold ANSI colours, OSC 8
hyperlinks or rich markup; what reaches stdout and stderr shows them as text: control
characters escaped (\\u001b), markup printed as written.
"""
from __future__ import annotations

import json

import pytest

from battery.hostile import fails_cleanly, invoke, renamed_trace
from battery.hostile import home  # noqa: F401 - fixture

ESC_NAME = "aten::\x1b[31mred\x1b]8;;http://evil.example\x07link\x1b]8;;\x07\x9b2J"
MARKUP_NAME = "[link=http://evil.example]click[/link][bold red]x"


def no_controls(text: str) -> None:
    bad = sorted({hex(ord(c)) for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f})
    assert not bad, f"control characters reached the terminal: {bad}"


@pytest.mark.parametrize("args", [(), ("--json",)], ids=["table", "json"])
def test_escape_sequences_in_op_names_are_shown_as_text(home, tmp_path, args):
    trace = renamed_trace(tmp_path / "t.json", "aten::softmax", ESC_NAME)
    result = invoke("import", trace, *args)
    assert result.exit_code == 0, result.stderr
    no_controls(result.stdout + result.stderr)
    assert "\\u001b[31mred" in result.stdout
    if args:
        names = [row["name"] for row in json.loads(result.stdout)["hotspots"]]
        assert ESC_NAME in names  # the JSON still decodes to the real name


def test_markup_in_op_names_is_printed_as_written(home, tmp_path):
    result = invoke("import", renamed_trace(tmp_path / "t.json", "aten::softmax", MARKUP_NAME))
    assert result.exit_code == 0, result.stderr
    assert "[link=http://evil.example]click[/link]" in result.stdout


def test_recommend_markdown_escapes_op_names(home, tmp_path):
    assert invoke("import", renamed_trace(tmp_path / "t.json", "aten::softmax", ESC_NAME)).exit_code == 0
    result = invoke("recommend", "--format", "markdown")
    assert result.exit_code == 0, result.stderr
    no_controls(result.stdout + result.stderr)


def test_a_file_name_with_escapes_in_the_error_line(home, tmp_path):
    name = tmp_path / "evil\x1b]8;;x\x07name\x1b[2J.json"
    line = fails_cleanly(invoke("import", name), 1, ("does not exist",))
    no_controls(line)
    assert "evil\\u001b]8;;x\\u0007name" in line


def test_markup_in_a_file_name_is_not_interpreted(home, tmp_path):
    name = tmp_path / "[bold]x[/bold].json"
    fails_cleanly(invoke("import", name), 1, ("[bold]x[/bold].json",))


def test_a_models_exception_message_with_escapes(home, tmp_path):
    model = tmp_path / "evil_error.py"
    model.write_text(
        "import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
        "        raise ValueError('\\x1b[2J\\x1b]8;;http://evil\\x07click\\x1b]8;;\\x07 gone')\n\n\n"
        "def get_inputs():\n    return [torch.randn(2)]\n")
    line = fails_cleanly(invoke("profile", model, "--device", "cpu", "--steps", "1", "--warmup", "0"), 1,
                         ("evil_error.py:6 in forward", "\\u001b[2J"))
    no_controls(line)


@pytest.mark.parametrize("text, shown", [
    ("plain", "plain"), ("a\x1bb", "a\\u001bb"), ("bell\x07", "bell\\u0007"), ("c1\x9b", "c1\\u009b"),
    ("rtl\u202eevil", "rtl\\u202eevil"), ("tab\tand\nnewline", "tab\tand\nnewline"), ("del\x7f", "del\\u007f"),
])
def test_printable(text, shown):
    from kernel_advisor.cli.console import printable

    assert printable(text) == shown
