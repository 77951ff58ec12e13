"""Every user-visible output on the test fixtures, normalised, so a refactor can prove it changed none.

`outputs(work)` runs, in process, on the CUDA traces under tests/data and on a tiny CPU model:
`import` (JSON and table), `recommend` (JSON, table, markdown), `report` (HTML, with and
without recommendations), `compare` (JSON and table), the run directory's files, the
`--measure` document and its renderings (the search replaced by fixed outcomes: the outputs
are about how measurements are recorded and shown, not about timing), what try-kernel's
prediction reads from recommendations.json, and a CPU `profile`'s structure. Timestamps,
temporary paths and, for the CPU profile, every measured number are normalised away.

tests/test_golden_outputs.py compares them with tests/data/golden_outputs.json (one sha256 per
output). After a change that is meant to change an output:

    COLUMNS=200 python3 tests/golden_outputs.py --write          # refresh the hashes
    COLUMNS=200 python3 tests/golden_outputs.py --dump DIR       # the normalised texts, to diff
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data"
GOLDEN = DATA / "golden_outputs.json"
TRACES = ("cuda_gpt_inference", "cuda_gpt_train", "cuda_gpt_compiled")
TINY_MODEL = '''import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 32)

    def forward(self, x):
        return torch.relu(self.fc(x)).softmax(-1)


def get_inputs():
    return [torch.randn(8, 64)]
'''
_TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?Z?")
_RUN_STAMP = re.compile(r"-\d{8}-\d{6}")


def normalise(text: str, work: Path) -> str:
    """Paths of the run's temporary directory and the checkout become <WORK> and <REPO>;
    timestamps <TIME>; default run names lose their date stamp."""
    text = text.replace(str(work), "<WORK>").replace(str(REPO), "<REPO>")
    return _RUN_STAMP.sub("-<STAMP>", _TIME.sub("<TIME>", text))


def _cli(args: list) -> str:
    from typer.testing import CliRunner

    from kernel_advisor.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exit_code != 0:
        raise AssertionError(f"advisor {' '.join(map(str, args))} exited {result.exit_code}: {result.output}")
    return result.stdout


def _run_files(run: Path) -> dict[str, str]:
    return {name: (run / name).read_text(encoding="utf-8") for name in ("run.json", "ops.csv", "sequence.csv")}


def _imported(out: dict[str, str]) -> dict[str, Path]:
    """Paths relative to the working directory (`data` links to tests/data): a table's column
    widths must not depend on where the checkout or the temporary directory is."""
    runs = {}
    for name in TRACES:
        run = Path(name)
        out[f"{name}/import.json"] = _cli(["import", f"data/{name}.json.gz", "--out", run, "--json"])
        out.update({f"{name}/{k}": v for k, v in _run_files(run).items()})
        runs[name] = run
    out["import-table.txt"] = _cli(["import", f"data/{TRACES[0]}.json.gz", "--out", "table", "--top", "8"])
    return runs


def _recommended(out: dict[str, str], runs: dict[str, Path]) -> None:
    from kernel_advisor.trykernel.results import read_recommended_gains

    for name, run in runs.items():
        out[f"{name}/report-before-recommend.html"] = _report(run, "plain.html")
        for fmt in ("table", "markdown", "json"):
            out[f"{name}/recommend.{fmt}"] = _cli(["recommend", run, "--format", fmt])
        out[f"{name}/recommendations.json"] = (run / "recommendations.json").read_text(encoding="utf-8")
        out[f"{name}/report.html"] = _report(run, "report.html")
        gains = read_recommended_gains(run)
        out[f"{name}/try-kernel-prediction-gains.json"] = json.dumps(gains, indent=1, sort_keys=True)


def _report(run: Path, file: str) -> str:
    _cli(["report", run, "-o", run / file])
    return (run / file).read_text(encoding="utf-8")


def _compared(out: dict[str, str], runs: dict[str, Path]) -> None:
    a, b = runs["cuda_gpt_inference"], runs["cuda_gpt_compiled"]
    out["compare.json"] = _cli(["compare", a, b, "--json"])
    out["compare.txt"] = _cli(["compare", a, b, "--top", "6"])


def fixed_measurement(loaded, mode, names, options=None, busy_frac=None, run_dir=None, progress=None):
    """What the search would return, fixed: the first action faster, the second slower, the third
    failing its gate, the rest not reached; the plan is the first."""
    from kernel_advisor.collect.loop_timing import Estimate
    from kernel_advisor.experiment.engine import SearchResult, PlanResult
    from kernel_advisor.experiment.trial import Outcome
    from kernel_advisor.records.experiments import ExperimentsRecord

    shapes = [Outcome("passed", "", "applied", Estimate(1.25, 1.2, 1.3), 0.2, "faster", Estimate(8e-4, 7.9e-4, 8.1e-4)),
              Outcome("passed", "", "applied", Estimate(0.9, 0.88, 0.92), -0.11, "slower", Estimate(1.1e-3, 1e-3, 1.2e-3)),
              Outcome("failed-gate", "max abs error 3e-2 above 1e-2", "applied", gate={"max_abs": 3e-2})]
    outcomes = {name: shapes[i] for i, name in enumerate(list(dict.fromkeys(names))[:3])}
    plan_actions = tuple(list(outcomes)[:1])
    plan = PlanResult(plan_actions, outcomes[plan_actions[0]] if plan_actions else Outcome("not-applied", "none"))
    trials = tuple({"config": n, "phase": "full", "status": o.status, "reason": o.reason, "applied": o.applied,
                    "speedup": o.to_json()["speedup"], "gain_frac": o.gain_frac, "verdict": o.verdict,
                    "step_s": o.to_json()["step_s"], "windows": 3, "prepare_s": 0.5, "pruned": False}
                   for n, o in outcomes.items())
    record = ExperimentsRecord(True, False, 60.0, 12.0, "back-to-back", {"value": 1e-3, "low": 9.5e-4, "high": 1.05e-3},
                               None, None, trials, {"config": " + ".join(plan_actions), "speedup": 1.25})
    return SearchResult(outcomes, plan, Estimate(1e-3, 9.5e-4, 1.05e-3), None, "float64 eager", "back-to-back steps",
                    record, 10)


def _measured(out: dict[str, str], run: Path) -> None:
    """`recommend --measure`'s document, table and markdown with the search's outcomes fixed."""
    import io

    from rich.console import Console

    import kernel_advisor.recommend.measured as advice
    from kernel_advisor import api
    from kernel_advisor.experiment.search import SearchOptions
    from kernel_advisor.pipeline import measured_document, recommendations_document
    from kernel_advisor.render.recommend_render import measured_markdown, render_measured

    saved = advice.measure_actions
    advice.measure_actions = fixed_measurement
    try:
        loaded = api.load(run)
        report, doc = recommendations_document(loaded, None, 10)
        doc, m = measured_document(report, doc, None, "inference", SearchOptions(budget_s=60.0), 10, ("compile",))
    finally:
        advice.measure_actions = saved
    api.Advice(loaded, report, doc).save()
    out["measured/recommendations.json"] = json.dumps(doc, indent=2, allow_nan=False)
    console = Console(file=io.StringIO(), width=200, color_system=None)
    render_measured(report, m, console)
    out["measured/table.txt"] = console.file.getvalue()
    out["measured/markdown.md"] = measured_markdown(report, m)
    out["measured/report.html"] = _report(run, "measured.html")
    out["measured/frame.csv"] = loaded.recommendations.to_csv(index=False)


def _profiled(out: dict[str, str]) -> None:
    """A CPU profile's structure: which ops, shapes and calls, which keys; no measured number."""
    import pandas as pd

    model = Path("tiny.py")
    model.write_text(TINY_MODEL, encoding="utf-8")
    run = Path("tiny-run")
    doc = json.loads(_cli(["profile", model, "--device", "cpu", "--steps", "2", "--warmup", "1", "--out", run,
                           "--json", "--seed", "0", "--threads", "1"]))
    out["profile/json-keys.txt"] = "\n".join(_key_paths(doc))
    meta = json.loads((run / "run.json").read_text(encoding="utf-8"))
    out["profile/run.json-keys.txt"] = "\n".join(_key_paths(meta))
    ops = pd.read_csv(run / "ops.csv")
    out["profile/ops.txt"] = ops[["name", "kind", "input_shapes", "input_dtypes", "calls"]].sort_values(
        ["name", "input_shapes"]).to_csv(index=False)
    out["profile/ops-columns.txt"] = ",".join(ops.columns)


def _key_paths(doc, prefix: str = "") -> list[str]:
    """Every key path of a JSON document (list items merged), sorted: the shape without the numbers."""
    paths: set[str] = set()
    if isinstance(doc, dict):
        for k, v in doc.items():
            paths.add(prefix + k)
            paths.update(_key_paths(v, prefix + k + "."))
    elif isinstance(doc, list):
        for item in doc:
            paths.update(_key_paths(item, prefix + "[]."))
    return sorted(paths)


def outputs(work: Path) -> dict[str, str]:
    """Every output, by name, normalised."""
    work = Path(work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    (work / "data").symlink_to(DATA, target_is_directory=True)
    os.environ.setdefault("ADVISOR_GAIN_CALIBRATION", "off")
    out: dict[str, str] = {}
    cwd = os.getcwd()
    os.chdir(work)
    try:
        runs = _imported(out)
        _recommended(out, runs)
        _compared(out, runs)
        _measured(out, runs["cuda_gpt_inference"])
        _profiled(out)
    finally:
        os.chdir(cwd)
    return {k: normalise(v, work) for k, v in out.items()}


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="golden-") as tmp:
        os.environ["ADVISOR_HOME"] = str(Path(tmp) / ".advisor")
        os.environ["ADVISOR_CACHE_DIR"] = str(Path(tmp) / "cache")
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.chdir(tmp)
        got = outputs(Path(tmp) / "work")
    if "--write" in argv:
        GOLDEN.write_text(json.dumps({k: digest(v) for k, v in sorted(got.items())}, indent=1) + "\n",
                          encoding="utf-8")
    if "--dump" in argv:
        target = Path(argv[argv.index("--dump") + 1])
        for name, text in got.items():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main(sys.argv[1:]))
