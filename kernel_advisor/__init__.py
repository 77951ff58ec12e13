"""kernel_advisor: is a custom kernel worth it, and what should you do instead?

    import kernel_advisor as ka
    run = ka.profile(model, [x], device="cuda", dtype="bfloat16")
    run.recommend(measure=True)

API: docs/api.md. CLI: `advisor --help`.
"""

__version__ = "0.1.0"

from kernel_advisor.api import Run, import_trace, load, profile, profile_file  # noqa: E402

__all__ = ["Run", "__version__", "import_trace", "load", "profile", "profile_file"]
