"""YAML with a line number on every value, safe_load semantics only.

yaml.compose builds the node tree (SafeLoader: no Python tags); scalars are then
constructed by SafeConstructor, so `true`, `0.6`, `null`, `1e-3` mean what they mean in
yaml.safe_load. Unlike safe_load, a key given twice in one mapping is an error: the
second silently winning is how rule files go wrong unnoticed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml


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
        return None if root is None else _convert(root, loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise LocatedYamlError(line, f"invalid YAML: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise LocatedYamlError(1, f"invalid YAML: {e}") from None
    finally:
        loader.dispose()


_PLAIN_TAGS = {yaml.MappingNode: "tag:yaml.org,2002:map", yaml.SequenceNode: "tag:yaml.org,2002:seq"}


def _convert(node: yaml.Node, loader: yaml.SafeLoader) -> Located:
    line = node.start_mark.line + 1
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
            out[key] = _convert(value_node, loader)
            out[key] = Located(out[key].value, key_line if _is_block(value_node) else out[key].line)
        return Located(out, line)
    if isinstance(node, yaml.SequenceNode):
        return Located([_convert(n, loader) for n in node.value], line)
    return Located(loader.construct_object(node, deep=True), line)


def _is_block(node: yaml.Node) -> bool:
    # A nested mapping/list starts on the line after its key; errors read better at the key.
    return isinstance(node, (yaml.MappingNode, yaml.SequenceNode))
