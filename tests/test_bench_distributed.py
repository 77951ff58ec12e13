"""The multi-GPU benchmark's pieces on CPU: busbw_check's arithmetic and its gloo run, the
distributed.json record, the docs renderer, and (slow) the driver end to end on gloo."""
import json
import subprocess
import sys
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import busbw_check as bb
from benchmarks.bench_distributed import DDP_ACTIONS, figure_problems, figure_warnings, headline_lines, plain_lines
from benchmarks.distributed_record import (SCHEMA_VERSION, DistributedRecord, RecordError, RunFigures, busbw_at,
                                          clock_skew_us, read_record, read_records, upsert_record, write_record)
from benchmarks.render_distributed import BEGIN, END, main as render_main, render, render_all, splice

REPO = Path(__file__).resolve().parents[1]
MIB = 2**20


# ---------------------------------------------------------------- busbw arithmetic


def test_busbw_formula_hand_worked():
    # 1 MiB in 100 µs: algbw = 1048576 B / 1e-4 s = 10.49 GB/s; n = 2: factor 2·1/2 = 1, busbw the same
    algbw, busbw = bb.bandwidths(MIB, 100e-6, 2)
    assert algbw == pytest.approx(10.48576e9) and busbw == pytest.approx(10.48576e9)
    # n = 8: factor 2·7/8 = 1.75, busbw 18.35 GB/s
    assert bb.bandwidths(MIB, 100e-6, 8)[1] == pytest.approx(10.48576e9 * 1.75)
    assert bb.busbw_factor(4) == pytest.approx(1.5)


def test_sizes_follow_nccl_tests_b_e_f():
    sizes = bb.message_sizes(bb.parse_bytes("4K"), bb.parse_bytes("1G"), 4)
    assert len(sizes) == 10 and sizes[0] == 4096 and sizes[-1] == 2**30
    assert {MIB, 16 * MIB, 256 * MIB} <= set(sizes)  # the sizes calibrate and docs/benchmarks.md used
    assert bb.message_sizes(8192, 100_000, 4) == [8192, 32768]  # 131072 is past the end
    assert bb.parse_bytes("4096") == 4096 and bb.parse_bytes("16MiB") == 16 * MIB
    with pytest.raises(Exception):
        bb.parse_bytes("lots")


def test_busbw_check_table_reads_like_nccl_tests():
    doc = {"world_size": 2, "backend": "nccl", "dtype": "bfloat16", "device_name": "GPU", "warmup": 5,
           "iters": 20, "avg_busbw_bytes_per_s": 10.48576e9,
           "rows": [{"size_bytes": MIB, "count": MIB // 2, "time_s": 100e-6, "algbw_bytes_per_s": 10.48576e9,
                     "busbw_bytes_per_s": 10.48576e9, "wrong": 0}]}
    text = bb.table_text(doc)
    assert "      all_reduce      1048576       524288  bfloat16    sum     100.00    10.49    10.49       0" in text
    assert "# Avg bus bandwidth    : 10.486 GB/s" in text and "OK" in text


def test_busbw_factors_per_family():
    # nccl-tests: all-gather and reduce-scatter move (n-1)/n of the buffer per rank, all-reduce twice that
    assert bb.busbw_factor(4, "all_gather") == bb.busbw_factor(4, "reduce_scatter") == pytest.approx(0.75)
    assert bb.bandwidths(MIB, 100e-6, 4, "all_gather")[1] == pytest.approx(10.48576e9 * 0.75)
    rows = [{"collective": "all_gather", "busbw_bytes_per_s": 2.0}, {"collective": "all_gather", "busbw_bytes_per_s": 5.0},
            {"busbw_bytes_per_s": 3.0}]
    assert bb.ceilings(rows) == {"all_gather": 5.0, "all_reduce": 3.0}


def test_busbw_at_reads_one_family():
    rows = [{"collective": "all_gather", "size_bytes": MIB, "busbw_bytes_per_s": 1e9},
            {"size_bytes": MIB, "busbw_bytes_per_s": 7e9}]
    assert busbw_at(rows, MIB, "all_gather") == 1e9 and busbw_at(rows, MIB) == 7e9


def test_records_are_upserted_by_gpu_count(tmp_path):
    path = tmp_path / "d.json"
    rec = read_record(REPO / "benchmarks" / "data" / "distributed.json")
    upsert_record(rec, path)
    upsert_record(replace(rec, world_size=4, date_utc="later"), path)
    upsert_record(replace(rec, world_size=4, date_utc="latest"), path)
    got = read_records(path)
    assert [(r.world_size, r.date_utc) for r in got] == [(2, rec.date_utc), (4, "latest")]
    assert "### 4 GPUs" in render_all(got)


def test_busbw_check_on_gloo(tmp_path):
    out = tmp_path / "bb.json"
    code = bb.main(["--nproc", "2", "--backend", "gloo", "--device", "cpu", "--min-bytes", "4K",
                    "--max-bytes", "16K", "--iters", "2", "--warmup", "1", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert code == 0 and doc["world_size"] == 2 and doc["busbw_factor"] == 1.0
    assert [r["size_bytes"] for r in doc["rows"]] == [4096, 16384]
    for r in doc["rows"]:
        assert r["wrong"] == 0 and r["time_s"] > 0
        assert r["algbw_bytes_per_s"] == pytest.approx(r["size_bytes"] / r["time_s"])
        assert r["busbw_bytes_per_s"] == pytest.approx(r["algbw_bytes_per_s"])  # n = 2
    assert doc["env"]["NCCL_NVLS_ENABLE"] == "0"


def test_busbw_check_is_independent_of_the_advisor():
    source = (REPO / "benchmarks" / "busbw_check.py").read_text()
    assert "kernel_advisor" not in source.replace("independent of kernel_advisor", "").replace(
        "imports nothing from kernel_advisor", "")


# ---------------------------------------------------------------- record arithmetic


def test_busbw_at_interpolates_in_log_size():
    rows = [{"size_bytes": 64 * MIB, "busbw_bytes_per_s": 200e9}, {"size_bytes": 256 * MIB, "busbw_bytes_per_s": 300e9}]
    # 128 MiB is halfway between 64 and 256 MiB in log2 (26, 27, 28): 250 GB/s
    assert busbw_at(rows, 128 * MIB) == pytest.approx(250e9)
    assert busbw_at(rows, 256 * MIB) == pytest.approx(300e9)
    assert busbw_at(rows, 4 * MIB) == 200e9 and busbw_at(rows, 2**31) == 300e9  # the end rows outside
    assert busbw_at(rows, None) is None and busbw_at([], MIB) is None


def test_clock_skew_is_the_median_end_offset():
    # rank 1's calls end 3, 5 and 40 µs after rank 0's: the median, 5 µs, is the clock offset
    # (the 40 is one late call, which the median ignores); its 4th call has no partner
    skew = clock_skew_us({0: [100.0, 200.0, 300.0], 1: [103.0, 205.0, 340.0, 400.0]})
    assert skew == {"per_rank": {"0": 0.0, "1": 5.0}, "max_abs_us": 5.0, "calls": 3}
    assert clock_skew_us({0: [1.0]})["max_abs_us"] is None


def test_headline_lines_are_the_profile_summary():
    out = ("Ranks — 2 × nccl, ddp\n│ 0 │ cuda:0 │\n"
           "step 2.10 ms [2.0 ms–2.2 ms, 75 % CI] · profiler overhead 1.05×\n"
           "2 ranks (nccl, ddp) · slowest/fastest step 1.002 · overlap 70% · per rank: ranks.json, rank<r>/\n")
    assert headline_lines(out) == ["step 2.10 ms [2.0 ms–2.2 ms, 75 % CI] · profiler overhead 1.05×",
                                   "2 ranks (nccl, ddp) · slowest/fastest step 1.002 · overlap 70% · per rank: "
                                   "ranks.json, rank<r>/"]


# ---------------------------------------------------------------- the record


def run_figures(**changes) -> RunFigures:
    run = RunFigures(
        name="ddp_mlp", model="examples/ddp_mlp.py", options=["--mode", "train", "--steps", "20", "--warmup", "5"],
        wall_s=60.0, step_s=0.004, backend="nccl", wrapper="ddp", comm_time_s=0.002, comm_share_of_step=0.5,
        exposed_comm_s=0.0005, exposed_comm_pct=12.5, overlap_frac=0.75, allreduce_count=4.0,
        mean_allreduce_bytes=128 * MIB, busbw_bytes_per_s=270e9, bus_ceiling_bytes_per_s=300e9,
        bus_ceiling_source="measured", busbw_frac_of_ceiling=0.9, independent_busbw_bytes_per_s=300e9,
        busbw_vs_independent=0.9,
        straggler={"ratio": 1.004, "slowest_rank": 1, "fastest_rank": 0, "ranks": [], "waited_for_rank": 1,
                   "max_comm_wait_s": 0.0001, "max_comm_wait_pct": 2.5, "calls_aligned": True},
        profiler_overhead={"value": 1.05, "low": 1.01, "high": 1.09},
        clock_skew_us={"per_rank": {"0": 0.0, "1": 2.5}, "max_abs_us": 2.5, "calls": 80},
        ranks=[{"rank": r, "step_median_s": 0.0042, "comm_per_step_s": 0.002, "comm_wait_per_step_s": 0.0001,
                "exposed_comm_per_step_s": 0.0005, "overlap_frac": 0.75, "trace_bytes": 3 * MIB,
                "profiler_overhead": {"value": 1.05, "low": 1.01, "high": 1.09}} for r in (0, 1)],
        headline=["step 4.00 ms [3.9 ms–4.1 ms, 75 % CI] · profiler overhead 1.05× [1.01–1.09] · "
                  "trace: /tmp/x/trace.json.gz (opens in Perfetto)",
                  "2 ranks (nccl, ddp) · comm 2.00 ms/step, 500.0 µs exposed (12.5% of the step) · overlap 75%"],
        recommendations=["dist-exposed-communication", "leave-gemm-at-roof"], single_process_step_s=0.0025)
    return replace(run, **changes)


def record(**changes) -> DistributedRecord:
    rec = DistributedRecord(
        schema_version=SCHEMA_VERSION, date_utc="2026-12-01T10:00:00Z", commit="abc1234",
        command="python3 benchmarks/bench_distributed.py OUT --nproc 2 --device cuda",
        gpus={"name": "NVIDIA H200", "count": 2, "driver": "580.159.04",
              "topology": ["\tGPU0\tGPU1\tCPU Affinity", "GPU0\t X \tNV18\t0-31", "GPU1\tNV18\t X \t0-31"]},
        world_size=2, versions={"torch": "2.11.0+cu130", "cuda": "13.0", "nccl": "2.28.9", "triton": "3.6.0",
                                "python": "3.12.3", "kernel_advisor": "0.1.0"},
        env={"NCCL_NVLS_ENABLE": "0"},
        busbw_check={"dtype": "bfloat16", "world_size": 2, "backend": "nccl", "device": "cuda", "warmup": 5,
                     "iters": 20, "rows": [{"size_bytes": 64 * MIB, "time_s": 280e-6, "algbw_bytes_per_s": 240e9,
                                            "busbw_bytes_per_s": 240e9, "wrong": 0},
                                           {"size_bytes": 256 * MIB, "time_s": 900e-6, "algbw_bytes_per_s": 300e9,
                                            "busbw_bytes_per_s": 300e9, "wrong": 0}]},
        ceiling={"source": "advisor calibrate", "busbw_bytes_per_s": 297e9, "size_bytes": 256 * MIB, "world_size": 2,
                 "median_s": 904e-6, "independent_busbw_bytes_per_s": 300e9, "ratio": 0.99},
        runs=[run_figures()], primary_run="ddp_mlp")
    return replace(rec, **changes)


def test_topology_lines_lose_terminal_escapes():
    # nvidia-smi topo -m on the 2 x H200 host underlines its header row and ends with a blank line
    out = "\x1b[4mGPU0\tGPU1\tCPU Affinity\x1b[0m\nGPU0\t X \tNV18\t0-31  \n\n"
    assert plain_lines(out) == ["GPU0\tGPU1\tCPU Affinity", "GPU0\t X \tNV18\t0-31"]


def test_record_round_trips(tmp_path):
    path = tmp_path / "distributed.json"
    write_record(record(), path)
    assert read_record(path) == record()
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION


def test_record_of_another_version_is_refused_loudly(tmp_path):
    doc = record().to_json()
    with pytest.raises(RecordError, match="schema_version 99; this code reads 1"):
        DistributedRecord.from_json({**doc, "schema_version": 99})
    del doc["runs"][0]["overlap_frac"]
    with pytest.raises(RecordError, match=r"runs\[0\] lacks overlap_frac"):
        DistributedRecord.from_json(doc)


def test_nan_becomes_null(tmp_path):
    path = tmp_path / "d.json"
    write_record(record(runs=[run_figures(overlap_frac=float("nan"))]), path)
    assert json.loads(path.read_text())["runs"][0]["overlap_frac"] is None


def test_gpu_checks_fail_a_run_off_the_calibration():
    assert figure_problems("cuda", 2, record()) == []
    bad = record(runs=[run_figures(bus_ceiling_source="datasheet", busbw_bytes_per_s=None)])
    problems = figure_problems("cuda", 2, bad)
    assert any("not the calibration" in p for p in problems) and any("no all-reduce busbw" in p for p in problems)
    assert figure_problems("cpu", 2, bad) == []  # CPU figures check the script, not the host
    skewed = record(runs=[run_figures(clock_skew_us={"per_rank": {}, "max_abs_us": 80.0, "calls": 8})])
    assert any("clocks differ by 80" in w for w in figure_warnings(skewed))


def test_gpu_checks_fail_the_fp32_run_without_its_measured_actions():
    measured = [{"action": a, "predicted_gain_frac": None,
                 "measured": {"status": "passed", "reason": "", "gain_frac": 0.01}} for a in DDP_ACTIONS]
    fp32 = run_figures(name="ddp_mlp_fp32", measured_actions=measured)
    assert figure_problems("cuda", 2, record(runs=[run_figures(), fp32])) == []
    hook_refused = [*measured[:2], {"action": "ddp:bf16_compress", "predicted_gain_frac": None,
                                    "measured": {"status": "not-applied", "reason": "bfloat16 already"}}]
    problems = figure_problems("cuda", 2, record(runs=[run_figures(), replace(fp32, measured_actions=hook_refused)]))
    assert problems == ["ddp_mlp_fp32: ddp:bf16_compress not measured (not-applied: bfloat16 already)"]
    # an optional run's actions that were not measured are a warning: the record is still written
    fsdp = run_figures(name="fsdp_mlp", wrapper="fsdp")
    assert figure_problems("cuda", 2, record(runs=[run_figures(), fp32, fsdp])) == []
    assert sum("fsdp_mlp: fsdp:" in w for w in figure_warnings(record(runs=[run_figures(), fp32, fsdp]))) == 2


# ---------------------------------------------------------------- the docs section


def test_render_writes_the_measured_section(tmp_path):
    text = render(record())
    assert text.startswith("**Measured 2026-12-01** on 2 × NVIDIA H200 (driver 580.159.04, GPU0–GPU1 NV18)")
    lines = text.splitlines()
    assert "| bus-bandwidth ceiling (`advisor calibrate`: one bf16 all-reduce of 256 MiB over 2 GPUs) | 297.0 GB/s |" \
        in lines
    # 270 GB/s over the 300 GB/s ceiling; busbw_check at 128 MiB, interpolated, is 300 GB/s here too
    assert ("| all-reduce busbw of the run (4 calls/step of 128 MiB) | 270.0 GB/s: **90 % of the ceiling**, "
            "0.90× busbw_check at that size |") in lines
    assert "| comm/compute overlap · exposed communication | **75 %** · 0.50 ms (12.5 % of the step) |" in lines
    assert "| profiler overhead (profiled / unprofiled step, rank 0) | 1.050× [1.010–1.090] |" in lines
    # 4.00 ms under DDP against 2.50 ms as one process: 1.60×
    assert "| the same model as one process on one device (no DDP) · the DDP step over it | 2.50 ms · 1.60× |" \
        in lines
    assert "step 4.00 ms [3.9 ms–4.1 ms, 75 % CI] · profiler overhead 1.05× [1.01–1.09]" in lines  # no temp path
    assert "| all_reduce | 256 MiB | 900.0 µs | 300.0 GB/s | 300.0 GB/s |" in lines
    assert "`dist-exposed-communication` (and 1 single-device rules)" in text


def test_render_shows_families_and_measured_actions():
    fam = {"collective": "all_gather", "calls_per_step": 8.0, "bytes_per_call": 2 * MIB, "busbw_bytes_per_s": 1.5e11,
           "family_ceiling_bytes_per_s": 3e11, "busbw_frac_of_family_ceiling": 0.5,
           "independent_busbw_bytes_per_s": 2e11, "busbw_vs_independent": 0.75}
    act = {"action": "ddp:bucket_cap_mb", "predicted_gain_frac": 0.05,
           "measured": {"status": "passed", "gain_frac": 0.08, "verdict": "faster",
                        "speedup": {"value": 1.09, "low": 1.05, "high": 1.12}}}
    rec = record()
    rec = replace(rec, runs=[replace(rec.runs[0], collectives=[fam], measured_actions=[act])])
    lines = render(rec).splitlines()
    assert "| ddp_mlp | ddp | all_gather | 8 × 2 MiB | 150.0 GB/s | 50 % (300.0 GB/s) | 0.75× |" in lines
    assert "| ddp_mlp | `ddp:bucket_cap_mb` | 5 % | 8 % | 1.09× [1.05–1.12] | faster |" in lines


def test_render_splices_between_markers_and_before_limits(tmp_path):
    docs = tmp_path / "distributed.md"
    docs.write_text("# Multi-GPU\n\nintro\n\n## Limits\n\n- one node\n")
    rec = tmp_path / "distributed.json"
    write_record(record(), rec)
    assert render_main(["--record", str(rec), "--docs", str(docs)]) == 0
    first = docs.read_text()
    assert first.index("## Measured on a multi-GPU host") < first.index(BEGIN) < first.index(END) \
        < first.index("## Limits")
    assert render_main(["--record", str(rec), "--docs", str(docs)]) == 0
    assert docs.read_text() == first  # a second render replaces, never duplicates
    assert splice("a\n", "x").endswith(f"{BEGIN}\nx\n{END}\n")


def test_render_without_a_record_writes_nothing(tmp_path, capsys):
    docs = tmp_path / "distributed.md"
    docs.write_text("unchanged\n")
    assert render_main(["--record", str(tmp_path / "absent.json"), "--docs", str(docs)]) == 1
    assert docs.read_text() == "unchanged\n" and "nothing written" in capsys.readouterr().out


# ---------------------------------------------------------------- the driver, end to end on gloo


@pytest.mark.slow
def test_driver_on_cpu_end_to_end(tmp_path):
    out, rec = tmp_path / "out", tmp_path / "record.json"
    res = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_distributed.py"), str(out),
                          "--nproc", "2", "--device", "cpu", "--record", str(rec)],
                         capture_output=True, text=True, timeout=480, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["bench_distributed.log", "distributed.json", "runs.tar.gz"]
    with tarfile.open(out / "runs.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"calibration.json", "busbw_check.json", "ddp_mlp/run.json", "ddp_mlp/rank1/comms.csv"} <= names
    got = read_record(rec)
    assert got == read_record(out / "distributed.json")
    run = got.primary()
    assert run.backend == "gloo" and run.wrapper == "ddp" and len(run.ranks) == 2
    assert run.allreduce_count and run.busbw_bytes_per_s > 0 and 0.0 <= run.overlap_frac <= 1.0
    assert len(run.headline) == 2 and run.headline[1].startswith("2 ranks (gloo, ddp)")
    assert run.profiler_overhead["value"] > 0 and all(r["trace_bytes"] > 0 for r in run.ranks)
    assert run.single_process_step_s > 0
    assert isinstance(run.recommendations, list)  # which rules fire on a loaded 2-core box varies
    assert "total" in res.stdout and "FAILED" not in res.stdout
