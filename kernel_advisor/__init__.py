"""kernel_advisor: is a custom kernel worth it, and what should you do instead?

    import kernel_advisor as ka
    run = ka.profile(model, [x], device="cuda", dtype="bfloat16")
    run.recommend(measure=True)
    ka.report(run, "report.html")

API: docs/api.md. CLI: `advisor --help`.
"""
from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["Run", "__version__", "import_trace", "load", "profile", "profile_file", "report", "warnings"]
_API = ("Run", "import_trace", "load", "profile", "profile_file")


def __getattr__(name: str):
    # The API sits at the top of the layers; importing it lazily keeps `import kernel_advisor.x`
    # for any lower layer from loading every layer above it.
    if name in _API:
        from kernel_advisor import api

        return getattr(api, name)
    raise AttributeError(f"module 'kernel_advisor' has no attribute {name!r}")


# The API returns data; these two render it for a notebook, as `advisor report` and
# `advisor profile` do on the command line (render/ sits beside the CLI, above the API).


def report(run, path, top: int | None = None):
    """A self-contained HTML report of `run` (an api.Run) at `path`, with its recommendations
    and try-kernel results once made, as `advisor report`; the path written."""
    from pathlib import Path

    from kernel_advisor.render.html_report import DEFAULT_TOP, write_report

    return write_report(run, Path(path), DEFAULT_TOP if top is None else top).path


def warnings(run) -> list[str]:
    """The lines `advisor profile` / `import` warn about `run` (drifting steps, missing step
    markers or shapes, under 90 % modelled, kernels left with the shapes pass's times)."""
    from kernel_advisor.render.profile_render import run_warnings

    return run_warnings(run.meta)
