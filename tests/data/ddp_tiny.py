"""A tiny model for multi-rank tests: four 256-wide Linear+GELU blocks (~1 MB of fp32 weights).

The blocks sit in an nn.Sequential, so --fsdp shards each one (wrap.repeated_blocks).
"""
import torch
import torch.nn as nn

WIDTH, DEPTH, BATCH = 256, 4, 64


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.GELU()) for _ in range(DEPTH)])

    def forward(self, x):
        return self.layers(x)


def get_inputs():
    return [torch.randn(BATCH, WIDTH)]
