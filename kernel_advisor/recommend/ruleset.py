"""Where rules come from: the built-in rules/*.yaml plus any --rules FILE_OR_DIR."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Collection, Iterable

from kernel_advisor.errors import UserInputError
from kernel_advisor.recommend.schema import Rule, RuleFileError, check_unique, parse_rule_text

RULE_SUFFIXES = (".yaml", ".yml")


def builtin_rules_dir() -> Path:
    """Installed: the package data kernel_advisor._rules; from a checkout: <repo>/rules."""
    try:
        spec = importlib.util.find_spec("kernel_advisor._rules")
    except ModuleNotFoundError:
        spec = None
    # _rules has no __init__.py: a namespace package, whose directories are its search locations.
    for location in (spec.submodule_search_locations or []) if spec else []:
        if any(Path(location).glob("*.yaml")):
            return Path(location)
    return Path(__file__).resolve().parents[2] / "rules"


def rule_files(path: Path) -> list[Path]:
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in RULE_SUFFIXES and p.is_file())
        if not files:
            raise UserInputError(f"{path} holds no .yaml rule files", "pass a rule file or a directory of them")
        return files
    if not path.is_file():
        raise UserInputError(f"rules path {path} does not exist", "pass an existing rule file or directory")
    return [path]


def load_rule_file(path: Path, kernel_ids: Collection[str] | None = None) -> tuple[Rule, ...]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise RuleFileError(path, 1, "not a UTF-8 text file") from None
    except OSError as e:
        raise UserInputError(f"cannot read {path}: {e.strerror}", "check the path and its permissions") from None
    return parse_rule_text(text, path, kernel_ids)


def load_rules(extra: Iterable[Path] = (), include_builtin: bool = True,
               kernel_ids: Collection[str] | None = None) -> tuple[Rule, ...]:
    """Built-in rules first, then each --rules path in order; ids must be unique across all."""
    files: list[Path] = rule_files(builtin_rules_dir()) if include_builtin else []
    for path in extra:
        files.extend(rule_files(Path(path)))
    rules: list[Rule] = []
    seen: set[Path] = set()
    for f in files:
        if f.resolve() in seen:  # the same file named twice is one file, not a duplicate id
            continue
        seen.add(f.resolve())
        rules.extend(load_rule_file(f, kernel_ids))
    out = tuple(rules)
    check_unique(out)
    return out
