"""Deep MLP of tiny Linear(64, 64) layers on a batch of 32: launch-bound; expects compile:reduce-overhead (CUDA graphs)."""
import torch
import torch.nn as nn

BATCH, WIDTH, DEPTH = 32, 64, 24
SMALL = {"BATCH": 4, "WIDTH": 8, "DEPTH": 3}


class Model(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        for layer in self.layers:
            x = x + torch.relu(layer(x))
        return self.norm(x)


def get_init_inputs():
    return [WIDTH, DEPTH]


def get_inputs():
    return [torch.randn(BATCH, WIDTH)]
