"""MobileNet-ish depthwise-separable blocks (depthwise 3x3 + pointwise 1x1, BatchNorm, ReLU6); expects channels_last and compile."""
import torch
import torch.nn as nn

BATCH, IMAGE, WIDTH, N_CLASSES = 64, 112, 32, 1000
SMALL = {"BATCH": 2, "IMAGE": 16, "WIDTH": 8, "N_CLASSES": 10}


def separable(c_in, c_out, stride):
    return nn.Sequential(
        nn.Conv2d(c_in, c_in, 3, stride, 1, groups=c_in, bias=False), nn.BatchNorm2d(c_in), nn.ReLU6(),
        nn.Conv2d(c_in, c_out, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU6())


class Model(nn.Module):
    def __init__(self, width, n_classes):
        super().__init__()
        w = width
        self.features = nn.Sequential(
            nn.Conv2d(3, w, 3, 2, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU6(),
            separable(w, 2 * w, 1), separable(2 * w, 4 * w, 2), separable(4 * w, 4 * w, 1),
            separable(4 * w, 8 * w, 2), separable(8 * w, 8 * w, 1), separable(8 * w, 16 * w, 2))
        self.classifier = nn.Linear(16 * w, n_classes)

    def forward(self, x):
        return self.classifier(self.features(x).mean(dim=(2, 3)))


def get_init_inputs():
    return [WIDTH, N_CLASSES]


def get_inputs():
    return [torch.randn(BATCH, 3, IMAGE, IMAGE)]
