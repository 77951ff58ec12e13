"""`advisor rules list` and `advisor rules validate FILE`."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from kernel_advisor.cli.app import app, guarded, new_typer
from kernel_advisor.cli.console import out

rules_app = new_typer(help="List and check the recommendation rules (rules/*.yaml and your own).",
                      no_args_is_help=True)
app.add_typer(rules_app, name="rules")


@rules_app.command("list")
@guarded
def list_command(
    rules: Annotated[Optional[list[Path]], typer.Option(
        "--rules", help="Extra rule file or directory to include (repeatable).")] = None,
) -> None:
    """Every rule that `advisor recommend` would apply: id, tier, action, source file, title."""
    from kernel_advisor import api

    table = Table(title="Rules")
    for col in ("id", "tier", "action", "source"):
        table.add_column(col, no_wrap=True)
    table.add_column("title", overflow="fold")
    for rule in api.rules_by_tier(rules or ()):
        table.add_row(rule.id, rule.tier, rule.action, f"{Path(rule.source).name}:{rule.line}", rule.title)
    out.print(table)


@rules_app.command("validate")
@guarded
def validate_command(
    path: Annotated[Path, typer.Argument(help="A rule file, or a directory of .yaml rule files.")],
) -> None:
    """Check a rule file as `--rules` would load it (ids must not clash with the built-in rules)."""
    from kernel_advisor import api

    typer.echo(f"ok: {api.rules_in(path)} rules")
