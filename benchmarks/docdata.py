"""What the benchmark scripts share: a CSV is written whole or not at all, a generated
block goes between its markers in a docs page (or a new section holding them), and a block
names the data file that holds its commits rather than printing them."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd


def write_csv_atomic(df: pd.DataFrame, path: Path, float_format: str | None = None) -> None:
    """`df` to `path` through a temporary file beside it: a killed run never leaves half a CSV."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        df.to_csv(tmp, index=False, float_format=float_format)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def upsert_rows(old: pd.DataFrame, new: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    """`new` replaces the rows of `old` with the same `key`; every other row of `old` stays
    (Liger-Kernel's benchmark CSV convention). Callers type and sort the result."""
    if old.empty:
        return new.reset_index(drop=True)
    same = pd.MultiIndex.from_frame(old[key]).isin(pd.MultiIndex.from_frame(new[key]))
    return pd.concat([old.loc[~same], new], ignore_index=True)


def splice_block(text: str, block: str, begin: str, end: str, title: str, before: str | None = None) -> str:
    """`block` between the markers of `text`; without them, a section `## title` holding them,
    put before the heading `before` where the page has it, else at the end."""
    inner = f"{begin}\n{block.rstrip()}\n{end}"
    start, stop = text.find(begin), text.find(end)
    if start >= 0 and stop > start:
        return text[:start] + inner + text[stop + len(end):]
    section = f"## {title}\n\n{inner}\n"
    at = text.find(f"\n{before}") if before else -1
    if at >= 0:
        return text[:at + 1] + section + "\n" + text[at + 1:]
    head = text.rstrip("\n") + "\n\n" if text.strip() else ""
    return head + section


def commit_source(path: str) -> str:
    """Where a generated block's commits are: the docs describe the product, the data keeps
    the provenance (date, GPU and versions are printed; commits stay in the file)."""
    field = "column" if path.endswith(".csv") else "field"
    return f"commit: the `commit` {field} of `{path}`"
