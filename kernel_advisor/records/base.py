"""What every run-directory record shares: a schema version checked loudly, required keys.

A reader never guesses: a file written by another schema version, or missing a key the
schema requires, is one UserInputError naming the file and the fix.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping

from kernel_advisor.errors import UserInputError


class RecordError(UserInputError):
    """A run-directory file that does not hold the record its name promises."""


def read_json(path: Path, rerun: str) -> Any:
    return parse_json(Path(path), f"delete it and rerun {rerun}")


def parse_json(path: Path, fix: str) -> Any:
    """The JSON document in `path`, or one RecordError naming the file and `fix`.

    Invalid JSON, bytes that are not UTF-8 and nesting deeper than Python's parser can follow
    (a damaged or hostile file: `[[[[...]]]]` raises RecursionError) all say which file is bad.
    """
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RecordError(f"{path} is not valid JSON ({e})", fix) from None
    except RecursionError:
        raise RecordError(f"{path} is damaged (JSON nested too deeply to read)", fix) from None


def check_record(doc: Any, path: Path | str, version: int, required: Iterable[str], rerun: str) -> Mapping:
    """`doc` as a mapping of schema `version` holding every `required` key, or RecordError."""
    if not isinstance(doc, dict):
        raise RecordError(f"{path} is not a JSON object", f"rerun {rerun}")
    found = doc.get("schema_version")
    if found != version:
        raise RecordError(f"{path} has schema_version {found!r}; this kernel_advisor reads version {version}",
                          f"rerun {rerun} with this version")
    missing = [k for k in required if k not in doc]
    if missing:
        raise RecordError(f"{path} lacks {', '.join(missing)} (schema {version})", f"rerun {rerun}")
    return doc


def json_text(doc: Any, schema_version: int) -> str:
    """A JSON document for stdout: `schema_version` first, NaN/Inf as null, parseable anywhere."""
    body = strict(doc)
    body = {"schema_version": schema_version, **body} if isinstance(body, dict) else body
    return json.dumps(body, indent=2, allow_nan=False)


def strict(value: Any) -> Any:
    """JSON-ready: NaN and ±Inf become null, tuples lists, numpy scalars Python numbers."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if hasattr(value, "item"):
        return strict(value.item())
    return str(value)
