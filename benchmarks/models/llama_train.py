"""Llama-like decoder for a training step: HF-style RMSNorm (float32 variance), SwiGLU MLP, causal SDPA attention, cross-entropy over Llama 3's 128256-token vocabulary.

Sizes are Llama-3.2-1B's (hidden 2048, 32 heads, MLP 8192, vocab 128256) with two layers and
no rotary embedding; 4 x 1024 tokens a step. benchmarks/bench_train_try_kernel.py runs
`advisor try-kernel` on it with --mode train --dtype bfloat16.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, SEQ, D_MODEL, N_HEADS, HIDDEN, N_LAYERS, VOCAB = 4, 1024, 2048, 32, 8192, 2, 128256
SMALL = {"BATCH": 2, "SEQ": 8, "D_MODEL": 32, "N_HEADS": 4, "HIDDEN": 64, "N_LAYERS": 1, "VOCAB": 97}


class RMSNorm(nn.Module):
    """As transformers' LlamaRMSNorm: the variance in float32, the weight applied in the input's dtype."""

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.variance_epsilon = eps

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dtype)


class Attention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, d // self.n_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, d_model, hidden):
        super().__init__()
        self.gate = nn.Linear(d_model, hidden, bias=False)
        self.up = nn.Linear(d_model, hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, d_model, n_heads, hidden):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(d_model), RMSNorm(d_model)
        self.attn, self.mlp = Attention(d_model, n_heads), MLP(d_model, hidden)

    def forward(self, x):
        h = x + self.attn(self.attn_norm(x))
        return h + self.mlp(self.mlp_norm(h))


class Model(nn.Module):
    def __init__(self, d_model, n_heads, hidden, n_layers, vocab):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, hidden) for _ in range(n_layers))
        self.norm = RMSNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, ids, targets):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def get_init_inputs():
    return [D_MODEL, N_HEADS, HIDDEN, N_LAYERS, VOCAB]


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ)), torch.randint(0, VOCAB, (BATCH, SEQ))]
