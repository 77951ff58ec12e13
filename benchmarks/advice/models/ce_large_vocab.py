"""LM head + F.cross_entropy over a 32k vocab, the model returns the loss; expects the cross-entropy kernel / compile rungs."""
import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS, D_MODEL, VOCAB = 8192, 1024, 32000
SMALL = {"TOKENS": 16, "D_MODEL": 32, "VOCAB": 100}


class Model(nn.Module):
    def __init__(self, d_model, vocab):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, hidden, targets):
        return F.cross_entropy(self.head(self.norm(hidden)), targets)


def get_init_inputs():
    return [D_MODEL, VOCAB]


def get_inputs():
    return [torch.randn(TOKENS, D_MODEL), torch.randint(0, VOCAB, (TOKENS,))]
