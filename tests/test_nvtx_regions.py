"""NVTX ranges the model pushes become regions of the ops inside them."""
import textwrap

import torch

from kernel_advisor.collect.attribute import attribute
from kernel_advisor.collect.loader import load_model
from kernel_advisor.collect.nvtx_ranges import mirror_user_nvtx
from kernel_advisor.collect.profiler import capture
from kernel_advisor.collect.trace import read_trace

MODEL = """
import nvtx, torch, torch.nn as nn
from nvtx import annotate

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    @annotate("decorated")
    def second(self, x):
        return torch.relu(self.b(x))

    def forward(self, x):
        with nvtx.annotate("first"):
            x = torch.tanh(self.a(x))
        torch.cuda.nvtx.range_push("<script>alert(1)</script>")
        x = x * 2
        torch.cuda.nvtx.range_pop()
        return self.second(x)

def get_inputs():
    return [torch.randn(4, 16)]
"""


def test_user_nvtx_ranges_become_regions(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(textwrap.dedent(MODEL))
    with mirror_user_nvtx():  # as the CLI does: decorators are applied at import
        lm = load_model(path, device="cpu")
    cap = capture(lm, "inference", warmup=1, steps=2, workdir=tmp_path)
    att = attribute(read_trace(cap.trace_path), "cpu")
    region = dict(zip(att.sequence["name"], att.sequence["region"]))
    assert region["aten::tanh"] == "first"
    assert region["aten::mul"] == "<script>alert(1)</script>"
    assert region["aten::relu"] == "decorated"
    # the advisor's own step ranges are not regions
    assert not any(r.startswith("advisor") for r in att.sequence["region"])


def test_patches_are_removed_after_profiling(tmp_path):
    import nvtx

    before = (nvtx.annotate.__enter__, nvtx.push_range, torch.cuda.nvtx.range_push)
    path = tmp_path / "m.py"
    path.write_text(textwrap.dedent(MODEL))
    capture(load_model(path, device="cpu"), "inference", warmup=0, steps=1, workdir=tmp_path)
    assert (nvtx.annotate.__enter__, nvtx.push_range, torch.cuda.nvtx.range_push) == before


def test_region_option_on_profile_and_recommend(advisor_home, tmp_path):
    from typer.testing import CliRunner

    import kernel_advisor.cli

    path = tmp_path / "m.py"
    path.write_text(textwrap.dedent(MODEL))
    runner = CliRunner()
    res = runner.invoke(kernel_advisor.cli.app, ["profile", str(path), "--device", "cpu", "--steps", "1"])
    assert res.exit_code == 0, res.output
    assert "Regions" in res.stdout and "decorated" in res.stdout
    res = runner.invoke(kernel_advisor.cli.app, ["profile", str(path), "--device", "cpu", "--steps", "1",
                                                 "--region", "first", "--json"])
    assert res.exit_code == 0, res.output
    import json

    names = {h["name"] for h in json.loads(res.stdout)["hotspots"]}
    assert "aten::tanh" in names and "aten::relu" not in names
    res = runner.invoke(kernel_advisor.cli.app, ["recommend", "--region", "nope"])
    assert res.exit_code == 1 and "no op ran in a region matching 'nope'" in res.output
    res = runner.invoke(kernel_advisor.cli.app, ["recommend", "--region", "first", "--format", "json"])
    assert res.exit_code == 0, res.output
