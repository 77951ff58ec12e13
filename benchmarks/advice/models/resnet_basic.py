"""ResNet-ish stack of basic blocks (conv3x3 + BatchNorm + ReLU); expects channels_last, cudnn_benchmark and compile:reduce-overhead."""
import torch
import torch.nn as nn

BATCH, IMAGE, WIDTH, N_CLASSES = 32, 128, 64, 1000
SMALL = {"BATCH": 2, "IMAGE": 32, "WIDTH": 8, "N_CLASSES": 10}


class BasicBlock(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class Model(nn.Module):
    def __init__(self, width, n_classes):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        layers, c = [], width
        for i, mult in enumerate((1, 2, 4, 8)):
            layers += [BasicBlock(c, width * mult, 1 if i == 0 else 2), BasicBlock(width * mult, width * mult, 1)]
            c = width * mult
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(c, n_classes)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def get_init_inputs():
    return [WIDTH, N_CLASSES]


def get_inputs():
    return [torch.randn(BATCH, 3, IMAGE, IMAGE)]
