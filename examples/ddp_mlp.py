"""A wide MLP for data-parallel profiling: large weights, small batch, so the gradient
all-reduce is a visible share of the step (KernelBench convention).

    advisor profile examples/ddp_mlp.py --mode train --nproc-per-node 2

Each square Linear(8192, 8192) holds 128 MiB of bf16 gradient, more than DDP's 25 MB bucket,
so every layer is its own all-reduce, launched as soon as backward has produced it. With
1024 rows a layer's backward (2 matmuls of 1024 x 8192 x 8192, 275 GFLOP) and its all-reduce
(128 MiB over NVLink) take similar times on an H100/H200-class host: the report shows most of
the communication hidden behind backward, the first layer's (reduced last) exposed, and the
NCCL kernels against the bus-bandwidth ceiling. On CPU (gloo) the sizes shrink to a quick
check and the model stays in float32.

gpt_block.py under DDP is the realistic counterpart: there the all-reduce is ~2 % of the step.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

ON_GPU = torch.cuda.is_available()
# bf16 on GPU: the matmuls run on tensor cores, so communication is not drowned by fp32 math
BATCH, WIDTH, DEPTH, DTYPE = (1024, 8192, 4, torch.bfloat16) if ON_GPU else (64, 512, 4, torch.float32)


class Model(nn.Module):
    def __init__(self, width: int = WIDTH, depth: int = DEPTH):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width, dtype=DTYPE) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = x + F.gelu(layer(x))  # residual keeps activations in range across the stack
        return x


def get_init_inputs():
    return [WIDTH, DEPTH]


def get_inputs():
    return [torch.randn(BATCH, WIDTH, dtype=DTYPE)]
