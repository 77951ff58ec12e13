"""Tiny ViT encoder (patch conv, 197 tokens, naive non-causal attention); host-bound-ish, expects sdpa and compile:reduce-overhead."""
import torch
import torch.nn as nn

BATCH, IMAGE, PATCH, D_MODEL, N_HEADS, DEPTH, N_CLASSES = 32, 224, 16, 192, 3, 6, 1000
SMALL = {"BATCH": 2, "IMAGE": 32, "PATCH": 8, "D_MODEL": 48, "N_HEADS": 3, "DEPTH": 1, "N_CLASSES": 10}


class Attention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.n_heads, -1).permute(2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
        y = attn.softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model, eps=1e-6), nn.LayerNorm(d_model, eps=1e-6)
        self.attn = Attention(d_model, n_heads)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    def __init__(self, image, patch, d_model, n_heads, depth, n_classes):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, d_model, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, d_model) * 0.02)
        self.blocks = nn.Sequential(*(Block(d_model, n_heads) for _ in range(depth)))
        self.norm = nn.LayerNorm(d_model, eps=1e-6)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, images):
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


def get_init_inputs():
    return [IMAGE, PATCH, D_MODEL, N_HEADS, DEPTH, N_CLASSES]


def get_inputs():
    return [torch.randn(BATCH, 3, IMAGE, IMAGE)]
