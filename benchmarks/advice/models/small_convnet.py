"""CIFAR-sized conv net (3 conv+BN+ReLU+pool stages, batch 16, 32x32): host-bound; expects compile:reduce-overhead, not cudnn_benchmark."""
import torch
import torch.nn as nn

BATCH, IMAGE, WIDTH, N_CLASSES = 16, 32, 32, 10
SMALL = {"BATCH": 2, "IMAGE": 8, "WIDTH": 4}


def stage(c_in, c_out):
    return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(), nn.MaxPool2d(2)]


class Model(nn.Module):
    def __init__(self, width, n_classes):
        super().__init__()
        self.net = nn.Sequential(*stage(3, width), *stage(width, 2 * width), *stage(2 * width, 4 * width),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, n_classes))

    def forward(self, x):
        return self.net(x)


def get_init_inputs():
    return [WIDTH, N_CLASSES]


def get_inputs():
    return [torch.randn(BATCH, 3, IMAGE, IMAGE)]
