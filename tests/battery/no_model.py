"""Battery fixture: neither a `Model` class nor an --entry function."""
import torch


def build():
    return torch.nn.Linear(4, 4)
