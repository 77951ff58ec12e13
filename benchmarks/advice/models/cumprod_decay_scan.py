"""A decayed cumulative sum (linear-attention style scan): cumprod of gates, cumsum of gated values, a divide; expects compile."""
import torch
import torch.nn as nn

BATCH, LENGTH, DIM = 32, 2048, 256
SMALL = {"BATCH": 2, "LENGTH": 9, "DIM": 5}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        # The upstream layer's output scale: a parameter, so --mode train has a gradient to compute.
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x, gate):
        decay = torch.cumprod(torch.sigmoid(gate), dim=1).clamp_min(1e-4)
        return torch.cumsum(x * self.scale / decay, dim=1) * decay


def get_inputs():
    return [torch.randn(BATCH, LENGTH, DIM), torch.randn(BATCH, LENGTH, DIM)]
