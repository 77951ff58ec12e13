"""kernel_advisor: is a custom kernel worth it, and what should you do instead?

    import kernel_advisor as ka
    run = ka.profile(model, [x], device="cuda", dtype="bfloat16")
    run.recommend(measure=True)

API: docs/api.md. CLI: `advisor --help`.
"""

__version__ = "0.1.0"
__all__ = ["Run", "__version__", "import_trace", "load", "profile", "profile_file"]


def __getattr__(name: str):
    # The API sits at the top of the layers; importing it lazily keeps `import kernel_advisor.x`
    # for any lower layer from loading every layer above it.
    if name in __all__:
        from kernel_advisor import api

        return getattr(api, name)
    raise AttributeError(f"module 'kernel_advisor' has no attribute {name!r}")
