"""ddp_tiny's model, wrapping itself: DDP with 0.25 MB gradient buckets.

`wrap_distributed(model)` is the hook a model file uses to choose its own wrapping
(docs/distributed.md). Small buckets give several all-reduces per step, issued while
backward still runs: the NCCL fixtures (tests/data/ddp_rank*.json.gz) come from this file.
"""
import torch
import torch.nn as nn

WIDTH, DEPTH, BATCH = 256, 4, 64
BUCKET_MB = 0.25


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(*[nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.GELU()) for _ in range(DEPTH)])

    def forward(self, x):
        return self.layers(x)


def get_inputs():
    return [torch.randn(BATCH, WIDTH)]


def wrap_distributed(model):
    device_ids = [torch.cuda.current_device()] if next(model.parameters()).is_cuda else None
    return nn.parallel.DistributedDataParallel(model, device_ids=device_ids, bucket_cap_mb=BUCKET_MB)
