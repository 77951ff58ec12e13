"""Draws of real models' shapes for the kernel sweep (benchmarks/shape_draws.py): reproducible
from their seed, under the sweep's cap, never read by the fit when held out; the side-by-side
table of fit and held-out draws (benchmarks/render_draws.py) from a small CSV; the training
try-kernel benchmark's target (benchmarks/bench_train_try_kernel.py) from its rows."""
import math

import pandas as pd
import pytest

from benchmarks import bench_kernels_csv as bk  # puts benchmarks/ on sys.path, as the scripts run
from benchmarks import bench_train_try_kernel as tt
from benchmarks import render_kernels as rk
from reference_kernels.registry import all_kernels
from reference_kernels.routes import read_routes

import kernel_routes  # noqa: E402 - the modules the scripts import, so DrawError is theirs
import shape_draws as sd  # noqa: E402


def test_a_draw_is_reproducible_from_its_id_and_fit_and_heldout_differ():
    a, b = sd.draw_shapes("heldout-3", bk.MAX_ELEMENTS), sd.draw_shapes("heldout-3", bk.MAX_ELEMENTS)
    assert a == b
    assert a != sd.draw_shapes("fit-3", bk.MAX_ELEMENTS) and a != sd.draw_shapes("heldout-4", bk.MAX_ELEMENTS)
    for family in sd.DRAWN_FAMILIES:
        mine = [s for s in a if s.family == family]
        assert len(mine) == 40 and len({(s.op, s.rows, s.cols) for s in mine}) == 40
        assert {s.op for s in mine} <= set(sd.FAMILIES[family])


def test_a_heldout_draw_covers_every_family_pass_and_dtype_under_the_cap():
    cells = bk.cells(draw="heldout-1")
    assert {c.draw for c in cells} == {"heldout-1"}
    for c in cells:
        assert c.rows * c.cols <= bk.MAX_ELEMENTS and c.rows >= 1
        assert c.shape_class == bk.shape_class(c.rows, c.cols)
    for family in sd.DRAWN_FAMILIES:
        for pass_ in bk.PASSES:
            for dtype in bk.DTYPES:
                shapes = {(c.op, c.rows, c.cols) for c in cells
                          if sd.FAMILY_OF[c.op] == family and c.pass_ == pass_ and c.dtype == dtype}
                assert len(shapes) >= 40, (family, pass_, dtype)
    assert len(bk.cells(draw="heldout-1", ops=["norms"], dtypes=["bfloat16"], passes=["fwd"])) == 40


def test_an_oversized_draw_is_split_into_the_largest_equal_rows_that_fit():
    big = sd.Drawn("cross_entropy", 8192, 151936, "cross_entropy", "x")
    small = sd._fit_cap(big, 2**24)
    assert small.cols == 151936 and small.rows * small.cols <= 2**24
    assert (small.rows + 1) * small.cols > 2**24 or 8192 % small.rows == 0
    assert sd._fit_cap(sd.Drawn("gelu", 3, 5, "activation", "x"), 100).rows == 3


@pytest.mark.parametrize("bad", ["grid", "heldout", "fit-x", "test-1", ""])
def test_a_draw_id_names_its_kind_and_seed(bad):
    assert sd.parse_draw("heldout-12") == ("heldout", 12)
    with pytest.raises(sd.DrawError, match="fit-<seed> or heldout-<seed>"):
        sd.parse_draw(bad)
    assert sd.is_fit_draw("grid") and sd.is_fit_draw("fit-1") and not sd.is_fit_draw("heldout-1")


def _cell_rows(draw, op, rows, cols, times, dtype="bfloat16", pass_="fwd", shape_class="mid"):
    return [{"op": op, "rows": rows, "cols": cols, "dtype": dtype, "pass": pass_, "provider": p,
             "gpu": "GPU X", "draw": draw, "shape_class": shape_class, "status": "ok", "reason": "",
             "ms": ms, "host_us_per_call": 5.0, "commit": "abc1234", "date": "2026-12-01T00:00:00Z",
             "routes": ""} for p, ms in times.items()]


def _fixture() -> pd.DataFrame:
    peers = {"eager": 0.010, "compile": 0.009}
    rows = []
    # grid: the kernel wins at 1024x1024, loses to eager at 16x4096 (the route sends it there)
    rows += _cell_rows("grid", "softmax", 1024, 1024, {"ours_triton": 0.005, **peers})
    rows += _cell_rows("grid", "softmax", 16, 4096, {"ours_triton": 0.020, "eager": 0.008, "compile": 0.009})
    rows += _cell_rows("fit-1", "softmax", 2000, 1000, {"ours_triton": 0.006, "eager": 0.010})
    # held out: near 16x4096 (routed to eager, 0.008 against compile's 0.0075: a loss as routed),
    # and near 1024x1024 (the kernel runs, wins)
    rows += _cell_rows("heldout-1", "softmax", 20, 4000, {"ours_triton": 0.030, "eager": 0.008, "compile": 0.0075})
    rows += _cell_rows("heldout-1", "softmax", 1100, 900, {"ours_triton": 0.004, **peers})
    # a held-out group whose compile unit the budget cut: left out, counted
    rows += _cell_rows("heldout-1", "rms_norm", 512, 4096, {"ours_triton": 0.004, "eager": 0.01})
    rows += _cell_rows("heldout-1", "rms_norm", 512, 2048, {"ours_triton": 0.004, **peers})
    return bk.upsert(pd.DataFrame(columns=bk.COLUMNS), pd.DataFrame(rows))


def test_the_fit_refuses_heldout_rows_and_the_routes_hold_fit_points_only(tmp_path):
    df = _fixture()
    with pytest.raises(sd.DrawError, match="heldout-1"):
        kernel_routes.routes_table(df)
    with pytest.raises(sd.DrawError):
        kernel_routes.as_shipped(df)
    routes = tmp_path / "routes.csv"
    rk.write_routes(df, routes)
    table = pd.read_csv(routes)
    assert set(table["draw"]) == {"grid", "fit-1"} and len(table) == 3
    assert sd.routes_stamp("fit-2", routes) == ""
    assert len(sd.routes_stamp("heldout-2", routes)) == 12
    bad = tmp_path / "bad.csv"
    bad.write_text(routes.read_text().replace(",fit-1", ",heldout-1"))
    with pytest.raises(sd.DrawError, match="fit on fit draws only"):
        sd.routes_stamp("heldout-2", bad)
    with pytest.raises(sd.DrawError, match="does not exist"):
        sd.routes_stamp("heldout-2", tmp_path / "absent.csv")


def test_no_measured_loss_of_the_registry_comes_from_a_heldout_draw():
    for spec in all_kernels():
        for loss in spec.loses:
            assert "heldout" not in loss.source and "heldout" not in loss.figure, spec.id


def test_render_puts_fit_and_heldout_draws_side_by_side(tmp_path):
    path, docs, routes = tmp_path / "kernels.csv", tmp_path / "benchmarks.md", tmp_path / "routes.csv"
    bk.write_atomic(_fixture(), path)
    assert rk.main(["--csv", str(path), "--docs", str(docs), "--routes", str(routes)]) == 0
    text = docs.read_text()
    assert "| family | pass | grid (fit) | fit-1 (fit) | heldout-1 (held out) | heldout-1 kernels alone |" in text
    # held out as routed: the routed 20x4000 cell runs eager (0.008) against compile's 0.0075 = 0.9375,
    # a loss; 1100x900 wins; the rms_norm group without compile is left out
    assert "| softmax | fwd | 2/2 = 100% | 1/1 = 100% | 1/2 = 50% | 1/2 = 50% |" in text
    assert "| norm | fwd | — | — | 1/1 = 100% | 1/1 = 100% |" in text
    assert "| softmax | 20×4000 | bfloat16 | fwd | eager (route of ours_triton) | 0.0080 | compile | 0.0075 | 0.938 |" in text
    assert "1 group(s) missing a peer left out" in text
    # the held-out rows were not stamped with these routes: the header says so
    assert "refit since" in text
    groups = rk.groups(kernel_routes.as_routed(_fixture(), read_routes(routes)))
    assert set(groups["draw"]) == {"grid", "fit-1", "heldout-1"}


def _variant(name, kind, status="passed", speedup=None, vs=None, verdict_vs="", calls=9, routed=0, routes=()):
    est = (lambda v: None if v is None else {"value": v, "low": v - 0.01, "high": v + 0.01})
    return {"name": name, "kind": kind, "status": status, "reason": "", "calls": calls,
            "eager_routed_calls": routed, "eager_routes": list(routes),
            "step_s": est(0.02), "speedup": est(speedup), "verdict": "faster",
            "speedup_vs_compile": est(vs), "verdict_vs_compile": verdict_vs}


def _run(set_speedup, vs_compile, verdict_vs, status="passed", calls=9, routed=0):
    payload = {"device": "GPU X", "mode": "train", "dtype": "bfloat16", "notes": ["routes: device-bound step"],
               "variants": [_variant("eager", "eager", "baseline"), _variant("torch.compile", "compile", speedup=1.3),
                            _variant("all together", "combined", status, set_speedup, calls=calls, routed=routed,
                                     routes=("triton.rms_norm loses at 4096x2048",)),
                            _variant("torch.compile + all together", "compile+kernel", speedup=1.35,
                                     vs=vs_compile, verdict_vs=verdict_vs)]}
    return pd.DataFrame(tt.rows_of(payload, "llama_train", "k", {"date": "2026-12-01", "reps": 30}))


def test_train_target_is_decided_from_the_measured_rows():
    assert tt.decide(_run(1.12, 1.02, "faster"))["verdict"] == "met"
    low = tt.decide(_run(1.03, 1.0, "no measurable difference"))
    assert low["verdict"] == "not met" and "1.030x eager < 1.05x" in low["why"]
    slow = tt.decide(_run(1.2, 0.95, "slower"))
    assert slow["verdict"] == "not met" and "0.950x torch.compile alone" in slow["why"]
    away = tt.decide(_run(math.nan, 1.0, "", status="not applied", calls=0, routed=12))
    assert away["verdict"] == "routed away" and "loses at 4096x2048" in away["why"]
    text = tt.render(_run(1.12, 1.02, "faster"))
    assert "**met**" in text and "| all together | combined | passed | 9 (0) |" in text
