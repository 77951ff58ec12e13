"""Battery fixture: forward raises inside the user's own helper (line 7)."""
import torch


def helper(x):
    # a shape bug of the kind users hit: (4, 8) @ (4, 8)
    return x @ x


class Model(torch.nn.Module):
    def forward(self, x):
        return helper(x)


def get_inputs():
    return [torch.randn(4, 8)]
