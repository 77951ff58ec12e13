"""What a run records about the machine and the numerics settings it ran under."""
from __future__ import annotations

import platform
import sys
from pathlib import Path

import torch


def device_info(dev: torch.device) -> dict:
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        return {"type": "cuda", "name": props.name, "capability": [props.major, props.minor],
                "sm_count": props.multi_processor_count,
                "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
                "total_memory_bytes": int(props.total_memory), "driver": driver_version()}
    return {"type": "cpu", "name": cpu_name(), "capability": None, "sm_count": None,
            "l2_bytes": None, "total_memory_bytes": None, "driver": ""}


def driver_version() -> str:
    proc = Path("/proc/driver/nvidia/version")
    if proc.is_file():
        for word in proc.read_text(errors="replace").split():
            if word.count(".") >= 1 and word.replace(".", "").isdigit():
                return word
    try:
        import pynvml  # nvidia-ml-py, optional

        pynvml.nvmlInit()
        return str(pynvml.nvmlSystemGetDriverVersion())
    except Exception:  # noqa: BLE001 - driver version is informative only
        return ""


def cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "cpu"


def versions() -> dict:
    try:
        import triton

        triton_version = triton.__version__
    except Exception:  # noqa: BLE001 - triton is optional
        triton_version = None
    return {"python": platform.python_version(), "torch": torch.__version__,
            "triton": triton_version, "cuda": torch.version.cuda,
            "platform": sys.platform}


def numerics_settings(mode: str, dtype: str, effective_dtype: str) -> dict:
    return {
        "allow_tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "allow_tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "mode": mode, "dtype": dtype, "effective_dtype": effective_dtype,
    }
