"""benchmarks/data/provenance.csv is the one source of the hand-written benchmark sections'
provenance: the pages' generated lines match it, and every row is named where it is used."""
from __future__ import annotations

import re
from pathlib import Path

from benchmarks import render_provenance as rp

REPO = Path(__file__).resolve().parents[1]
USERS = [*sorted((REPO / "docs").glob("*.md")), REPO / "benchmarks" / "studies" / "README.md"]
COMMIT = re.compile(r"[0-9a-f]{7,40}")


def test_pages_match_the_csv():
    rows = rp.read_rows()
    stale = [p.name for p in rp.PAGES if rp.render_page(p.read_text(encoding="utf-8"), rows) != p.read_text(encoding="utf-8")]
    assert not stale, f"run python3 benchmarks/render_provenance.py: {stale} out of date"


def test_every_row_is_used_and_holds_a_commit():
    rows = rp.read_rows()
    text = "\n".join(p.read_text(encoding="utf-8") for p in USERS)
    unused = [s for s in rows if f"<!-- provenance:{s}:begin -->" not in text and f"row `{s}`" not in text]
    assert not unused, f"rows no page names: {unused}"
    assert all(COMMIT.fullmatch(r["commit"]) and r["commit_is"] in ("results", "measured") for r in rows.values())
    named = set(re.findall(r"row `([a-z0-9-]+)`", text))
    assert named <= set(rows), f"rows named in a page but missing from the CSV: {named - set(rows)}"


def test_line_marks_files_only_the_history_holds(tmp_path):
    (tmp_path / "kept.json").write_text("{}")
    row = {"date": "2026-01-02", "gpu": "G", "versions": "", "script": "`s.py`", "raw": "kept.json;gone.json"}
    assert rp.line("sec", row, tmp_path) == ("2026-01-02 · G · `s.py` · raw: `kept.json`, `gone.json` (git history) "
                                            "· commit: row `sec` of `benchmarks/data/provenance.csv`")


def test_a_marked_section_without_a_row_is_an_error():
    page = "<!-- provenance:nowhere:begin -->\n<!-- provenance:nowhere:end -->\n"
    try:
        rp.render_page(page, {})
    except KeyError as e:
        assert "nowhere" in str(e)
    else:
        raise AssertionError("a section with no row rendered")
