"""Battery fixture: a tiny model whose one softmax try-kernel can replace."""
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.softmax(self.fc(x), dim=-1)


def get_inputs():
    return [torch.randn(4, 16)]
