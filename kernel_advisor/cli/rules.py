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


def _kernel_ids() -> set[str]:
    from kernel_advisor.recommend.kernels import registry_kernels

    return {k.id for k in registry_kernels()}


@rules_app.command("list")
@guarded
def list_command(
    rules: Annotated[Optional[list[Path]], typer.Option(
        "--rules", help="Extra rule file or directory to include (repeatable).")] = None,
) -> None:
    """Every rule that `advisor recommend` would apply: id, tier, action, source file, title."""
    from kernel_advisor.recommend.ruleset import load_rules
    from kernel_advisor.recommend.schema import TIERS

    table = Table(title="Rules")
    for col in ("id", "tier", "action", "source"):
        table.add_column(col, no_wrap=True)
    table.add_column("title", overflow="fold")
    order = {tier: i for i, tier in enumerate(TIERS)}
    loaded = load_rules(rules or (), kernel_ids=_kernel_ids())
    for rule in sorted(loaded, key=lambda r: order[r.tier]):  # stable: file order within a tier
        table.add_row(rule.id, rule.tier, rule.action, f"{Path(rule.source).name}:{rule.line}", rule.title)
    out.print(table)


@rules_app.command("validate")
@guarded
def validate_command(
    path: Annotated[Path, typer.Argument(help="A rule file, or a directory of .yaml rule files.")],
) -> None:
    """Check a rule file as `--rules` would load it (ids must not clash with the built-in rules)."""
    from kernel_advisor.recommend.ruleset import load_rules, rule_files

    files = {str(f) for f in rule_files(path)}
    rules = load_rules([path], kernel_ids=_kernel_ids())
    count = sum(1 for r in rules if r.source in files)
    typer.echo(f"ok: {count} rules")
