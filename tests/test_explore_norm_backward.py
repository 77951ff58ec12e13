"""benchmarks/explore_norm_backward.py: every variant it times computes the shipped backward.

On a machine without CUDA the kernels run in Triton's interpreter (small shapes); the
grid-barrier variant needs its programs resident at once, so it only runs on a GPU.
"""
import pytest
import torch

from benchmarks import explore_norm_backward as explore
from reference_kernels.triton import norm

DEV = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("shape", [(7, 64), (13, 100), (1, 7)])
@pytest.mark.parametrize("name", list(explore.VARIANTS))
def test_variant_matches_shipped_backward(name, shape):
    knobs = dict(explore.VARIANTS[name])
    if knobs.get("fused") and DEV == "cpu":
        pytest.skip("the grid barrier needs every program resident: GPU only")
    if knobs.get("programs") == -1:
        knobs["programs"] = shape[0]
    g = torch.Generator().manual_seed(0)
    x, dy = (torch.randn(shape, generator=g).to(DEV) for _ in range(2))
    w = torch.randn(shape[1], generator=g).to(DEV)
    _, _, mean, rstd = norm.norm_fwd(x, None, w, None, 1e-5, False)
    ref = norm.norm_bwd(x, w, mean, rstd, dy, None, True, True, False)
    got = explore._launcher(x, w, mean, rstd, dy, sms=3, **knobs)()
    assert explore._check(name, got, ref, knobs.get("need_dw", True))


def test_main_without_cuda_exits_2(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert explore.main(["--out", str(tmp_path)]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
