"""The datasheet table, its loader, device matching and ceiling resolution."""
import dataclasses
import json
import textwrap

import pytest

from kernel_advisor.analyze import ceilings as C
from kernel_advisor.errors import EnvironmentCapabilityError, UserInputError

# What torch.cuda.get_device_name() returns on each machine (and /proc/cpuinfo on CPUs).
NAMES = [
    ("Tesla V100-SXM2-16GB", "v100-sxm2"),
    ("Tesla V100-SXM2-32GB", "v100-sxm2"),
    ("Tesla V100-PCIE-16GB", "v100-pcie"),
    ("Tesla V100-PCIE-32GB", "v100-pcie"),
    ("Tesla T4", "t4"),
    ("NVIDIA A10G", "a10g"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"),
    ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H100 NVL", "h100-nvl"),
    ("NVIDIA H200", "h200-sxm"),
    ("NVIDIA H200 NVL", "h200-nvl"),
    ("NVIDIA B200", "b200"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("cpu", "cpu-generic"),
    ("AMD EPYC 7B13", "cpu-generic"),
    ("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", "cpu-generic"),
]
# Devices not in the table must not borrow a neighbour's numbers.
UNLISTED = ["NVIDIA A40", "NVIDIA L40", "Tesla V100S-PCIE-32GB", "NVIDIA GeForce RTX 4090 D",
            "AMD Instinct MI300X", "NVIDIA GeForce RTX 3090", "NVIDIA A10"]


@pytest.mark.parametrize("name,device_id", NAMES)
def test_match_device_picks_the_one_entry(name, device_id):
    assert C.match_device(name).id == device_id
    matching = [d.id for d in C.load_devices() if d.matches(name)]
    assert matching == [device_id]  # exactly one entry, so table order never matters


def test_every_table_entry_has_a_tested_name():
    assert {d.id for d in C.load_devices()} == {device_id for _, device_id in NAMES}


@pytest.mark.parametrize("name", UNLISTED)
def test_unlisted_devices_match_nothing(name):
    assert C.match_device(name) is None


def test_datasheet_values_are_converted_to_si():
    h100 = C.match_device("NVIDIA H100 80GB HBM3")
    assert h100.peak_flops_per_s["bf16_tc"] == pytest.approx(989.5e12)  # 1979 sparse / 2
    assert h100.bandwidth_bytes_per_s == pytest.approx(3.35e12)  # 3350 GB/s
    assert h100.l2_bytes == 52_428_800  # 50 MiB = 50 * 1048576
    assert h100.sm_count == 132
    assert h100.nvlink_bytes_per_s == pytest.approx(900e9)
    a100 = C.match_device("NVIDIA A100-SXM4-80GB")
    assert a100.bandwidth_bytes_per_s == pytest.approx(2.039e12)
    assert "fp8_tc" not in a100.peak_flops_per_s  # Ampere has no fp8 tensor cores


@pytest.mark.parametrize("spec", C.load_devices(), ids=lambda d: d.id)
def test_entries_are_dense_and_cited(spec):
    assert spec.source.strip() and "fp32" in spec.peak_flops_per_s
    peaks = spec.peak_flops_per_s
    # Dense tensor-core rates double per halving of precision (tf32 -> bf16 -> fp8);
    # a sparse figure slipped into one column breaks the ratio by 2x. Datasheets round,
    # hence 2%: L40S prints 183 / 362.05 / 733.
    if "tf32" in peaks and "bf16_tc" in peaks:
        assert peaks["bf16_tc"] / peaks["tf32"] == pytest.approx(2.0, rel=0.02)
    if "fp8_tc" in peaks and "bf16_tc" in peaks:
        assert peaks["fp8_tc"] / peaks["bf16_tc"] == pytest.approx(2.0, rel=0.02)


def _write(tmp_path, text):
    path = tmp_path / "devices.yaml"
    path.write_text(textwrap.dedent(text))
    return path


GOOD_ENTRY = """\
version: 1
devices:
  - id: x
    name: X
    type: cuda
    match: ['^X$']
    source: test
    peak_tflops: {fp32: 10}
    memory_gb_per_s: 100
    l2_mib: 1
    sm_count: 4
    nvlink_gb_per_s: null
    pcie_gb_per_s: 64
"""


def test_a_minimal_table_loads(tmp_path):
    (spec,) = C.load_devices(_write(tmp_path, GOOD_ENTRY))
    assert spec.peak_flops_per_s == {"fp32": 10e12} and spec.nvlink_bytes_per_s is None
    assert C.match_device("X", (spec,)) is spec


# The table's own checks; the generic ones (types, keys, syntax, version) are the one
# loader's, tested in tests/test_located_yaml.py on this same entry.
@pytest.mark.parametrize("old,new,line,message", [
    ("match: ['^X$']", "match: ['(']", 3, "bad match regex"),
    ("type: cuda", "type: tpu", 3, "type 'tpu'"),
    ("memory_gb_per_s: 100", "memory_gb_per_s: fast", 9, "must be pos"),
])
def test_yaml_errors_name_file_and_line(tmp_path, old, new, line, message):
    assert old in GOOD_ENTRY
    path = _write(tmp_path, GOOD_ENTRY.replace(old, new))
    with pytest.raises(UserInputError) as e:
        C.load_devices(path)
    assert e.value.problem.startswith(f"{path}:{line}:") and message in e.value.one_line()


def test_duplicate_ids_are_errors(tmp_path):
    body = GOOD_ENTRY + GOOD_ENTRY.split("devices:\n", 1)[1]
    with pytest.raises(UserInputError, match=r":14: duplicate device id 'x'"):
        C.load_devices(_write(tmp_path, body))


# ---------------------------------------------------------------- Ceilings


def test_missing_units_fall_back():
    v100 = C.datasheet_ceilings("Tesla V100-SXM2-16GB")
    assert v100.native_paths == ("fp64", "fp32", "fp16_tc")
    assert v100.effective_path("tf32") == "fp32"  # no TF32 before Ampere
    assert v100.effective_path("bf16_tc") == "fp32"
    assert v100.effective_path("fp8_tc") == "fp16_tc"
    assert v100.peak_flops_per_s["fp8_tc"] == pytest.approx(125e12)
    assert v100.peak_flops_per_s["tf32"] == pytest.approx(15.7e12)
    with pytest.raises(UserInputError):
        v100.effective_path("int8")


def test_ceilings_serialise_to_json():
    h200 = C.datasheet_ceilings("NVIDIA H200")
    data = json.loads(json.dumps(dataclasses.asdict(h200)))
    assert data == json.loads(json.dumps(h200.to_dict())) and data["source"] == "datasheet"
    assert data["peak_flops_per_s"]["bf16_tc"] == pytest.approx(989.5e12)
    assert data["l2_bytes"] == 62_914_560  # 60 MiB


def _cache(tmp_path, name, driver, **measured):
    payload = {"schema_version": 1, "device_type": "cuda", "device_name": name,
               "driver": driver, "peak_flops_per_s": {}, "bandwidth_bytes_per_s": None,
               "l2_bytes": None, "sm_count": None, **measured}
    C.cache_file(name, driver, tmp_path).write_text(json.dumps(payload))


def test_resolve_without_a_cache_is_the_datasheet(tmp_path):
    c = C.resolve_ceilings("NVIDIA H200", "580.1", cache_dir=tmp_path)
    assert c.source == "datasheet" and c.bandwidth_bytes_per_s == pytest.approx(4.8e12)
    assert set(c.origins.values()) == {"datasheet"}


def test_resolve_prefers_measured_values(tmp_path):
    _cache(tmp_path, "NVIDIA H200", "580.1", bandwidth_bytes_per_s=4.282e12,
           peak_flops_per_s={"bf16_tc": 6.8e14, "fp32": 5.1e13}, sm_count=132,
           l2_bytes=62914560)
    c = C.resolve_ceilings("NVIDIA H200", "580.1", cache_dir=tmp_path)
    assert c.source == "measured+datasheet"
    assert c.bandwidth_bytes_per_s == 4.282e12 and c.origins["bandwidth"] == "measured"
    assert c.peak_flops_per_s["bf16_tc"] == 6.8e14 and c.origins["bf16_tc"] == "measured"
    assert c.peak_flops_per_s["fp8_tc"] == pytest.approx(1979e12)  # not measured
    assert c.origins["fp8_tc"] == "datasheet"
    # another driver is another cache entry: the datasheet again
    assert C.resolve_ceilings("NVIDIA H200", "590.0", cache_dir=tmp_path).source == "datasheet"


def test_unlisted_gpu_needs_a_calibration(tmp_path):
    with pytest.raises(EnvironmentCapabilityError) as e:
        C.resolve_ceilings("NVIDIA A40", "", cache_dir=tmp_path)
    assert "advisor calibrate" in e.value.fix
    _cache(tmp_path, "NVIDIA A40", "", bandwidth_bytes_per_s=6.0e11, sm_count=84,
           l2_bytes=6291456, peak_flops_per_s={"fp32": 3.0e13, "bf16_tc": 1.2e14})
    c = C.resolve_ceilings("NVIDIA A40", "", cache_dir=tmp_path)
    assert c.source == "measured" and c.peak_flops_per_s["bf16_tc"] == 1.2e14
    # fp8_tc -> fp16_tc (not measured here) -> fp32
    assert c.effective_path("fp8_tc") == "fp32" and c.peak_flops_per_s["fp8_tc"] == 3.0e13


def test_cpu_runs_use_the_generic_entry_scaled_by_threads(tmp_path):
    c = C.resolve_ceilings("Some Unlisted RISC-V Core", "", cache_dir=tmp_path,
                           device_type="cpu", cpu_threads=4)
    assert c.peak_flops_per_s["fp32"] == pytest.approx(384e9)  # 4 cores * 96 GFLOP/s
    assert c.peak_flops_per_s["bf16_tc"] == pytest.approx(384e9)  # no tensor cores: fp32
    assert c.bandwidth_bytes_per_s == pytest.approx(51.2e9) and c.sm_count == 4


def test_unreadable_cache_says_what_to_do(tmp_path):
    C.cache_file("NVIDIA H200", "1", tmp_path).write_text("{not json")
    with pytest.raises(UserInputError) as e:
        C.resolve_ceilings("NVIDIA H200", "1", cache_dir=tmp_path)
    assert "unreadable" in e.value.problem and "--force" in e.value.fix


def test_cache_location(monkeypatch, tmp_path):
    monkeypatch.delenv("ADVISOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert C.default_cache_dir() == tmp_path / "xdg" / "kernel_advisor" / "ceilings"
    monkeypatch.setenv("ADVISOR_CACHE_DIR", str(tmp_path / "mine"))
    assert C.default_cache_dir() == tmp_path / "mine" / "ceilings"
    assert C.cache_file("NVIDIA H100 80GB HBM3", "580.159.04").name == \
        "nvidia-h100-80gb-hbm3-580.159.04.json"
