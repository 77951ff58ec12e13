"""MLP with hidden sizes 1000, 4001 and 333 (not multiples of 8); expects pad_gemm (tensor-core alignment)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, D_IN, HIDDEN, D_OUT = 8192, 1000, 4001, 333
SMALL = {"BATCH": 4, "D_IN": 10, "HIDDEN": 41, "D_OUT": 3}


class Model(nn.Module):
    def __init__(self, d_in, hidden, d_out):
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.fc3(F.gelu(self.fc2(F.gelu(self.fc1(x)))))


def get_init_inputs():
    return [D_IN, HIDDEN, D_OUT]


def get_inputs():
    return [torch.randn(BATCH, D_IN)]
