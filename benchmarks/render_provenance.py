"""The provenance line of each hand-written benchmarks section, from benchmarks/data/provenance.csv.

    python3 benchmarks/render_provenance.py [--check]

A page marks where a section's line goes with `<!-- provenance:SECTION:begin -->` and
`<!-- provenance:SECTION:end -->`; the line gives the row's date, machine, versions, script and
raw files and names the row, whose `commit` column holds the commit (`commit_is`: `results`, the
commit that added the results; `measured`, the code that was measured). A raw file no longer in
the tree is marked so: `git show COMMIT:PATH` reads it. Prose elsewhere refers to a row by name.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from docdata import splice_block  # noqa: E402

CSV = HERE / "data" / "provenance.csv"
CSV_NAME = "benchmarks/data/provenance.csv"
PAGES = sorted((REPO / "docs").glob("*.md"))
MARKER = re.compile(r"<!-- provenance:([a-z0-9-]+):begin -->")


def read_rows(path: Path = CSV) -> dict[str, dict[str, str]]:
    """One row per section; every field a string ('' where the row has none)."""
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    return {r["section"]: r for r in df.to_dict("records")}


def raw_text(raw: str, repo: Path = REPO) -> str:
    """The raw files, each marked where only the git history holds it."""
    paths = [p for p in raw.split(";") if p]
    return ", ".join(f"`{p}`" if (repo / p).exists() else f"`{p}` (git history)" for p in paths)


def line(section: str, row: dict[str, str], repo: Path = REPO) -> str:
    raw = raw_text(row["raw"], repo)
    parts = [row["date"], row["gpu"], row["versions"], row["script"], raw and f"raw: {raw}"]
    return " · ".join(p for p in parts if p) + f" · commit: row `{section}` of `{CSV_NAME}`"


def render_page(text: str, rows: dict[str, dict[str, str]], repo: Path = REPO) -> str:
    """Every marked section of `text` with its line; a section missing from the CSV is an error."""
    for section in MARKER.findall(text):
        if section not in rows:
            raise KeyError(f"{section!r} is marked in a page but has no row in {CSV_NAME}")
        begin, end = f"<!-- provenance:{section}:begin -->", f"<!-- provenance:{section}:end -->"
        text = splice_block(text, line(section, rows[section], repo), begin, end, section)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a page is out of date, writing nothing")
    args = ap.parse_args(argv)
    rows = read_rows()
    stale = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        new = render_page(text, rows)
        if new != text:
            stale.append(page.relative_to(REPO))
            if not args.check:
                page.write_text(new, encoding="utf-8")
    verb = "out of date" if args.check else "rewritten"
    print(f"{verb}: {', '.join(map(str, stale))}" if stale else "provenance lines up to date")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
