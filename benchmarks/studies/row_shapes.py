"""The row ops at the shapes the sweep's 64 MiB bound leaves out: wide rows
(4096 x 393216) and few long rows (16 x 4194304), bf16, forward and forward + backward.

Triton (the bundled kernel), eager and torch.compile, each timed with triton.testing.do_bench
(L2 flushed, median); `of copy` is the minimum bytes (forward: read x, write y; forward +
backward: also read y or x and dy, write dx) over the time, against a device-to-device copy's
bandwidth timed the same way. Writes JSON to the path given (default: stdout).

    python3 benchmarks/studies/row_shapes.py [OUT.json] [--no-compile]
"""
from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F
import triton.testing

from reference_kernels.triton.layer_norm import layer_norm
from reference_kernels.triton.rms_norm import rms_norm
from reference_kernels.triton.softmax import log_softmax, softmax

SHAPES = [(4096, 393216), (16, 4194304)]


def _ops(n):
    return {
        "softmax": (lambda x, w: softmax(x), lambda x, w: torch.softmax(x, -1)),
        "log_softmax": (lambda x, w: log_softmax(x), lambda x, w: torch.log_softmax(x, -1)),
        "layer_norm": (lambda x, w: layer_norm(x, (n,), w, None, 1e-5),
                       lambda x, w: F.layer_norm(x, (n,), w, None, 1e-5)),
        "rms_norm": (lambda x, w: rms_norm(x, (n,), w, 1e-6),
                     lambda x, w: F.rms_norm(x, (n,), w, 1e-6)),
    }


def _bench(fn) -> float:
    return float(triton.testing.do_bench(fn, warmup=5, rep=40, return_mode="median")) * 1e3


def _fwd_bwd(fn, x, w, dy):
    def run():
        xs = x.detach().requires_grad_()
        ws = w.detach().requires_grad_() if w is not None else None
        y = fn(xs, ws)
        torch.autograd.grad(y, (xs, ws) if ws is not None else (xs,), dy)
    return run


def main(argv: list[str]) -> int:
    out_path = next((a for a in argv if not a.startswith("--")), None)
    with_compile = "--no-compile" not in argv
    dev = torch.device("cuda")
    rows = []
    big = torch.empty(4096 * 393216, dtype=torch.bfloat16, device=dev)
    copy_us = _bench(lambda: big.clone())
    copy_bw = 2 * big.numel() * 2 / (copy_us * 1e-6)
    del big
    for shape in SHAPES:
        n = shape[-1]
        x = torch.randn(shape, device=dev, dtype=torch.bfloat16)
        dy = torch.randn_like(x)
        for name, (kernel, eager) in _ops(n).items():
            w = (torch.randn(n, device=dev) * 0.5 + 1).to(x.dtype) if "norm" in name else None
            providers = {"triton": kernel, "eager": eager}
            if with_compile:
                providers["compile"] = torch.compile(eager, dynamic=False)
            for provider, fn in providers.items():
                fwd = _bench(lambda: fn(x, w))
                both = _bench(_fwd_bwd(fn, x, w, dy))
                elt = x.numel() * x.element_size()
                rows.append({"op": name, "rows": shape[0], "cols": n, "dtype": "bfloat16",
                             "provider": provider, "fwd_us": fwd, "fwd_bwd_us": both,
                             "fwd_of_copy": 2 * elt / (fwd * 1e-6) / copy_bw,
                             "fwd_bwd_of_copy": 5 * elt / (both * 1e-6) / copy_bw})
                print(json.dumps(rows[-1]), flush=True)
            torch.cuda.empty_cache()
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": triton.__version__, "copy_GBps": copy_bw / 1e9, "rows": rows}
    text = json.dumps(doc, indent=1)
    if out_path:
        with open(out_path, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
