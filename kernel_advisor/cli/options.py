"""Option choices shared by the commands that load and run a model."""
from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer


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


class Autocast(str, Enum):
    bfloat16 = "bfloat16"
    float16 = "float16"


AutocastOption = Annotated[Optional[Autocast], typer.Option(
    help="Run steps under torch.autocast with this dtype instead of casting the model (for models that make "
         "float32 tensors in forward, such as an LSTM's hidden state); not with a 16-bit --dtype.")]


def autocast_name(autocast: Optional[Autocast]) -> Optional[str]:
    return autocast.value if autocast is not None else None


def check_top(top: int, least: int = 0) -> None:
    """--top counts rows: a negative count would print an empty table as if nothing were hot; a
    report or a comparison needs `least` rows."""
    from kernel_advisor.api import check_count

    check_count("--top", top, 0, "use --top 15, for example, or 0 for no rows")
    check_count("--top", top, least, f"pass --top {least} or more")
