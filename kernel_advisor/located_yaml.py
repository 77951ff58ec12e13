"""The one YAML loader: a line number on every value, safe_load semantics only.

yaml.compose builds the node tree (SafeLoader: no Python tags); scalars are then
constructed by SafeConstructor, so `true`, `0.6`, `null`, `1e-3` mean what they mean in
yaml.safe_load. Unlike safe_load, a key given twice in one mapping is an error: the
second silently winning is how rule files go wrong unnoticed.

Rule files (recommend/schema.py) walk the Located tree themselves; data files with a fixed
shape (data/verdict_thresholds.yaml, the devices table) describe it in a small schema
(`load_checked`), and every error is one UserInputError "<file>:<line>: <problem>".
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import yaml

from kernel_advisor.errors import UserInputError


class LocatedYamlError(ValueError):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


@dataclass(frozen=True)
class Located:
    """A value and the 1-based line it starts on; dicts and lists hold Located children."""

    value: Any
    line: int

    def plain(self) -> Any:
        """The value with every Located wrapper removed (what yaml.safe_load would return)."""
        if isinstance(self.value, dict):
            return {k: v.plain() for k, v in self.value.items()}
        if isinstance(self.value, list):
            return [v.plain() for v in self.value]
        return self.value


def load_located(text: str) -> Located | None:
    """The document in `text` (None when empty); LocatedYamlError carries the line of a syntax error."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        return None if root is None else _convert(root, loader, [MAX_NODES])
    except RecursionError:  # the composer and _convert recurse once per level of nesting
        raise LocatedYamlError(1, "invalid YAML: nested too deeply") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise LocatedYamlError(line, f"invalid YAML: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise LocatedYamlError(1, f"invalid YAML: {e}") from None
    finally:
        loader.dispose()


_PLAIN_TAGS = {yaml.MappingNode: "tag:yaml.org,2002:map", yaml.SequenceNode: "tag:yaml.org,2002:seq"}


# Nodes a document may expand to, aliases counted at every use: a few anchors that each
# repeat the one before ("billion laughs") expand to 10^9 nodes from a few hundred bytes.
MAX_NODES = 100_000


def _convert(node: yaml.Node, loader: yaml.SafeLoader, budget: list[int]) -> Located:
    line = node.start_mark.line + 1
    budget[0] -= 1
    if budget[0] < 0:
        raise LocatedYamlError(line, f"the document expands to more than {MAX_NODES} values "
                                     f"(aliases repeat what they name): a YAML alias bomb?")
    plain = _PLAIN_TAGS.get(type(node))
    if plain is not None and node.tag != plain:
        raise LocatedYamlError(line, f"YAML tag {node.tag} is not allowed (safe_load semantics)")
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)  # `<<: *anchor` merge keys, as safe_load does
        out: dict[str, Located] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            key_line = key_node.start_mark.line + 1
            if not isinstance(key, str):
                raise LocatedYamlError(key_line, f"mapping key {key!r} is not a string")
            if key in out:
                raise LocatedYamlError(key_line, f"key '{key}' given twice (first on line {out[key].line})")
            out[key] = _convert(value_node, loader, budget)
            out[key] = Located(out[key].value, key_line if _is_block(value_node) else out[key].line)
        return Located(out, line)
    if isinstance(node, yaml.SequenceNode):
        return Located([_convert(n, loader, budget) for n in node.value], line)
    return Located(loader.construct_object(node, deep=True), line)


def _is_block(node: yaml.Node) -> bool:
    # A nested mapping/list starts on the line after its key; errors read better at the key.
    return isinstance(node, (yaml.MappingNode, yaml.SequenceNode))


# ---------------------------------------------------------------- files of a fixed shape

# A schema is a dict (a mapping; a key ending in "?" is optional; the one key "*": any string
# keys, each value of that schema), a one-item list (a list of that item) or a leaf kind: int, str, bool, pos (a positive finite number), and pos?,
# int? (those or null), num (any number, a signed coefficient).
_LEAF_TYPES: dict[str, tuple[str, ...]] = {
    "int": ("int",), "str": ("str",), "bool": ("bool",), "num": ("int", "float"),
    "pos": ("int", "float"), "pos?": ("int", "float", "null"), "int?": ("int", "null"),
}
_TYPE_NAMES = {bool: "bool", int: "int", float: "float", str: "str", type(None): "null"}


def fail(path: Path | str, where: Located | int, problem: str, fix: str) -> NoReturn:
    """One UserInputError "<path>:<line>: <problem>" with its fix."""
    line = where.line if isinstance(where, Located) else where
    raise UserInputError(f"{path}:{line}: {problem}", fix)


def load_checked(path: Path | str, schema: dict, version: int = 1) -> tuple[dict, Located]:
    """The file's plain data, checked against `schema` (which has an int `version` that must
    equal `version`), and its Located tree for the line numbers of later checks."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise UserInputError(f"cannot read {path}: {e.strerror}", "check the path") from None
    except UnicodeDecodeError:
        raise UserInputError(f"{path} is not UTF-8 text", "save it as UTF-8 YAML") from None
    try:
        root = load_located(text)
    except LocatedYamlError as e:
        fail(path, e.line, e.message, "fix the file at that line")
    if root is None:
        raise UserInputError(f"{path}: the file is empty", f"start it with `version: {version}`")
    _check(root, schema, path, "file")
    if root.value["version"].value != version:
        fail(path, root.value["version"], f"version {root.value['version'].value} is not supported",
             f"this kernel_advisor reads version {version}")
    return root.plain(), root


def _check(node: Located, schema: Any, path: Path, what: str) -> None:
    if isinstance(schema, dict):
        _check_mapping(node, schema, path, what)
    elif isinstance(schema, list):
        if not isinstance(node.value, list):
            fail(path, node, f"{what} must be a list", "write it as a YAML list")
        for i, item in enumerate(node.value):
            _check(item, schema[0], path, f"{what}[{i}]")
    else:
        _check_leaf(node, schema, path, what)


def _check_mapping(node: Located, schema: dict, path: Path, what: str) -> None:
    if not isinstance(node.value, dict):
        fail(path, node, f"{what} must be a mapping", "write it as `key: value` lines")
    if set(schema) == {"*"}:
        for key, child in node.value.items():
            _check(child, schema["*"], path, f"{what}.{key}")
        return
    allowed = {key.rstrip("?"): key for key in schema}
    for key, child in node.value.items():
        if key not in allowed:
            fail(path, child, f"unknown key '{key}' in {what}", f"allowed keys: {', '.join(sorted(allowed))}")
        _check(child, schema[allowed[key]], path, f"{what}.{key}")
    missing = sorted(k for k in schema if not k.endswith("?") and k not in node.value)
    if missing:
        fail(path, node, f"{what} lacks required key(s) {', '.join(missing)}", "add them")


def _check_leaf(node: Located, kind: str, path: Path, what: str) -> None:
    value = node.value
    found = _TYPE_NAMES.get(type(value), "collection")
    if found not in _LEAF_TYPES[kind]:
        hint = " (YAML 1.1 reads 1e12 as text: write 1.0e12)" if kind.startswith("pos") else ""
        shown = "" if found == "collection" else f" {value!r}"
        fail(path, node, f"{what} must be {kind.rstrip('?')}, got {found}{shown}",
             f"write a {kind.rstrip('?')} value{hint}")
    if kind.startswith("pos") and value is not None and not (0 < value < math.inf):
        fail(path, node, f"{what} must be a positive finite number, got {value}", "fix the value")
