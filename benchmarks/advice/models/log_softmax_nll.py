"""Classifier written as log_softmax + nll_loss (with label smoothing by hand) over 10k classes; expects compile / the log_softmax kernel rung."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, D_IN, N_CLASSES, SMOOTHING = 16384, 512, 10000, 0.1
SMALL = {"BATCH": 16, "D_IN": 16, "N_CLASSES": 50}


class Model(nn.Module):
    def __init__(self, d_in, n_classes, smoothing):
        super().__init__()
        self.smoothing = smoothing
        self.fc = nn.Linear(d_in, n_classes)

    def forward(self, x, labels):
        logp = F.log_softmax(self.fc(x), dim=-1)
        # Label smoothing spelled out: the mean over classes is an extra full-width pass.
        return (1 - self.smoothing) * F.nll_loss(logp, labels) - self.smoothing * logp.mean(dim=-1).mean()


def get_init_inputs():
    return [D_IN, N_CLASSES, SMOOTHING]


def get_inputs():
    return [torch.randn(BATCH, D_IN), torch.randint(0, N_CLASSES, (BATCH,))]
