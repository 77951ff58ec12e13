"""Render benchmarks/data/distributed.json into docs/distributed.md's measured section.

    python3 benchmarks/render_distributed.py [--record benchmarks/data/distributed.json] [--docs docs/distributed.md]

The section goes between `<!-- measured:begin -->` and `<!-- measured:end -->`; without those
markers a `## Measured on a multi-GPU host` section holding them is put before `## Limits`
(or at the end). With no record it says so and writes nothing (exit 1): every number in the
section comes from a record that benchmarks/bench_distributed.py measured.
Everything but main() is a pure function of the record (tests/test_bench_distributed.py).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from distributed_record import DEFAULT_PATH, DistributedRecord, RunFigures, read_records  # noqa: E402
from docdata import commit_source, splice_block  # noqa: E402

BEGIN, END = "<!-- measured:begin -->", "<!-- measured:end -->"
TITLE = "Measured on a multi-GPU host"
DASH = "–"


def gbps(value: float | None) -> str:
    return DASH if value is None else f"{value / 1e9:.1f} GB/s"


def pct(frac: float | None) -> str:
    return DASH if frac is None else f"{frac * 100:.0f} %"


def times(value: float | None, digits: int = 2) -> str:
    return DASH if value is None else f"{value:.{digits}f}×"


def ms(seconds: float | None) -> str:
    return DASH if seconds is None else f"{seconds * 1e3:.2f} ms"


def size(nbytes: float | None) -> str:
    if nbytes is None:
        return DASH
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


def link_text(topology: list[str]) -> str:
    """'GPU0–GPU1 NV18' from `nvidia-smi topo -m`'s GPU0 row, '' when it is not there."""
    for line in topology:
        cells = line.split()
        if len(cells) > 2 and cells[0] == "GPU0" and cells[1] == "X":
            return f"GPU0–GPU1 {cells[2]}"
    return ""


def overhead_text(overhead: dict | None) -> str:
    if not overhead or overhead.get("value") is None:
        return DASH
    if overhead.get("low") is None or overhead.get("high") is None:
        return times(overhead["value"], 3)
    return f"{overhead['value']:.3f}× [{overhead['low']:.3f}–{overhead['high']:.3f}]"


def without_trace_path(line: str) -> str:
    """The headline names the trace in the run's temporary directory: of no use in the docs."""
    return re.sub(r" · trace: \S+( \(opens in Perfetto\))?", "", line)


def provenance(rec: DistributedRecord) -> str:
    g, v = rec.gpus, rec.versions
    link = link_text(g.get("topology") or [])
    return (f"**Measured {rec.date_utc[:10]}** on {rec.world_size} × {g['name']} (driver {g.get('driver') or DASH}"
            f"{', ' + link if link else ''}) · torch {v['torch']} · CUDA {v.get('cuda') or DASH} · "
            f"NCCL {v.get('nccl') or DASH} · Triton {v.get('triton') or DASH} · "
            f"{commit_source('benchmarks/data/distributed.json')} · "
            f"`{rec.command}` · `NCCL_NVLS_ENABLE={rec.env.get('NCCL_NVLS_ENABLE')}` · "
            "raw: `benchmarks/data/distributed.json`")


def figures_table(rec: DistributedRecord, run: RunFigures) -> list[str]:
    c = rec.ceiling
    wait = run.straggler.get("max_comm_wait_s")
    rows = [
        ("bus-bandwidth ceiling (`advisor calibrate`: one bf16 all-reduce of "
         f"{size(c.get('size_bytes'))} over {c.get('world_size') or DASH} GPUs)", gbps(c.get("busbw_bytes_per_s"))),
        ("the same size in `benchmarks/busbw_check.py` (independent, nccl-tests method)",
         f"{gbps(c.get('independent_busbw_bytes_per_s'))} (ceiling / check {times(c.get('ratio'))})"),
        (f"all-reduce busbw of the run ({run.allreduce_count or 0:.0f} calls/step of "
         f"{size(run.mean_allreduce_bytes)})",
         f"{gbps(run.busbw_bytes_per_s)}: **{pct(run.busbw_frac_of_ceiling)} of the ceiling**, "
         f"{times(run.busbw_vs_independent)} busbw_check at that size"),
        ("step (unprofiled median) · communication per step", f"{ms(run.step_s)} · {ms(run.comm_time_s)} "
                                                              f"({pct(run.comm_share_of_step)} of the step)"),
        ("the same model as one process on one device (no DDP) · the DDP step over it",
         f"{ms(run.single_process_step_s)} · "
         f"{times(run.step_s / run.single_process_step_s if run.step_s and run.single_process_step_s else None)}"),
        ("comm/compute overlap · exposed communication",
         f"**{pct(run.overlap_frac)}** · {ms(run.exposed_comm_s)} "
         f"({DASH if run.exposed_comm_pct is None else f'{run.exposed_comm_pct:.1f} %'} of the step)"),
        ("slowest/fastest rank step · longest wait for a peer",
         f"{times(run.straggler.get('ratio'), 3)} · {ms(wait)}"
         + (f" (for rank {run.straggler['waited_for_rank']})" if run.straggler.get("waited_for_rank") is not None
            else "")),
        ("profiler overhead (profiled / unprofiled step, rank 0)", overhead_text(run.profiler_overhead)),
        ("rank trace clocks (median end-time offset of matched NCCL calls)",
         DASH if run.clock_skew_us.get("max_abs_us") is None else f"{run.clock_skew_us['max_abs_us']:.1f} µs"),
        ("trace size per rank (gzip)", ", ".join(size(r.get("trace_bytes")) for r in run.ranks)),
    ]
    return ["| figure | value |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]


def rank_table(run: RunFigures) -> list[str]:
    lines = ["| rank | step (profiled median) | comm | waiting | exposed | overlap | profiler overhead |",
             "|---|---|---|---|---|---|---|"]
    for r in run.ranks:
        lines.append(f"| {r['rank']} | {ms(r.get('step_median_s'))} | {ms(r.get('comm_per_step_s'))} | "
                     f"{ms(r.get('comm_wait_per_step_s'))} | {ms(r.get('exposed_comm_per_step_s'))} | "
                     f"{pct(r.get('overlap_frac'))} | {overhead_text(r.get('profiler_overhead'))} |")
    return lines


def busbw_table(check: dict) -> list[str]:
    families = ", ".join(check.get("collectives") or ["all_reduce"])
    lines = [f"`benchmarks/busbw_check.py`: {check['dtype']} {families} (sum) over {check['world_size']} "
             f"ranks ({check['backend']}), {check['warmup']} warm-up + {check['iters']} timed calls per size, "
             f"{'CUDA events' if check.get('device') == 'cuda' else 'perf_counter'}, the slowest rank's mean; "
             "busbw = algbw × 2(n−1)/n for all-reduce, × (n−1)/n for all-gather and reduce-scatter.", "",
             "| collective | message | time | algbw | busbw |", "|---|---|---|---|---|"]
    for r in check["rows"]:
        lines.append(f"| {r.get('collective', 'all_reduce')} | {size(r['size_bytes'])} | {r['time_s'] * 1e6:.1f} µs | "
                     f"{gbps(r['algbw_bytes_per_s'])} | {gbps(r['busbw_bytes_per_s'])} |")
    return lines


def families_table(rec: DistributedRecord) -> list[str]:
    """Every run's collective families against busbw_check's sweep of the same family."""
    rows = [(run, c) for run in rec.runs for c in run.collectives]
    if not rows:
        return []
    lines = ["Each run's collectives against `busbw_check.py`'s sweep of the same family (ceiling: the "
             "family's peak busbw over the sizes swept):", "",
             "| run | wrapper | collective | calls/step × size | busbw | of the family's ceiling | "
             "vs busbw_check at that size |", "|---|---|---|---|---|---|---|"]
    for run, c in rows:
        lines.append(f"| {run.name} | {run.wrapper} | {c['collective']} | {c.get('calls_per_step') or 0:.0f} × "
                     f"{size(c.get('bytes_per_call'))} | {gbps(c.get('busbw_bytes_per_s'))} | "
                     f"{pct(c.get('busbw_frac_of_family_ceiling'))} ({gbps(c.get('family_ceiling_bytes_per_s'))}) | "
                     f"{times(c.get('busbw_vs_independent'))} |")
    return lines


def interval_text(e: dict | None) -> str:
    if not e or e.get("value") is None:
        return DASH
    if e.get("low") is None or e.get("high") is None:
        return f"{e['value']:.2f}×"
    return f"{e['value']:.2f}× [{e['low']:.2f}–{e['high']:.2f}]"


def actions_table(rec: DistributedRecord) -> list[str]:
    """Data-parallel actions `recommend --measure` measured on the ranks: predicted beside measured."""
    rows = [(run, a) for run in rec.runs for a in run.measured_actions]
    if not rows:
        return []
    lines = ["Data-parallel actions `advisor recommend --measure` measured on the run's ranks (gated on every "
             "rank against the run's own wrapping, timed in lockstep back-to-back windows; predicted: the rule's "
             "estimate, – where no rule named the action):", "",
             "| run | action | predicted % step | measured % step | speedup [95 % CI] | result |",
             "|---|---|---|---|---|---|"]
    for run, a in rows:
        m = a.get("measured") or {}
        result = m.get("verdict") if m.get("status") == "passed" else f"{m.get('status')}: {m.get('reason', '')}"
        lines.append(f"| {run.name} | `{a['action']}` | {pct(a.get('predicted_gain_frac'))} | "
                     f"{pct(m.get('gain_frac'))} | {interval_text(m.get('speedup'))} | {result} |")
    return lines


def other_runs(rec: DistributedRecord) -> list[str]:
    lines = []
    for run in rec.runs:
        if run.name == rec.primary_run:
            continue
        prefetch = (f", all-gather overlap (prefetch) {pct(run.allgather_overlap_frac)}"
                    if run.allgather_overlap_frac is not None else "")
        lines.append(f"- {run.name} (`{run.model}`, {run.wrapper}): step {ms(run.step_s)}, communication "
                     f"{pct(run.comm_share_of_step)} of it, overlap {pct(run.overlap_frac)}{prefetch}, exposed "
                     f"{ms(run.exposed_comm_s)}, straggler ratio {times(run.straggler.get('ratio'), 3)}, busbw "
                     f"{gbps(run.busbw_bytes_per_s)} ({pct(run.busbw_frac_of_ceiling)} of the ceiling), "
                     f"profiler overhead {overhead_text(run.profiler_overhead)}.")
    return lines


def render(rec: DistributedRecord) -> str:
    run = rec.primary()
    command = f"advisor profile {run.model} {' '.join(run.options)} --nproc-per-node {rec.world_size}"
    parts = [provenance(rec), "", f"The merged report's headline (`{command}`):", "", "```",
             *map(without_trace_path, run.headline), "```", "", *figures_table(rec, run), "", *rank_table(run), ""]
    multi_gpu = [r for r in run.recommendations if r.startswith("dist-")]
    if run.recommendations:
        fired = ", ".join(f"`{r}`" for r in multi_gpu) or "none"
        parts += [f"Multi-GPU rules `advisor recommend` fires on the run: {fired} (and "
                  f"{len(run.recommendations) - len(multi_gpu)} single-device rules).", ""]
    others = other_runs(rec)
    if others:
        parts += ["Other runs of the same call:", "", *others, ""]
    for table in (families_table(rec), actions_table(rec)):
        parts += [*table, ""] if table else []
    parts += busbw_table(rec.busbw_check)
    return "\n".join(parts)


def render_all(records: list[DistributedRecord]) -> str:
    """The fewest-GPU record in full; each other GPU count under its own heading."""
    blocks = [render(records[0])]
    for rec in records[1:]:
        blocks += ["", f"### {rec.world_size} GPUs", "", render(rec)]
    return "\n".join(blocks)


def splice(text: str, block: str) -> str:
    return splice_block(text, block, BEGIN, END, TITLE, before="## Limits")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", type=Path, default=DEFAULT_PATH)
    ap.add_argument("--docs", type=Path, default=REPO / "docs" / "distributed.md")
    args = ap.parse_args(argv)
    if not args.record.is_file():
        print(f"render_distributed: no record at {args.record}; nothing written. Run "
              "benchmarks/bench_distributed.py on a multi-GPU host first.")
        return 1
    block = render_all(read_records(args.record))
    args.docs.write_text(splice(args.docs.read_text() if args.docs.is_file() else "", block))
    print(block)
    print(f"wrote the measured section of {args.docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
