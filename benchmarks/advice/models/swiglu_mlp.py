"""SwiGLU MLP with SiLU written as x * sigmoid(x) and a tanh-GELU by hand: elementwise chains; expects compile (fusion) and the gelu/silu kernels."""
import math

import torch
import torch.nn as nn

TOKENS, D_MODEL, HIDDEN, N_LAYERS = 16384, 2048, 5632, 2
SMALL = {"TOKENS": 8, "D_MODEL": 16, "HIDDEN": 32, "N_LAYERS": 1}


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


class SwiGLU(nn.Module):
    def __init__(self, d_model, hidden):
        super().__init__()
        self.gate = nn.Linear(d_model, hidden, bias=False)
        self.up = nn.Linear(d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x):
        g = self.gate(x)
        return x + self.down(g * torch.sigmoid(g) * gelu_tanh(self.up(x)))


class Model(nn.Module):
    def __init__(self, d_model, hidden, n_layers):
        super().__init__()
        self.layers = nn.Sequential(*(SwiGLU(d_model, hidden) for _ in range(n_layers)))

    def forward(self, x):
        return self.layers(x)


def get_init_inputs():
    return [D_MODEL, HIDDEN, N_LAYERS]


def get_inputs():
    return [torch.randn(TOKENS, D_MODEL)]
