"""Every benchmarks/advice model builds and runs at its SMALL sizes on CPU, in float32 and in bfloat16.

The advice sweep (benchmarks/advice/run_advice.py) casts models and floating inputs to
bfloat16 (or runs them under autocast when the file says `# advisor: --autocast ...`); a
model that breaks under that cast would only show up on the GPU machine, so it is checked here.
"""
import ast
from pathlib import Path

import pytest
import torch

from benchmarks.advice.run_advice import discover_models, extra_args, load_module

MODELS = discover_models()


def _tensors(out):
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, (list, tuple)):
        for item in out:
            yield from _tensors(item)
    elif isinstance(out, dict):
        for item in out.values():
            yield from _tensors(item)


def _run(path: Path, dtype: torch.dtype):
    module = load_module(path, small=True)
    torch.manual_seed(0)
    init = module.get_init_inputs() if hasattr(module, "get_init_inputs") else []
    model = module.Model(*init).eval()
    inputs = module.get_inputs()
    autocast = "--autocast" in extra_args(path)
    if dtype != torch.float32 and not autocast:  # what `--dtype bfloat16` does
        model = model.to(dtype)
        inputs = [x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype, enabled=autocast and dtype != torch.float32):
        try:
            out = model(*inputs)
        except RuntimeError as e:
            if autocast and "primitive descriptor" in str(e):  # CPU-only gap; cuDNN runs it
                pytest.skip("oneDNN has no LSTM under CPU bf16 autocast on this CPU; the GPU sweep covers it")
            raise
    tensors = list(_tensors(out))
    assert tensors, f"{path.name}: no tensor in the output"
    for t in tensors:
        assert torch.isfinite(t.float()).all(), f"{path.name}: non-finite output"


def test_there_are_enough_models():
    assert len(MODELS) >= 24


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_model_file_follows_the_convention(path):
    source = path.read_text()
    tree = ast.parse(source)
    doc = ast.get_docstring(tree, clean=False)
    assert doc and "\n" not in doc.strip() and source.startswith('"""'), "one-line docstring first"
    assert "expect" in doc, "the docstring says which advice the model should exercise"
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    assert {"Model", "get_inputs"} <= names
    module = load_module(path)
    for name, small in module.SMALL.items():
        full = getattr(module, name)  # every SMALL key is a size constant of the module
        assert isinstance(small, type(full)) and small <= full, name
    rnn = any(k in source for k in ("nn.LSTM(", "nn.GRU(", "nn.RNN("))
    assert rnn == ("--autocast" in extra_args(path)), "RNN models (and only they) run under autocast"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_model_runs_small_on_cpu(path, dtype):
    _run(path, dtype)


def test_small_sizes_do_not_leak_into_a_plain_load():
    # Each load_module() is a fresh module object: the sweep's GPU sizes stay as written.
    path = next(p for p in MODELS if p.stem == "llama_naive_attention")
    assert load_module(path, small=True).D_MODEL == 64
    assert load_module(path).D_MODEL == 1024
