"""benchmarks/data/distributed_scale.json: rows measured past one process group's view.

One long list of rows, each keyed by (kind, key): `import_ranks` (benchmarks/bench_import_ranks.py:
`advisor import DIR/` on N replicated ranks, wall time and peak memory) and `multinode`
(benchmarks/bench_multinode.py: two node agents on one host, merged). A new row replaces the
row with the same key; every row carries its date, commit, versions and machine.
Read by benchmarks/render_distributed_scale.py. Pure data: no torch, no kernel_advisor.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from distributed_record import clean  # noqa: E402  (NaN/inf → None: strict JSON)

SCHEMA_VERSION = 1
DEFAULT_PATH = Path(__file__).resolve().parent / "data" / "distributed_scale.json"


def read_rows(path: Path = DEFAULT_PATH) -> list[dict]:
    if not Path(path).is_file():
        return []
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path} has schema_version {doc.get('schema_version')!r}; this code reads {SCHEMA_VERSION}")
    return list(doc["rows"])


def upsert_rows(path: Path, new: list[dict]) -> list[dict]:
    """Rows of `path` with `new` replacing those of the same (kind, key); written atomically."""
    keys = {(r["kind"], r["key"]) for r in new}
    rows = [r for r in read_rows(path) if (r["kind"], r["key"]) not in keys] + list(new)
    rows.sort(key=lambda r: (r["kind"], r["key"]))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(clean({"schema_version": SCHEMA_VERSION, "rows": rows}), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return rows


def main(argv: list[str] | None = None) -> int:
    """`--merge FILE`: fold the rows a GPU pass wrote into benchmarks/data/distributed_scale.json."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--merge", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=DEFAULT_PATH)
    ns = ap.parse_args(argv)
    rows = upsert_rows(ns.data, read_rows(ns.merge))
    print(f"{ns.data}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
