"""kernel_advisor.collect.trace against an independent json.load reading of the same files."""
from __future__ import annotations

import gzip
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from kernel_advisor.collect.trace import (TABLE_COLUMNS, TABLE_OF_CATEGORY, TraceData, fast_paths, pool, read,
                                         read_trace, split)
from kernel_advisor.errors import UserInputError

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
FIXTURES = ["cuda_gpt_inference", "cuda_gpt_train", "cuda_gpt_compiled"]


def _load(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _compact(value) -> str:
    return "" if value is None else json.dumps(value, separators=(",", ":"))


def _expected(trace: dict) -> dict[str, list[tuple]]:
    """The tables, read the slow obvious way from json.load output."""
    ids: dict[str, int] = {}

    def idv(v):
        if isinstance(v, int):
            return v
        return ids.setdefault(json.dumps(v), -1 - len(ids))

    tables: dict[str, list[tuple]] = {name: [] for name in TABLE_COLUMNS}
    for e in trace["traceEvents"]:
        table = TABLE_OF_CATEGORY.get(e.get("cat"))
        if e.get("ph") != "X" or table is None:
            continue
        a, name, ts, dur = e.get("args", {}), e["name"], float(e["ts"]), float(e["dur"])
        if table == "cpu_ops":
            row = (name, idv(e["pid"]), idv(e["tid"]), ts, dur, a.get("External id", -1), _compact(a.get("Input Dims")),
                   _compact(a.get("Input type")), _compact(a.get("Input Strides")),
                   _compact(a.get("Concrete Inputs")), a.get("kernel_file", ""), a.get("Sequence number", -1))
        elif table in ("annotations", "runtime"):
            row = (name, idv(e["pid"]), idv(e["tid"]), ts, dur)
            if table == "runtime":
                row += (a.get("External id", -1), a.get("correlation", -1))
        elif table == "gpu":
            blocks = math.prod(a["grid"]) if "grid" in a else 0
            row = (e["cat"], name, a.get("device", e["pid"]), a.get("stream", e["tid"]), ts, dur,
                   a.get("External id", -1), a.get("correlation", -1), blocks)
        else:
            row = (name, e["pid"], ts, dur)
        tables[table].append(row)
    return tables


def _rows(df: pd.DataFrame) -> list[tuple]:
    return list(df.itertuples(index=False, name=None))


def _assert_same_as_json(trace: TraceData, path: Path) -> None:
    expected = _load(path)
    assert trace.header == {k: v for k, v in expected.items() if k != "traceEvents"}
    for table, rows in _expected(expected).items():
        assert _rows(getattr(trace, table)) == rows, table


def _assert_same(a: TraceData, b: TraceData, meta: bool = True) -> None:
    assert a.header == b.header or not meta
    for table in [*TABLE_COLUMNS, "collectives"]:
        pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table))


@pytest.fixture(scope="module")
def fixtures() -> dict[str, TraceData]:
    return {name: read_trace(DATA / f"{name}.json.gz") for name in FIXTURES}


@pytest.fixture(scope="module")
def gen_big_trace():
    spec = importlib.util.spec_from_file_location("gen_big_trace", REPO / "benchmarks" / "gen_big_trace.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generated(tmp_path_factory, gen_big_trace) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("gen") / "trace.json.gz"
    return path, gen_big_trace.write_trace(path, kernels=2000, layers=4, seed=3)


# --- the fixture traces written by torch 2.11 on an H200 ------------------------------------

@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_counts_per_category(fixtures, name):
    events = _load(DATA / f"{name}.json.gz")["traceEvents"]
    per_cat = Counter(e.get("cat") for e in events if e.get("ph") == "X")
    trace = fixtures[name]
    assert len(trace.cpu_ops) == per_cat["cpu_op"]
    assert len(trace.annotations) == per_cat["user_annotation"]
    assert len(trace.gpu) == per_cat["kernel"] + per_cat["gpu_memcpy"] + per_cat["gpu_memset"]
    assert len(trace.gpu_annotations) == per_cat["gpu_user_annotation"]
    assert len(trace.runtime) == per_cat["cuda_runtime"] + per_cat["cuda_driver"]
    assert len(trace.cpu_ops) > 0 and len(trace.gpu) > 0


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_rows_equal_json_load(fixtures, name):
    _assert_same_as_json(fixtures[name], DATA / f"{name}.json.gz")


def test_fixture_known_values(fixtures):
    cpu = fixtures["cuda_gpt_inference"].cpu_ops
    first_linear = cpu[cpu.name == "aten::linear"].iloc[0]
    # args of that event in the file: "Input Dims": [[2, 64, 256], [768, 256], [768]], ...
    assert first_linear.input_dims == "[[2,64,256],[768,256],[768]]"
    assert first_linear.input_types == '["float","float","float"]'
    assert first_linear.input_strides == "[[16384,256,1],[256,1],[1]]"
    assert first_linear.concrete == '["","",""]'
    assert first_linear.ext_id == 13 and first_linear.seq_nr == -1
    assert first_linear.ts_us == 4392600536885.539 and first_linear.dur_us == 47.372
    compiled = fixtures["cuda_gpt_compiled"]
    launches = compiled.cpu_ops[compiled.cpu_ops.kernel_file != ""]
    assert launches.name.str.startswith("triton_").all() and len(launches) > 0
    kernels = compiled.gpu.set_index("correlation")
    assert kernels.loc[7218, "blocks"] == 4 * 24 * 4  # "grid": [4, 24, 4] = 384
    assert kernels.loc[7207, "blocks"] == 128  # "grid": [128, 1, 1]


@pytest.mark.parametrize("name", FIXTURES)
def test_column_dtypes(fixtures, name):
    trace = fixtures[name]
    for table, columns in TABLE_COLUMNS.items():
        df = getattr(trace, table)
        assert list(df.columns) == [c for c, _ in columns]
        for column, kind in columns:
            if kind == "float":
                assert df[column].dtype == "float64", (table, column)
            elif kind in ("int", "id"):
                assert df[column].dtype == "int64", (table, column)
            else:
                assert pd.api.types.is_string_dtype(df[column]), (table, column)
                assert all(type(v) is str for v in df[column].tolist()), (table, column)


def test_every_kernel_links_to_an_op_or_launch(fixtures):
    trace = fixtures["cuda_gpt_inference"]
    linked = set(trace.cpu_ops.ext_id) | set(trace.runtime.ext_id)
    kernels = trace.gpu[trace.gpu.cat == "kernel"]
    assert len(kernels) == 46
    assert set(kernels.ext_id) <= linked
    # and every kernel's correlation id is a runtime launch's
    assert set(kernels.correlation) <= set(trace.runtime.correlation)


def test_repeated_strings_are_one_object(fixtures):
    cpu = fixtures["cuda_gpt_train"].cpu_ops
    for column in ("name", "input_dims", "input_types"):
        values = cpu[column].tolist()
        assert len({id(v) for v in values}) == len(set(values)) < len(values), column


def test_meta_keeps_keys_before_and_after_trace_events(fixtures):
    header = fixtures["cuda_gpt_compiled"].header
    assert header["deviceProperties"][0]["name"] == "NVIDIA H200"
    assert header["traceName"] == "/root/out/cuda_gpt_compiled.json"  # written after traceEvents
    assert "traceEvents" not in header


# --- other layouts go through the json path and must give the same tables ---------------

@pytest.mark.parametrize("layout", ["compact", "indent1", "sorted", "one_line_per_event"])
def test_other_layouts_give_the_same_tables(tmp_path, fixtures, layout):
    trace = _load(DATA / "cuda_gpt_train.json.gz")
    if layout == "compact":
        text = json.dumps(trace)
    elif layout == "indent1":
        text = json.dumps(trace, indent=1)
    elif layout == "sorted":
        text = json.dumps(trace, indent=2, sort_keys=True)
    else:
        body = ",\n".join(json.dumps(e) for e in trace["traceEvents"])
        text = '{"traceName": "x", "traceEvents": [\n' + body + "\n]}"
    path = _write(tmp_path / f"{layout}.json", text)
    _assert_same(read_trace(path), fixtures["cuda_gpt_train"], meta=layout != "one_line_per_event")
    _assert_same_as_json(read_trace(path), path)


def _write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


@pytest.mark.parametrize("old,new,name", [
    (b'"aten::mean"', b'"aten::mean\\"q\\u00e9"', 'aten::mean"q\u00e9'),  # escapes: the json path
    (b'"aten::rsqrt"', b'" aten::rsqrt "', " aten::rsqrt "),  # no escapes: the regex path
])
def test_names_are_read_as_written(tmp_path, old, new, name):
    raw = gzip.decompress((DATA / "cuda_gpt_inference.json.gz").read_bytes()).replace(old, new, 1)
    path = _write(tmp_path / "names.json", raw)
    trace = read_trace(path)
    assert name in set(trace.cpu_ops.name)
    _assert_same_as_json(trace, path)


def test_string_pid_tid_get_stable_negative_ids(tmp_path):
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": pid, "tid": tid, "ts": i, "dur": 1, "args": {}}
              for i, (pid, tid) in enumerate([(7, "PyTorch Profiler"), ("Spans", "PyTorch Profiler"),
                                              (7, "other"), ("12", 3)])]
    path = _write(tmp_path / "ids.json", json.dumps({"traceEvents": events}, indent=1))
    cpu = read_trace(path).cpu_ops
    profiler, other, spans = cpu.tid[0], cpu.tid[2], cpu.pid[1]
    assert cpu.tid.tolist() == [profiler, profiler, other, 3]  # "12" is an integer
    assert cpu.pid.tolist() == [7, spans, 7, 12]
    assert sorted([profiler, other, spans]) == [-3, -2, -1]  # one negative id per distinct text
    assert cpu.ext_id.tolist() == [-1] * 4 and cpu.input_dims.tolist() == [""] * 4


def test_cpu_only_trace_from_this_torch(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU())
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with record_function("region"):
            model(torch.randn(3, 16)).sum().backward()
    path = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(path))
    trace = read_trace(path)
    _assert_same_as_json(trace, path)
    linear = trace.cpu_ops[trace.cpu_ops.name == "aten::linear"].iloc[0]
    assert linear.input_dims == "[[3,16],[8,16],[8]]"
    assert "region" in set(trace.annotations.name)
    assert len(trace.gpu) == 0 and list(trace.gpu.columns) == [c for c, _ in TABLE_COLUMNS["gpu"]]


# --- blocks, chunk boundaries and worker processes -----------------------------------------

@pytest.mark.parametrize("kernels", [1, 7, 127])
def test_generated_trace_counts(tmp_path, gen_big_trace, kernels):
    path = tmp_path / "t.json.gz"
    counts = gen_big_trace.write_trace(path, kernels=kernels, layers=2, seed=kernels)
    trace = read_trace(path)
    assert (trace.gpu.cat == "kernel").sum() == counts["kernel"] == kernels
    assert len(trace.gpu) == counts["kernel"] + counts["gpu_memcpy"] + counts["gpu_memset"]
    assert len(trace.cpu_ops) == counts["cpu_op"]
    assert len(trace.runtime) == counts["cuda_runtime"] + counts["cuda_driver"]
    assert len(trace.annotations) == counts["user_annotation"]
    assert len(trace.gpu_annotations) == counts["gpu_user_annotation"]
    _assert_same_as_json(trace, path)


def test_generator_is_deterministic_and_counts_every_event(tmp_path, gen_big_trace):
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    counts = gen_big_trace.write_trace(a, kernels=300, layers=3, seed=11)
    assert gen_big_trace.write_trace(b, kernels=300, layers=3, seed=11) == counts
    assert a.read_bytes() == b.read_bytes()
    events = _load(a)["traceEvents"]
    assert len(events) == counts["total_events"]
    assert sum(e.get("cat") == "ac2g" for e in events) == counts["flows"] == 2 * len(read_trace(a).gpu)


def test_generated_trace_round_trips(generated):
    path, counts = generated
    trace = read_trace(path, workers=1)
    assert (trace.gpu.cat == "kernel").sum() == 2000
    assert len(trace.cpu_ops) == counts["cpu_op"]
    assert len(trace.runtime) == counts["cuda_runtime"] + counts["cuda_driver"]
    _assert_same_as_json(trace, path)


@pytest.mark.parametrize("block_bytes,read_bytes", [(4096, 1 << 20), (50_000, 97), (1 << 20, 1)])
def test_block_and_chunk_boundaries_do_not_matter(monkeypatch, generated, block_bytes, read_bytes):
    path, _ = generated
    expected = read_trace(path, workers=1)
    monkeypatch.setattr(split, "BLOCK_BYTES", block_bytes)
    monkeypatch.setattr(read, "READ_BYTES", read_bytes)
    _assert_same(read_trace(path, workers=1), expected)


def test_plain_json_cut_into_tiny_chunks(monkeypatch, tmp_path):
    raw = gzip.decompress((DATA / "cuda_gpt_compiled.json.gz").read_bytes())
    # numbers and literals as the last members: a chunk may end inside any of them
    raw = raw.rstrip()[:-1] + b', "flag": true, "nothing": null, "tail_number": -1234567}'
    path = _write(tmp_path / "plain.json", raw)
    monkeypatch.setattr(read, "READ_BYTES", 1)  # plain files are read 16 x READ_BYTES at a time
    monkeypatch.setattr(split, "BLOCK_BYTES", 3000)
    trace = read_trace(path)
    assert trace.header["tail_number"] == -1234567
    assert trace.header["flag"] is True and trace.header["nothing"] is None
    _assert_same_as_json(trace, path)


def test_workers_give_the_same_tables(monkeypatch, generated):
    path, _ = generated
    expected = read_trace(path, workers=1)
    monkeypatch.setattr(split, "BLOCK_BYTES", 64_000)  # several blocks per worker
    _assert_same(read_trace(path, workers=2), expected)


def test_workers_read_the_json_path_too(tmp_path, fixtures):
    trace = _load(DATA / "cuda_gpt_train.json.gz")
    path = _write(tmp_path / "compact.json", json.dumps(trace))
    _assert_same(read_trace(path, workers=2), fixtures["cuda_gpt_train"])


@pytest.mark.parametrize("python", ["/nonexistent/python3", "/bin/false"])
def test_workers_that_cannot_run_leave_the_work_here(monkeypatch, generated, python):
    # /nonexistent: the processes do not start; /bin/false: they start and exit at once
    path, _ = generated
    expected = read_trace(path, workers=1)
    monkeypatch.setattr(split, "BLOCK_BYTES", 64_000)
    monkeypatch.setattr(pool.sys, "executable", python)
    _assert_same(read_trace(path, workers=2), expected)


def test_workers_start_from_a_script_on_stdin(generated):
    # multiprocessing's spawn would re-run __main__ (here: stdin) in each worker and hang.
    path, counts = generated
    script = (f"from kernel_advisor.collect.trace import read_trace\n"
              f"t = read_trace({str(path)!r}, workers=2)\nprint(len(t.cpu_ops))\n")
    done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=300,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) == counts["cpu_op"]


@pytest.mark.parametrize("name", FIXTURES + ["generated", "with_flops"])
def test_kineto_blocks_take_the_fast_path(tmp_path, generated, name):
    # a guard for speed: the regex path must read torch's own layout without json's help
    path = generated[0] if name == "generated" else DATA / f"{name.replace('with_flops', FIXTURES[0])}.json.gz"
    raw = gzip.decompress(path.read_bytes())
    if name == "with_flops":  # profile(with_flops=True) appends "flops" after "Ev Idx"
        raw = re.sub(rb'("Ev Idx": \d+)\n', rb'\1, "flops": 2048\n', raw)
        _assert_same_as_json(read_trace(_write(tmp_path / "flops.json", raw)), tmp_path / "flops.json")
    start = raw.index(b"{", raw.index(b'"traceEvents"'))
    rows = fast_paths.fast_rows(raw[start:raw.rindex(split.SEP) + 4])
    assert rows is not None
    for table, pattern in (("cpu_ops", fast_paths.CPU_ARGS), ("gpu", fast_paths.GPU_ARGS),
                           ("runtime", fast_paths.RUNTIME_ARGS)):
        assert rows[table], table
        unread = fast_paths.args_columns(rows[table], pattern, pattern.groups)[-1]
        assert not any(unread), table


# --- damaged or wrong files: one UserInputError naming the file ----------------------------

def _gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


FIXTURE_RAW = gzip.decompress((DATA / "cuda_gpt_inference.json.gz").read_bytes())
BAD_FILES = {
    "half.json.gz": ((DATA / "cuda_gpt_inference.json.gz").read_bytes()[:5000], "truncated"),
    "half.json": (FIXTURE_RAW[: len(FIXTURE_RAW) * 3 // 5], "truncated"),
    "tail_cut.json": (FIXTURE_RAW.rstrip()[:-40], "truncated"),
    "empty.json": (b"", "empty"),
    "text.json": (b"hello, this is not a trace\n", "does not hold a JSON object"),
    "text.json.gz": (_gz(b"not json at all"), "does not hold a JSON object"),
    "bad_magic.json.gz": (b"\x1f\x8b" + b"garbage" * 20, "not a valid gzip file"),
    "no_events.json": (b'{"schemaVersion": 1, "deviceProperties": []}', "no traceEvents"),
    "events_not_list.json": (b'{"traceEvents": {"ph": "X"}}', "traceEvents is not a list"),
    "array.json": (b'[{"ph": "X", "cat": "cpu_op"}]', "no traceEvents"),
    "broken_event.json": (FIXTURE_RAW.replace(b'"ph": "X", "cat": "kernel"', b'"ph": "X" "cat": "kernel"', 1),
                          "not valid JSON"),
    "extra.json": (FIXTURE_RAW + b"\n{}", "extra data"),
    "latin1.json": (FIXTURE_RAW.replace(b"aten::mean", b"aten::m\xe9an", 1), "not UTF-8"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_damaged_files_raise_user_input_error(tmp_path, name):
    data, problem = BAD_FILES[name]
    path = _write(tmp_path / name, data)
    with pytest.raises(UserInputError) as caught:
        read_trace(path)
    assert problem in caught.value.problem
    assert name in caught.value.problem
    assert caught.value.fix


def test_truncation_names_the_byte(tmp_path):
    path = _write(tmp_path / "cut.json", FIXTURE_RAW[:12345])
    with pytest.raises(UserInputError, match="cut.json is truncated at byte 12345"):
        read_trace(path)


@pytest.mark.parametrize("make", ["missing", "directory"])
def test_missing_path(tmp_path, make):
    path = tmp_path / "nope.json.gz"
    if make == "directory":
        path.mkdir()
    with pytest.raises(UserInputError, match="nope.json.gz"):
        read_trace(path)


@pytest.mark.parametrize("enabled", [True, False])
def test_gc_setting_is_restored(enabled):
    import gc

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        read_trace(DATA / "cuda_gpt_compiled.json.gz")
        assert gc.isenabled() is enabled
        with pytest.raises(UserInputError):
            read_trace(DATA / "missing.json.gz")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
