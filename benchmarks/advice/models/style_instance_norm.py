"""Style-transfer residual blocks with InstanceNorm2d (affine) and reflection padding; expects compile for instance_norm->relu."""
import torch
import torch.nn as nn

BATCH, IMAGE, CHANNELS, N_BLOCKS = 4, 256, 128, 3
SMALL = {"BATCH": 1, "IMAGE": 16, "CHANNELS": 8, "N_BLOCKS": 1}


class ResidualBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.body = nn.Sequential(
            nn.ReflectionPad2d(1), nn.Conv2d(c, c, 3), nn.InstanceNorm2d(c, affine=True), nn.ReLU(),
            nn.ReflectionPad2d(1), nn.Conv2d(c, c, 3), nn.InstanceNorm2d(c, affine=True))

    def forward(self, x):
        return x + self.body(x)


class Model(nn.Module):
    def __init__(self, channels, n_blocks):
        super().__init__()
        self.inp = nn.Sequential(nn.ReflectionPad2d(4), nn.Conv2d(3, channels, 9),
                                 nn.InstanceNorm2d(channels, affine=True), nn.ReLU())
        self.blocks = nn.Sequential(*(ResidualBlock(channels) for _ in range(n_blocks)))
        self.out = nn.Sequential(nn.ReflectionPad2d(4), nn.Conv2d(channels, 3, 9))

    def forward(self, x):
        return torch.tanh(self.out(self.blocks(self.inp(x))))


def get_init_inputs():
    return [CHANNELS, N_BLOCKS]


def get_inputs():
    return [torch.randn(BATCH, 3, IMAGE, IMAGE)]
