"""MaxPool1d over long sequences after a ReLU (a 1-D CNN front end): memory-bound pooling; expects compile."""
import torch
import torch.nn as nn

BATCH, CHANNELS, LENGTH = 64, 128, 8192
SMALL = {"BATCH": 2, "CHANNELS": 3, "LENGTH": 31}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        # The upstream layer's output scale: a parameter, so --mode train has a gradient to compute.
        self.scale = nn.Parameter(torch.ones(()))
        self.pool = nn.MaxPool1d(kernel_size=4, stride=2, padding=1)

    def forward(self, x):
        return self.pool(torch.relu(x * self.scale))


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, LENGTH)]
