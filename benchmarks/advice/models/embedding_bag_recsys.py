"""DLRM-like recommender: 8 EmbeddingBag tables (sum of 20 ids per bag), pairwise dot interaction, MLPs; expects compile / leave-it on the gathers."""
import torch
import torch.nn as nn

BATCH, N_TABLES, ROWS, DIM, BAG, D_DENSE = 4096, 8, 100000, 64, 20, 13
SMALL = {"BATCH": 4, "N_TABLES": 2, "ROWS": 50, "DIM": 8, "BAG": 3}


def mlp(*sizes):
    layers = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class Model(nn.Module):
    def __init__(self, n_tables, rows, dim, d_dense):
        super().__init__()
        self.tables = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(n_tables))
        self.bottom = mlp(d_dense, 512, 256, dim)
        n = n_tables + 1
        self.top = mlp(dim + n * (n - 1) // 2, 512, 256, 1)

    def forward(self, dense, ids):
        # ids: (tables, batch, bag) int64; a 2-D input to EmbeddingBag is one bag per row.
        feats = [self.bottom(dense)] + [t(ids[i]) for i, t in enumerate(self.tables)]
        z = torch.stack(feats, dim=1)  # (batch, tables + 1, dim)
        dots = torch.bmm(z, z.transpose(1, 2))
        i, j = torch.triu_indices(z.shape[1], z.shape[1], offset=1, device=z.device)
        return torch.sigmoid(self.top(torch.cat([feats[0], dots[:, i, j]], dim=1)))


def get_init_inputs():
    return [N_TABLES, ROWS, DIM, D_DENSE]


def get_inputs():
    return [torch.randn(BATCH, D_DENSE), torch.randint(0, ROWS, (N_TABLES, BATCH, BAG))]
