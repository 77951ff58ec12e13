"""Causal attention with ReLU scores normalised by sequence length instead of softmax: no sdpa match; expects compile, not sdpa."""
import torch
import torch.nn as nn

BATCH, SEQ, D_MODEL, N_HEADS, N_LAYERS = 8, 1024, 768, 12, 2
SMALL = {"BATCH": 2, "SEQ": 16, "D_MODEL": 32, "N_HEADS": 4, "N_LAYERS": 1}


class ReLUAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.norm = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        scores = torch.relu(q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5)) / t
        scores = scores * torch.ones(t, t, device=x.device, dtype=x.dtype).tril()
        return x + self.out((scores @ v).transpose(1, 2).reshape(b, t, d))


class Model(nn.Module):
    def __init__(self, d_model, n_heads, n_layers):
        super().__init__()
        self.layers = nn.Sequential(*(ReLUAttention(d_model, n_heads) for _ in range(n_layers)))

    def forward(self, x):
        return self.layers(x)


def get_init_inputs():
    return [D_MODEL, N_HEADS, N_LAYERS]


def get_inputs():
    return [torch.randn(BATCH, SEQ, D_MODEL)]
