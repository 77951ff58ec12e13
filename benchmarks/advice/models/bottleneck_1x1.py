"""ResNet-50-style bottlenecks (1x1 reduce, 3x3, 1x1 expand, BatchNorm, ReLU) at 56x56: 1x1-conv heavy; expects channels_last and compile."""
import torch
import torch.nn as nn

BATCH, IMAGE, CHANNELS, N_BLOCKS = 32, 56, 256, 3
SMALL = {"BATCH": 2, "IMAGE": 8, "CHANNELS": 16, "N_BLOCKS": 1}


class Bottleneck(nn.Module):
    def __init__(self, c):
        super().__init__()
        mid = c // 4
        self.body = nn.Sequential(
            nn.Conv2d(c, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
            nn.Conv2d(mid, mid, 3, padding=1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
            nn.Conv2d(mid, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return torch.relu(x + self.body(x))


class Model(nn.Module):
    def __init__(self, channels, n_blocks):
        super().__init__()
        self.blocks = nn.Sequential(*(Bottleneck(channels) for _ in range(n_blocks)))

    def forward(self, x):
        return self.blocks(x)


def get_init_inputs():
    return [CHANNELS, N_BLOCKS]


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, IMAGE, IMAGE)]
