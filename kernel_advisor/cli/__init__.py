"""Command-line interface: one module per command, all registered on `app`."""
from __future__ import annotations

import importlib

from kernel_advisor.cli.app import app

# Each module registers its command(s) on `app` when imported.
_COMMAND_MODULES = (
    "profile", "import_trace", "calibrate", "recommend", "rules", "kernels", "try_kernel",
    "report", "roofline", "compare", "merge",
)
for _name in _COMMAND_MODULES:
    importlib.import_module(f"kernel_advisor.cli.{_name}")


def main() -> None:
    app()


__all__ = ["app", "main"]
