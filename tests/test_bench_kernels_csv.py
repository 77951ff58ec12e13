"""The side-by-side kernel benchmark kept as data (benchmarks/bench_kernels_csv.py) and its
renderer (benchmarks/render_kernels.py), without a GPU: the declared sweep's bounds, the
upsert, the target share (render_kernels.target_share) on a hand-made CSV, and the correctness check on the CPU under
TRITON_INTERPRET=1 (tests/conftest.py sets it). Nothing is written outside tmp_path."""
import math

import pandas as pd
import pytest
import torch

from benchmarks import bench_kernels_csv as bk
from benchmarks import render_kernels as rk
from reference_kernels import verify


# ---------------------------------------------------------------- the declared sweep

def test_declared_sweep_respects_the_bounds_and_covers_every_class_pass_and_dtype():
    full = bk.cells()
    assert full, "the full sweep is empty"
    for c in full:
        assert bk.ROWS_RANGE[0] <= c.rows <= bk.ROWS_RANGE[1]
        assert bk.COLS_RANGE[0] <= c.cols <= bk.COLS_RANGE[1]
        assert c.rows * c.cols * 4 <= 64 * 2**20  # <= 64 MiB per tensor, even in float32
        assert bk.shape_class(c.rows, c.cols) == c.shape_class  # declared class = the rule
    assert {c.shape_class for c in full} == {"few-rows", "wide-rows", "mid", "large"}
    assert {c.pass_ for c in full} == {"fwd", "fwd+bwd"}
    assert {c.dtype for c in full} == {"bfloat16", "float32"}
    # both ends of both ranges are reached
    assert min(c.rows for c in full) == 1 and max(c.rows for c in full) == 65536
    assert min(c.cols for c in full) == 127 and max(c.cols for c in full) == 393216
    # every class has fwd+bwd cells, and the sweep has no duplicate cell
    for name in bk.CLASS_NAMES:
        assert any(c.shape_class == name and c.pass_ == "fwd+bwd" for c in full)
    assert len(set(full)) == len(full)


def test_ops_come_from_the_registry_and_the_groups_split_them():
    ops = bk.bench_ops()
    reg = bk.registry_ops()
    assert set(ops) == {op for op in reg if op in bk.OPS}
    assert "matmul" not in ops  # not memory-bound
    assert set(ops) == {op for group in bk.OP_GROUPS.values() for op in group}
    # bias_act has no backward: forward only; ops with a backward have both passes, and each
    # bundled backend takes part in fwd+bwd where its spec has a backward
    assert bk.passes_of("bias_gelu") == ("fwd",)
    assert bk.passes_of("softmax") == ("fwd", "fwd+bwd")
    assert bk.providers_of("softmax", "fwd") == ("ours_triton", "ours_cuda", "eager", "compile",
                                                 "liger")
    assert bk.providers_of("softmax", "fwd+bwd", liger=False) == ("ours_triton", "ours_cuda",
                                                                  "eager", "compile")
    assert bk.providers_of("cross_entropy", "fwd+bwd", liger=False) == (
        "ours_triton", "ours_cuda", "eager", "compile")
    assert bk.providers_of("bias_gelu", "fwd", liger=False) == ("ours_cuda", "eager", "compile")


def test_quick_is_a_small_subset_that_still_covers_the_classes_and_passes():
    quick, full = bk.cells(quick=True), set(bk.cells())
    assert set(quick) <= full
    assert {c.shape_class for c in quick} == set(bk.CLASS_NAMES)
    assert {c.pass_ for c in quick} == {"fwd", "fwd+bwd"}
    assert bk.estimate(quick, quick=True)["total_s"] < 240


def test_each_op_group_fits_one_device_call():
    # The device tool stops a command at 10 min; each group is planned for < 8.
    for group in bk.OP_GROUPS:
        assert bk.estimate(bk.cells([group]))["total_s"] < 480, group


def test_filters_select_what_they_name():
    sel = bk.cells(["norms"], ["wide-rows"], ["float32"], ["fwd+bwd"])
    assert sel and {c.op for c in sel} == set(bk.OP_GROUPS["norms"])
    assert {(c.shape_class, c.dtype, c.pass_) for c in sel} == {("wide-rows", "float32",
                                                                 "fwd+bwd")}
    with pytest.raises(SystemExit):
        bk.cells(["no_such_op"])


# ---------------------------------------------------------------- the upsert

def _row(**kw):
    base = dict(op="softmax", rows=1, cols=4096, dtype="bfloat16", provider="eager", gpu="G",
                shape_class="few-rows", status="ok", reason="", ms=0.01)
    base["pass"] = kw.pop("pass_", "fwd")
    return {**base, **kw}


def test_upsert_replaces_by_key_and_keeps_the_other_rows(tmp_path):
    path = tmp_path / "kernels.csv"
    bk.upsert_file(path, pd.DataFrame([_row(ms=1.0), _row(provider="ours_triton", ms=2.0),
                                       _row(gpu="H", ms=3.0)]))
    merged = bk.upsert_file(path, pd.DataFrame([_row(ms=5.0), _row(pass_="fwd+bwd", ms=6.0)]))
    back = bk.read_csv(path)
    assert len(back) == len(merged) == 4
    key = lambda df, **kw: df[(df[list(kw)] == pd.Series(kw)).all(axis=1)]  # noqa: E731
    assert key(back, gpu="G", provider="eager", **{"pass": "fwd"})["ms"].tolist() == [5.0]
    assert key(back, gpu="G", provider="ours_triton")["ms"].tolist() == [2.0]  # kept
    assert key(back, gpu="H")["ms"].tolist() == [3.0]  # another GPU: another key
    assert key(back, **{"pass": "fwd+bwd"})["ms"].tolist() == [6.0]
    assert not back.duplicated(bk.KEY).any()
    assert list(back.columns) == bk.COLUMNS


def test_merge_mode_upserts_part_files(tmp_path):
    main_csv, part = tmp_path / "kernels.csv", tmp_path / "part.csv"
    bk.upsert_file(main_csv, pd.DataFrame([_row(ms=1.0), _row(op="gelu", ms=4.0)]))
    bk.upsert_file(part, pd.DataFrame([_row(ms=2.0)]))
    assert bk.main(["--merge", str(part), "--csv", str(main_csv)]) == 0
    back = bk.read_csv(main_csv)
    assert sorted(back["ms"]) == [2.0, 4.0]


# ---------------------------------------------------------------- the renderer's share

def _hand_made() -> pd.DataFrame:
    rows = [
        # 1. few-rows fwd: ours 0.010 ms, eager 0.012: ratio 0.012 / 0.010 = 1.2 -> win
        _row(provider="ours_triton", ms=0.010), _row(provider="eager", ms=0.012),
        # 2. few-rows fwd+bwd: best other is eager 0.0195 (compile 0.030);
        #    0.0195 / 0.020 = 0.975 >= 0.97 -> win (a tie counts as not losing)
        _row(pass_="fwd+bwd", provider="ours_triton", ms=0.020),
        _row(pass_="fwd+bwd", provider="eager", ms=0.0195),
        _row(pass_="fwd+bwd", provider="compile", ms=0.030),
        # 3. wide-rows: ours_triton refused, ours_cuda 0.050, liger 0.040:
        #    0.040 / 0.050 = 0.80 -> loss
        _row(op="rms_norm", rows=32, cols=131072, shape_class="wide-rows", provider="ours_triton",
             status="refused", reason="ValueError: too wide", ms=math.nan),
        _row(op="rms_norm", rows=32, cols=131072, shape_class="wide-rows", provider="ours_cuda",
             ms=0.050),
        _row(op="rms_norm", rows=32, cols=131072, shape_class="wide-rows", provider="liger",
             ms=0.040),
        # 4. mid fwd+bwd: ours_triton is WRONG (and carries a tiny time it must never be
        #    credited with), eager 0.010: no correct bundled kernel -> loss
        _row(op="rms_norm", rows=2048, cols=1024, dtype="float32", pass_="fwd+bwd",
             shape_class="mid", provider="ours_triton", status="wrong",
             reason="relative error norm", ms=0.001),
        _row(op="rms_norm", rows=2048, cols=1024, dtype="float32", pass_="fwd+bwd",
             shape_class="mid", provider="eager", ms=0.010),
        # 5. large: ours 0.100, eager 0.110, compile 0.095: 0.095 / 0.100 = 0.95 -> loss
        _row(op="swiglu", rows=16384, cols=1024, dtype="float32", shape_class="large",
             provider="ours_triton", ms=0.100),
        _row(op="swiglu", rows=16384, cols=1024, dtype="float32", shape_class="large",
             provider="eager", ms=0.110),
        _row(op="swiglu", rows=16384, cols=1024, dtype="float32", shape_class="large",
             provider="compile", ms=0.095),
        # 6. mid: ours 0.005, eager wrong, compile refused: nothing correct to compare with
        #    -> uncompared, in neither the numerator nor the denominator
        _row(op="gelu", rows=256, cols=127, shape_class="mid", provider="ours_triton", ms=0.005),
        _row(op="gelu", rows=256, cols=127, shape_class="mid", provider="eager",
             status="wrong", ms=math.nan),
        _row(op="gelu", rows=256, cols=127, shape_class="mid", provider="compile",
             status="refused", ms=math.nan),
    ]
    return bk.upsert(pd.DataFrame(columns=bk.COLUMNS), pd.DataFrame(rows))


def test_share_on_a_hand_made_csv(tmp_path):
    path = tmp_path / "kernels.csv"
    bk.write_atomic(_hand_made(), path)
    gr = rk.groups(rk.read_csv(path))
    assert len(gr) == 6
    outcome = {(r.op, r.rows, r.dtype, r._6): r.outcome for r in gr.itertuples()}
    assert outcome == {("softmax", 1, "bfloat16", "fwd"): "win",
                       ("softmax", 1, "bfloat16", "fwd+bwd"): "win",
                       ("rms_norm", 32, "bfloat16", "fwd"): "loss",
                       ("rms_norm", 2048, "float32", "fwd+bwd"): "loss",
                       ("swiglu", 16384, "float32", "fwd"): "loss",
                       ("gelu", 256, "bfloat16", "fwd"): "uncompared"}
    ratio = dict(zip(gr["op"] + gr["pass"], gr["ratio"]))
    assert ratio["softmaxfwd"] == pytest.approx(1.2)
    assert ratio["softmaxfwd+bwd"] == pytest.approx(0.975)
    assert ratio["rms_normfwd"] == pytest.approx(0.8)
    assert ratio["swiglufwd"] == pytest.approx(0.95)
    # 2 wins of 5 compared groups = 40 %; by class: few-rows 2/2, wide-rows 0/1, mid 0/1
    # (the uncompared gelu group is left out), large 0/1
    d = rk.target_share(gr)
    assert (d["wins"], d["compared"], d["uncompared"]) == (2, 5, 1)
    assert d["share"] == pytest.approx(0.4)
    assert d["missing"] == [] and d["met"] is False
    by = rk.share(gr, "shape_class").set_index("shape_class")
    assert by.loc["few-rows", ["wins", "compared"]].tolist() == [2, 2]
    assert by.loc["wide-rows", ["wins", "compared"]].tolist() == [0, 1]
    assert by.loc["mid", ["wins", "compared"]].tolist() == [0, 1]
    assert by.loc["large", ["wins", "compared"]].tolist() == [0, 1]


def test_a_wrong_row_is_never_a_win():
    df = _hand_made()
    gr = rk.groups(df)
    wrong = gr[(gr["op"] == "rms_norm") & (gr["rows"] == 2048)].iloc[0]
    # its 0.001 ms would be 10x faster than eager's 0.010: still a loss, with the reason
    assert wrong["outcome"] == "loss" and wrong["bundled"] == "" and math.isnan(wrong["ratio"])
    assert "wrong" in wrong["why"]
    # the same group with the wrong row marked ok would be a win: the status alone decides
    fixed = df.copy()
    fixed.loc[(fixed["provider"] == "ours_triton") & (fixed["rows"] == 2048), "status"] = "ok"
    again = rk.groups(fixed)
    assert again[(again["rows"] == 2048)].iloc[0]["outcome"] == "win"


def test_the_target_needs_the_share_and_the_coverage():
    # 9 wins and 1 loss = 90 %, but only few-rows fwd: coverage missing -> not met
    rows = [_row(cols=c, provider=p, ms=ms) for c in range(1000, 1010)
            for p, ms in (("ours_triton", 0.010), ("eager", 0.011 if c < 1009 else 0.005))]
    d = rk.target_share(rk.groups(bk.upsert(pd.DataFrame(columns=bk.COLUMNS), pd.DataFrame(rows))))
    assert (d["wins"], d["compared"]) == (9, 10) and d["share"] == pytest.approx(0.9)
    assert d["missing"] == ["wide-rows", "mid", "fwd+bwd"] and d["met"] is False


def test_renderer_writes_between_markers_and_nothing_without_data(tmp_path, capsys):
    docs = tmp_path / "benchmarks.md"
    docs.write_text(f"# B\n\nbefore\n\n{rk.BEGIN}\nold\n{rk.END}\n\nafter\n")
    absent = tmp_path / "none.csv"
    routes = ["--routes", str(tmp_path / "routes.csv")]
    assert rk.main(["--csv", str(absent), "--docs", str(docs), *routes]) == 1
    assert "old" in docs.read_text()  # untouched
    assert "no measurements" in capsys.readouterr().out
    empty = tmp_path / "empty.csv"
    empty.write_text(",".join(bk.COLUMNS) + "\n")
    assert rk.main(["--csv", str(empty), "--docs", str(docs), *routes]) == 1
    assert not (tmp_path / "routes.csv").exists()
    assert "old" in docs.read_text()
    path = tmp_path / "kernels.csv"
    bk.write_atomic(_hand_made(), path)
    assert rk.main(["--csv", str(path), "--docs", str(docs), *routes]) == 0
    assert rk.main(["--csv", str(path), "--docs", str(docs), "--check", *routes]) == 1  # 40 % < 90 %
    assert (tmp_path / "routes.csv").read_text().startswith("kernel,dtype,pass,rows,cols,kernel_ms,")
    text = docs.read_text()
    assert "old" not in text and text.startswith("# B\n\nbefore") and text.endswith("after\n")
    assert "**2 of 5**" in text and "40.0%" in text and "not met" in text
    assert "| rms_norm | 2048×1024 | mid | float32 | fwd+bwd | — |" in text  # a losing group


# ---------------------------------------------------------------- correctness on the CPU

def test_compare_agrees_with_verify_pass_rule():
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(64, 33, generator=gen, dtype=torch.float64)
    tol = (1e-2, 1e-2)
    off_one = ref.to(torch.bfloat16).clone()
    off_one[3, 4] += 5.0
    nan = ref.to(torch.float32).clone()
    nan[0, 0] = float("nan")
    cases = [ref.to(torch.bfloat16), ref.to(torch.float32), (ref * 1.05).to(torch.float32),
             off_one, nan, ref[:, :32].to(torch.float32)]
    for out in cases:
        ours = bk.compare(out, ref, tol)
        theirs = verify._compare_one(out, ref, tol)[2]
        assert (ours == "") == (theirs == ""), (ours, theirs)
    zero = torch.zeros(4, 5, dtype=torch.float64)
    assert bk.compare(zero.float(), zero, tol) == "" == verify._compare_one(zero.float(), zero,
                                                                            tol)[2]


def _fake_timing():
    return bk.Timing(1, 1, 1e9, bench=lambda call: (call(), 0.5)[1])


def _measure(op, pass_, fns=None, dtype="float32", rows=3, cols=131):
    reg = bk.registry_ops()
    fns = fns if fns is not None else {
        k: v for k, v in bk.provider_fns(op, dtype, pass_, "cpu", reg, False, {}).items()
        if k != "compile"}  # torch.compile on the CPU would need a C++ toolchain: GPU only
    cell = bk.Cell(op, rows, cols, dtype, pass_, bk.shape_class(rows, cols))
    return {r["provider"]: r for r in bk.measure_cell(cell, fns, _fake_timing(), "cpu", reg)}


def test_cpu_check_passes_ours_and_eager_and_refuses_cuda():
    rows = _measure("softmax", "fwd+bwd")
    assert rows["ours_triton"]["status"] == "ok" and rows["eager"]["status"] == "ok"
    rows = _measure("softmax", "fwd")
    assert rows["ours_cuda"]["status"] == "refused" and math.isnan(rows["ours_cuda"]["ms"])
    ok = rows["ours_triton"]
    # 3 x 131 float32 fwd: 2 * 393 * 4 = 3144 bytes in 0.5 ms against a 1 GB/s copy
    assert ok["min_bytes"] == 3144 and ok["frac_of_copy_bw"] == pytest.approx(3144 / 5e-4 / 1e9)


def test_a_wrong_or_raising_candidate_gets_no_time():
    from reference_kernels.triton import eager

    def off(x, dim):
        return eager.softmax(x, dim) * 1.05

    def raises(x, dim):
        raise ValueError("rows this wide are not supported")

    rows = _measure("softmax", "fwd", {"ours_triton": off, "eager": eager.softmax,
                                       "ours_cuda": raises})
    assert rows["ours_triton"]["status"] == "wrong" and math.isnan(rows["ours_triton"]["ms"])
    assert "relative error" in rows["ours_triton"]["reason"]
    assert rows["ours_cuda"]["status"] == "refused" and math.isnan(rows["ours_cuda"]["ms"])
    assert "not supported" in rows["ours_cuda"]["reason"]
    assert rows["eager"]["status"] == "ok" and rows["eager"]["ms"] == 0.5


@pytest.mark.slow
@pytest.mark.parametrize("op", bk.bench_ops())
def test_cpu_check_every_op_tiny_odd_shape(op):
    for pass_ in bk.passes_of(op):
        for provider, row in _measure(op, pass_).items():
            want = "refused" if provider == "ours_cuda" else "ok"
            assert row["status"] == want, (op, pass_, provider, row["reason"])


def test_compile_runs_in_a_process_of_its_own_with_the_budget_left():
    cmd = bk.compile_command(["--ops", "norms", "--providers", "ours_triton", "compile", "--budget-s", "480",
                              "--csv", "out.csv"], 123.4)
    assert cmd[2:] == ["--ops", "norms", "--csv", "out.csv", "--providers", "compile", "--budget-s", "123"]
    assert bk.compile_command([], 0)[2:] == ["--providers", "compile", "--budget-s", "0"]


def test_providers_take_turns_and_keep_their_median_round():
    order, times = [], {"a": iter([5.0, 1.0, 2.0]), "b": iter([9.0, 3.0, 4.0])}

    def fake_bench(call):
        name = call()
        order.append(name)
        return next(times[name])

    def raises():
        raise RuntimeError("boom")

    timing = bk.Timing(1, 1, 1e9, bench=fake_bench, rounds=3)
    out = bk.timed_rounds({"a": lambda: "a", "b": lambda: "b", "c": raises}, timing, "cpu")
    # first round: a b c; the second starts at b; the third at c (which failed in the first and is skipped)
    assert order == ["a", "b", "b", "a", "a", "b"]
    assert out["a"][0] == 2.0 and out["b"][0] == 4.0  # medians of (5, 1, 2) and (9, 3, 4)
    assert out["c"][0] == "RuntimeError: boom" and math.isnan(out["c"][1])
