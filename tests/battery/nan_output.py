"""Battery fixture: the second output holds NaN (log of a negative number)."""
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return {"ok": x * 2, "bad": torch.log(-x.abs() - 1)}


def get_inputs():
    return [torch.randn(8, 16)]
