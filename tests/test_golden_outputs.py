"""Every output on the test fixtures is the one recorded in tests/data/golden_outputs.json
(tests/golden_outputs.py says what runs, what is normalised, and how to refresh the hashes)."""
from __future__ import annotations

import json

import pytest

from golden_outputs import GOLDEN, digest, outputs

pytestmark = pytest.mark.slow  # ~20 s: every command on three traces and a CPU profile


@pytest.fixture(scope="module")
def produced(tmp_path_factory):
    work = tmp_path_factory.mktemp("golden")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(work)
        mp.setenv("ADVISOR_HOME", str(work / ".advisor"))
        yield outputs(work / "work")


def test_the_same_outputs_are_produced(produced, tmp_path):
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    got = {name: digest(text) for name, text in produced.items()}
    assert sorted(got) == sorted(want), "outputs added or gone: refresh with tests/golden_outputs.py --write"
    changed = sorted(name for name in want if got[name] != want[name])
    for name in changed:  # the texts, to diff against `tests/golden_outputs.py --dump` at the commit before
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(produced[name], encoding="utf-8")
    assert not changed, f"changed outputs (normalised texts in {tmp_path}): {', '.join(changed)}"
