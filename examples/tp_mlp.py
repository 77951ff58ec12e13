"""A stack of transformer MLP blocks under tensor parallelism (KernelBench convention).

    advisor profile examples/tp_mlp.py --mode train --nproc-per-node 2

`wrap_distributed` shards every block Megatron-style over all ranks with DTensor's
`parallelize_module`: the up-projection column-wise (each rank holds 1/n of the hidden
units), the down-projection row-wise, so each block's forward ends in one all-reduce of the
activations (and its backward in one more for the input gradient). Every rank runs the same
batch: tensor parallelism splits the weights, not the data. On CPU (gloo) the sizes shrink
to a quick check and the model stays in float32.
"""
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

ON_GPU = torch.cuda.is_available()
BATCH, WIDTH, DEPTH, DTYPE = (8192, 4096, 4, torch.bfloat16) if ON_GPU else (64, 256, 4, torch.float32)


class Block(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width, dtype=DTYPE)
        self.up = nn.Linear(width, 4 * width, dtype=DTYPE)
        self.down = nn.Linear(4 * width, width, dtype=DTYPE)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x))))


class Model(nn.Module):
    def __init__(self, width: int = WIDTH, depth: int = DEPTH):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def wrap_distributed(model):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    device_type = next(model.parameters()).device.type
    mesh = init_device_mesh(device_type, (dist.get_world_size(),))
    for block in model.blocks:
        parallelize_module(block, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    return model


def get_init_inputs():
    return [WIDTH, DEPTH]


def get_inputs():
    return [torch.randn(BATCH, WIDTH, dtype=DTYPE)]
