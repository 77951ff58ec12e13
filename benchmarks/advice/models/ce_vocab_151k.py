"""Cross-entropy over a 151936-token vocabulary (a Qwen-sized LM head's loss) on 4096 tokens: expects a fused cross-entropy kernel, compile."""
import torch
import torch.nn as nn

TOKENS, VOCAB = 4096, 151936
SMALL = {"TOKENS": 5, "VOCAB": 37}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        # The upstream layer's output scale: a parameter, so --mode train has a gradient to compute.
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, logits, targets):
        return nn.functional.cross_entropy(logits * self.scale, targets)


def get_inputs():
    return [torch.randn(TOKENS, VOCAB), torch.randint(0, VOCAB, (TOKENS,))]
