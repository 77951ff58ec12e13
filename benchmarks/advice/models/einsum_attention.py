"""Multi-head attention written in einsum (non-causal, softmax in between); expects sdpa if the pattern is found through einsum, else compile."""
import torch
import torch.nn as nn

BATCH, SEQ, D_MODEL, N_HEADS, N_LAYERS = 8, 512, 512, 8, 4
SMALL = {"BATCH": 2, "SEQ": 16, "D_MODEL": 32, "N_HEADS": 4, "N_LAYERS": 1}


class EinsumAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        head = d_model // n_heads
        self.w_qkv = nn.Parameter(torch.randn(3, n_heads, d_model, head) * d_model ** -0.5)
        self.w_out = nn.Parameter(torch.randn(n_heads, head, d_model) * d_model ** -0.5)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x):
        h = self.norm(x)
        q, k, v = torch.einsum("btd,shde->sbhte", h, self.w_qkv)
        scores = torch.einsum("bhqe,bhke->bhqk", q, k) * (q.shape[-1] ** -0.5)
        y = torch.einsum("bhqk,bhke->bhqe", scores.softmax(dim=-1), v)
        return x + torch.einsum("bhte,hed->btd", y, self.w_out)


class Model(nn.Module):
    def __init__(self, d_model, n_heads, n_layers):
        super().__init__()
        self.layers = nn.Sequential(*(EinsumAttention(d_model, n_heads) for _ in range(n_layers)))

    def forward(self, x):
        return self.layers(x)


def get_init_inputs():
    return [D_MODEL, N_HEADS, N_LAYERS]


def get_inputs():
    return [torch.randn(BATCH, SEQ, D_MODEL)]
