"""Battery fixture: the Model constructor raises (line 7)."""
import torch


class Model(torch.nn.Module):
    def __init__(self):
        raise RuntimeError("battery: constructor failed")

    def forward(self, x):
        return x


def get_inputs():
    return [torch.randn(4)]
