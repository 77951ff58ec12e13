"""A small CNN: three conv → batch-norm → ReLU stages, max-pooling, a linear head.

Returns a dict, to show that outputs of any structure are accepted.
"""
import torch
import torch.nn as nn

ON_GPU = torch.cuda.is_available()
BATCH, SIZE = (64, 128) if ON_GPU else (8, 64)


def stage(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
                         nn.BatchNorm2d(c_out), nn.ReLU(inplace=True), nn.MaxPool2d(2))


class Model(nn.Module):
    def __init__(self, n_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(stage(3, 32), stage(32, 64), stage(64, 128))
        self.head = nn.Linear(128, n_classes)

    def forward(self, x):
        feats = self.features(x)
        logits = self.head(feats.mean(dim=(2, 3)))
        return {"logits": logits, "features": feats}


def loss_fn(output):
    return output["logits"].logsumexp(-1).mean()


def get_init_inputs():
    return [10]


def get_inputs():
    return [torch.randn(BATCH, 3, SIZE, SIZE)]
