"""run.json: the record every run directory holds (`advisor profile`, `advisor import`, and a
distributed profile, which writes rank 0's with a "distributed" key added).

Schema 2 (the tables' column names carry their scope: records/columns.py). A reader takes a
run of schema 2 or of an older schema in READABLE_VERSIONS (collect/rundir.py renames its
columns and keys by records/columns.py's RENAMED_SINCE), and refuses a newer or unknown
schema_version, a file that is not a JSON object, and a key of the wrong type, each with one
line naming the file. A key left out is not damage: runs written before a key was added
(step_s, steady_state, ceilings, coverage, ...) lack it and readers fall back
(collect/step_time.py works the step time out of the step times). Every writer builds the
document with `RunRecord.build`, which insists on the keys every writer sets (WRITTEN), and
writes its `to_json`.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from kernel_advisor.records import columns
from kernel_advisor.records.base import RecordError, strict

SCHEMA_VERSION = 2
# Schemas a reader still loads: 1 wrote the columns under the names RENAMED_SINCE[1] lists.
READABLE_VERSIONS = (1, 2)
FILE = "run.json"
DAMAGED_FIX = "profile again to write a fresh run"
SCHEMA_FIX = "profile the model again with this version"
NEWER_FIX = "upgrade kernel_advisor to read it, or profile the model again with this version"

_NUMBER = (int, float)
_NONE = (type(None),)
# The JSON types readers rely on, per key; a key absent is tolerated (readers fall back), a
# key of another type is damage. bool is an int to Python, never a number or a count here.
KEY_TYPES: Mapping[str, tuple[type, ...]] = {
    "tool_version": (str,), "created": (str,), "source": (str,),
    "steps": (int,), "args": (dict,), "model": (dict,), "device": (dict,), "settings": (dict,),
    "versions": (dict,), "files": (dict,), "step_wall_s": (list,), "unprofiled_step_wall_s": (list,),
    "trace_step_wall_s": (list,), "step_device_time_s": (list,),
    "total_device_time_s": _NUMBER, "device_busy_s": _NUMBER, "device_busy_frac": _NUMBER,
    "nonfinite_outputs": (list,), "step_markers": (str, *_NONE),
    "step_s": (dict, *_NONE), "steady_state": (dict, *_NONE), "profiler_overhead": (dict, *_NONE),
    "noise": (dict, *_NONE),
    "profiler_overhead_ratio": (*_NUMBER, *_NONE), "kernel_timing": (dict,), "peak_memory_bytes": (int, *_NONE),
    "peak_memory_kind": (str,), "shapes_recorded": (bool,),
    "ceilings": (dict,), "coverage": (dict,), "distributed": (dict,),
}
# Lists whose every item is a number of seconds.
NUMBER_LISTS = ("step_wall_s", "unprofiled_step_wall_s", "trace_step_wall_s", "step_device_time_s")
# What every writer sets (collect/run_meta.py for profile and import, so a distributed run's
# rank 0 too), each since the first run of schema 1. The keys added since (step_markers,
# step_s, steady_state, profiler_overhead, kernel_timing, shapes_recorded, ceilings, coverage,
# distributed) are optional to readers.
WRITTEN = ("tool_version", "created", "source", "args", "steps", "trace_step_wall_s", "step_device_time_s",
           "total_device_time_s", "device_busy_s", "device_busy_frac", "files", "model", "device", "versions",
           "settings", "step_wall_s", "unprofiled_step_wall_s", "profiler_overhead_ratio", "peak_memory_bytes",
           "nonfinite_outputs")


def wrong_types(values: Mapping[str, Any]) -> list[str]:
    """The keys of `values` that do not hold the type KEY_TYPES gives them."""
    wrong = [k for k, types in KEY_TYPES.items() if k in values and not _is(values[k], types)]
    wrong += [k for k in NUMBER_LISTS if k not in wrong and isinstance(values.get(k), list)
              and not all(_is(v, _NUMBER) for v in values[k])]
    return wrong


# Seconds and counts that no profile writes negative or non-finite; every "% of the step"
# divides by step_s, so it must be positive.
NON_NEGATIVE = ("total_device_time_s", "device_busy_s", "device_busy_frac", "profiler_overhead_ratio")
STEP_FIGURES = ("value", "low", "high")


def impossible_values(values: Mapping[str, Any]) -> list[str]:
    """The keys of `values` (types already right) whose numbers no profile writes."""
    bad = [k for k in NON_NEGATIVE if _is(values.get(k), _NUMBER) and not _finite_at_least(values[k], 0)]
    bad += [k for k in NUMBER_LISTS if isinstance(values.get(k), list)
            and not all(_finite_at_least(v, 0) for v in values[k])]
    if _is(values.get("steps"), (int,)) and values["steps"] < 1:
        bad.append("steps")
    step = values.get("step_s")
    if isinstance(step, dict):
        bad += [f"step_s.{k}" for k in STEP_FIGURES
                if k in step and step[k] is not None and not (_is(step[k], _NUMBER) and _finite_at_least(step[k], 0)
                                                              and step[k] > 0)]
    return bad


def _finite_at_least(value: Any, low: float) -> bool:
    return math.isfinite(value) and value >= low


def _is(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in types
    return isinstance(value, types)


@dataclass(frozen=True)
class RunRecord:
    """run.json's keys as written, schema_version aside; every key of KEY_TYPES has its type."""

    values: Mapping[str, Any]
    schema_version: int = SCHEMA_VERSION  # the schema the file declared (READABLE_VERSIONS)

    def __post_init__(self) -> None:
        wrong = wrong_types(self.values)
        if wrong:
            raise ValueError(f"run.json keys of the wrong type: {', '.join(wrong)}")

    @classmethod
    def build(cls, meta: Mapping[str, Any]) -> "RunRecord":
        """A writer's record: every key of WRITTEN there, each of the right type (else ValueError:
        a writer that left one out is a bug, not the user's input)."""
        missing = [k for k in WRITTEN if k not in meta]
        if missing:
            raise ValueError(f"run.json written without {', '.join(missing)}")
        return cls({k: v for k, v in strict(dict(meta)).items() if k != "schema_version"})

    def to_json(self) -> dict[str, Any]:
        """The document: schema_version first, NaN and ±Inf as null (strict JSON)."""
        return strict({"schema_version": self.schema_version, **self.values})

    @classmethod
    def from_json(cls, doc: Any, source: str | Path = FILE) -> "RunRecord":
        """The record in `doc`, or one RecordError naming `source` and what is wrong."""
        if not isinstance(doc, dict):
            raise RecordError(f"{source} is not a run.json object", DAMAGED_FIX)
        version = _readable_version(doc.get("schema_version"), source)
        wrong = wrong_types(doc)
        if wrong:
            raise RecordError(f"{source} is damaged: {', '.join(wrong)} {'has' if len(wrong) == 1 else 'have'} "
                              "the wrong type", DAMAGED_FIX)
        impossible = impossible_values(doc)
        if impossible:
            raise RecordError(f"{source} is damaged: {', '.join(impossible)} "
                              f"{'holds' if len(impossible) == 1 else 'hold'} an impossible value "
                              "(negative, infinite or not a number)", DAMAGED_FIX)
        return cls({k: v for k, v in doc.items() if k != "schema_version"}, version)

    @classmethod
    def read(cls, path: Path) -> "RunRecord":
        """run.json at `path`; a file that is not JSON is 'corrupted', one RecordError like the rest."""
        path = Path(path)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RecordError(f"{path} is corrupted ({e})", DAMAGED_FIX) from None
        except RecursionError:  # `[[[[…]]]]` deeper than Python's parser can follow
            raise RecordError(f"{path} is corrupted (JSON nested too deeply to read)", DAMAGED_FIX) from None
        return cls.from_json(doc, path)

    def meta(self) -> "RunMeta":
        """The document, schema_version the one it declared."""
        return RunMeta({"schema_version": self.schema_version, **self.values})

    def current_meta(self) -> "RunMeta":
        """The document under this schema's names (an older run's renamed keys renamed:
        records/columns.py), schema_version this schema's."""
        meta = self.meta()
        coverage = meta.coverage
        if isinstance(coverage.get("unmodelled"), list):
            renamed = columns.renames(self.schema_version, columns.UNMODELLED)
            meta = meta.with_keys(coverage={**coverage, "unmodelled": columns.renamed_items(coverage["unmodelled"],
                                                                                             renamed)})
        return meta.with_keys(schema_version=SCHEMA_VERSION)


def _readable_version(version: Any, source: str | Path) -> int:
    """The run schema `version` when this advisor reads it, else one RecordError."""
    if type(version) is int and version in READABLE_VERSIONS:  # not True, not 1.0
        return version
    if type(version) is int and version > SCHEMA_VERSION:
        raise RecordError(f"{source} was written with run schema {version}, newer than this advisor reads "
                          f"(up to {SCHEMA_VERSION})", NEWER_FIX)
    raise RecordError(f"{source} was written with run schema {version!r}; this advisor reads run schemas "
                      f"{', '.join(map(str, READABLE_VERSIONS))}", SCHEMA_FIX)


def _section(doc: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = doc.get(key)
    return dict(value) if isinstance(value, Mapping) else {}


class RunMeta(dict):
    """run.json as its readers use it: the document (a dict, as `Run.meta` always was) with its
    keys as typed attributes, so no reader outside records/ looks a key up by string.

    A section left out (a run written before it existed, an imported trace) reads as an empty
    dict, a figure left out as None: the fall-backs every reader used to spell out itself."""

    @classmethod
    def of(cls, meta: Mapping[str, Any] | None) -> "RunMeta":
        """`meta` itself when it is one already, else a RunMeta over a copy of it."""
        return meta if isinstance(meta, RunMeta) else cls(meta or {})

    # Sections (objects in run.json)
    @property
    def model(self) -> dict[str, Any]:
        return _section(self, "model")

    @property
    def args(self) -> dict[str, Any]:
        """The options the run was made with (profile / import)."""
        return _section(self, "args")

    @property
    def device(self) -> dict[str, Any]:
        return _section(self, "device")

    @property
    def settings(self) -> dict[str, Any]:
        return _section(self, "settings")

    @property
    def versions(self) -> dict[str, Any]:
        return _section(self, "versions")

    @property
    def ceilings(self) -> dict[str, Any]:
        return _section(self, "ceilings")

    @property
    def coverage(self) -> dict[str, Any]:
        return _section(self, "coverage")

    @property
    def distributed(self) -> dict[str, Any]:
        return _section(self, "distributed")

    @property
    def rank(self) -> dict[str, Any]:
        """A rank directory's rank.json: this rank's own section (rank, backend, wrapper, overlap)."""
        return _section(self, "rank")

    @property
    def files(self) -> dict[str, Any]:
        return _section(self, "files")

    @property
    def is_distributed(self) -> bool:
        return "distributed" in self

    # Where the run came from
    @property
    def model_file(self) -> str | None:
        return self.model.get("file")

    @property
    def model_entry(self) -> str | None:
        return self.model.get("entry")

    @property
    def device_type(self) -> str | None:
        return self.device.get("type")

    @property
    def device_name(self) -> str | None:
        return self.device.get("name")

    @property
    def source(self) -> str | None:
        """"profile" or "import"."""
        return self.get("source")

    @property
    def created(self) -> str | None:
        return self.get("created")

    @property
    def mode(self) -> str | None:
        """inference | train, as the options gave it."""
        return self.args.get("mode")

    # Counts and figures
    @property
    def steps(self) -> int | None:
        return self.get("steps")

    @property
    def step_count(self) -> int:
        """The profiled steps every total is divided by: at least 1."""
        return max(int(self.get("steps") or 1), 1)

    @property
    def total_device_time_s(self) -> float:
        return float(self.get("total_device_time_s") or 0.0)

    @property
    def device_busy_s(self) -> float | None:
        return self.get("device_busy_s")

    @property
    def device_busy_frac(self) -> float | None:
        return self.get("device_busy_frac")

    @property
    def peak_memory_bytes(self) -> int | None:
        return self.get("peak_memory_bytes")

    @property
    def nonfinite_outputs(self) -> list:
        return list(self.get("nonfinite_outputs") or [])

    @property
    def step_markers(self) -> str | None:
        return self.get("step_markers")

    @property
    def records_step_markers(self) -> bool:
        """Whether the run says which step markers it found (runs before that key did not)."""
        return "step_markers" in self

    @property
    def shapes_recorded(self) -> bool | None:
        return self.get("shapes_recorded")

    # Timing (collect/step_time.py reads these into estimates)
    @property
    def step_s(self) -> dict | None:
        return self.get("step_s")

    @property
    def step_wall_s(self) -> list | None:
        return self.get("step_wall_s")

    @property
    def unprofiled_step_wall_s(self) -> list | None:
        return self.get("unprofiled_step_wall_s")

    @property
    def loop_step_s(self) -> list | None:
        return self.get("loop_step_s")

    @property
    def profiler_overhead(self) -> dict | None:
        return self.get("profiler_overhead")

    @property
    def steady_state(self) -> dict | None:
        return self.get("steady_state")

    @property
    def kernel_timing(self) -> dict | None:
        return self.get("kernel_timing")

    @property
    def noise(self) -> dict | None:
        return self.get("noise")

    def with_keys(self, **values: Any) -> "RunMeta":
        """A copy with `values` set (a writer adding what a later stage worked out)."""
        return RunMeta({**self, **values})
