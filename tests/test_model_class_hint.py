"""A model file whose nn.Module is not called `Model` gets told which classes it has and how to expose one."""
import subprocess
import sys
import textwrap

import pytest

from kernel_advisor.collect.loader import load_model
from kernel_advisor.errors import UserInputError

NET = """
import torch, torch.nn as nn
from torch.nn import Linear  # imported classes are not the file's own
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = Linear(4, 4)
    def forward(self, x):
        return self.lin(x)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()
    def forward(self, x):
        return self.block(x)
Alias = Net
class Helper:  # not an nn.Module
    pass
def get_inputs():
    return [torch.randn(2, 4)]
"""


def write(tmp_path, body, name="m.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_names_the_classes_found_and_the_alias_fix(tmp_path):
    with pytest.raises(UserInputError) as e:
        load_model(write(tmp_path, NET), device="cpu")
    line = e.value.one_line()
    assert "m.py defines no `Model` class" in line
    assert "`Block`, `Net`" in line  # file order, each class once (Alias is the same class as Net)
    assert "Alias" not in line and "Linear" not in line and "Helper" not in line
    assert "add `Model = Net`" in e.value.fix
    assert "--entry" in e.value.fix
    assert "\n" not in line


def test_single_class_is_named_as_the_one(tmp_path):
    body = "import torch\nclass MyNet(torch.nn.Module):\n    def forward(self, x):\n        return x\n" \
           "def get_inputs():\n    return [torch.ones(1)]\n"
    with pytest.raises(UserInputError) as e:
        load_model(write(tmp_path, body), device="cpu")
    assert "the nn.Module class `MyNet`" in e.value.problem
    assert e.value.fix.startswith("add `Model = MyNet` at the end of the file")


def test_the_suggested_fix_works(tmp_path):
    path = write(tmp_path, NET + "Model = Net\n")
    lm = load_model(path, device="cpu")
    assert type(lm.model).__name__ == "Net"


def test_no_module_class_keeps_the_plain_message(tmp_path):
    body = "import torch\nfrom torch.nn import Linear\ndef get_inputs():\n    return [torch.ones(1)]\n"
    with pytest.raises(UserInputError) as e:
        load_model(write(tmp_path, body), device="cpu")
    assert e.value.one_line() == ("m.py defines no `Model` class — define `class Model(nn.Module)` and "
                                  "`get_inputs()`, or pass --entry FUNCTION")


def test_cli_prints_one_error_line_and_exits_1(tmp_path):
    path = write(tmp_path, NET, "net.py")
    proc = subprocess.run([sys.executable, "-m", "kernel_advisor", "profile", str(path), "--device", "cpu",
                           "--out", str(tmp_path / "runs")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("advisor: error: net.py defines no `Model` class")
    assert "`Model = Net`" in lines[0]
    assert "Traceback" not in proc.stderr
