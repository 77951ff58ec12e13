"""A tiny conv net at batch 8 on 28x28 (MNIST-sized): every kernel a few microseconds, host-bound; expects compile:reduce-overhead (CUDA graphs)."""
import torch
import torch.nn as nn

BATCH, IMAGE, WIDTH = 8, 28, 16
SMALL = {"BATCH": 2, "IMAGE": 8, "WIDTH": 4}


class Model(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, 10))

    def forward(self, x):
        return self.net(x)


def get_init_inputs():
    return [WIDTH]


def get_inputs():
    return [torch.randn(BATCH, 1, IMAGE, IMAGE)]
