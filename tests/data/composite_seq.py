"""A held-out sequence model (KernelBench convention) made of the composite and list-taking
ops the cost model once left unmodelled: EmbeddingBag, a bidirectional 2-layer GRU, an LSTM,
einsum attention, cumsum, scatter_add, linear/bilinear/nearest upsampling, cat and stack.
Small enough for a CPU test: tests/test_costs_composite.py profiles it through the CLI and
compares the FLOPs with torch.utils.flop_counter.FlopCounterMode.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH, SEQ, BAG, VOCAB, D_EMB, HIDDEN, GROUPS = 8, 32, 4, 1000, 64, 64, 8


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.EmbeddingBag(VOCAB, D_EMB, mode="mean")
        self.gru = nn.GRU(D_EMB, HIDDEN, num_layers=2, batch_first=True, bidirectional=True)
        self.lstm = nn.LSTM(2 * HIDDEN, HIDDEN, batch_first=True)
        self.head = nn.Linear(2 * HIDDEN, HIDDEN)
        # token t belongs to segment t // (SEQ // GROUPS)
        group = (torch.arange(SEQ) // (SEQ // GROUPS)).view(1, SEQ, 1)
        self.register_buffer("group", group.expand(BATCH, SEQ, HIDDEN).contiguous())

    def forward(self, tokens):
        b, t, _ = tokens.shape
        x = self.embed(tokens.reshape(b * t, -1)).view(b, t, -1)        # embedding_bag
        x, _ = self.gru(x)                                             # gru
        y, _ = self.lstm(x)                                            # lstm
        scores = torch.einsum("bqh,bkh->bqk", y, y) / HIDDEN ** 0.5   # einsum -> bmm
        ctx = torch.einsum("bqk,bkh->bqh", scores.softmax(-1), y)
        ctx = ctx.cumsum(dim=1)                                        # cumsum
        pooled = torch.zeros(b, GROUPS, HIDDEN, dtype=ctx.dtype)
        pooled = pooled.scatter_add(1, self.group, ctx)                # scatter_add
        line = F.interpolate(pooled.transpose(1, 2), size=t, mode="linear")  # [b, H, t]
        plane = F.interpolate(pooled.unsqueeze(1), scale_factor=(4, 1), mode="bilinear")
        near = F.interpolate(pooled.unsqueeze(1), scale_factor=(4, 1), mode="nearest")
        grid = torch.stack([plane, near]).sum(0).squeeze(1)            # stack, [b, t, H]
        out = torch.cat([ctx + grid, line.transpose(1, 2)], dim=-1)     # cat, [b, t, 2H]
        return self.head(out)


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ, BAG))]
