"""Battery fixture: get_inputs() returns plain numbers, no tensor."""
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [1, 2.0, "three"]
