"""Post-LN transformer MLP blocks: Linear, GELU, dropout, residual add, LayerNorm; expects compile (add + layer_norm fusion)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, SEQ, D_MODEL, N_LAYERS, P_DROP = 8, 1024, 1024, 4, 0.1
SMALL = {"BATCH": 2, "SEQ": 8, "D_MODEL": 16, "N_LAYERS": 1}


class MLPBlock(nn.Module):
    def __init__(self, d_model, p_drop):
        super().__init__()
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)
        self.drop = nn.Dropout(p_drop)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x):
        h = self.drop(self.fc2(self.drop(F.gelu(self.fc1(x)))))
        return self.norm(x + h)


class Model(nn.Module):
    def __init__(self, d_model, n_layers, p_drop):
        super().__init__()
        self.layers = nn.Sequential(*(MLPBlock(d_model, p_drop) for _ in range(n_layers)))

    def forward(self, x):
        return self.layers(x)


def get_init_inputs():
    return [D_MODEL, N_LAYERS, P_DROP]


def get_inputs():
    return [torch.randn(BATCH, SEQ, D_MODEL)]
