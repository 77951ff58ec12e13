"""Conv2d followed by InstanceNorm2d and a scale: expects compile on the norm, channels_last + compile."""
import torch
import torch.nn as nn

BATCH, C_IN, C_OUT, IMAGE = 32, 32, 64, 96
SMALL = {"BATCH": 2, "C_IN": 3, "C_OUT": 4, "IMAGE": 9}


class Model(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm = nn.InstanceNorm2d(c_out)

    def forward(self, x):
        return self.norm(self.conv(x)) * 2.0


def get_init_inputs():
    return [C_IN, C_OUT]


def get_inputs():
    return [torch.randn(BATCH, C_IN, IMAGE, IMAGE)]
