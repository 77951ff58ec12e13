"""A workload of one op per family, for checking verdicts against Nsight Compute.

KernelBench model file: `advisor profile benchmarks/ncu_workload.py --dtype bfloat16` profiles it;
benchmarks/ncu_accuracy.py runs the same forward under `ncu`. Sizes fill an H200.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(128, 128, 3, padding=1, bias=False)
        self.ln = nn.LayerNorm(8192)
        self.rms_w = nn.Parameter(torch.ones(8192))

    def forward(self, a, b, img, x, small):
        y = a @ b                                   # compute-bound GEMM
        z = self.conv(img)                          # cuDNN conv
        s = F.softmax(x, dim=-1)                    # memory-bound row reduction
        n = self.ln(x)                              # layer_norm
        r = F.rms_norm(x, (8192,), self.rms_w)      # rms_norm
        g = F.gelu(x)                               # elementwise
        e = x + s                                   # binary elementwise
        t = F.softmax(small, dim=-1)                # tiny: latency territory
        return y, z, n, r, g, e, t


def get_inputs():
    return [torch.randn(8192, 8192), torch.randn(8192, 8192), torch.randn(32, 128, 112, 112),
            torch.randn(16384, 8192), torch.randn(64, 128)]
