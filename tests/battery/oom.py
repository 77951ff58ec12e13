"""Battery fixture: forward raises torch.OutOfMemoryError, as CUDA does when inputs do not fit."""
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")


def get_inputs():
    return [torch.randn(4)]
