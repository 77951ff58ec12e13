"""`advisor calibrate`: measurement, the cache, the CLI; the GPU check runs only with CUDA."""
import json
import math

import pytest
import torch
from typer.testing import CliRunner

from kernel_advisor.analyze import calibrate as K
from kernel_advisor.analyze.ceilings import match_device, read_measured, resolve_ceilings
from kernel_advisor.collect.options import resolve_device
from kernel_advisor.errors import EnvironmentCapabilityError, UserInputError

MIB = 2**20
TINY = K.CalibrationSizes(copy_bytes=1 * MIB, matmul_n=32, fp32_matmul_n=64, fp64_matmul_n=32,
                          warmup=1, reps=3, flush_bytes=1 * MIB)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ADVISOR_CACHE_DIR", str(tmp_path))
    return tmp_path / "ceilings"


@pytest.fixture(scope="module")
def cpu_calibration():
    steps = []
    cal = K.calibrate("cpu", TINY, on_step=lambda *a: steps.append(a))
    return cal, steps


def test_cpu_calibration_measures_copy_and_matmuls(cpu_calibration):
    cal, steps = cpu_calibration
    by_step = {m.step: m for m in cal.measurements}
    assert list(by_step) == ["copy", "matmul fp32", "matmul fp64"]
    assert by_step["copy"].work == 2 * MIB  # 1 MiB read + 1 MiB written
    assert by_step["matmul fp32"].work == 524_288  # 2 * 64^3
    assert by_step["matmul fp64"].work == 65_536  # 2 * 32^3
    for m in cal.measurements:
        assert m.median_s > 0 and math.isfinite(m.rate_per_s)
        assert m.rate_per_s == pytest.approx(m.work / m.median_s)
    assert [s[:2] for s in steps] == [(0, 3), (1, 3), (2, 3), (3, 3)]
    measured = cal.measured
    assert measured.device_type == "cpu" and measured.driver == ""
    assert measured.bandwidth_bytes_per_s == by_step["copy"].rate_per_s
    assert set(measured.peak_flops_per_s) == {"fp32", "fp64"}
    assert measured.sm_count == torch.get_num_threads()


def test_cache_round_trip_feeds_resolve(cpu_calibration, cache_dir):
    cal, _ = cpu_calibration
    path = K.write_cache(cal)
    assert path.parent == cache_dir and path.suffix == ".json"
    assert [p.name for p in cache_dir.iterdir()] == [path.name]  # no temp file left behind
    assert K.read_calibration(cal.measured.device_name, "") == cal
    assert read_measured(cal.measured.device_name, "") == cal.measured
    c = resolve_ceilings(cal.measured.device_name, "", device_type="cpu")
    assert c.peak_flops_per_s["fp32"] == cal.measured.peak_flops_per_s["fp32"]
    assert c.bandwidth_bytes_per_s == cal.measured.bandwidth_bytes_per_s
    assert c.source == "measured+datasheet" and c.origins["l2"] == "datasheet"


def test_rewrite_replaces_the_cache(cpu_calibration, cache_dir):
    cal, _ = cpu_calibration
    K.write_cache(cal)
    path = K.write_cache(cal)
    assert json.loads(path.read_text())["measurements"][0]["step"] == "copy"
    assert len(list(cache_dir.iterdir())) == 1


def test_median_time_runs_warmup_then_flushes_each_rep():
    events = []
    t_s = K.median_time_s(lambda: events.append("fn"), "cpu", warmup=2, reps=3,
                          flush=lambda: events.append("flush"))
    assert events == ["fn", "fn", "flush", "fn", "flush", "fn", "flush", "fn"]
    assert t_s >= 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_cuda_without_gpu_is_an_environment_error():
    with pytest.raises(EnvironmentCapabilityError) as e:
        K.calibrate("cuda")  # refused before anything is measured (collect/options.py resolve_device)
    assert "--device cpu" in e.value.fix
    assert resolve_device("auto").type == "cpu"


def test_unknown_device_is_bad_input():
    with pytest.raises(UserInputError):
        K.calibrate("tpu")


def test_gpu_plan_follows_capability():
    ident = K.DeviceIdentity("cuda", "Tesla V100-SXM2-16GB", "", 80, 6 * MIB, (7, 0))
    assert [d for d, _ in K.plan_steps(ident, K.GPU_SIZES)] == [
        "copy 1024 MiB", "fp16_tc matmul 8192^3", "fp32 matmul 8192^3", "fp64 matmul 4096^3"]
    ident = K.DeviceIdentity("cuda", "NVIDIA H200", "", 132, 60 * MIB, (9, 0))
    assert [d.split()[0] for d, _ in K.plan_steps(ident, K.GPU_SIZES)] == [
        "copy", "bf16_tc", "fp16_tc", "tf32", "fp32", "fp64"]


# ---------------------------------------------------------------- CLI


@pytest.fixture
def cli(monkeypatch, cache_dir):
    import kernel_advisor.cli  # registers every command on the app

    monkeypatch.setattr(K, "CPU_SIZES", TINY)
    runner = CliRunner()
    return lambda *args: runner.invoke(kernel_advisor.cli.app, ["calibrate", *args])


def test_cli_json_measures_then_reuses_the_cache(cli, cache_dir):
    first = cli("--device", "cpu", "--json")
    assert first.exit_code == 0, first.output
    data = json.loads(first.stdout)
    assert data["from_cache"] is False and data["device"]["type"] == "cpu"
    assert data["calibration"]["measurements"][1]["work"] == 524_288  # 2 * 64^3
    assert data["ceilings"]["bandwidth_bytes_per_s"] == \
        data["calibration"]["bandwidth_bytes_per_s"]
    assert data["datasheet"]["id"] == "cpu-generic"
    assert data["cache_file"].startswith(str(cache_dir))
    again = json.loads(cli("--device", "cpu", "--json").stdout)
    assert again["from_cache"] is True and again["calibration"] == data["calibration"]
    forced = json.loads(cli("--device", "cpu", "--json", "--force").stdout)
    assert forced["from_cache"] is False


def test_cli_table(cli):
    result = cli("--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "copy" in result.stdout and "matmul fp32" in result.stdout
    assert "ceilings: measured+datasheet" in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_cli_cuda_without_gpu_exits_2_with_one_line(cli):
    result = cli("--device", "cuda")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("advisor: error: --device cuda")


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_calibration_is_near_the_datasheet(tmp_path):
    cal = K.calibrate("cuda")
    spec = match_device(cal.measured.device_name)
    if spec is None:
        pytest.skip(f"{cal.measured.device_name} is not in the datasheet table")
    ratio = cal.measured.bandwidth_bytes_per_s / spec.bandwidth_bytes_per_s
    assert 0.5 <= ratio <= 1.1, f"copy at {ratio:.0%} of the datasheet"
    if "bf16_tc" in spec.peak_flops_per_s:
        bf16 = cal.measured.peak_flops_per_s["bf16_tc"] / spec.peak_flops_per_s["bf16_tc"]
        assert bf16 > 0.5, f"bf16 matmul at {bf16:.0%} of the datasheet"
    K.write_cache(cal, tmp_path)
    assert resolve_ceilings(cal.measured.device_name, cal.measured.driver,
                            cache_dir=tmp_path).origins["bandwidth"] == "measured"
