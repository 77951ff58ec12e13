"""ranks.json and its tables, from a hand-made two-rank merge (no torchrun)."""
import json

import pandas as pd
from rich.console import Console
from test_distributed_merge import two_ranks

from kernel_advisor.distributed.assemble import json_clean, ranks_document
from kernel_advisor.distributed.links import BusCeiling
from kernel_advisor.distributed.merge import merge_ranks
from kernel_advisor.render.dist_render import collective_table, distributed_json, distributed_line, rank_table

CEILING = BusCeiling(4.5e11, "nvlink", "datasheet")


def document():
    merged = merge_ranks(two_ranks(), CEILING.bytes_per_s)
    metas = [{"rank": {"backend": "nccl", "wrapper": "ddp", "device": f"cuda:{r}"}, "device": {"name": "NVIDIA H200"},
              "step_wall_s": [0.1, 0.1], "unprofiled_step_wall_s": [0.09, 0.09]} for r in (0, 1)]
    return merged, ranks_document(merged, metas, CEILING)


def text(renderable) -> str:
    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text()


def test_ranks_document_is_strict_json():
    _, doc = document()
    again = json.loads(json.dumps(doc, allow_nan=False))  # no NaN anywhere
    assert again["straggler"]["slowest_rank"] == 1 and again["straggler"]["ranks"] == [1]
    assert again["ranks"][1]["files"]["trace"] == "rank1/trace.json.gz"
    assert again["interconnect"] == {"bytes_per_s": 4.5e11, "link": "nvlink", "source": "datasheet"}
    assert json_clean({"a": [float("nan"), 1.5]}) == {"a": [None, 1.5]}


def test_rank_and_collective_tables():
    merged, doc = document()
    ranks = text(rank_table(doc))
    assert "Ranks — 2 × nccl, ddp" in ranks and "cuda:1" in ranks
    assert "◀ straggler: step +25%" in ranks  # 0.125 / 0.100
    assert "100.00 ms" in ranks and "125.00 ms" in ranks  # median steps
    comm = text(collective_table(doc))
    assert "bus ceiling 450 GB/s (nvlink, datasheet)" in comm
    assert "all-reduce" in comm and "80 GB/s" in comm and "18%" in comm  # 8e10 B/s, 8e10 / 4.5e11
    line = distributed_line({**merged.evidence, "backend": "nccl", "wrapper": "ddp"})
    assert line.startswith("2 ranks (nccl, ddp)") and "overlap 60%" in line  # (1.5 + 3.0) / (3.0 + 4.5)


def test_json_output_carries_the_ranks():
    _, doc = document()
    out = json.loads(distributed_json({"distributed": {}}, pd.DataFrame([{"name": "aten::mm"}]), "/r", 5, doc))
    assert out["ranks"]["world_size"] == 2 and out["hotspots"] == [{"name": "aten::mm"}]
