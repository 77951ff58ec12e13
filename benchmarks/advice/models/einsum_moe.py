"""Dense soft mixture of experts in einsum (every token through every expert, softmax gate); expects compile / leave-it for the batched GEMMs."""
import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS, D_MODEL, HIDDEN, N_EXPERTS = 4096, 512, 1024, 8
SMALL = {"TOKENS": 8, "D_MODEL": 16, "HIDDEN": 32, "N_EXPERTS": 3}


class Model(nn.Module):
    def __init__(self, d_model, hidden, n_experts):
        super().__init__()
        self.gate = nn.Linear(d_model, n_experts)
        self.w_in = nn.Parameter(torch.randn(n_experts, d_model, hidden) * d_model ** -0.5)
        self.w_out = nn.Parameter(torch.randn(n_experts, hidden, d_model) * hidden ** -0.5)

    def forward(self, x):
        weights = self.gate(x).softmax(dim=-1)  # (tokens, experts)
        h = F.gelu(torch.einsum("td,edh->teh", x, self.w_in))
        y = torch.einsum("teh,ehd->ted", h, self.w_out)
        return x + torch.einsum("te,ted->td", weights, y)


def get_init_inputs():
    return [D_MODEL, HIDDEN, N_EXPERTS]


def get_inputs():
    return [torch.randn(TOKENS, D_MODEL)]
