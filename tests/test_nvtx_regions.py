"""NVTX ranges the model pushes become regions of the ops inside them."""
import textwrap

import torch

from kernel_advisor.collect.attribute import attribute
from kernel_advisor.collect.loader import load_model
from kernel_advisor.collect.nvtx_mirror import mirror_user_nvtx
from kernel_advisor.collect.profiler import capture
from kernel_advisor.collect.trace_reader import read_trace

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
