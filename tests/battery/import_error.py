"""Battery fixture: importing the model file fails on a module that is not installed."""
import torch
import advisor_battery_no_such_module  # noqa: F401


class Model(torch.nn.Module):
    def forward(self, x):
        return x


def get_inputs():
    return [torch.randn(4)]
