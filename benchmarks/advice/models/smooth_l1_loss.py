"""Huber (smooth L1) regression loss over a large prediction tensor, with a mask: expects compile to fuse the elementwise chain."""
import torch
import torch.nn as nn

ROWS, COLS = 16384, 2048
SMALL = {"ROWS": 7, "COLS": 13}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        # The upstream layer's output scale: a parameter, so --mode train has a gradient to compute.
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, pred, target):
        mask = (target.abs() < 3).to(pred.dtype)
        return (nn.functional.smooth_l1_loss(pred * self.scale, target, reduction="none") * mask).sum() / mask.sum()


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]
