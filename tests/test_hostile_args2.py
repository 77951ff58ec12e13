"""Arguments that are legal but looked hostile: region names with quotes or brackets, and a
try-kernel --impl that returns its tensor in a tuple."""
from __future__ import annotations

import textwrap

import pytest

from battery.checks import assert_result_fails
from battery.hostile import fails_cleanly, invoke

REGIONS = textwrap.dedent("""
    import torch
    import torch.nn as nn
    from torch.profiler import record_function


    class Model(nn.Module):
        def forward(self, x):
            with record_function('say "hi"'):
                x = x.softmax(-1)
            with record_function("blocks[0]"):
                x = x * 2
            with record_function("blocks0"):
                x = x + 1
            return x


    def get_inputs():
        return [torch.randn(4, 8)]
""")


@pytest.fixture(scope="module")
def region_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("regions")
    (tmp / "regions.py").write_text(REGIONS)
    result = invoke("profile", tmp / "regions.py", "--steps", "1", "--warmup", "0", "--json", "--out", tmp / "run")
    return tmp / "run", result


def region_names(run_dir) -> set[str]:
    from kernel_advisor.collect.rundir import load_run

    return set(load_run(run_dir).sequence["region"])


def test_a_region_name_with_a_quote_is_no_damaged_trace(region_run):
    run_dir, result = region_run
    assert result.exit_code == 0, result.stderr[-3000:]
    assert 'say "hi"' in region_names(run_dir)


def test_the_kineto_name_repair_keeps_valid_json_alone():
    from kernel_advisor.collect.trace.pool import _events

    valid = b'{"ph": "X", "name": "a\\"b", "pid": 1}'
    assert _events(valid)[0]["name"] == 'a"b'
    kineto = b'{"ph": "X", "name": "say "hi" / b",\n  "pid": 1}'
    assert _events(kineto)[0]["name"] == 'say "hi" / b'


@pytest.mark.parametrize("region, ops", [("blocks[0]", {"aten::mul"}), ("blocks0", {"aten::add"}),
                                         ("blocks*", {"aten::mul", "aten::add"}), ('say "hi"', {"aten::softmax"})])
def test_an_exact_region_name_wins_over_its_glob_reading(region_run, region, ops):
    from kernel_advisor.analyze.regions import region_view
    from kernel_advisor.collect.rundir import load_run

    run_dir, _ = region_run
    names = set(region_view(load_run(run_dir), region).ops["name"])
    assert names == ops, names


def test_a_region_glob_matching_nothing_is_still_one_line(region_run):
    run_dir, _ = region_run
    fails_cleanly(invoke("recommend", run_dir, "--region", "nothing[xy]"), 1, ("no op ran in a region",))


IMPL_TUPLE = textwrap.dedent("""
    import torch


    def softmax(x, dim, half_to_float):
        return (torch.softmax(x, dim),)
""")
SOFTMAX_MODEL = textwrap.dedent("""
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, x):
            return torch.softmax(x, -1) * 2


    def get_inputs():
        return [torch.randn(4, 8)]
""")


def test_an_impl_returning_a_one_tuple_fails_the_gate_naming_the_kernel(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text(SOFTMAX_MODEL)
    (tmp_path / "mine.py").write_text(IMPL_TUPLE)
    result = invoke("try-kernel", tmp_path / "model.py", "--impl", "mine.py:softmax", "--op", "aten::_softmax",
                    "--check-only", "--draws", "1", "--no-compile", "--json")
    line = assert_result_fails(result, 3, ("mine.py:softmax FAILED", "returned a tuple of 1 tensor"))
    assert "model.py" not in line.split(" — ")[0]
    assert result.stderr.count("\n") == 1, result.stderr


def test_the_gate_names_a_one_tuple_for_a_one_tensor_op():
    import torch

    from kernel_advisor.trykernel.gate import check_call_output

    t = torch.ones(2)
    problem, fatal = check_call_output((t,), t, (1e-5, 1e-8))
    assert fatal and "tuple of 1 tensor" in problem
    assert check_call_output(t, t, (1e-5, 1e-8)) == ("", False)
