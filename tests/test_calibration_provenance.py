"""The calibration cache says which device it is for, when it was measured and how noisy it was,
and every run that uses it says so too ("ceilings: measured <date>, ±x %")."""
from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from kernel_advisor.analyze.ceilings import (calibration_provenance, cache_file, default_cache_dir, read_measured,
                                             resolve_ceilings)
from kernel_advisor.analyze import calibrate as K

MIB = 2**20
TINY = K.CalibrationSizes(copy_bytes=1 * MIB, matmul_n=32, fp32_matmul_n=64, fp64_matmul_n=32,
                          warmup=1, reps=3, flush_bytes=1 * MIB)
WHEN = "2026-11-20T08:15:42Z"
MODEL = """
import torch
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(32, 32)
    def forward(self, x):
        return torch.relu(self.lin(x))
def get_inputs():
    return [torch.randn(8, 32)]
"""


@pytest.fixture(scope="module")
def measured_here():
    return K.calibrate("cpu", TINY)


def fixed(cal: K.Calibration, spread: float | None, name: str | None = None, when: str = WHEN) -> K.Calibration:
    """The calibration with a known date and spread (and, optionally, another device's name)."""
    measured = dataclasses.replace(cal.measured, created=when, spread_frac=spread,
                                   device_name=name or cal.measured.device_name)
    steps = tuple(dataclasses.replace(m, spread_frac=spread) for m in cal.measurements)
    return dataclasses.replace(cal, measured=measured, measurements=steps, created=when)


def cli(*args):
    import kernel_advisor.cli

    return CliRunner().invoke(kernel_advisor.cli.app, [str(a) for a in args])


def test_spread_is_half_the_range_over_the_median():
    assert K.spread_frac([1.0, 1.1, 0.9]) == pytest.approx(0.1)
    assert K.spread_frac([2.0, 2.0, 2.0]) == 0.0
    assert K.spread_frac([1.0, 1.0, 1.0, 1.0, 1.6]) == pytest.approx(0.3)  # one slow rep shows


def test_every_benchmark_records_its_spread_and_the_noisiest_speaks(measured_here):
    for m in measured_here.measurements:
        assert m.reps == 3 and m.spread_frac is not None and m.spread_frac >= 0
    assert measured_here.measured.spread_frac == max(m.spread_frac for m in measured_here.measurements)
    assert measured_here.measured.created == measured_here.created


def test_the_cache_round_trips_date_and_spread(measured_here):
    cal = fixed(measured_here, 0.042)
    path = K.write_cache(cal)
    data = json.loads(path.read_text())
    assert data["created"] == WHEN and data["spread_frac"] == 0.042
    assert all(m["spread_frac"] == 0.042 and m["reps"] == 3 for m in data["measurements"])
    back = read_measured(cal.measured.device_name, "")
    assert (back.created, back.spread_frac) == (WHEN, 0.042)
    assert K.read_calibration(cal.measured.device_name, "") == cal
    prov = calibration_provenance(cal.measured.device_name, "")
    assert prov == {"created": WHEN, "spread_frac": 0.042, "device_name": cal.measured.device_name,
                    "driver": "", "cache_file": str(path)}


def test_a_cache_written_before_spreads_still_reads(measured_here):
    path = K.write_cache(fixed(measured_here, 0.05))
    data = json.loads(path.read_text())
    del data["spread_frac"]
    for m in data["measurements"]:
        del m["spread_frac"], m["reps"]
    path.write_text(json.dumps(data))
    back = read_measured(measured_here.measured.device_name, "")
    assert back.created == WHEN and back.spread_frac is None
    assert K.read_calibration(measured_here.measured.device_name, "").measurements[0].spread_frac is None
    result = cli("calibrate", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "spread not recorded" in result.stdout


def test_each_device_and_driver_has_its_own_entry(measured_here):
    here = fixed(measured_here, 0.02)
    other = fixed(measured_here, 0.30, name="Some Other CPU 9000")
    gpu = dataclasses.replace(here, measured=dataclasses.replace(here.measured, device_type="cuda",
                                                                 device_name="NVIDIA H200", driver="580.1"))
    gpu_new_driver = dataclasses.replace(gpu, measured=dataclasses.replace(gpu.measured, driver="590.2"))
    paths = {K.write_cache(c) for c in (here, other, gpu, gpu_new_driver)}
    assert len(paths) == 4 and {p.parent for p in paths} == {default_cache_dir()}
    assert calibration_provenance(here.measured.device_name, "")["spread_frac"] == 0.02
    assert calibration_provenance("Some Other CPU 9000", "")["spread_frac"] == 0.30
    assert cache_file("NVIDIA H200", "580.1") != cache_file("NVIDIA H200", "590.2")
    assert calibration_provenance("NVIDIA H200", "600.0") is None  # a driver not calibrated: datasheet
    assert resolve_ceilings("NVIDIA H200", "600.0").source == "datasheet"


def test_cli_says_where_it_wrote_and_that_other_devices_get_their_own(monkeypatch, measured_here):
    monkeypatch.setattr(K, "CPU_SIZES", TINY)
    monkeypatch.setattr(K, "spread_frac", lambda times: 0.02)
    first = cli("calibrate", "--device", "cpu")
    assert first.exit_code == 0, first.output
    path = cache_file(measured_here.measured.device_name, "")
    assert f"wrote {path}: the entry for the CPU model {measured_here.measured.device_name}" in first.stdout
    assert f"a different device or driver gets its own entry in {path.parent}" in first.stdout
    assert "ceilings: measured+datasheet — measured 20" in first.stdout and "±2.0 %" not in first.stdout
    assert "±2 %" in first.stdout and "spread" in first.stdout  # the table's spread column
    assert "noisy" not in first.stderr
    again = cli("calibrate", "--device", "cpu")
    assert f"read {path}:" in again.stdout and "cached calibration (measured 20" in again.stderr


def test_cli_warns_when_the_calibration_was_noisy(monkeypatch):
    monkeypatch.setattr(K, "CPU_SIZES", TINY)
    monkeypatch.setattr(K, "spread_frac", lambda times: 0.25)
    result = cli("calibrate", "--device", "cpu", "--force")
    assert result.exit_code == 0, result.output
    warning = [line for line in result.stderr.splitlines() if line.startswith("advisor: warning:")]
    assert len(warning) == 1 and "noisy (±25 %" in warning[0] and "advisor calibrate --force" in warning[0]
    data = json.loads(cli("calibrate", "--device", "cpu", "--json").stdout)
    assert data["calibration"]["spread_frac"] == 0.25 and data["from_cache"] is True


def test_profile_says_when_and_how_noisily_its_ceilings_were_measured(measured_here, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    K.write_cache(fixed(measured_here, 0.042))
    model = tmp_path / "tiny.py"
    model.write_text(MODEL)
    result = cli("profile", model, "--device", "cpu", "--steps", "2", "--warmup", "1", "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    flat = " ".join(result.stdout.split())  # rich wraps the summary line
    assert "ceilings: measured 2026-11-20 08:15 UTC, ±4 % (+datasheet)" in flat
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["ceilings"]["calibration"]["created"] == WHEN
    assert meta["ceilings"]["calibration"]["spread_frac"] == 0.042
    assert meta["ceilings"]["calibration"]["cache_file"] == str(cache_file(measured_here.measured.device_name, ""))


def test_profile_without_a_calibration_records_none(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "tiny.py"
    model.write_text(MODEL)
    result = cli("profile", model, "--device", "cpu", "--steps", "2", "--warmup", "1", "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    assert "ceilings: datasheet" in " ".join(result.stdout.split())
    assert "calibration" not in json.loads((tmp_path / "run" / "run.json").read_text())["ceilings"]
