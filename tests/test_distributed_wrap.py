"""Wrapping for data parallelism, in this process on a one-rank gloo group (no torchrun)."""
from pathlib import Path

import pytest
import torch.distributed as dist
from torch import nn

from kernel_advisor.collect.loader import load_model
from kernel_advisor.distributed.worker import repeated_blocks, wrap_model
from kernel_advisor.errors import UserInputError

DATA = Path(__file__).parent / "data"
EXAMPLES = Path(__file__).parents[1] / "examples"


@pytest.fixture
def one_rank():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def load(path):
    return load_model(path, device="cpu")


def model_file(tmp_path, body):
    path = tmp_path / "model.py"
    path.write_text("import torch\nimport torch.nn as nn\n\n"
                    "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                    "        self.fc = nn.Linear(4, 4)\n\n    def forward(self, x):\n        return self.fc(x)\n\n"
                    "def get_inputs():\n    return [torch.randn(2, 4)]\n\n" + body)
    return path


@pytest.mark.parametrize("path,blocks", [
    (DATA / "ddp_tiny.py", 4),  # nn.Sequential of 4 Linear+GELU blocks: the blocks, not their Linears
    (EXAMPLES / "gpt_block.py", 2),  # the ModuleList of decoder blocks (2 on CPU)
    (EXAMPLES / "mlp.py", 0),  # four Linear attributes, no container: only the root is sharded
])
def test_repeated_blocks_are_the_outermost_containers_items(path, blocks):
    model = load(path).model
    found = repeated_blocks(model)
    assert len(found) == blocks
    inner = {id(m) for b in found for m in b.modules() if m is not b}
    assert not any(id(b) in inner for b in found)


def test_train_mode_wraps_in_ddp(one_rank):
    model, how = wrap_model(load(DATA / "ddp_tiny.py"), "train", fsdp=False)
    assert how == "ddp" and isinstance(model, nn.parallel.DistributedDataParallel)


def test_fsdp_shards_each_block_then_the_root(one_rank):
    from torch.distributed.fsdp import FSDPModule

    model, how = wrap_model(load(DATA / "ddp_tiny.py"), "train", fsdp=True)
    assert how == "fsdp" and isinstance(model, FSDPModule)
    assert all(isinstance(block, FSDPModule) for block in model.layers)


def test_the_files_own_wrapping_wins(one_rank):
    model, how = wrap_model(load(DATA / "ddp_tiny_buckets.py"), "train", fsdp=True)
    assert how == "user" and isinstance(model, nn.parallel.DistributedDataParallel)
    assert model.bucket_bytes_cap == int(0.25 * 1024 * 1024)  # bucket_cap_mb=0.25


def test_inference_runs_the_bare_model(one_rank):
    loaded = load(DATA / "ddp_tiny.py")
    model, how = wrap_model(loaded, "inference", fsdp=False)
    assert how == "none" and model is loaded.model


@pytest.mark.parametrize("body,text", [
    ("wrap_distributed = 3\n", "wrap_distributed is not callable"),
    ("def wrap_distributed(model):\n    raise ValueError('no wrap')\n", "model.py:16 in wrap_distributed: ValueError: no wrap"),  # 14 header lines + def + raise
    ("def wrap_distributed(model):\n    return None\n", "returned NoneType, not a model"),
])
def test_bad_wrap_hooks_are_user_errors(tmp_path, body, text):
    with pytest.raises(UserInputError) as e:
        wrap_model(load(model_file(tmp_path, body)), "train", fsdp=False)
    assert text in e.value.problem


def test_a_model_without_trainable_parameters_cannot_be_wrapped(tmp_path):
    path = model_file(tmp_path, "")
    loaded = load(path)
    loaded.model.requires_grad_(False)
    with pytest.raises(UserInputError) as e:
        wrap_model(loaded, "train", fsdp=False)
    assert "no trainable parameters" in e.value.problem and "--mode inference" in e.value.fix
