"""GPT-style decoder blocks written the way research code often is.

Naive attention (q @ k^T → scale → causal mask → softmax → @ v), a hand-written RMSNorm
(x.float().pow(2).mean(-1) → rsqrt → mul) and a SwiGLU MLP (silu(x W1) * (x W3)) W2.
`advisor recommend` should point at SDPA, F.rms_norm and torch.compile here.
GPU sizes follow the reference measurement (4 blocks, d=1024, 16 heads, T=1024, B=8).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

ON_GPU = torch.cuda.is_available()
if ON_GPU:
    BATCH, SEQ, D_MODEL, N_HEADS, N_LAYERS = 8, 1024, 1024, 16, 4
else:
    BATCH, SEQ, D_MODEL, N_HEADS, N_LAYERS = 2, 128, 256, 4, 2


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        variance = x.float().pow(2).mean(-1, keepdim=True)
        return self.weight * (x.float() * torch.rsqrt(variance + self.eps)).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.n_heads, -1).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        y = F.softmax(scores, dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class SwiGLU(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        hidden = 8 * d_model // 3 // 64 * 64
        self.w1 = nn.Linear(d_model, hidden, bias=False)
        self.w3 = nn.Linear(d_model, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.norm1 = RMSNorm(d_model)
        self.attn = Attention(d_model, n_heads)
        self.norm2 = RMSNorm(d_model)
        self.mlp = SwiGLU(d_model)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    def __init__(self, d_model: int = D_MODEL, n_heads: int = N_HEADS, n_layers: int = N_LAYERS):
        super().__init__()
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.norm = RMSNorm(d_model)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


def get_init_inputs():
    return [D_MODEL, N_HEADS, N_LAYERS]


def get_inputs():
    return [torch.randn(BATCH, SEQ, D_MODEL)]
