"""Battery fixture: a model file that does not parse (line 5 is missing its colon)."""
import torch


class Model(torch.nn.Module)
    def forward(self, x):
        return x
