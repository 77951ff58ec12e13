"""Battery fixture: Ctrl-C arrives while torch.profiler is recording (forward raises KeyboardInterrupt)."""
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        if torch._C._autograd._profiler_enabled():
            raise KeyboardInterrupt
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 8)]
