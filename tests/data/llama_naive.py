"""A one-block Llama-like decoder written the way research code often is: naive causal
attention (q @ k^T, scale, masked_fill, softmax, @ v) and a hand-written RMSNorm class.
Small enough for a CPU test of `advisor recommend --measure`."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, SEQ, D_MODEL, N_HEADS = 2, 64, 128, 4


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class Attention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(x).split(d, dim=-1))
        scores = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        y = F.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class Model(nn.Module):
    def __init__(self, d: int = D_MODEL, heads: int = N_HEADS):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.attn = Attention(d, heads)
        self.w1 = nn.Linear(d, 4 * d, bias=False)
        self.w3 = nn.Linear(d, 4 * d, bias=False)
        self.w2 = nn.Linear(4 * d, d, bias=False)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        h = self.norm2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


def get_inputs():
    return [torch.randn(BATCH, SEQ, D_MODEL)]
