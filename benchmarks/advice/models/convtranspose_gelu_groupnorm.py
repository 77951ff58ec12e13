"""ConvTranspose2d + GELU + GroupNorm, a decoder stage: expects compile for gelu->group_norm, channels_last + compile."""
import torch
import torch.nn as nn

BATCH, C_IN, C_OUT, IMAGE, GROUPS = 32, 64, 64, 64, 8
SMALL = {"BATCH": 2, "C_IN": 4, "C_OUT": 4, "IMAGE": 5, "GROUPS": 2}


class Model(nn.Module):
    def __init__(self, c_in, c_out, groups):
        super().__init__()
        self.up = nn.ConvTranspose2d(c_in, c_out, 4, stride=2, padding=1)
        self.norm = nn.GroupNorm(groups, c_out)

    def forward(self, x):
        return self.norm(nn.functional.gelu(self.up(x)))


def get_init_inputs():
    return [C_IN, C_OUT, GROUPS]


def get_inputs():
    return [torch.randn(BATCH, C_IN, IMAGE, IMAGE)]
