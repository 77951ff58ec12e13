"""inductor_kernel_bytes: Inductor's own kernel_num_gb metadata from generated Triton files.

tests/data/inductor_triton_per_fused_add_relu_sum_0.py.txt is a kernel file Inductor
(torch 2.13, cpu_backend="triton", benchmark_kernel=True) generated for
relu(x + y).sum(-1) with x [64, 33] and y [33] fp32, copied unchanged (stored as .txt: the
CPU Triton backend emits a stray indented import that makes it invalid Python).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernel_advisor.analyze.costs import inductor_kernel_bytes

DATA = Path(__file__).parent / "data" / "inductor_triton_per_fused_add_relu_sum_0.py.txt"
KERNEL = "triton_per_fused_add_relu_sum_0"
# x 64*33*4 = 8448 + y 33*4 = 132 + out 64*4 = 256 -> 8836 bytes ('kernel_num_gb': 8.836e-06)
EXPECTED_BYTES = 8836.0


def test_reads_kernel_num_gb_in_scientific_notation():
    assert inductor_kernel_bytes(str(DATA), KERNEL) == EXPECTED_BYTES


def test_absent_file_kernel_or_metadata_give_none(tmp_path):
    assert inductor_kernel_bytes(str(tmp_path / "missing.py"), KERNEL) is None
    assert inductor_kernel_bytes(str(DATA), "triton_poi_fused_other_1") is None
    assert inductor_kernel_bytes("", KERNEL) is None
    stripped = tmp_path / "no_benchmark.py"
    text = DATA.read_text()
    stripped.write_text(text.replace("'kernel_num_gb': 8.836e-06, ", ""))
    assert "kernel_num_gb': 8" in text  # the replacement really removed something
    assert inductor_kernel_bytes(str(stripped), KERNEL) is None


def test_picks_the_named_kernel_in_a_multi_kernel_module(tmp_path):
    # Inductor's wrapper module embeds every kernel's source; each has its own metadata.
    text = DATA.read_text()
    other = text.replace(KERNEL, "triton_poi_fused_mul_1").replace("8.836e-06", "0.000128")
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(f"k0 = '''{text}'''\nk1 = '''{other}'''\n")
    assert inductor_kernel_bytes(str(wrapper), KERNEL) == EXPECTED_BYTES
    assert inductor_kernel_bytes(str(wrapper), "triton_poi_fused_mul_1") == 128_000.0


_GENERATE = textwrap.dedent("""
    import torch, torch.utils._triton as triton_utils
    import torch._inductor.config as config
    # Inductor hashes the Triton backend while generating code; with no GPU driver there
    # is none, so give it a fixed hash. The kernel source is Inductor's own output.
    triton_utils.triton_hash_with_backend = lambda: "0" * 64
    config.cpu_backend = "triton"
    config.benchmark_kernel = True
    config.compile_threads = 1
    x, y = torch.randn(64, 33), torch.randn(33)
    try:
        torch.compile(lambda a, b: torch.relu(a + b).sum(-1))(x, y)
    except Exception as error:  # loading the CPU Triton kernel may fail after codegen
        print("compile stopped:", type(error).__name__)
""")


@pytest.mark.slow
def test_live_generated_inductor_kernel(tmp_path):
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path), TRITON_INTERPRET="1")
    run = subprocess.run([sys.executable, "-c", _GENERATE], env=env, capture_output=True,
                         text=True, timeout=240)
    files = [p for p in tmp_path.rglob("*.py") if f"def {KERNEL}(" in p.read_text()]
    if not files:
        pytest.skip(f"Inductor emitted no Triton kernel here: {run.stdout[-300:]}"
                    f"{run.stderr[-300:]}")
    for path in files:
        assert inductor_kernel_bytes(str(path), KERNEL) == EXPECTED_BYTES, path
