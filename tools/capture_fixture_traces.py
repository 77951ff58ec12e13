"""Capture small real torch.profiler chrome traces on a CUDA device.

They become test fixtures (tests/data/) so CI, which has no GPU, checks kernel
attribution against traces the real profiler wrote.  Run on a GPU machine:
    python tools/capture_fixture_traces.py OUTDIR
"""
import gzip, json, os, shutil, sys
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule


class Block(nn.Module):
    def __init__(self, d=256, h=4):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.w = nn.Parameter(torch.ones(d))
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def rms(self, x):
        v = x.float().pow(2).mean(-1, keepdim=True)
        return (x * torch.rsqrt(v + 1e-6)).to(x.dtype) * self.w

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.rms(x)).split(D, dim=-1)
        q = q.view(B, T, self.h, -1).transpose(1, 2)
        k = k.view(B, T, self.h, -1).transpose(1, 2)
        v = v.view(B, T, self.h, -1).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (q.shape[-1] ** 0.5))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.proj(y)
        with torch.cuda.nvtx.range("mlp"):
            x = x + self.fc2(F.gelu(self.fc1(x)))
        return x


def capture(path, fn, steps=2):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    # The trace must be exported from on_trace_ready: the profiler clears its events
    # when the scheduled cycle ends.
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                 record_shapes=True, schedule=schedule(wait=0, warmup=1, active=steps),
                 on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for i in range(steps + 1):
            with record_function(f"advisor::step#{i}"):
                fn()
            torch.cuda.synchronize()
            prof.step()
    with open(path, "rb") as f, gzip.open(path + ".gz", "wb") as g:
        shutil.copyfileobj(f, g)
    os.remove(path)


def main(out):
    torch.manual_seed(0)
    dev = "cuda"
    m = Block().to(dev)
    x = torch.randn(2, 64, 256, device=dev)
    with torch.no_grad():
        capture(os.path.join(out, "cuda_gpt_inference.json"), lambda: m(x))

    def train():
        m.zero_grad(set_to_none=True)
        m(x).sum().backward()
    capture(os.path.join(out, "cuda_gpt_train.json"), train)

    mc = torch.compile(Block().to(dev))
    with torch.no_grad():
        capture(os.path.join(out, "cuda_gpt_compiled.json"), lambda: mc(x))
    info = {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
            "cap": torch.cuda.get_device_capability()}
    json.dump(info, open(os.path.join(out, "fixture_info.json"), "w"))
    print(info)


if __name__ == "__main__":
    main(sys.argv[1])
