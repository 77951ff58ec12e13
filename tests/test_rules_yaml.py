"""Rule files: the built-in set loads; every kind of bad file fails with `file:line: message`."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kernel_advisor.errors import ExitCode, UserInputError
from kernel_advisor.located_yaml import LocatedYamlError, load_located
from kernel_advisor.recommend.schema import builtin_rules_dir, load_rule_file, load_rules
from kernel_advisor.recommend.schema import LADDER, TIERS, RuleFileError, parse_rule_text

GOOD_RULE = """\
version: 1
rules:
  - id: team-softmax-budget
    title: Softmax over budget
    tier: library
    scope: op
    conditions:
      ops: [aten::softmax, aten::_softmax]
      share_pct: {min: 10}
    message: "{name} takes {share_pct:.1f} % of the step"
    references: [https://pytorch.org/docs/stable/generated/torch.nn.functional.softmax.html]
    gain: {model: fraction, value: 0.25}
"""

V2_RULE = GOOD_RULE.replace("version: 1", "version: 2") + "    action: compile\n"


def write(tmp_path: Path, text: str, name: str = "rules.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def error_of(path: Path, **kwargs) -> RuleFileError:
    with pytest.raises(RuleFileError) as info:
        load_rule_file(path, **kwargs)
    return info.value


# ---------------------------------------------------------------- built-in rules


def test_builtin_rules_load_with_unique_ids_and_every_tier():
    rules = load_rules()
    ids = [r.id for r in rules]
    assert len(rules) >= 15
    assert len(ids) == len(set(ids))
    assert {r.tier for r in rules} == set(TIERS)
    assert all(r.line >= 1 and Path(r.source).parent == builtin_rules_dir() for r in rules)


def test_builtin_cuda_rules_carry_caveats_and_references():
    for rule in load_rules():
        assert rule.references, rule.id
        if rule.tier == "cuda":
            text = " ".join(rule.caveats).lower()
            assert "architecture" in text and "graph break" in text, rule.id


def test_builtin_ladder_is_cheapest_first():
    assert LADDER == ("library", "compile", "triton", "cuda")


# ---------------------------------------------------------------- located YAML


def test_located_yaml_keeps_lines_and_safe_load_values():
    doc = load_located("a: 1\nb:\n  c: [true, 0.5, null]\n  d: '7'\n")
    assert doc.plain() == {"a": 1, "b": {"c": [True, 0.5, None], "d": "7"}}
    assert doc.value["a"].line == 1
    assert doc.value["b"].line == 2  # a nested block reports the line of its key
    assert doc.value["b"].value["c"].value[1].line == 3


def test_located_yaml_refuses_python_tags():
    with pytest.raises(LocatedYamlError):
        load_located("x: !!python/object/apply:os.system ['true']\n")


def test_located_yaml_rejects_duplicate_keys_with_line():
    with pytest.raises(LocatedYamlError) as info:
        load_located("a: 1\nb: 2\na: 3\n")
    assert info.value.line == 3 and "given twice" in info.value.message


def test_located_yaml_merge_keys_work_as_in_safe_load():
    doc = load_located("base: &b {x: 1}\nd:\n  <<: *b\n  y: 2\n")
    assert doc.plain()["d"] == {"x": 1, "y": 2}


# ---------------------------------------------------------------- good user file


def test_valid_user_file_parses_with_lines(tmp_path):
    rules = load_rule_file(write(tmp_path, GOOD_RULE))
    assert [r.id for r in rules] == ["team-softmax-budget"]
    assert rules[0].line == 3 and rules[0].gain.value == 0.25


def test_user_rules_follow_builtins_and_directories_are_read(tmp_path):
    write(tmp_path, GOOD_RULE, "a.yaml")
    rules = load_rules([tmp_path])
    assert rules[-1].id == "team-softmax-budget"
    assert len(rules) == len(load_rules()) + 1


def test_same_file_twice_is_not_a_duplicate(tmp_path):
    path = write(tmp_path, GOOD_RULE)
    assert len(load_rules([path, path], include_builtin=False)) == 1


# ---------------------------------------------------------------- each kind of bad file


BAD_FILES = {
    # name: (text, line, fragment of the message)
    "bad yaml": ("version: 1\nrules:\n  - id: x\n    title: [unclosed\n", 5, "invalid YAML"),
    "missing version": ("rules: []\n", 1, "missing 'version'"),
    "unsupported version": ("version: 3\nrules: []\n", 1, "unsupported version 3"),
    "top-level key": ("version: 1\nrulez: []\n", 2, "unknown top-level key 'rulez'"),
    "rules not a list": ("version: 1\nrules: {a: 1}\n", 2, "'rules' must be a list"),
    "unknown rule key": (GOOD_RULE.replace("    scope: op\n", "    scope: op\n    severity: high\n"),
                         7, "unknown key 'severity'"),
    "missing gain": (GOOD_RULE.replace("    gain: {model: fraction, value: 0.25}\n", ""), 3, "missing 'gain'"),
    "bad value type": (GOOD_RULE.replace("share_pct: {min: 10}", "share_pct: {min: ten}"), 9,
                       "min and max must be numbers"),
    "unknown condition": (GOOD_RULE.replace("share_pct: {min: 10}", "sharepct: {min: 10}"), 9,
                          "unknown condition 'sharepct'"),
    "condition in wrong scope": (GOOD_RULE.replace("share_pct: {min: 10}", "kernels_per_step: {min: 10}"), 9,
                                 "does not apply to scope 'op'"),
    "bad verdict": (GOOD_RULE.replace("share_pct: {min: 10}", "verdict: slow"), 9, "unknown value(s) ['slow']"),
    "range min above max": (GOOD_RULE.replace("{min: 10}", "{min: 10, max: 5}"), 9, "must be below max"),
    "bad tier": (GOOD_RULE.replace("tier: library", "tier: magic"), 5, "'tier' must be one of"),
    "bad id": (GOOD_RULE.replace("team-softmax-budget", "Team_Softmax"), 3, "must be lowercase"),
    "unknown gain model": (GOOD_RULE.replace("model: fraction, value: 0.25", "model: guess"), 12,
                           "unknown gain model 'guess'"),
    "gain model wrong scope": (GOOD_RULE.replace("model: fraction, value: 0.25", "model: fusion-bytes"), 12,
                               "does not apply to scope 'op'"),
    "fraction out of range": (GOOD_RULE.replace("value: 0.25", "value: 1.5"), 12, "in (0, 1]"),
    "unknown backend": (GOOD_RULE.replace("model: fraction, value: 0.25", "model: measured-backend, backend: fa3"),
                        12, "'backend' must be one of ['cudnn', 'flash', 'efficient']"),
    "backend missing": (GOOD_RULE.replace("model: fraction, value: 0.25", "model: measured-backend"), 12,
                        "needs 'backend'"),
    "message field unknown": (GOOD_RULE.replace("{name} takes", "{op_name} takes"), 10,
                              "'{op_name}' is not available"),
    "message attribute access": (GOOD_RULE.replace("{name} takes", "{name.__class__} takes"), 10,
                                 "must be a plain name"),
    "message conversion": (GOOD_RULE.replace("{name} takes", "{name!r} takes"), 10, "conversions are not allowed"),
    "message bad spec": (GOOD_RULE.replace("{share_pct:.1f}", "{share_pct:d}"), 10, "share_pct:d"),
    "reference not a url": (GOOD_RULE.replace("[https://pytorch.org/docs/stable/generated/torch.nn.functional"
                                              ".softmax.html]", "[see the wiki]"), 11, "must be URLs"),
    "kernel on a library rule": (GOOD_RULE.replace("    scope: op\n", "    scope: op\n    kernel: auto\n"), 7,
                                 "only applies to tiers triton and cuda"),
    "leave-it with a gain": (GOOD_RULE.replace("tier: library", "tier: leave-it"), 12, "use gain {model: none}"),
    "cuda without caveats": (GOOD_RULE.replace("tier: library", "tier: cuda"), 3, "must list its 'caveats'"),
    "pattern scope without pattern": (GOOD_RULE.replace("scope: op", "scope: pattern").replace(
        "      ops: [aten::softmax, aten::_softmax]\n", "").replace("{name} takes", "{names} take"),
        7, "needs a 'pattern' condition"),
    # version 2: every rule names its action (line 12 is the gain line; the action follows it)
    "v2 without action": (GOOD_RULE.replace("version: 1", "version: 2"), 3, "missing 'action'"),
    "unknown action": (V2_RULE.replace("action: compile", "action: comple"), 13, "unknown action 'comple'"),
    "none without reason": (V2_RULE.replace("action: compile", "action: none"), 13, "needs 'action_reason'"),
    "kernel:auto without kernel": (V2_RULE.replace("action: compile", "action: kernel:auto"), 13,
                                   "needs the rule's 'kernel' key"),
    "duplicate key": (GOOD_RULE.replace("    scope: op\n", "    scope: op\n    scope: run\n"), 7, "given twice"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_each_bad_file_names_file_and_line(tmp_path, case):
    text, line, fragment = BAD_FILES[case]
    path = write(tmp_path, text)
    err = error_of(path)
    assert err.line == line, (case, err.message)
    assert fragment in err.message, (case, err.message)
    assert err.problem.startswith(f"{path}:{line}: ")
    assert isinstance(err, UserInputError) and err.exit_code == ExitCode.USER_INPUT


def test_duplicate_id_across_files_names_the_second(tmp_path):
    first = write(tmp_path, GOOD_RULE, "a.yaml")
    second = write(tmp_path, GOOD_RULE, "b.yaml")
    with pytest.raises(RuleFileError) as info:
        load_rules([first, second], include_builtin=False)
    assert info.value.path == str(second) and info.value.line == 3
    assert f"first defined at {first}:3" in info.value.message


def test_duplicate_of_a_builtin_id_is_an_error(tmp_path):
    path = write(tmp_path, GOOD_RULE.replace("team-softmax-budget", "lib-sdpa"))
    with pytest.raises(RuleFileError) as info:
        load_rules([path])
    assert "duplicate rule id 'lib-sdpa'" in info.value.message


def test_unknown_kernel_id_when_the_registry_is_known(tmp_path):
    text = GOOD_RULE.replace("tier: library", "tier: triton").replace("    scope: op\n",
                                                                      "    scope: op\n    kernel: no-such\n")
    err = error_of(write(tmp_path, text), kernel_ids={"softmax"})
    assert err.line == 7 and "unknown kernel id 'no-such'" in err.message


def test_not_utf8_and_missing_paths(tmp_path):
    bad = tmp_path / "bin.yaml"
    bad.write_bytes(b"\xff\xfe\x00")
    assert error_of(bad).line == 1
    with pytest.raises(UserInputError, match="does not exist"):
        load_rules([tmp_path / "nope.yaml"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserInputError, match="no .yaml rule files"):
        load_rules([empty])


def test_parse_rule_text_empty_document():
    with pytest.raises(RuleFileError) as info:
        parse_rule_text("", Path("x.yaml"))
    assert info.value.line == 1


# ---------------------------------------------------------------- actions


def test_every_builtin_rule_names_a_known_action_or_says_why_not():
    from kernel_advisor import actions

    for rule in load_rules():
        assert actions.is_known(rule.action), rule.id
        assert rule.action != actions.NONE or rule.action_reason, rule.id


def test_version1_file_loads_with_no_action_and_says_so(tmp_path):
    (rule,) = load_rule_file(write(tmp_path, GOOD_RULE))
    assert rule.action == "none" and "version 1" in rule.action_reason


def test_version2_action_is_kept(tmp_path):
    (rule,) = load_rule_file(write(tmp_path, V2_RULE))
    assert (rule.action, rule.action_reason) == ("compile", "")
