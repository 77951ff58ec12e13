"""Device ceilings: peak FLOP/s per compute path, memory bandwidth, L2, SMs.

Two sources, in this order of trust: what `advisor calibrate` measured on this machine
(a JSON cache per device name + driver), then the vendor datasheet table in
data/devices.yaml. `resolve_ceilings` merges them and records which value came from where.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from kernel_advisor.errors import EnvironmentCapabilityError, UserInputError
from kernel_advisor.located_yaml import Located, fail, load_checked

PATHS = ("fp64", "fp32", "tf32", "fp16_tc", "bf16_tc", "fp8_tc")
# Where work on a path runs when the device has no unit for it: TF32 is off before
# Ampere (plain fp32), fp8 matmuls without fp8 tensor cores are upcast to fp16.
FALLBACK = {"tf32": "fp32", "fp16_tc": "fp32", "bf16_tc": "fp32", "fp8_tc": "fp16_tc",
            "fp64": "fp32"}
DEVICES_FILE = Path(__file__).resolve().parent.parent / "data" / "devices.yaml"
TERA = 1e12
GIGA = 1e9
MIB = 2**20

# ---------------------------------------------------------------- the datasheet table

_DEVICE_SCHEMA = {
    "id": "str", "name": "str", "type": "str", "match": ["str"], "source": "str",
    "per_core?": "bool", "peak_tflops": {f"{p}?": "pos" for p in PATHS},
    "memory_gb_per_s": "pos", "l2_mib": "pos", "sm_count": "int?",
    "nvlink_gb_per_s": "pos?", "pcie_gb_per_s": "pos?",
}
_DEVICES_SCHEMA = {"version": "int", "devices": [_DEVICE_SCHEMA]}


@dataclass(frozen=True)
class DeviceSpec:
    """One datasheet entry, converted to SI units."""

    id: str
    name: str
    type: str  # "cuda" or "cpu"
    patterns: tuple[re.Pattern, ...]
    source: str
    peak_flops_per_s: Mapping[str, float]  # only the paths the hardware has
    bandwidth_bytes_per_s: float
    l2_bytes: int
    sm_count: int | None
    nvlink_bytes_per_s: float | None
    pcie_bytes_per_s: float | None
    per_core: bool = False  # CPU: peaks are per core

    def matches(self, device_name: str) -> bool:
        return any(p.search(device_name) for p in self.patterns)


def _optional(value: float | None, scale: float) -> float | None:
    return None if value is None else value * scale


def _device_from_yaml(entry: dict, node: Located, path: Path) -> DeviceSpec:
    if entry["type"] not in ("cuda", "cpu"):
        fail(path, node, f"device '{entry['id']}' has type '{entry['type']}'",
              "use type: cuda or type: cpu")
    try:
        patterns = tuple(re.compile(p, re.IGNORECASE) for p in entry["match"])
    except re.error as e:
        fail(path, node, f"device '{entry['id']}': bad match regex: {e}", "fix the regex")
    peaks = {p: v * TERA for p, v in entry["peak_tflops"].items()}
    return DeviceSpec(
        id=entry["id"], name=entry["name"], type=entry["type"], patterns=patterns,
        source=entry["source"], peak_flops_per_s=MappingProxyType(peaks),
        bandwidth_bytes_per_s=entry["memory_gb_per_s"] * GIGA,
        l2_bytes=int(entry["l2_mib"] * MIB), sm_count=entry["sm_count"],
        nvlink_bytes_per_s=_optional(entry["nvlink_gb_per_s"], GIGA),
        pcie_bytes_per_s=_optional(entry["pcie_gb_per_s"], GIGA),
        per_core=entry.get("per_core", False),
    )


def load_devices(path: Path | str = DEVICES_FILE) -> tuple[DeviceSpec, ...]:
    """Parse a devices table; unknown keys, wrong types and duplicate ids name file:line."""
    return _load_devices_cached(str(Path(path).resolve()))


@lru_cache(maxsize=8)
def _load_devices_cached(path_str: str) -> tuple[DeviceSpec, ...]:
    path = Path(path_str)
    data, root = load_checked(path, _DEVICES_SCHEMA)
    entry_nodes = root.value["devices"].value
    specs, seen = [], set()
    for entry, node in zip(data["devices"], entry_nodes):
        if entry["id"] in seen:
            fail(path, node, f"duplicate device id '{entry['id']}'", "ids must be unique")
        seen.add(entry["id"])
        specs.append(_device_from_yaml(entry, node, path))
    return tuple(specs)


def match_device(name: str, devices: tuple[DeviceSpec, ...] | None = None) -> DeviceSpec | None:
    """The table entry whose patterns match `name` (first in file order), or None."""
    for spec in devices if devices is not None else load_devices():
        if spec.matches(name):
            return spec
    return None


def generic_cpu_spec(devices: tuple[DeviceSpec, ...] | None = None) -> DeviceSpec:
    return next(d for d in (devices or load_devices()) if d.type == "cpu")


# ---------------------------------------------------------------- ceilings


@dataclass(frozen=True)
class Ceilings:
    """What the roofline is drawn against.

    `peak_flops_per_s` has every path in PATHS; a path the device has no unit for holds
    the peak of the path its work falls back to (`effective_path` names it). Fields are
    plain dicts and tuples so dataclasses.asdict gives JSON; treat them as read-only.
    `origins` says per quantity ("bandwidth", "l2", "sm_count", each path) whether it was
    "measured" or taken from the "datasheet".
    """

    device_name: str
    peak_flops_per_s: dict[str, float]
    bandwidth_bytes_per_s: float
    l2_bytes: int
    sm_count: int
    source: str  # "measured" | "datasheet" | "measured+datasheet"
    native_paths: tuple[str, ...]
    origins: dict[str, str]

    def effective_path(self, path: str) -> str:
        if path not in FALLBACK and path not in PATHS:
            raise UserInputError(f"unknown compute path '{path}'", f"use one of {', '.join(PATHS)}")
        while path not in self.native_paths and path in FALLBACK:
            path = FALLBACK[path]
        return path

    def to_dict(self) -> dict:
        """JSON-ready, for run.json's "ceilings" (the same as dataclasses.asdict)."""
        return dataclasses.asdict(self)


def make_ceilings(device_name: str, peaks: Mapping[str, tuple[float, str]],
                  bandwidth: tuple[float, str], l2: tuple[int, str],
                  sm_count: tuple[int, str]) -> Ceilings:
    """Build Ceilings from (value, origin) pairs; fills absent paths by FALLBACK."""
    if "fp32" not in peaks or None in (bandwidth[0], l2[0], sm_count[0]):
        raise EnvironmentCapabilityError(
            f"incomplete ceilings for '{device_name}' (need fp32 peak, bandwidth, L2, SMs)",
            "run `advisor calibrate --force` on this machine")
    full: dict[str, float] = {}
    for path in PATHS:
        effective = path
        while effective not in peaks:
            effective = FALLBACK[effective]
        full[path] = peaks[effective][0]
    origins = {"bandwidth": bandwidth[1], "l2": l2[1], "sm_count": sm_count[1]}
    origins.update({path: origin for path, (_, origin) in peaks.items()})
    kinds = set(origins.values())
    source = kinds.pop() if len(kinds) == 1 else "measured+datasheet"
    return Ceilings(device_name=device_name, peak_flops_per_s=full,
                    bandwidth_bytes_per_s=float(bandwidth[0]), l2_bytes=int(l2[0]),
                    sm_count=int(sm_count[0]), source=source,
                    native_paths=tuple(p for p in PATHS if p in peaks), origins=origins)


# ---------------------------------------------------------------- the calibration cache

CACHE_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class MeasuredCeilings:
    """What `advisor calibrate` measured; None / absent = not measured."""

    device_type: str
    device_name: str
    driver: str
    peak_flops_per_s: dict[str, float]
    bandwidth_bytes_per_s: float | None
    l2_bytes: int | None
    sm_count: int | None
    created: str | None = None  # when it was measured (UTC, ISO 8601)
    # The noisiest benchmark's ± (half the range of its reps over their median); None in
    # caches written before it was recorded.
    spread_frac: float | None = None

    def to_json(self) -> dict:
        return {"schema_version": CACHE_SCHEMA_VERSION, "device_type": self.device_type,
                "device_name": self.device_name, "driver": self.driver,
                "peak_flops_per_s": dict(self.peak_flops_per_s),
                "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
                "l2_bytes": self.l2_bytes, "sm_count": self.sm_count,
                "created": self.created, "spread_frac": self.spread_frac}

    @staticmethod
    def from_json(data: dict) -> "MeasuredCeilings":
        peaks = {p: float(v) for p, v in data["peak_flops_per_s"].items()}
        unknown = set(peaks) - set(PATHS)
        if unknown:
            raise ValueError(f"unknown compute paths {sorted(unknown)}")
        spread = data.get("spread_frac")
        return MeasuredCeilings(
            device_type=str(data["device_type"]), device_name=str(data["device_name"]),
            driver=str(data["driver"]), peak_flops_per_s=peaks,
            bandwidth_bytes_per_s=data["bandwidth_bytes_per_s"],
            l2_bytes=data["l2_bytes"], sm_count=data["sm_count"],
            created=str(data["created"]) if data.get("created") else None,
            spread_frac=float(spread) if spread is not None else None)

    def provenance(self, cache_dir: Path | str | None = None) -> dict:
        """What run.json's ceilings carry as "calibration": when, how noisy, which cache entry."""
        return {"created": self.created, "spread_frac": self.spread_frac,
                "device_name": self.device_name, "driver": self.driver,
                "cache_file": str(cache_file(self.device_name, self.driver, cache_dir))}


def default_cache_dir() -> Path:
    """$ADVISOR_CACHE_DIR/ceilings, else $XDG_CACHE_HOME or ~/.cache + /kernel_advisor/ceilings."""
    if os.environ.get("ADVISOR_CACHE_DIR"):
        return Path(os.environ["ADVISOR_CACHE_DIR"]) / "ceilings"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "kernel_advisor" / "ceilings"


def cache_slug(device_name: str, driver: str) -> str:
    raw = f"{device_name}-{driver}" if driver else device_name
    return re.sub(r"[^a-z0-9._]+", "-", raw.lower()).strip("-") or "unnamed"


def cache_file(device_name: str, driver: str, cache_dir: Path | str | None = None) -> Path:
    return Path(cache_dir or default_cache_dir()) / f"{cache_slug(device_name, driver)}.json"


def read_cache(device_name: str, driver: str, parse, cache_dir: Path | str | None = None):
    """`parse(json)` of the cached calibration for this device + driver, or None when there is none."""
    path = cache_file(device_name, driver, cache_dir)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        if data.get("schema_version") != CACHE_SCHEMA_VERSION:
            return None  # written by another version: recalibrate rather than misread
        return parse(data)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserInputError(f"the calibration cache {path} is unreadable ({e})",
                             "delete it or run `advisor calibrate --force`") from e


def read_measured(device_name: str, driver: str,
                  cache_dir: Path | str | None = None) -> MeasuredCeilings | None:
    """The cached ceilings for this device + driver, or None when there is none."""
    return read_cache(device_name, driver, MeasuredCeilings.from_json, cache_dir)


NOISY_SPREAD_FRAC = 0.10  # reps of one benchmark more than ±10 % apart: the machine was busy


def calibration_provenance(device_name: str, driver: str,
                           cache_dir: Path | str | None = None) -> dict | None:
    """`MeasuredCeilings.provenance()` of this device's cache entry, or None without one."""
    measured = read_measured(device_name, driver, cache_dir)
    return measured.provenance(cache_dir) if measured is not None else None


# ---------------------------------------------------------------- resolution


def _datasheet_values(spec: DeviceSpec, cpu_threads: int | None) -> dict[str, Any]:
    scale = 1
    if spec.per_core:
        import torch  # only CPU entries need the thread count

        scale = cpu_threads or torch.get_num_threads()
    return {"peaks": {p: v * scale for p, v in spec.peak_flops_per_s.items()},
            "bandwidth": spec.bandwidth_bytes_per_s, "l2": spec.l2_bytes,
            "sm_count": spec.sm_count if spec.sm_count is not None else scale}


def _pick(measured: Any, datasheet: Any) -> tuple[Any, str]:
    return (measured, "measured") if measured is not None else (datasheet, "datasheet")


def spec_for(device_name: str, device_type: str = "cuda") -> DeviceSpec | None:
    """The datasheet entry for this device; an unlisted CPU gets the generic CPU entry."""
    spec = match_device(device_name)
    if spec is None and device_type == "cpu":
        spec = generic_cpu_spec()
    return spec


def datasheet_ceilings(device_name: str, device_type: str = "cuda",
                       cpu_threads: int | None = None) -> Ceilings | None:
    """Ceilings from the datasheet alone (None for a device not in the table)."""
    spec = spec_for(device_name, device_type)
    if spec is None:
        return None
    sheet = _datasheet_values(spec, cpu_threads)
    return make_ceilings(device_name, {p: (v, "datasheet") for p, v in sheet["peaks"].items()},
                         bandwidth=(sheet["bandwidth"], "datasheet"),
                         l2=(sheet["l2"], "datasheet"), sm_count=(sheet["sm_count"], "datasheet"))


def resolve_ceilings(device_name: str, driver: str, cache_dir: Path | str | None = None,
                     device_type: str = "cuda", cpu_threads: int | None = None) -> Ceilings:
    """Measured values from the calibrate cache when present, the datasheet for the rest.

    CPU runs (`device_type="cpu"`) whose processor is not in the table use the generic
    CPU entry, scaled by `cpu_threads` (default: torch's intra-op threads).
    """
    spec = spec_for(device_name, device_type)
    measured = read_measured(device_name, driver, cache_dir)
    if spec is None and measured is None:
        raise EnvironmentCapabilityError(
            f"no ceilings for '{device_name}': it is not in {DEVICES_FILE.name} and was "
            "not calibrated",
            "run `advisor calibrate` on this machine (or add the device to devices.yaml)")
    sheet = _datasheet_values(spec, cpu_threads) if spec else {
        "peaks": {}, "bandwidth": None, "l2": None, "sm_count": None}
    m_peaks = dict(measured.peak_flops_per_s) if measured else {}
    peaks = {p: _pick(m_peaks.get(p), sheet["peaks"].get(p))
             for p in PATHS if p in m_peaks or p in sheet["peaks"]}
    return make_ceilings(
        device_name, peaks,
        bandwidth=_pick(measured and measured.bandwidth_bytes_per_s, sheet["bandwidth"]),
        l2=_pick(measured and measured.l2_bytes, sheet["l2"]),
        sm_count=_pick(measured and measured.sm_count, sheet["sm_count"]))


# ------------------------------------------------------------
# Bandwidth of a collective from its size and time: nccl-tests' algbw and busbw formulas.

def algbw_bytes_per_s(size_bytes: float, time_s: float) -> float:
    """Algorithm bandwidth: message size / time (nccl-tests `algbw`); NaN without a time."""
    if not time_s > 0 or math.isnan(size_bytes):
        return math.nan
    return size_bytes / time_s


def busbw_factor(collective: str, group_size: int) -> float:
    """busbw / algbw for `group_size` ranks, so busbw is comparable with the link speed.

    NB: nccl-tests' factors: all-reduce 2(n−1)/n (a reduce-scatter then an all-gather, each
    sending (n−1)/n of the data per rank); all-gather, reduce-scatter, all-to-all (n−1)/n;
    broadcast, reduce, send/recv 1 (every byte crosses one link once).
    """
    n = max(int(group_size), 1)
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def busbw_bytes_per_s(collective: str, size_bytes: float, time_s: float, group_size: int) -> float:
    """Bus bandwidth = algbw × busbw_factor: what each rank's links carried per second."""
    return algbw_bytes_per_s(size_bytes, time_s) * busbw_factor(collective, group_size)
