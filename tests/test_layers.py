"""The import graph: every edge runs down the layers, and no package imports back up.

collect → analyze → recommend → pipeline → distributed → render → api → cli, with
trykernel, actions and experiment placed where their imports put them (pipeline.py joins the
layers below it for api.py; the distributed ranks run its analysis); reference_kernels and
records depend on nothing of ours above errors; so do dtypes (the one dtype table) and
located_yaml (the one YAML loader).
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Lower index = lower layer; a package may import only packages with a lower index.
LAYERS = ["errors", "records", "dtypes", "located_yaml", "collect", "analyze", "trykernel", "actions", "experiment",
          "recommend", "pipeline", "distributed", "render", "api", "cli"]


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


# ---------------------------------------------------------------- who may import what, and names

def _package_imports(path: pathlib.Path) -> set[str]:
    return {p.removesuffix(".py") for p in _imports(path)}


def _modules(under: str = "") -> list[pathlib.Path]:
    return sorted((ROOT / "kernel_advisor" / under).rglob("*.py"))


def _rel(path: pathlib.Path) -> str:
    return path.relative_to(ROOT / "kernel_advisor").as_posix()


# The package's own namespace renders for notebooks (`ka.report`, `ka.warnings`) as the CLI does
# for the shell: both sit above the API, which returns data.
RENDERERS = ("render", "cli", "__init__")
CLI_REACHES = {"cli", "api", "errors", "render"}
SHARED_NAMES: set[str] = set()  # none: a public name means one thing


def test_only_render_and_cli_import_render():
    importers = {_rel(p) for p in _modules() if _package(p) not in RENDERERS and "render" in _package_imports(p)}
    assert not importers, f"render/ imported by {sorted(importers)}"


def test_records_import_nothing_that_interprets_them():
    for path in _modules("records"):
        assert not _package_imports(path) & {"analyze", "recommend", "render"}, path


def test_cli_commands_reach_only_the_api():
    """A command parses options, calls api.py, and hands the result to render/ (cli/ helpers and
    errors aside): nothing below the API, reference_kernels included."""
    below = {p.name: sorted(_package_imports(p) - CLI_REACHES) for p in _modules("cli")}
    assert not any(below.values()), {name: pkgs for name, pkgs in below.items() if pkgs}


def test_no_two_public_names_alike():
    """A public class or function name means one thing in kernel_advisor."""
    where: dict[str, list[str]] = {}
    for path in _modules():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                where.setdefault(node.name, []).append(_rel(path))
    shared = {name for name, paths in where.items() if len(paths) > 1}
    assert shared <= SHARED_NAMES, {n: where[n] for n in shared - SHARED_NAMES}


def test_run_json_is_read_through_records():
    import re

    by_string = re.compile(r"""\bmeta(?:\[|\.get\()["']""")
    for path in _modules():
        rel = _rel(path)
        if _package(path) == "records":
            continue
        lines = [n for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if by_string.search(line)]
        assert not lines, f"{rel}:{lines[0]} reads run.json by key: use RunMeta's attributes (records/run.py)"
