"""Builds the CUDA C++ reference kernels as a torch JIT extension, once per source version and arch.

`load_extension()` compiles the .cu kernels and the C++ binding (forward.cpp, backward.cpp,
cross_entropy.cpp: tensor-level ops; library.cpp and autograd.cpp: the advisor_cuda
torch.library operators and their backward nodes; fast.cpp and binding.cpp: the pybind
module) with
torch.utils.cpp_extension.load into the torch extensions dir (TORCH_EXTENSIONS_DIR, else torch's
default cache) for the current GPU's arch only (`-gencode=arch=compute_XY,code=sm_XY`), at -O3
and without --use_fast_math. The extension name carries a digest of the sources, headers and
flags, so an edited source never reuses a stale build. Nothing is compiled at import time.
"""
from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
from pathlib import Path
from types import ModuleType

import torch

from reference_kernels.errors import KernelUnavailableError

SOURCE_DIR = Path(__file__).resolve().parent
CUDA_SOURCES: tuple[str, ...] = ("softmax.cu", "norms.cu", "bias_act.cu", "backward.cu",
                                  "norm_backward.cu", "pointwise.cu", "cross_entropy.cu")
CPP_SOURCES: tuple[str, ...] = ("forward.cpp", "backward.cpp", "cross_entropy.cpp",
                                "library.cpp", "autograd.cpp", "fast.cpp", "binding.cpp")
HEADERS: tuple[str, ...] = ("launchers.h", "device_math.h", "rowwise.h", "activations.h",
                            "tensors.h", "ops.h", "operators.h")
MIN_COMPUTE_CAPABILITY = (7, 0)
CXX_FLAGS: tuple[str, ...] = ("-O3",)
# Torch adds __CUDA_NO_HALF_OPERATORS__ and friends to every extension build itself.
# NB: accuracy over speed: no --use_fast_math, so '/' and sqrtf round correctly and expf/erff
# keep their documented ulp bounds.
_NVCC_BASE_FLAGS: tuple[str, ...] = ("-O3", "-lineinfo")
BUILD_LOG_NAME = "build.log"

_ERROR_LINE = re.compile(r"\berror\b|undefined reference|undefined symbol", re.IGNORECASE)
_NOT_COMPILER_LINES = ("FAILED:", "ninja: build stopped", "Error building extension")


def gencode_flag(capability: tuple[int, int]) -> str:
    """The nvcc target for one arch, e.g. (9, 0) -> -gencode=arch=compute_90,code=sm_90."""
    major, minor = capability
    return f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}"


def nvcc_flags(capability: tuple[int, int]) -> list[str]:
    return [*_NVCC_BASE_FLAGS, gencode_flag(capability)]


def source_paths() -> list[Path]:
    return [SOURCE_DIR / name for name in (*CUDA_SOURCES, *CPP_SOURCES)]


def extension_name(capability: tuple[int, int]) -> str:
    """A name unique to these sources, headers and flags, e.g. ka_cuda_sm90_1f2e3d4c5b6a."""
    digest = hashlib.sha256()
    for name in (*CUDA_SOURCES, *CPP_SOURCES, *HEADERS):
        digest.update(name.encode())
        digest.update((SOURCE_DIR / name).read_bytes())
    digest.update(" ".join([*CXX_FLAGS, *nvcc_flags(capability)]).encode())
    major, minor = capability
    return f"ka_cuda_sm{major}{minor}_{digest.hexdigest()[:12]}"


def first_compiler_error(log: str) -> str | None:
    """The first line of a build log that reports an error (nvcc, g++ or the linker)."""
    for line in log.splitlines():
        stripped = line.strip()
        if stripped.startswith(_NOT_COMPILER_LINES):
            continue
        if _ERROR_LINE.search(stripped):
            return stripped
    return None


def find_nvcc() -> str | None:
    """nvcc as torch's extension builder finds it: $CUDA_HOME/bin first, then PATH."""
    from torch.utils.cpp_extension import CUDA_HOME

    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), CUDA_HOME):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def unavailable_reason() -> tuple[str, str] | None:
    """(problem, fix) when this machine cannot build or run the kernels, else None."""
    from torch.utils.cpp_extension import is_ninja_available

    if torch.version.cuda is None:
        return (f"this PyTorch build has no CUDA support (torch {torch.__version__})",
                "install a CUDA build of PyTorch to use the CUDA reference kernels")
    if not torch.cuda.is_available():
        return ("no CUDA GPU is visible (torch.cuda.is_available() is False)",
                "run on a machine with an NVIDIA GPU, or check CUDA_VISIBLE_DEVICES and the driver")
    capability = torch.cuda.get_device_capability()
    if capability < MIN_COMPUTE_CAPABILITY:
        return (f"the GPU has compute capability {capability[0]}.{capability[1]}; "
                "the CUDA reference kernels need 7.0 or newer", "use a Volta or newer GPU")
    if find_nvcc() is None:
        return ("nvcc was not found (CUDA_HOME, CUDA_PATH and PATH were searched)",
                f"install the CUDA toolkit matching torch's CUDA {torch.version.cuda} "
                "and set CUDA_HOME")
    if not is_ninja_available():
        return ("ninja is not installed; torch builds C++ extensions with it",
                "pip install ninja")
    return None


def build_directory(name: str) -> Path:
    from torch.utils.cpp_extension import get_default_build_root

    root = os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()
    return Path(root) / name


@functools.cache
def load_extension() -> ModuleType:
    """Builds (first call, about a minute) or loads the extension; cached per process.

    Raises KernelUnavailableError when there is no GPU, nvcc or ninja, and when the build
    fails, naming the first compiler error and the full log's path.
    """
    reason = unavailable_reason()
    if reason is not None:
        raise KernelUnavailableError(*reason)
    from torch.utils.cpp_extension import load

    capability = torch.cuda.get_device_capability()
    name = extension_name(capability)
    build_dir = build_directory(name)
    build_dir.mkdir(parents=True, exist_ok=True)
    try:
        return load(name=name, sources=[str(p) for p in source_paths()],
                    extra_cflags=list(CXX_FLAGS), extra_cuda_cflags=nvcc_flags(capability),
                    build_directory=str(build_dir), verbose=False)
    except (RuntimeError, ImportError, OSError) as exc:
        raise _build_error(exc, build_dir) from exc


def _build_error(exc: BaseException, build_dir: Path) -> KernelUnavailableError:
    log = str(exc)
    log_path = build_dir / BUILD_LOG_NAME
    log_path.write_text(log)
    return KernelUnavailableError(
        f"building the CUDA reference kernels failed: {_log_summary(log, exc)}",
        f"full build log: {log_path}; check that nvcc ({find_nvcc()}) matches torch's "
        f"CUDA {torch.version.cuda}")


def _log_summary(log: str, exc: BaseException) -> str:
    if not log.strip():
        return repr(exc)
    return first_compiler_error(log) or log.strip().splitlines()[0]
