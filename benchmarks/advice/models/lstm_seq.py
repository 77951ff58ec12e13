"""Two-layer LSTM tagger whose forward builds float32 zero states; run under autocast, expects bf16_autocast / leave-it (cuDNN RNN)."""
# advisor: --autocast bfloat16
import torch
import torch.nn as nn

BATCH, SEQ, D_IN, HIDDEN, N_LAYERS, N_TAGS = 32, 256, 256, 512, 2, 64
SMALL = {"BATCH": 2, "SEQ": 8, "D_IN": 8, "HIDDEN": 16, "N_TAGS": 5}


class Model(nn.Module):
    def __init__(self, d_in, hidden, n_layers, n_tags):
        super().__init__()
        self.hidden, self.n_layers = hidden, n_layers
        self.lstm = nn.LSTM(d_in, hidden, n_layers, batch_first=True)
        self.head = nn.Linear(hidden, n_tags)

    def forward(self, x):
        # float32 states, as research code writes them: why this file needs --autocast, not --dtype.
        h0 = torch.zeros(self.n_layers, x.shape[0], self.hidden, device=x.device)
        c0 = torch.zeros_like(h0)
        out, _ = self.lstm(x, (h0, c0))
        return self.head(out)


def get_init_inputs():
    return [D_IN, HIDDEN, N_LAYERS, N_TAGS]


def get_inputs():
    return [torch.randn(BATCH, SEQ, D_IN)]
