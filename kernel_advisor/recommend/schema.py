"""Rule files (YAML) → frozen Rule records that remember their file and line.

Format (docs/rules.md): a mapping with `version: 2` and `rules:`, a list of rules with
id, title, tier, scope, conditions, message, references, gain, action (with
action_reason when it is `none`) and optionally kernel and caveats. Version 1 files
(no actions) still load; their rules measure nothing. Every mistake is a RuleFileError
naming `file:line`.
"""
from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Collection, Iterable, Mapping

from kernel_advisor import actions
from kernel_advisor.errors import UserInputError
from kernel_advisor.located_yaml import Located, LocatedYamlError, load_located
from kernel_advisor.recommend.conditions import COMPUTE_PATHS, SCOPES, ConditionValueError, parse_condition
from kernel_advisor.recommend.messages import TemplateError, validate_template

SUPPORTED_VERSIONS = (1, 2)
ACTIONS_SINCE = 2  # the first version in which every rule names its action
TIERS = ("leave-it", "library", "compile", "triton", "cuda")
LADDER = ("library", "compile", "triton", "cuda")  # cheapest first; leave-it sits outside it
_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_REQUIRED = ("id", "title", "tier", "conditions", "message", "gain")
_OPTIONAL = ("scope", "references", "kernel", "caveats", "action", "action_reason")
VERSION1_ACTION_REASON = "the rule file is version 1, which declares no actions"
# model -> (scopes it applies to, parameters it accepts, parameters it requires)
GAIN_MODELS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    "none": (SCOPES, (), ()),
    "roofline": (("op", "pattern"), ("target_efficiency_frac",), ()),
    "measured-kernel": (("op",), ("target_efficiency_frac",), ()),
    "fusion-bytes": (("pattern",), (), ()),
    "fused-roofline": (("pattern",), ("target_efficiency_frac",), ()),
    "fraction": (SCOPES, ("value",), ("value",)),
    "tf32": (("op",), (), ()),
    "precision": (("op",), ("target_path",), ("target_path",)),
    "launch-overhead": (("run",), (), ()),
    "exposed-comm": (("run",), ("value",), ("value",)),
    "measured-backend": (("op",), ("backend",), ("backend",)),
}
BACKENDS = ("cudnn", "flash", "efficient")  # the fused SDPA backends a measured-backend gain may target


class RuleFileError(UserInputError):
    def __init__(self, path: Path | str, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}",
                         "fix the rule file (format: docs/rules.md; check it with `advisor rules validate FILE`)")
        self.path, self.line, self.message = str(path), line, message


@dataclass(frozen=True)
class GainSpec:
    model: str
    value: float | None = None
    target_efficiency_frac: float = 1.0
    target_path: str = "tf32"
    backend: str = ""  # measured-backend: the library backend the action switches to


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    tier: str
    scope: str
    conditions: Mapping[str, Any]  # key -> parsed value, in file order
    message: str
    references: tuple[str, ...]
    gain: GainSpec
    kernel: str | None
    caveats: tuple[str, ...]
    source: str
    line: int
    action: str = actions.NONE  # what `recommend --measure` applies (kernel_advisor.actions)
    action_reason: str = ""  # why no action, when it is `none`


def _fail(path: Path, node: Located, message: str) -> RuleFileError:
    return RuleFileError(path, node.line, message)


def _text(path: Path, node: Located, key: str) -> str:
    if not isinstance(node.value, str) or not node.value.strip():
        raise _fail(path, node, f"'{key}' must be a non-empty string")
    return node.value.strip()


def _text_list(path: Path, node: Located, key: str) -> tuple[str, ...]:
    if not isinstance(node.value, list) or not all(isinstance(i.value, str) and i.value for i in node.value):
        raise _fail(path, node, f"'{key}' must be a list of non-empty strings")
    return tuple(i.value for i in node.value)


def _fraction(path: Path, node: Located, key: str) -> float:
    v = node.value
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise _fail(path, node, f"'{key}' must be a number in (0, 1]")
    return float(v)


def _gain(path: Path, node: Located, scope: str) -> GainSpec:
    if not isinstance(node.value, dict) or "model" not in node.value:
        raise _fail(path, node, "'gain' must be a mapping with a 'model' key")
    fields = node.value
    model = fields["model"].value
    if model not in GAIN_MODELS:
        raise _fail(path, fields["model"], f"unknown gain model '{model}'; known: {list(GAIN_MODELS)}")
    scopes, accepted, required = GAIN_MODELS[model]
    if scope not in scopes:
        raise _fail(path, fields["model"], f"gain model '{model}' does not apply to scope '{scope}'")
    for key, child in fields.items():
        if key != "model" and key not in accepted:
            raise _fail(path, child, f"unknown key '{key}' for gain model '{model}'")
    for key in required:
        if key not in fields:
            raise _fail(path, node, f"gain model '{model}' needs '{key}'")
    spec: dict[str, Any] = {"model": model}
    for key in ("value", "target_efficiency_frac"):
        if key in fields:
            spec[key] = _fraction(path, fields[key], key)
    if "target_path" in fields:
        if fields["target_path"].value not in COMPUTE_PATHS:
            raise _fail(path, fields["target_path"], f"'target_path' must be one of {list(COMPUTE_PATHS)}")
        spec["target_path"] = fields["target_path"].value
    if "backend" in fields:
        if fields["backend"].value not in BACKENDS:
            raise _fail(path, fields["backend"], f"'backend' must be one of {list(BACKENDS)}")
        spec["backend"] = fields["backend"].value
    return GainSpec(**spec)


def _conditions(path: Path, node: Located, scope: str) -> dict[str, Any]:
    if not isinstance(node.value, dict):
        raise _fail(path, node, "'conditions' must be a mapping (use {} for none)")
    out = {}
    for key, child in node.value.items():
        try:
            out[key] = parse_condition(key, child.plain(), scope)
        except ConditionValueError as e:
            raise _fail(path, child, str(e)) from None
    if scope == "pattern" and "pattern" not in out:
        raise _fail(path, node, "a rule with scope 'pattern' needs a 'pattern' condition")
    return out


def _kernel(path: Path, node: Located, tier: str, kernel_ids: Collection[str] | None) -> str:
    kernel = _text(path, node, "kernel")
    if tier not in ("triton", "cuda"):
        raise _fail(path, node, f"'kernel' only applies to tiers triton and cuda, not '{tier}'")
    if kernel != "auto" and kernel_ids is not None and kernel not in kernel_ids:
        raise _fail(path, node, f"unknown kernel id '{kernel}'; bundled: {sorted(kernel_ids)} or 'auto'")
    return kernel


def _action(path: Path, fields: dict[str, Located], node: Located, kernel: str | None,
            version: int) -> tuple[str, str]:
    if "action" not in fields:
        if version >= ACTIONS_SINCE:
            raise _fail(path, node, "rule is missing 'action' (an action name, or 'none' with 'action_reason')")
        return actions.NONE, VERSION1_ACTION_REASON
    name = _text(path, fields["action"], "action")
    if not actions.is_known(name):
        raise _fail(path, fields["action"], f"unknown action '{name}'; known: "
                                            f"{', '.join(actions.action_names())}, kernel:<id>, kernel:auto, none")
    if name == "kernel:auto" and kernel is None:
        raise _fail(path, fields["action"], "'kernel:auto' needs the rule's 'kernel' key")
    reason = _text(path, fields["action_reason"], "action_reason") if "action_reason" in fields else ""
    if name == actions.NONE and not reason:
        raise _fail(path, fields["action"], "'action: none' needs 'action_reason': why no code can apply it")
    return name, reason


def _check_keys(path: Path, node: Located) -> dict[str, Located]:
    if not isinstance(node.value, dict):
        raise _fail(path, node, "each rule must be a mapping")
    fields = node.value
    for key, child in fields.items():
        if key not in _REQUIRED and key not in _OPTIONAL:
            raise _fail(path, child, f"unknown key '{key}'; allowed: {', '.join(_REQUIRED + _OPTIONAL)}")
    for key in _REQUIRED:
        if key not in fields:
            raise _fail(path, node, f"rule is missing '{key}'")
    return fields


def _scope_and_tier(path: Path, fields: dict[str, Located]) -> tuple[str, str]:
    tier = fields["tier"].value
    if tier not in TIERS:
        raise _fail(path, fields["tier"], f"'tier' must be one of {list(TIERS)}, not {tier!r}")
    scope = fields["scope"].value if "scope" in fields else "op"
    if scope not in SCOPES:
        raise _fail(path, fields["scope"], f"'scope' must be one of {list(SCOPES)}, not {scope!r}")
    return scope, tier


def parse_rule(path: Path, node: Located, kernel_ids: Collection[str] | None = None,
               version: int = ACTIONS_SINCE) -> Rule:
    fields = _check_keys(path, node)
    rule_id = _text(path, fields["id"], "id")
    if not _ID.match(rule_id):
        raise _fail(path, fields["id"], f"rule id '{rule_id}' must be lowercase letters, digits and '-'")
    scope, tier = _scope_and_tier(path, fields)
    message = _text(path, fields["message"], "message")
    try:
        validate_template(message, scope)
    except TemplateError as e:
        raise _fail(path, fields["message"], str(e)) from None
    gain = _gain(path, fields["gain"], scope)
    if tier == "leave-it" and gain.model != "none":
        raise _fail(path, fields["gain"], "a leave-it rule saves nothing: use gain {model: none}")
    caveats = _text_list(path, fields["caveats"], "caveats") if "caveats" in fields else ()
    if tier == "cuda" and not caveats:
        raise _fail(path, node, "a cuda rule must list its 'caveats' (maintenance, graph breaks, portability)")
    refs = _text_list(path, fields["references"], "references") if "references" in fields else ()
    bad = [r for r in refs if not r.startswith(("https://", "http://"))]
    if bad:
        raise _fail(path, fields["references"], f"references must be URLs, got {bad[0]!r}")
    kernel = _kernel(path, fields["kernel"], tier, kernel_ids) if "kernel" in fields else None
    action, action_reason = _action(path, fields, node, kernel, version)
    return Rule(
        id=rule_id, title=_text(path, fields["title"], "title"), tier=tier, scope=scope,
        conditions=_conditions(path, fields["conditions"], scope), message=message, references=refs,
        gain=gain, kernel=kernel, caveats=caveats, source=str(path), line=node.line,
        action=action, action_reason=action_reason)


def parse_rule_text(text: str, path: Path, kernel_ids: Collection[str] | None = None) -> tuple[Rule, ...]:
    try:
        doc = load_located(text)
    except LocatedYamlError as e:
        raise RuleFileError(path, e.line, e.message) from None
    if doc is None or not isinstance(doc.value, dict):
        raise RuleFileError(path, doc.line if doc else 1, "a rule file is a mapping with 'version' and 'rules'")
    top = doc.value
    for key, child in top.items():
        if key not in ("version", "rules"):
            raise _fail(path, child, f"unknown top-level key '{key}'; allowed: version, rules")
    if "version" not in top:
        raise RuleFileError(path, doc.line, f"missing 'version' (supported: {list(SUPPORTED_VERSIONS)})")
    if top["version"].value not in SUPPORTED_VERSIONS or isinstance(top["version"].value, bool):
        raise _fail(path, top["version"], f"unsupported version {top['version'].value!r}; "
                                          f"supported: {list(SUPPORTED_VERSIONS)}")
    rules_node = top.get("rules")
    if rules_node is None or not isinstance(rules_node.value, list):
        raise RuleFileError(path, rules_node.line if rules_node else doc.line, "'rules' must be a list")
    version = top["version"].value
    rules = tuple(parse_rule(path, n, kernel_ids, version) for n in rules_node.value)
    check_unique(rules)
    return rules


def check_unique(rules: tuple[Rule, ...]) -> None:
    seen: dict[str, Rule] = {}
    for rule in rules:
        if rule.id in seen:
            first = seen[rule.id]
            raise RuleFileError(rule.source, rule.line,
                                f"duplicate rule id '{rule.id}' (first defined at {first.source}:{first.line})")
        seen[rule.id] = rule


# ------------------------------------------------------------
# Where rules come from: the built-in rules/*.yaml plus any --rules FILE_OR_DIR.

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
