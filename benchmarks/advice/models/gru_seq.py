"""Embedding + bidirectional GRU encoder with mean pooling and float32 initial state; run under autocast, expects leave-it or compile for the head."""
# advisor: --autocast bfloat16
import torch
import torch.nn as nn

BATCH, SEQ, VOCAB, D_EMB, HIDDEN, N_CLASSES = 64, 128, 20000, 256, 256, 10
SMALL = {"BATCH": 2, "SEQ": 8, "VOCAB": 50, "D_EMB": 8, "HIDDEN": 16}


class Model(nn.Module):
    def __init__(self, vocab, d_emb, hidden, n_classes):
        super().__init__()
        self.hidden = hidden
        self.embed = nn.Embedding(vocab, d_emb)
        self.gru = nn.GRU(d_emb, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.Tanh(), nn.Linear(hidden, n_classes))

    def forward(self, tokens):
        h0 = torch.zeros(4, tokens.shape[0], self.hidden, device=tokens.device)
        out, _ = self.gru(self.embed(tokens), h0)
        return self.head(out.mean(dim=1))


def get_init_inputs():
    return [VOCAB, D_EMB, HIDDEN, N_CLASSES]


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ))]
