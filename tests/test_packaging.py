"""The wheel ships every package: pyproject lists packages by hand (rules/ is mapped into
kernel_advisor._rules), so a new subpackage missing from the list installs without it."""
from __future__ import annotations

import pathlib

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _listed() -> set[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return set(tomllib.load(f)["tool"]["setuptools"]["packages"])


def _on_disk(top: str) -> set[str]:
    return {".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / top).rglob("__init__.py")
            if "__pycache__" not in init.parts}


def test_every_package_directory_is_listed_in_pyproject():
    missing = (_on_disk("kernel_advisor") | _on_disk("reference_kernels")) - _listed()
    assert not missing, f"add to [tool.setuptools] packages: {sorted(missing)}"


def test_every_listed_package_exists():
    mapped = {"kernel_advisor._rules"}  # rules/, through package-dir
    stale = {p for p in _listed() - mapped if not (ROOT / p.replace(".", "/") / "__init__.py").is_file()}
    assert not stale, f"listed but not on disk: {sorted(stale)}"
