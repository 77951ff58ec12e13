"""--region: a run restricted to one region, with hand-worked numbers."""
import pandas as pd
import pytest

from kernel_advisor.analyze.regions import region_summary, region_view
from kernel_advisor.collect.rundir import LoadedRun
from kernel_advisor.errors import UserInputError


def tiny_run():
    ops = pd.DataFrame({"row_id": [0, 1], "name": ["aten::mm", "aten::add"], "calls": [3, 2],
                        "device_time_total_s": [6e-3, 2e-3], "cpu_time_total_s": [3e-3, 1e-3], "kernel_count": [3, 2],
                        "roofline_per_call_s": [1e-3, 0.5e-3], "region": ["attn", "mlp"]})
    seq = pd.DataFrame({"seq": range(5), "row_id": [0, 0, 1, 0, 1], "region": ["attn", "attn", "mlp", "mlp", "mlp"],
                        "device_time_per_call_s": [2e-3, 2e-3, 1e-3, 2e-3, 1e-3],
                        "name": ["aten::mm"] * 2 + ["aten::add", "aten::mm", "aten::add"]})
    return LoadedRun(path=None, meta={"steps": 1, "total_device_time_s": 8e-3}, ops=ops, sequence=seq)


def test_region_view_recounts_the_rows_inside():
    view = region_view(tiny_run(), "mlp")
    rows = view.ops.set_index("name")
    # mlp holds one mm (2 ms) and two adds (1 ms each)
    assert rows.loc["aten::mm", "calls"] == 1 and rows.loc["aten::mm", "device_time_total_s"] == pytest.approx(2e-3)
    assert rows.loc["aten::add", "calls"] == 2 and rows.loc["aten::add", "device_time_total_s"] == pytest.approx(2e-3)
    # shares stay relative to the whole run: 2 ms of 8 ms = 25 %
    assert rows.loc["aten::mm", "share_pct"] == pytest.approx(25.0)
    # headroom = 2 ms - 1 call * 1 ms = 1 ms
    assert rows.loc["aten::mm", "headroom_total_s"] == pytest.approx(1e-3)
    # cpu time scaled by the share of the row's time inside: 3 ms * (2/6) = 1 ms
    assert rows.loc["aten::mm", "cpu_time_total_s"] == pytest.approx(1e-3)
    assert len(view.sequence) == 3


def test_glob_and_unknown_region():
    assert len(region_view(tiny_run(), "*").sequence) == 5
    with pytest.raises(UserInputError) as e:
        region_view(tiny_run(), "decoder")
    assert "use one of the run's regions: attn, mlp" in e.value.one_line()


def test_region_summary():
    s = region_summary(tiny_run().sequence)
    assert list(s["region"]) == ["attn", "mlp"]  # 2+2 = 4 ms vs 1+2+1 = 4 ms: ties by name
    assert s["device_time_total_s"].sum() == pytest.approx(8e-3)
