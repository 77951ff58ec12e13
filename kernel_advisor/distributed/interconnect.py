"""The bus-bandwidth ceiling collectives are judged against: measured, else the datasheet."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernel_advisor.hardware.calibrate import read_calibration
from kernel_advisor.analyze.ceilings import match_device


@dataclass(frozen=True)
class BusCeiling:
    bytes_per_s: float | None  # per direction, comparable with nccl-tests busbw; None = unknown
    link: str  # "nvlink", "pcie", "all-reduce (calibrated)" or "none"
    source: str  # "measured", "datasheet" or "none"

    def to_json(self) -> dict:
        return {"bytes_per_s": self.bytes_per_s, "link": self.link, "source": self.source}


NO_CEILING = BusCeiling(None, "none", "none")


def per_direction_bytes_per_s(bidirectional_bytes_per_s: float) -> float:
    """Datasheets add both directions (H200: 18 NVLinks x 25 GB/s x 2 = 900 GB/s).

    NB: busbw counts the bytes each rank sends, one direction, so its ceiling is half the
    datasheet figure (450 GB/s on an H200).
    """
    return bidirectional_bytes_per_s / 2


def bus_ceiling(device_type: str, device_name: str, driver: str,
                cache_dir: Path | str | None = None) -> BusCeiling:
    """`advisor calibrate`'s all-reduce busbw when cached, else NVLink, else PCIe (datasheet).

    CPU runs (gloo over sockets) have no ceiling in the table.
    """
    if device_type != "cuda":
        return NO_CEILING
    cal = read_calibration(device_name, driver, cache_dir)
    if cal is not None and cal.allreduce is not None:
        # NB: busbw is close to independent of the rank count on a switched fabric
        # (that is what it is for), so a calibration on n GPUs serves runs on m.
        return BusCeiling(cal.allreduce.busbw_bytes_per_s, "all-reduce (calibrated)", "measured")
    spec = match_device(device_name)
    if spec is not None and spec.nvlink_bytes_per_s:
        return BusCeiling(per_direction_bytes_per_s(spec.nvlink_bytes_per_s), "nvlink", "datasheet")
    if spec is not None and spec.pcie_bytes_per_s:
        return BusCeiling(per_direction_bytes_per_s(spec.pcie_bytes_per_s), "pcie", "datasheet")
    return NO_CEILING
