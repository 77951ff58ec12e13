"""The interconnect ceiling: calibrated all-reduce busbw in the cache, else NVLink/PCIe datasheet."""
import json

import pytest

from kernel_advisor.analyze.ceilings import MeasuredCeilings
from kernel_advisor.distributed.links import NO_CEILING, bus_ceiling, per_direction_bytes_per_s
from kernel_advisor.analyze import calibrate as K

H200 = "NVIDIA H200"


def calibration(allreduce):
    measured = MeasuredCeilings(device_type="cuda", device_name=H200, driver="580.1", peak_flops_per_s={"fp32": 5.1e13},
                                bandwidth_bytes_per_s=4.28e12, l2_bytes=62914560, sm_count=132)
    return K.Calibration(measured, (), "2026-11-21T09:00:00Z", "2.11.0", allreduce)


# 256 MiB in 0.75 ms over 2 GPUs: algbw = 268435456 / 7.5e-4 = 3.579e11 B/s, busbw x 2*1/2 = the same
MEASURED = K.AllReduceMeasurement(world_size=2, size_bytes=268435456, median_s=7.5e-4,
                                  algbw_bytes_per_s=268435456 / 7.5e-4, busbw_bytes_per_s=268435456 / 7.5e-4)


def test_the_cache_keeps_the_allreduce_measurement(tmp_path):
    path = K.write_cache(calibration(MEASURED), tmp_path)
    assert json.loads(path.read_text())["allreduce"]["world_size"] == 2
    assert K.read_calibration(H200, "580.1", tmp_path).allreduce == MEASURED


def test_a_cache_written_before_allreduce_reads_as_unmeasured(tmp_path):
    path = K.write_cache(calibration(None), tmp_path)
    data = json.loads(path.read_text())
    del data["allreduce"]
    path.write_text(json.dumps(data))
    assert K.read_calibration(H200, "580.1", tmp_path).allreduce is None


def test_measured_busbw_is_the_ceiling(tmp_path):
    K.write_cache(calibration(MEASURED), tmp_path)
    ceiling = bus_ceiling("cuda", H200, "580.1", tmp_path)
    assert ceiling.bytes_per_s == pytest.approx(3.579e11, rel=1e-3) and ceiling.source == "measured"


@pytest.mark.parametrize("name,bytes_per_s,link", [
    (H200, 450e9, "nvlink"),  # 900 GB/s both directions / 2
    ("NVIDIA A100-SXM4-80GB", 300e9, "nvlink"),  # 600 / 2
    ("NVIDIA L4", 32e9, "pcie"),  # no NVLink: PCIe 64 / 2
])
def test_datasheet_ceiling_is_per_direction(tmp_path, name, bytes_per_s, link):
    ceiling = bus_ceiling("cuda", name, "", tmp_path)  # empty cache directory
    assert ceiling.bytes_per_s == pytest.approx(bytes_per_s) and ceiling.link == link
    assert ceiling.source == "datasheet"


def test_no_ceiling_for_cpu_or_unknown_devices(tmp_path):
    assert bus_ceiling("cpu", "AMD EPYC", "", tmp_path) == NO_CEILING
    assert bus_ceiling("cuda", "Some Future GPU", "", tmp_path) == NO_CEILING
    assert per_direction_bytes_per_s(900e9) == 450e9


def test_one_gpu_or_cpu_measures_no_allreduce():
    steps = []
    assert K._maybe_allreduce("cpu", lambda *a: steps.append(a)) is None and steps == []
