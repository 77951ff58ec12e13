"""Stored subject keys (advice.csv keeps keys, not rows) read back into the rows they name."""
import pytest

from kernel_advisor.records.recommendations import subject_key_rows


@pytest.mark.parametrize("key, rows", [("row:12", {12}), ("pattern:naive-attention:3-4-5-4", {3, 4, 5}),
                                       ("run", set())])
def test_stored_subject_keys_name_their_rows(key, rows):
    assert subject_key_rows(key) == frozenset(rows)
