"""The Python API the way a notebook uses it: profile a module in memory, read the op table,
get recommendations measured in the model, write the report (ka.report renders it). Runs on CPU in about a minute:

    python examples/notebook_api.py
"""
import tempfile
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import kernel_advisor as ka


class Attention(nn.Module):
    """Written-out causal attention, as research code often has it."""

    def __init__(self, d: int = 256, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(x).split(d, dim=-1))
        scores = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        return self.out((F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, d))


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(nn.LayerNorm(256), Attention(), nn.LayerNorm(256), nn.Linear(256, 256), nn.GELU())
    out = Path(tempfile.mkdtemp(prefix="advisor-api-")) / "run"
    run = ka.profile(model, lambda: [torch.randn(4, 256, 256, device=device)], device=device, steps=3, warmup=2,
                     out=out)
    cols = ["name", "share_pct", "flops_per_call", "bytes_per_call", "verdict"]
    print(run.ops.sort_values("share_pct", ascending=False)[cols].head(8).to_string(index=False))
    for rec in run.recommend(measure=True, top=3, budget_s=20):  # the search stays within 20 s
        measured = rec.measured
        result = measured.verdict or measured.status
        speed = f"{measured.speedup['value']:.2f}x" if measured.speedup else "-"
        print(f"{rec.rank:>2} {rec.rule_id:<28} {rec.action:<16} predicted {rec.estimated_gain_frac or 0:.1%}"
              f"  measured {speed} ({result})")
    print("report:", ka.report(run, out.parent / "report.html"))
    print("reloaded:", len(ka.load(run.path).ops), "op rows")


if __name__ == "__main__":
    main()
