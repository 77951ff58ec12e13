"""The import graph: every edge runs down the layers, and no package imports back up.

collect → analyze → pipeline → recommend → measure → render → api → cli, with hardware, trykernel,
actions and distributed placed where their imports put them; reference_kernels and
records depend on nothing of ours above errors; so do dtypes (the one dtype table) and
located_yaml (the one YAML loader).
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Lower index = lower layer; a package may import only packages with a lower index.
LAYERS = ["errors", "records", "dtypes", "located_yaml", "collect", "analyze", "pipeline", "hardware", "trykernel", "actions", "experiment",
          "recommend", "measure", "distributed", "render", "api", "cli"]


def _imports(path: pathlib.Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else \
            [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module == "kernel_advisor":  # `from kernel_advisor import x`
            names = [f"kernel_advisor.{a.name}" for a in node.names if not a.name.startswith("__")]
        for name in names:
            parts = name.split(".")
            if parts[0] == "kernel_advisor" and len(parts) > 1:
                out.add(parts[1])
            elif parts[0] == "reference_kernels":
                out.add("reference_kernels")
    return out


def _package(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT / "kernel_advisor").parts
    return rel[0].removesuffix(".py")


def _edges() -> set[tuple[str, str]]:
    edges = set()
    for path in (ROOT / "kernel_advisor").rglob("*.py"):
        src = _package(path)
        edges |= {(src, dst) for dst in _imports(path) if dst != src}
    return edges


def test_every_package_is_placed():
    packages = {_package(p) for p in (ROOT / "kernel_advisor").rglob("*.py")}
    unplaced = packages - set(LAYERS) - {"__init__", "__main__", "data"}
    assert not unplaced, f"place {sorted(unplaced)} in LAYERS"


@pytest.mark.parametrize("src,dst", sorted(e for e in _edges() if e[1] in LAYERS and e[0] in LAYERS))
def test_edges_run_down(src, dst):
    assert LAYERS.index(dst) < LAYERS.index(src), f"{src} imports {dst}, a higher layer"


def test_reference_kernels_import_nothing_of_ours():
    for path in (ROOT / "reference_kernels").rglob("*.py"):
        assert "kernel_advisor" not in {n.split(".")[0] for n in _imports_raw(path)}, path


def _imports_raw(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return names
