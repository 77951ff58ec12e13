"""Option choices shared by the commands that load and run a model."""
from __future__ import annotations

from enum import Enum


class Device(str, Enum):
    auto = "auto"
    cuda = "cuda"
    cpu = "cpu"


class Mode(str, Enum):
    inference = "inference"
    train = "train"


class DType(str, Enum):
    keep = "keep"
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"
