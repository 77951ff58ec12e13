"""Battery fixture: get_inputs() raises (line 11)."""
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    raise ValueError("battery: no inputs today")
