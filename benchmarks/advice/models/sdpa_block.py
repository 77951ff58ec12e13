"""Pre-LN transformer encoder already on F.scaled_dot_product_attention; expects no sdpa advice, compile for the LayerNorm/GELU glue."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, SEQ, D_MODEL, N_HEADS, N_LAYERS = 8, 1024, 1024, 16, 4
SMALL = {"BATCH": 2, "SEQ": 32, "D_MODEL": 64, "N_HEADS": 4, "N_LAYERS": 1}


class Block(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Model(nn.Module):
    def __init__(self, d_model, n_heads, n_layers):
        super().__init__()
        self.blocks = nn.Sequential(*(Block(d_model, n_heads) for _ in range(n_layers)))

    def forward(self, x):
        return self.blocks(x)


def get_init_inputs():
    return [D_MODEL, N_HEADS, N_LAYERS]


def get_inputs():
    return [torch.randn(BATCH, SEQ, D_MODEL)]
