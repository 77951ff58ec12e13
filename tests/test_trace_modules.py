"""Each module of kernel_advisor.collect.trace does its one job: the splitter cuts at event
boundaries, the fast paths and the JSON path give equal tables, the pool gives the batches
of this process in file order, and collectives come out of the same single pass."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from kernel_advisor.collect.trace import (COLLECTIVE_COLUMNS, TABLE_COLUMNS, fast_paths, pool, read,
                                          read_trace, split, tables)
from kernel_advisor.collect.trace.tables import TableBuilder

DATA = Path(__file__).parent / "data"


def _raw(name: str) -> bytes:
    return gzip.decompress((DATA / f"{name}.json.gz").read_bytes())


def _events_block(raw: bytes) -> bytes:
    """traceEvents' events as the splitter hands them on: from the first "{" to the last
    whole event before a separator."""
    start = raw.index(b"{", raw.index(b'"traceEvents"'))
    return raw[start:raw.rindex(split.SEP) + 4]


def _tables(batches: list[dict]) -> dict[str, pd.DataFrame]:
    ids: dict[str, int] = {}
    columns = {**TABLE_COLUMNS, "collectives": COLLECTIVE_COLUMNS}
    builders = {name: TableBuilder(cols, ids) for name, cols in columns.items()}
    for one in batches:
        for name, values in one.items():
            builders[name].add(values)
    return {name: b.frame() for name, b in builders.items()}


# ---------------------------------------------------------------- split.py

@pytest.mark.parametrize("chunk_bytes", [1, 7, 997, 65_537])
def test_splitter_cuts_whole_events_on_odd_chunk_sizes(monkeypatch, chunk_bytes):
    raw = _raw("ddp_rank0")
    monkeypatch.setattr(split, "BLOCK_BYTES", 5000)
    splitter = split.Splitter("ddp_rank0.json")
    chunks = (raw[i:i + chunk_bytes] for i in range(0, len(raw), chunk_bytes))
    events = []
    for kind, offset, payload in splitter.items(chunks):
        if kind == "block":
            text = bytes(payload)
            assert text.startswith(b"{") and text.endswith(b"}")  # an event opens and closes it
            assert raw[offset:offset + len(text)] == text  # its offset is where it starts in the file
            events += json.loads(b"[" + text + b"]")
        else:
            events += payload
    expected = json.loads(raw)
    assert events == expected["traceEvents"]  # every event once, in file order
    assert splitter.header == {k: v for k, v in expected.items() if k != "traceEvents"}


def test_source_streams_gzip_and_plain_alike(tmp_path, monkeypatch):
    raw = _raw("ddp_gloo_rank0")
    plain = tmp_path / "t.json"
    plain.write_bytes(raw)
    monkeypatch.setattr(read, "READ_BYTES", 1001)
    assert b"".join(read.decompressed_chunks(plain)) == raw
    assert b"".join(read.decompressed_chunks(DATA / "ddp_gloo_rank0.json.gz")) == raw


# ---------------------------------------------------------------- fast_paths.py / tables.rows_from_events

@pytest.mark.parametrize("name", ["cuda_gpt_compiled", "ddp_rank0", "ddp_fsdp_rank0", "ddp_gloo_rank0"])
def test_fast_path_and_json_path_give_equal_tables(name):
    block = _events_block(_raw(name))
    rows = fast_paths.fast_rows(block)
    assert rows is not None
    fast = _tables([pool.rows_batch(rows)])
    slow = _tables([pool.rows_batch(tables.rows_from_events(json.loads(b"[" + block + b"]")))])
    for table in fast:
        pd.testing.assert_frame_equal(fast[table], slow[table], obj=table)
    assert len(fast["cpu_ops"]) and (len(fast["collectives"]) or name == "cuda_gpt_compiled")


def test_a_block_the_regexes_cannot_read_goes_through_json():
    block = _events_block(_raw("ddp_rank0")).replace(b'"Collective name": "allreduce"',
                                                    b'"Collective name": "all\\u0072educe"')
    assert fast_paths.fast_rows(block) is None  # escapes: json decodes them
    done = _tables([pool.item_batch(("block", 0, block))])
    assert set(done["collectives"]["collective"]) == {"allreduce"}


# ---------------------------------------------------------------- pool.py

def test_pool_returns_this_process_batches_in_file_order(monkeypatch):
    monkeypatch.setattr(split, "BLOCK_BYTES", 20_000)
    raw = _raw("ddp_fsdp_rank0")

    def items():
        return split.Splitter("t").items(raw[i:i + 20_000] for i in range(0, len(raw), 20_000))

    here = list(pool.parse_items(items(), workers=1))
    there = list(pool.parse_items(items(), workers=2))
    assert len(here) > 4 and [offset for offset, _ in there] == [offset for offset, _ in here]
    for table, frame in _tables([b for _, b in there]).items():
        pd.testing.assert_frame_equal(frame, _tables([b for _, b in here])[table], obj=table)


# ---------------------------------------------------------------- collectives, in the same pass

def test_collectives_do_not_depend_on_blocks_or_workers(monkeypatch):
    path = DATA / "ddp_fsdp_rank0.json.gz"
    whole = read_trace(path).collectives
    monkeypatch.setattr(split, "BLOCK_BYTES", 20_000)
    pd.testing.assert_frame_equal(read_trace(path, workers=2).collectives, whole)
    assert len(whole) == 48 and whole["ts_us"].is_monotonic_increasing


def test_collective_columns_hold_the_args_comms_needs():
    nccl = read_trace(DATA / "ddp_fsdp_rank0.json.gz").collectives
    gather = nccl[nccl["name"].str.startswith("ncclDevKernel_AllGather")].iloc[0]
    # args of that kernel in the file: "Collective name": "_allgather_base", "In msg nelems": 32896,
    # "Out msg nelems": 65792, "Group size": 2, "dtype": "Float", "device": 0, "stream": 19
    assert (gather.collective, gather.in_nelems, gather.out_nelems) == ("_allgather_base", 32896, 65792)
    assert (gather.group_size, gather["dtype"], gather.device, gather.stream) == (2, "Float", 0, 19)
    launch = nccl[(nccl["cat"] == "cpu_op") & (nccl["ext_id"] == 532)].iloc[0]
    assert launch["name"] == "record_param_comms" and launch.collective == "_allgather_base"
    gloo = read_trace(DATA / "ddp_gloo_rank0.json.gz").collectives
    assert set(gloo["cat"]) == {"user_annotation"} and set(gloo["name"]) == {"gloo:all_reduce"}
    assert set(gloo["input_dims"]) == {"[[65792]]"} and set(gloo["input_types"]) == {'["float"]'}
    assert gloo["collective"].eq("").all() and gloo["in_nelems"].isna().all() and gloo["device"].eq(-1).all()


def test_a_trace_without_communication_has_an_empty_collectives_table():
    collectives = read_trace(DATA / "cuda_gpt_inference.json.gz").collectives
    assert collectives.empty and list(collectives.columns) == [c for c, _ in COLLECTIVE_COLUMNS]
