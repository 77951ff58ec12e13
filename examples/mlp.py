"""A plain MLP (KernelBench convention): Linear → GELU → Linear, twice, in fp32.

Sizes are larger when a GPU is visible so the GPU run fills the device; on CPU they stay
small enough for a quick look.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

ON_GPU = torch.cuda.is_available()
BATCH, D_IN, D_HIDDEN = (8192, 4096, 16384) if ON_GPU else (256, 512, 2048)


class Model(nn.Module):
    def __init__(self, d_in: int = D_IN, d_hidden: int = D_HIDDEN):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_in)
        self.fc3 = nn.Linear(d_in, d_hidden)
        self.fc4 = nn.Linear(d_hidden, d_in)

    def forward(self, x):
        x = x + self.fc2(F.gelu(self.fc1(x)))
        return x + self.fc4(F.gelu(self.fc3(x)))


def get_init_inputs():
    return [D_IN, D_HIDDEN]


def get_inputs():
    return [torch.randn(BATCH, D_IN)]
