"""A budgeted search over configurations, as an autotuner runs one (successive halving).

1. Singles (singles, below): every configuration is prepared, gated, and timed *short* (a few
   windows) interleaved with eager, cheapest first; one that would not fit what is left of
   the budget is skipped and says so.
2. Combinations built from the singles' results, the same way.
3. The finalists (the best few by the short timing, and any whose interval reaches the
   best's) are timed *long*, interleaved with eager, with the reserve the budget kept for it;
   the rest are pruned with the figure that pruned them. The plan is the fastest finalist.

Compiled variants stay alive between the rounds (no recompiling); Dynamo's cache is reset
once, at the end. Every decided trial is reported to `on_change`, so a caller can write
results as they come.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import statistics
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import torch

from kernel_advisor.actions import NONE, get_action, is_known
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.loop_timing import (Estimate, autorange_steps, interleaved_windows_s, median_ci,
                                                regime_label, speedup_ci, synchronized_s, verdict)
from kernel_advisor.collect.runner import timed_loop
from kernel_advisor.experiment.trial import Budget, Outcome, Progress, Trial, gate_trials, prepare_trial
from kernel_advisor.experiment.variant import EAGER, Config, conflicts, make_config
from kernel_advisor.trykernel import compiled as kernel_compiled
from kernel_advisor.trykernel.capture import GateDraws

SHORT_WINDOWS = 5
LONG_WINDOWS = 30
MIN_LONG_WINDOWS = 8
FINALISTS = 3
SYNC_SAMPLES = 7


@dataclass(frozen=True)
class SearchOptions:
    draws: int = 2  # fresh input draws the gate checks
    warmup: int = 3  # untimed steps per variant before each timing
    short_windows: int = SHORT_WINDOWS
    long_windows: int = LONG_WINDOWS
    finalists: int = FINALISTS
    budget_s: float | None = None
    seed: int = 0
    compile_modes: tuple[str, ...] | None = None  # None: every mode of the device (singles)
    combinations: bool = True  # False: the singles only


@dataclass
class SearchState:
    """Everything the search found so far; complete or not, it is a valid result."""

    trials: list[Trial] = field(default_factory=list)
    eager_s: Estimate | None = None  # back-to-back, from the last timing eager took part in
    eager_sync_s: Estimate | None = None  # synchronized steps
    steps_per_window: int = 0
    regime: str = ""
    plan: Trial | None = None
    finished: bool = False


def search(loaded: LoadedModel, mode: str, names: Sequence[str], options: SearchOptions, reference,
           busy_frac: float | None, on_change: Callable[[SearchState], None], progress: Progress) -> SearchState:
    """Run the search; `on_change` sees the state after every decision. The state is returned
    complete, or raised through (KeyboardInterrupt) with `on_change` already called on it."""
    budget = Budget(options.budget_s)
    state = SearchState()
    draws = GateDraws(loaded, mode, reference, options.draws, options.seed)
    with kernel_compiled.recompile_room(16):
        try:
            first = _explore(loaded, mode, singles(loaded, names, options.compile_modes), "single", options, draws, budget,
                             busy_frac, state, on_change, progress)
            combos = combinations({t.config: t.outcome for t in first if t.outcome}, loaded) \
                if options.combinations else []
            _explore(loaded, mode, combos, "combination", options, draws, budget, busy_frac, state,
                     on_change, progress)
            _final(loaded, mode, options, budget, state, on_change, progress)
            state.finished = True
        finally:
            for t in state.trials:
                t.close()
            on_change(state)
    return state


def _explore(loaded, mode, configs: Sequence[Config], phase: str, options: SearchOptions, draws: GateDraws,
             budget: Budget, busy_frac, state: SearchState, on_change, progress: Progress) -> list[Trial]:
    """Prepare, gate and short-time `configs`, cheapest first, each only when it fits."""
    done: list[Trial] = []
    for config in sorted(configs, key=lambda c: budget.expected_compile_s(c.compile)):
        cost = budget.expected_compile_s(config.compile) + _short_cost_s(state, options)
        if not budget.fits(cost):
            trial = Trial(config, phase, outcome=Outcome("not-measurable", budget.out_of_time_reason(cost)))
        else:
            progress(f"{phase}: {config.name}", 0, 1)
            trial = prepare_trial(loaded, mode, config, phase, busy_frac)
            if trial.pending:
                gate_trials(loaded, mode, [trial], draws, budget, lambda *a: None)
                _learn_window(state, loaded, mode)
            if trial.pending:
                _time(loaded, mode, [trial], options.short_windows, options.warmup, state, budget)
            progress(f"{phase}: {config.name}", 1, 1)
        state.trials.append(trial)
        done.append(trial)
        on_change(state)
    return done


def _final(loaded, mode, options: SearchOptions, budget: Budget, state: SearchState, on_change,
           progress: Progress) -> None:
    """Time the finalists long; prune the rest with the figure that pruned them."""
    timed = [t for t in state.trials if t.outcome is not None and t.outcome.speedup is not None
             and t.variant is not None]
    if not timed:
        return
    timed.sort(key=lambda t: -t.outcome.speedup.value)
    best = timed[0].outcome.speedup
    finalists = [t for i, t in enumerate(timed)
                 if i < options.finalists or t.outcome.speedup.high >= best.low][:2 * options.finalists]
    for t in timed:
        if t not in finalists:
            s = t.outcome.speedup
            t.pruned = (f"pruned after {t.windows} windows: {s.value:.2f}× [{s.low:.2f}–{s.high:.2f}] against "
                        f"{timed[0].name}'s {best.value:.2f}× [{best.low:.2f}–{best.high:.2f}]")
    windows = _windows_that_fit(len(finalists), options.long_windows, options.warmup, state, budget)
    if windows >= MIN_LONG_WINDOWS:
        progress("timing the finalists", 0, 1)
        _time(loaded, mode, finalists, windows, options.warmup, state, budget)
        progress("timing the finalists", 1, 1)
    faster = [t for t in finalists if t.outcome.verdict == "faster"]
    state.plan = max(faster, key=lambda t: t.outcome.speedup.value, default=None)
    on_change(state)


def _time(loaded: LoadedModel, mode: str, trials: Sequence[Trial], windows: int, warmup: int, state: SearchState,
          budget: Budget) -> None:
    """Time `trials` interleaved with eager; each gets a passed outcome from these windows."""
    eager = timed_loop(EAGER, loaded, mode)
    steps = [timed_loop(t.name, _variant_loaded(loaded, t), mode, t.variant.context) for t in trials]
    with _weights_kept(loaded, mode):
        times = interleaved_windows_s([eager, *steps], windows, state.steps_per_window, warmup, loaded.device,
                                      deadline_s=budget.end)
    state.eager_s = median_ci(times[EAGER])
    for t in trials:
        mine = times[t.name]
        t.windows += len(mine)
        speed = speedup_ci(times[EAGER], mine)
        t.outcome = Outcome("passed", t.outcome.reason if t.outcome else "", t.variant.applied, speedup=speed,
                            gain_frac=1.0 - statistics.median(mine) / statistics.median(times[EAGER]),
                            verdict=verdict(speed), step_s=median_ci(mine), gate=t.gate.worst())


@contextlib.contextmanager
def _weights_kept(loaded: LoadedModel, mode: str) -> Iterator[None]:
    """The user's weights as they were before timing: train steps with the file's optimizer move
    them, and every configuration gated later is held against eager's results on the old ones."""
    model = loaded.model
    if mode != "train" or loaded.make_optimizer is None or not isinstance(model, torch.nn.Module):
        yield
        return
    saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
    try:
        yield
    finally:
        with torch.no_grad():
            for k, v in model.state_dict().items():
                v.copy_(saved[k])


def _variant_loaded(loaded: LoadedModel, t: Trial) -> LoadedModel:
    v = t.variant
    return dataclasses.replace(loaded, model=v.model, inputs=v.convert_inputs(loaded.inputs))


def _learn_window(state: SearchState, loaded: LoadedModel, mode: str) -> None:
    """Size the window once, on eager's step timed back to back; eager's synchronized step beside it."""
    if state.steps_per_window:
        return
    eager = timed_loop(EAGER, loaded, mode)
    with eager.activate():
        state.steps_per_window = autorange_steps(eager.step, loaded.device)
        state.eager_sync_s = median_ci([synchronized_s(eager.step, loaded.device) for _ in range(SYNC_SAMPLES)])
    state.regime = regime_label(loaded.device, state.steps_per_window)


def _short_cost_s(state: SearchState, options: SearchOptions) -> float:
    """Seconds a short timing of one variant beside eager takes (0 before the step is known)."""
    if state.eager_s is None and state.eager_sync_s is None:
        return 0.0
    step = (state.eager_s or state.eager_sync_s).value
    return 2 * (options.short_windows * state.steps_per_window + options.warmup) * step


def _windows_that_fit(n: int, wanted: int, warmup: int, state: SearchState, budget: Budget) -> int:
    step = (state.eager_s or state.eager_sync_s).value if (state.eager_s or state.eager_sync_s) else 0.0
    if step <= 0 or not math.isfinite(budget.remaining_s()):
        return wanted
    per_window = (n + 1) * state.steps_per_window * step
    return int(min(wanted, (budget.remaining_s() - (n + 1) * warmup * step) / per_window))


# ------------------------------------------------------------
# The configurations worth measuring, in the order an expert would try them.
#
# Singles first: each recommended action alone, each compile mode alone, channels_last where
# the model holds 4-D weights, each bundled kernel the advice names. Then combinations built
# from what the singles showed: the library actions that measured faster stacked (the base),
# the base and channels_last under each compile mode that passed alone, and the kernels inside
# the best compile mode as the operators they are.

CHANNELS_LAST = "channels_last"
COMPILE_MODES_CPU = ("compile", "compile:max-autotune-no-cudagraphs")
COMPILE_MODES_CUDA = ("compile", "compile:max-autotune-no-cudagraphs", "compile:reduce-overhead")


def compile_modes(device_type: str, named: Iterable[str], modes: Sequence[str] | None = None) -> list[str]:
    """The compile modes searched (`modes`, or every mode of the device when None), and the
    compile-stage actions the advice named (float8:compile)."""
    base = list(modes if modes is not None else COMPILE_MODES_CUDA if device_type == "cuda" else COMPILE_MODES_CPU)
    return base + [n for n in named if get_action(n).stage == "compile" and n not in base]


def has_4d_weights(loaded: LoadedModel) -> bool:
    model = loaded.model
    return isinstance(model, torch.nn.Module) and any(p.dim() == 4 for p in model.parameters())


def singles(loaded: LoadedModel, names: Sequence[str], modes: Sequence[str] | None = None) -> list[Config]:
    """Each named action alone, each compile mode alone, channels_last where it can apply."""
    named = [n for n in dict.fromkeys(names) if n != NONE and is_known(n)]
    below = [n for n in named if get_action(n).stage != "compile"]
    if has_4d_weights(loaded) and CHANNELS_LAST not in below:
        below.append(CHANNELS_LAST)
    tops = compile_modes(loaded.device.type, named, modes)
    return _unique([make_config([n]) for n in below] + [Config((), c) for c in tops])


def combinations(singles_out: Mapping[Config, Outcome], loaded: LoadedModel) -> list[Config]:
    """Configurations of several parts, from the singles' measurements."""
    faster = _faster(singles_out)
    base = _base([c.actions[0] for c in faster if c.actions and not c.compile and not c.kernels])
    kernels = [c.actions[0] for c in singles_out if len(c.actions) == 1 and c.kernels]
    tops = [c.compile for c in _passed(singles_out) if c.compile and not c.actions]
    layouts = [[], base] + ([[CHANNELS_LAST], base + [CHANNELS_LAST]] if has_4d_weights(loaded) else [])
    out = [make_config(base)] if len(base) > 1 else []
    for layout, top in itertools.product(layouts, tops):
        out += _maybe(list(layout) + [top])
    best_top = next((c.compile for c in faster if c.compile and not c.actions), "")
    for k in kernels:
        out += _maybe(base + [k]) + (_maybe([k, best_top]) if best_top else [])
    if best_top and len(kernels) > 1:
        out += _maybe(kernels + [best_top])
    seen = set(singles_out)
    return [c for c in _unique(out) if c not in seen and c.parts]


def _base(names: Sequence[str]) -> list[str]:
    """The faster library actions (best first) that stack without conflict."""
    chosen: list[str] = []
    for n in names:
        if not any(conflicts(get_action(n), get_action(m)) for m in chosen):
            chosen.append(n)
    return chosen


def _maybe(parts: Sequence[str]) -> list[Config]:
    try:
        return [make_config(parts)]
    except ValueError:
        return []


def _passed(outcomes: Mapping[Config, Outcome]) -> list[Config]:
    return [c for c, o in outcomes.items() if o.status == "passed"]


def _faster(outcomes: Mapping[Config, Outcome]) -> list[Config]:
    """Configurations measured faster than eager, largest gain first."""
    fast = [c for c, o in outcomes.items() if o.status == "passed" and o.verdict == "faster"]
    return sorted(fast, key=lambda c: -(outcomes[c].gain_frac or 0.0))


def _unique(configs: Iterable[Config]) -> list[Config]:
    return list(dict.fromkeys(configs))
