"""The model-file contract: KernelBench, --entry, dtype/seed, outputs of any structure, errors."""
import textwrap

import pytest
import torch

from kernel_advisor.collect.loader import load_model
from kernel_advisor.collect.runner import make_step, scalar_loss
from kernel_advisor.errors import EnvironmentCapabilityError, UserInputError


def write(tmp_path, body, name="m.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


KB = """
import torch, torch.nn as nn
class Model(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)
    def forward(self, x, idx):
        return self.lin(x)[idx]
def get_init_inputs():
    return [6]
def get_inputs():
    return [torch.randn(4, 6), torch.tensor([0, 2])]
"""


def test_kernelbench_contract_with_init_inputs(tmp_path):
    lm = load_model(write(tmp_path, KB), device="cpu")
    assert lm.model.lin.in_features == 6
    out = make_step(lm, "inference")()
    assert out.shape == (2, 6)


def test_dtype_casts_model_and_floating_inputs_only(tmp_path):
    lm = load_model(write(tmp_path, KB), device="cpu", dtype="bfloat16")
    assert lm.model.lin.weight.dtype == torch.bfloat16
    assert lm.inputs[0].dtype == torch.bfloat16
    assert lm.inputs[1].dtype == torch.int64  # indices are not cast


def test_seed_makes_inputs_reproducible(tmp_path):
    path = write(tmp_path, KB)
    a = load_model(path, device="cpu", seed=3).inputs[0]
    b = load_model(path, device="cpu", seed=3).inputs[0]
    c = load_model(path, device="cpu", seed=4).inputs[0]
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_make_inputs_draws_fresh_inputs(tmp_path):
    lm = load_model(write(tmp_path, KB), device="cpu")
    assert not torch.equal(lm.make_inputs(1)[0], lm.make_inputs(2)[0])
    assert torch.equal(lm.make_inputs(1)[0], lm.make_inputs(1)[0])


def test_entry_function(tmp_path):
    path = write(tmp_path, """
        import torch
        def build():
            return torch.nn.Linear(3, 2), [torch.randn(5, 3)]
    """)
    lm = load_model(path, entry="build", device="cpu")
    assert make_step(lm, "train")().shape == (5, 2)


STRUCTURED = """
import dataclasses, torch, torch.nn as nn
@dataclasses.dataclass
class Out:
    logits: torch.Tensor
    aux: dict
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
    def forward(self, x):
        y = self.a(x)
        return (Out(y, {"z": y * 2, "n": 3}), [y.sum()])
def get_inputs():
    return [torch.randn(2, 4)]
"""


def test_train_mode_sums_every_floating_output_of_any_structure(tmp_path):
    lm = load_model(write(tmp_path, STRUCTURED), device="cpu")
    out = make_step(lm, "train")()
    y = out[0].logits
    # loss = sum(y) + sum(2y) + sum(y) = 4*sum(y)
    assert torch.allclose(scalar_loss(lm, out), 4 * y.sum())
    assert lm.model.a.weight.grad is not None


def test_loss_fn_is_used_when_defined(tmp_path):
    path = write(tmp_path, STRUCTURED + "\ndef loss_fn(out):\n    return out[1][0] * 0 + 7.0\n")
    lm = load_model(path, device="cpu")
    assert float(scalar_loss(lm, make_step(lm, "inference")())) == 7.0


@pytest.mark.parametrize("body,expect", [
    ("x = (", "syntax error"),
    ("import not_a_real_module_xyz\n", "not_a_real_module_xyz"),
    ("import torch\ndef get_inputs():\n    return [torch.ones(1)]\n", "no `Model` class"),
    ("import torch\nclass Model(torch.nn.Module):\n    pass\n", "no get_inputs()"),
    ("import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    raise ValueError('boom')\n",
     "m.py:5 in get_inputs: ValueError: boom"),
    ("import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    return [1, 'a']\n", "no tensors"),
    ("import torch\nclass Model(torch.nn.Module):\n    def __init__(self):\n        raise RuntimeError('ctor')\n"
     "def get_inputs():\n    return [torch.ones(1)]\n", "m.py:4 in __init__: RuntimeError: ctor"),
])
def test_bad_model_files_give_one_clear_error(tmp_path, body, expect):
    with pytest.raises(UserInputError) as e:
        load_model(write(tmp_path, body), device="cpu")
    assert expect in e.value.one_line()
    assert "\n" not in e.value.one_line()


def test_forward_error_points_at_the_users_line(tmp_path):
    path = write(tmp_path, """
        import torch
        class Model(torch.nn.Module):
            def forward(self, x):
                return x @ torch.ones(3, 3)
        def get_inputs():
            return [torch.ones(2, 2)]
    """)
    lm = load_model(path, device="cpu")
    with pytest.raises(UserInputError, match=r"m\.py:5 in forward: RuntimeError"):
        make_step(lm, "inference")()


@pytest.mark.parametrize("make", [lambda p: p / "missing.py", lambda p: p, lambda p: p / "notes.txt"])
def test_paths_that_are_not_model_files(tmp_path, make):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(UserInputError):
        load_model(make(tmp_path), device="cpu")


def test_cuda_without_gpu_is_an_environment_error(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(EnvironmentCapabilityError, match="no CUDA device"):
        load_model(write(tmp_path, KB), device="cuda")


@pytest.mark.parametrize("example", ["mlp.py", "gpt_block.py", "cnn.py"])
@pytest.mark.parametrize("mode", ["inference", "train"])
def test_examples_run(examples_dir, example, mode):
    lm = load_model(f"{examples_dir}/{example}", device="cpu")
    assert make_step(lm, mode)() is not None
