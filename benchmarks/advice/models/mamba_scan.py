"""Mamba-ish block: gated causal depthwise conv1d and a chunked selective scan in einsum + cumsum; expects compile (many small ops)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, SEQ, D_MODEL, N_HEADS, D_STATE, CHUNK, KERNEL = 8, 2048, 768, 24, 64, 128, 4
SMALL = {"BATCH": 2, "SEQ": 16, "D_MODEL": 16, "N_HEADS": 2, "D_STATE": 4, "CHUNK": 4}


def decay_matrix(a_cum):
    """exp(a_cum[i] - a_cum[j]) for j <= i, else 0; every exponent is <= 0 since a <= 0."""
    diff = a_cum.unsqueeze(-1) - a_cum.unsqueeze(-2)
    n = a_cum.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool, device=a_cum.device).tril()
    return torch.exp(diff.masked_fill(~causal, float("-inf")))


class Model(nn.Module):
    def __init__(self, d_model, n_heads, d_state, chunk, kernel):
        super().__init__()
        d_inner = 2 * d_model
        self.n_heads, self.d_state, self.chunk = n_heads, d_state, chunk
        self.norm = nn.LayerNorm(d_model)
        self.in_proj = nn.Linear(d_model, 2 * d_inner + 2 * d_state + n_heads, bias=False)
        self.conv = nn.Conv1d(d_inner, d_inner, kernel, groups=d_inner, padding=kernel - 1)
        self.a_log = nn.Parameter(torch.zeros(n_heads))
        self.out_proj = nn.Linear(d_inner, d_model, bias=False)

    def forward(self, u):
        b, t, _ = u.shape
        h, n, c = self.n_heads, self.d_state, t // self.chunk
        x, z, B, C, dt = self.in_proj(self.norm(u)).split(
            [self.conv.in_channels, self.conv.in_channels, n, n, h], dim=-1)
        x = F.silu(self.conv(x.transpose(1, 2))[..., :t].transpose(1, 2))
        a = -F.softplus(dt) * torch.exp(self.a_log)  # (b, t, h), log decay per step, <= 0
        x = x.reshape(b, c, self.chunk, h, -1)
        a = a.reshape(b, c, self.chunk, h).permute(0, 3, 1, 2)  # (b, h, c, l)
        B, C = B.reshape(b, c, self.chunk, n), C.reshape(b, c, self.chunk, n)
        a_cum = torch.cumsum(a, dim=-1)
        # Inside each chunk: y = C B^T (decay-masked) x.
        y = torch.einsum("bcln,bcsn,bhcls,bcshp->bclhp", C, B, decay_matrix(a_cum), x)
        # Across chunks: the state each chunk ends with, carried forward with its decay.
        states = torch.einsum("bcln,bhcl,bclhp->bchpn", B, torch.exp(a_cum[..., -1:] - a_cum), x)
        states = torch.cat([torch.zeros_like(states[:, :1]), states], dim=1)
        chunk_decay = decay_matrix(F.pad(torch.cumsum(a_cum[..., -1], dim=-1), (1, 0)))
        states = torch.einsum("bhzc,bchpn->bzhpn", chunk_decay, states)[:, :-1]
        y = y + torch.einsum("bcln,bchpn,bhcl->bclhp", C, states, torch.exp(a_cum))
        y = y.reshape(b, t, -1) * F.silu(z)
        return u + self.out_proj(y)


def get_init_inputs():
    return [D_MODEL, N_HEADS, D_STATE, CHUNK, KERNEL]


def get_inputs():
    return [torch.randn(BATCH, SEQ, D_MODEL)]
