"""nn.LayerNorm over a 3-D normalized_shape (C, H, W): 16 rows of 4 M elements, few blocks; expects compile (split reduction), not latency-bound."""
import torch
import torch.nn as nn

BATCH, CHANNELS, HEIGHT, WIDTH = 16, 64, 256, 256
SMALL = {"BATCH": 2, "CHANNELS": 3, "HEIGHT": 4, "WIDTH": 5}


class Model(nn.Module):
    def __init__(self, channels, height, width):
        super().__init__()
        self.norm = nn.LayerNorm((channels, height, width))
        self.scale = nn.Parameter(torch.ones(channels, 1, 1))

    def forward(self, x):
        return self.norm(x) * self.scale


def get_init_inputs():
    return [CHANNELS, HEIGHT, WIDTH]


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]
