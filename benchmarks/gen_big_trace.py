"""Write a large, realistic synthetic torch.profiler (kineto) chrome trace as gzip JSON.

The trace mimics what torch 2.11 writes for a bf16 transformer on one H200: each step is a
`ProfilerStep#N` user annotation holding `layers` blocks; every block runs layer norms,
linears (`aten::linear` → `aten::t` + `aten::addmm`), flash attention, GELU, residual adds
and a split-K GEMM (two kernels for one op); each step also copies its input (memcpy) and
zeroes a buffer (memset), and ends in a cudaDeviceSynchronize. Every launch has its
cuda_runtime event and its ac2g flow pair, every block a gpu_user_annotation; the GELU is
an Inductor (Triton) launch with kineto's args layout for those. The text layout
(indentation, key order, line breaks) follows kineto's `output_json.cpp`, because a reader
must cope with exactly that.

Per step the CPU events come first, then the GPU activities, as kineto flushes its
buffers. Output is deterministic for a given (kernels, layers, seed): the gzip header
carries no time stamp and no file name.

    python benchmarks/gen_big_trace.py /tmp/big.json.gz --kernels 1000000
"""
from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

PID = 4242  # host process id
DEVICE = 0
STREAM = 7
TS0_US = 4392600536703.773  # kineto-like absolute start (µs)

HEADER = """
  {
    "schemaVersion": 1,
    "deviceProperties": [
    {
      "id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150109880320,
      "computeMajor": 9, "computeMinor": 0,
      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
      "regsPerBlock": 65536, "warpSize": 32,
      "sharedMemPerBlock": 49152, "numSms": 132
    , "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472
    }
    ],
      "trace_id": "0123456789ABCDEF0123456789ABCDEF",
      "record_shapes": 1,
      "cuda_driver_version": 13000,
      "cuda_runtime_version": 13000,
      "cupti_version": 130001,
  "displayTimeUnit": "ms",
  "baseTimeNanoseconds": 1790857026000000000,
  "traceEvents": [
"""
FOOTER = """  {
    "ph": "X", "cat": "Trace", "ts": %.3f, "dur": %.3f,
    "pid": "Spans", "tid": "PyTorch Profiler",
    "name": "PyTorch Profiler (0)",
    "args": {
      "Op count": 0
    }
  },
  {
    "name": "Record Window End", "ph": "i", "s": "g",
    "pid": "", "tid": "", "ts": %.3f
  }
  ],
  "traceName": "synthetic_gen_big_trace.json"
}
"""
N_FIXED_EVENTS = 5  # 3 metadata events, the Trace span and the Record Window End instant
METADATA = f"""  {{
    "name": "process_name", "ph": "M", "ts": {TS0_US:.3f}, "pid": {PID}, "tid": 0,
    "args": {{
      "name": "python3"
    }}
  }},
  {{
    "name": "process_labels", "ph": "M", "ts": {TS0_US:.3f}, "pid": {DEVICE}, "tid": 0,
    "args": {{
      "labels": "GPU 0"
    }}
  }},
  {{
    "name": "thread_name", "ph": "M", "ts": {TS0_US:.3f}, "pid": {PID}, "tid": {PID},
    "args": {{
      "name": "thread {PID} (python3)"
    }}
  }},
"""

# Kernel names as cuBLAS / ATen / flash-attention emit them: long, templated, with braces,
# parentheses and commas inside the string (a reader that counts braces naively breaks).
K_LAYER_NORM = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
                "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, "
                "float*, c10::BFloat16*)")
K_GEMM = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
          "_execute_segment_k_off_kernel__5x_cublas")
K_GEMM_SPLITK = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64_warpgroupsize1x1x1"
                 "_execute_split_k_kernel__5x_cublas")
K_SPLITK_REDUCE = ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, true, "
                   "false, false>(cublasLt::cublasSplitKParams<float>, float const*, __nv_bfloat16 const*, "
                   "__nv_bfloat16*, float const*, float const*, __nv_bfloat16 const*, float*, void*, long, "
                   "float*, int*)")
K_FLASH = ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
           "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, "
           "false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)")
K_GELU = "triton_poi_fused_gelu_0"
K_ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
         "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")


def _args(dims: list, types: list, concrete: list | None = None) -> str:
    """The record_shapes part of a cpu_op's args, written as kineto writes it."""
    concrete = concrete if concrete is not None else ["" for _ in dims]
    strides = [_contiguous_strides(d) for d in dims]
    return (f'"Concrete Inputs": {json.dumps(concrete)}, "Input type": {json.dumps(types)}, '
            f'"Input Strides": {json.dumps(strides)}, "Input Dims": {json.dumps(dims)}')


def _inductor_args(dims: list, types: list, concrete: list, kernel: str) -> str:
    """args of an Inductor kernel launch: shapes in the opposite order, then launch details."""
    strides = [_contiguous_strides(d) for d in dims]
    return (f'"Input Dims": {json.dumps(dims)}, "Input Strides": {json.dumps(strides)}, '
            f'"Input type": {json.dumps(types)}, "Concrete Inputs": {json.dumps(concrete)}, '
            f'"num_warps": 4, "stream": 0, "kernel_backend": "triton", "kernel_name": "{kernel}", '
            f'"kernel_kwargs": "XBLOCK=1024", "num_stages": 1, '
            f'"kernel_file": "/tmp/torchinductor_root/g3/cg3{kernel}.py", "kernel_hash": "cg3{kernel}"')


def _contiguous_strides(dims: list) -> list:
    strides, running = [], 1
    for size in reversed(dims):
        strides.append(running)
        running *= size
    return strides[::-1]


@dataclass(frozen=True)
class Launch:
    """One GPU activity issued by a leaf op."""
    cat: str  # kernel | gpu_memcpy | gpu_memset
    name: str
    api: str  # the runtime / driver call that issues it
    api_cat: str  # cuda_runtime | cuda_driver
    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (128, 1, 1)
    mean_dur_us: float = 10.0
    nbytes: int = 0


@dataclass(frozen=True)
class Op:
    """A cpu_op; `children` run nested inside it, `launches` are issued by it directly."""
    name: str
    args: str = ""
    children: tuple["Op", ...] = ()
    launches: tuple[Launch, ...] = ()
    seq: bool = True  # carries a "Sequence number" (autograd-recorded forward op)
    inductor: bool = False  # args laid out as for an Inductor kernel launch (Ev Idx first)


def _block_ops(tokens: int, hidden: int) -> tuple[Op, ...]:
    """The ops of one transformer block at (tokens × hidden), bf16."""
    bf16 = "c10::BFloat16"
    act = [tokens, hidden]

    def linear(out_features: int, split_k: bool = False) -> Op:
        weight, bias = [out_features, hidden], [out_features]
        launches = (
            (Launch("kernel", K_GEMM_SPLITK, "cudaLaunchKernelExC", "cuda_runtime", (8, 24, 4), (384, 1, 1), 42.0),
             Launch("kernel", K_SPLITK_REDUCE, "cudaLaunchKernel", "cuda_runtime", (96, 1, 1), (512, 1, 1), 6.0))
            if split_k else
            (Launch("kernel", K_GEMM, "cudaLaunchKernelExC", "cuda_runtime", (24, 16, 1), (384, 1, 1), 35.0),))
        return Op("aten::linear", _args([act, weight, bias], [bf16] * 3), children=(
            Op("aten::t", _args([weight], [bf16]), seq=False),
            Op("aten::addmm", _args([bias, act, [hidden, out_features], [], []],
                                    [bf16, bf16, bf16, "Scalar", "Scalar"], ["", "", "", "1", "1"]),
               launches=launches, seq=False)))

    def layer_norm() -> Op:
        return Op("aten::layer_norm", _args([act, [], [hidden], [hidden], [], []],
                                            [bf16, "ScalarList", bf16, bf16, "Scalar", "Scalar"],
                                            ["", f"[{hidden}]", "", "", "1e-05", "True"]), children=(
            Op("aten::native_layer_norm", _args([act, [], [hidden], [hidden], []],
                                                [bf16, "ScalarList", bf16, bf16, "Scalar"],
                                                ["", f"[{hidden}]", "", "", "1e-05"]),
               launches=(Launch("kernel", K_LAYER_NORM, "cudaLaunchKernel", "cuda_runtime",
                                (tokens, 1, 1), (32, 4, 1), 8.0),), seq=False),))

    def add() -> Op:
        return Op("aten::add", _args([act, act, []], [bf16, bf16, "Scalar"], ["", "", "1"]),
                  launches=(Launch("kernel", K_ADD, "cudaLaunchKernel", "cuda_runtime",
                                   (tokens * hidden // 512, 1, 1), (128, 1, 1), 5.0),))

    heads, head_dim = hidden // 128, 128
    qkv = [1, heads, tokens, head_dim]
    attention = Op("aten::scaled_dot_product_attention", _args([qkv] * 3, [bf16] * 3), children=(
        Op("aten::_scaled_dot_product_flash_attention", _args([qkv] * 3, [bf16] * 3), seq=False, children=(
            Op("aten::_flash_attention_forward", _args([qkv] * 3, [bf16] * 3), seq=False,
               launches=(Launch("kernel", K_FLASH, "cudaLaunchKernel", "cuda_runtime",
                                (tokens // 128, heads, 1), (128, 1, 1), 60.0),)),)),))
    gelu = Op(K_GELU, _inductor_args([[tokens, 4 * hidden], []], [bf16, "Scalar"], ["", str(tokens * 4 * hidden)],
                                     K_GELU),
              seq=False, inductor=True, launches=(Launch("kernel", K_GELU, "cuLaunchKernel", "cuda_driver",
                                                         (tokens * 4 * hidden // 1024, 1, 1), (128, 1, 1), 9.0),))
    return (layer_norm(), linear(3 * hidden), attention, linear(hidden), add(), layer_norm(),
            linear(4 * hidden), gelu, linear(hidden, split_k=True), add())


def _step_prologue_ops(tokens: int, hidden: int) -> tuple[Op, ...]:
    """Input upload (memcpy) and a buffer zeroing (memset) at the start of each step."""
    nbytes = tokens * hidden * 2
    copy = Op("aten::to", _args([[tokens, hidden], [], [], [], []], ["c10::BFloat16", "Scalar", "Scalar", "Scalar", ""],
                                ["", "15", "False", "False", ""]), seq=False, children=(
        Op("aten::_to_copy", _args([[tokens, hidden]], ["c10::BFloat16"]), seq=False, children=(
            Op("aten::copy_", _args([[tokens, hidden], [tokens, hidden], []],
                                    ["c10::BFloat16", "c10::BFloat16", "Scalar"], ["", "", "False"]), seq=False,
               launches=(Launch("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", "cudaMemcpyAsync", "cuda_runtime",
                                mean_dur_us=nbytes / 50e3, nbytes=nbytes),)),)),))
    zero = Op("aten::zero_", _args([[hidden]], ["float"]), seq=False, children=(
        Op("aten::fill_", _args([[hidden], []], ["float", "Scalar"], ["", "0"]), seq=False,
           launches=(Launch("gpu_memset", "Memset (Device)", "cudaMemsetAsync", "cuda_runtime",
                            mean_dur_us=1.5, nbytes=hidden * 4),)),))
    return copy, zero


@dataclass
class Counts:
    kernel: int = 0
    gpu_memcpy: int = 0
    gpu_memset: int = 0
    cpu_op: int = 0
    user_annotation: int = 0
    gpu_user_annotation: int = 0
    cuda_runtime: int = 0
    cuda_driver: int = 0
    flows: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class TraceWriter:
    """Emits events with kineto's text layout; keeps the clocks and id counters."""

    def __init__(self, out, rng: random.Random, kernel_budget: int) -> None:
        self.out, self.rng, self.kernel_budget = out, rng, kernel_budget
        self.counts = Counts()
        self.cpu_us = TS0_US + 50.0
        self.gpu_us = self.cpu_us
        self.ext_id = 0
        self.ev_idx = 0
        self.correlation = 1000
        self.seq_nr = 0
        self.cpu_text: list[str] = []
        self.gpu_text: list[str] = []

    def budget_left(self) -> int:
        return self.kernel_budget - self.counts.kernel

    def jitter(self, mean: float) -> float:
        # NB: ±25% uniform jitter: enough spread for realistic-looking timings, cheap to draw.
        return mean * (0.75 + 0.5 * self.rng.random())

    def reserve(self) -> int:
        """A slot for an event whose text is known only when it ends; kineto orders by start."""
        self.cpu_text.append("")
        return len(self.cpu_text) - 1

    def cpu_event(self, slot: int, cat: str, name: str, ts: float, dur: float, args: str) -> None:
        self.cpu_text[slot] = (
            f'  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": {PID}, "tid": {PID},\n'
            f'    "ts": {ts:.3f}, "dur": {dur:.3f},\n    "args": {{\n      {args}\n    }}\n  }},\n')

    def open_span(self) -> tuple[int, int, int, float]:
        """Slot, External id, Ev Idx and start of an annotation; kineto numbers spans at their start."""
        self.ext_id += 1
        self.ev_idx += 1
        return self.reserve(), self.ext_id, self.ev_idx - 1, self.cpu_us

    def annotation(self, span: tuple[int, int, int, float], name: str,
                   gpu_span: tuple[float, float] | None) -> None:
        slot, ext_id, ev_idx, start_us = span
        self.cpu_event(slot, "user_annotation", name, start_us, self.cpu_us - start_us,
                       f'"External id": {ext_id},"Record function id": 0, "Ev Idx": {ev_idx}')
        self.counts.user_annotation += 1
        if gpu_span is not None:
            self.gpu_text.append(
                f'  {{\n    "ph": "X", "cat": "gpu_user_annotation", "name": "{name}", "pid": {DEVICE}, '
                f'"tid": {STREAM},\n    "ts": {gpu_span[0]:.3f}, "dur": {gpu_span[1] - gpu_span[0]:.3f},\n'
                f'    "args": {{\n      "External id": {ext_id}\n    }}\n  }},\n')
            self.counts.gpu_user_annotation += 1

    def op(self, op: Op) -> bool:
        """Emit `op` and its subtree; False once the kernel budget is spent."""
        if self.budget_left() <= 0:
            return False
        self.ext_id += 1
        ext_id, ev_idx = self.ext_id, self.ev_idx
        self.ev_idx += 1
        slot = self.reserve()
        start = self.cpu_us
        self.cpu_us += self.jitter(3.0)
        for child in op.children:
            self.op(child)
        for launch in op.launches:
            self.launch(launch, ext_id)
        self.cpu_us += self.jitter(2.0)
        seq = ""
        if op.seq:
            self.seq_nr += 1
            seq = f'"Sequence number": {self.seq_nr}, "Fwd thread id": 0, '
        args = (f'"Ev Idx": {ev_idx}, {op.args}' if op.inductor else f'{op.args}, "Ev Idx": {ev_idx}')
        self.cpu_event(slot, "cpu_op", op.name, start, self.cpu_us - start,
                       f'"External id": {ext_id},{seq}"Record function id": 0, {args}')
        self.counts.cpu_op += 1
        return True

    def launch(self, launch: Launch, ext_id: int) -> None:
        if self.budget_left() <= 0:
            return
        self.correlation += 1
        corr = self.correlation
        api_ts = self.cpu_us
        api_dur = self.jitter(4.0)
        self.cpu_us += api_dur
        gpu_ts = max(self.gpu_us, api_ts + 3.0)
        gpu_dur = self.jitter(launch.mean_dur_us)
        self.gpu_us = gpu_ts + gpu_dur + 1.0
        if launch.cat == "kernel":
            blocks_per_sm = launch.grid[0] * launch.grid[1] * launch.grid[2] / 132
            detail = (f'"registers per thread": 128,      "shared memory": 49152,      '
                      f'"blocks per SM": {blocks_per_sm:.6f},      "warps per SM": {blocks_per_sm * 4:.6f},      '
                      f'"grid": [{launch.grid[0]}, {launch.grid[1]}, {launch.grid[2]}],      '
                      f'"block": [{launch.block[0]}, {launch.block[1]}, {launch.block[2]}],      '
                      f'"est. achieved occupancy %": {min(100, int(blocks_per_sm * 6))}')
        else:
            detail = f'"bytes": {launch.nbytes}, "memory bandwidth (GB/s)": {launch.nbytes / (gpu_dur * 1e3):.6f}'
        self.gpu_text.append(
            f'  {{\n    "ph": "X", "cat": "{launch.cat}", "name": "{launch.name}", "pid": {DEVICE}, "tid": {STREAM},\n'
            f'    "ts": {gpu_ts:.3f}, "dur": {gpu_dur:.3f},\n    "args": {{\n      "External id": {ext_id},'
            f'      "queued": 0, "device": {DEVICE}, "context": 1,      "stream": {STREAM}, "correlation": {corr},'
            f'      {detail}\n    }}\n  }},\n'
            f'  {{\n    "ph": "f", "id": {corr}, "pid": {DEVICE}, "tid": {STREAM}, "ts": {gpu_ts:.3f},\n'
            f'    "cat": "ac2g", "name": "ac2g", "bp": "e"\n  }},\n'
            f'  {{\n    "ph": "X", "cat": "{launch.api_cat}", "name": "{launch.api}", "pid": {PID}, "tid": {PID},\n'
            f'    "ts": {api_ts:.3f}, "dur": {api_dur:.3f},\n    "args": {{\n      "External id": {ext_id},'
            f'      "cbid": 211, "correlation": {corr}\n    }}\n  }},\n'
            f'  {{\n    "ph": "s", "id": {corr}, "pid": {PID}, "tid": {PID}, "ts": {api_ts:.3f},\n'
            f'    "cat": "ac2g", "name": "ac2g"\n  }},\n')
        setattr(self.counts, launch.cat, getattr(self.counts, launch.cat) + 1)
        setattr(self.counts, launch.api_cat, getattr(self.counts, launch.api_cat) + 1)
        self.counts.flows += 2

    def synchronize(self, ext_id: int) -> None:
        """cudaDeviceSynchronize at the end of a step: the CPU waits for the GPU queue to drain."""
        self.correlation += 1
        start = self.cpu_us
        self.cpu_us = max(self.cpu_us, self.gpu_us) + self.jitter(8.0)
        self.gpu_text.append(
            f'  {{\n    "ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": {PID}, '
            f'"tid": {PID},\n    "ts": {start:.3f}, "dur": {self.cpu_us - start:.3f},\n    "args": {{\n'
            f'      "External id": {ext_id},      "cbid": 165, "correlation": {self.correlation}\n    }}\n  }},\n')
        self.counts.cuda_runtime += 1

    def flush(self) -> None:
        self.out.write("".join(self.cpu_text).encode())
        self.out.write("".join(self.gpu_text).encode())
        self.cpu_text.clear()
        self.gpu_text.clear()


def write_trace(path: str | Path, kernels: int = 1_000_000, layers: int = 32, seed: int = 0,
                tokens: int = 4096, hidden: int = 4096, compresslevel: int = 6) -> dict:
    """Write the trace to `path` (gzip); returns the number of events written per category.

    Generation stops as soon as `kernels` kernels have been issued, possibly part-way
    through a step; memcpys and memsets (two per step) come on top.
    """
    if kernels < 1 or layers < 1:
        raise ValueError("kernels and layers must be at least 1")
    block, prologue = _block_ops(tokens, hidden), _step_prologue_ops(tokens, hidden)
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                                compresslevel=compresslevel, mtime=0) as out:
        out.write(HEADER.encode())
        out.write(METADATA.encode())
        writer = TraceWriter(out, random.Random(seed), kernels)
        step = 0
        while writer.budget_left() > 0:
            step += 1
            _write_step(writer, step, prologue, block, layers)
            writer.flush()
        end_us = max(writer.cpu_us, writer.gpu_us)
        out.write((FOOTER % (TS0_US, end_us - TS0_US, end_us)).encode())
    counts = writer.counts.as_dict()
    counts["total_events"] = sum(counts.values()) + N_FIXED_EVENTS
    counts["steps"] = step
    return counts


def _write_step(writer: TraceWriter, step: int, prologue: tuple[Op, ...], block: tuple[Op, ...],
                layers: int) -> None:
    step_span = writer.open_span()
    writer.cpu_us += 10.0
    for op in prologue:
        writer.op(op)
    for layer in range(layers):
        if writer.budget_left() <= 0:
            break
        layer_span, gpu_start = writer.open_span(), writer.gpu_us
        kernels_before = writer.counts.kernel
        for op in block:
            writer.op(op)
        gpu_span = (gpu_start, writer.gpu_us) if writer.counts.kernel > kernels_before else None
        writer.annotation(layer_span, f"block.{layer}", gpu_span)
    writer.synchronize(step_span[1])
    writer.annotation(step_span, f"ProfilerStep#{step}", None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="output path, e.g. /tmp/big_trace.json.gz")
    parser.add_argument("--kernels", type=int, default=1_000_000, help="kernel events to emit")
    parser.add_argument("--layers", type=int, default=32, help="transformer blocks per step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compresslevel", type=int, default=6, choices=range(1, 10))
    ns = parser.parse_args(argv)
    counts = write_trace(ns.out, ns.kernels, ns.layers, ns.seed, compresslevel=ns.compresslevel)
    print(json.dumps({"path": str(ns.out), "gzip_bytes": Path(ns.out).stat().st_size, **counts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
