"""`cascade build dataset NAME`: run a recipe and print its funnel."""

from __future__ import annotations

import typer
from rich.table import Table

from builders.runner import BuildError, FunnelStep, build_dataset, parse_overrides, recipe_module
from cli import app
from cli.console import CascadeError, console, state
from curation.ingest import IngestError
from lake.catalog import Lake, LakeError
from schemas.tables import SchemaError

build_app = typer.Typer(help="Build versioned datasets from recipes.", no_args_is_help=True)
app.add_typer(build_app, name="build")


@build_app.command("dataset")
def build_dataset_command(
    name: str = typer.Argument(..., help="Recipe name, e.g. math_rl_v2."),
    source: list[str] = typer.Option(None, "--source", help="Source file(s) to ingest."),
    set_: list[str] = typer.Option(None, "--set", help="Override a recipe parameter: key=value."),
    profile: str = typer.Option("default", "--profile", help="default, or demo (bundled corpus)."),
    manifests: str = typer.Option("manifests", "--manifests", help="Where manifests are written."),
) -> None:
    """Run a recipe: ingest -> filters -> decontaminate -> dedup -> publish + manifest."""
    try:
        module = recipe_module(name)
        overrides = parse_overrides(set_ or [], module.DEFAULTS)
        with console.status(f"building {name}...") as status:

            def show(entry: FunnelStep) -> None:
                status.update(f"building {name}: {entry.step} done ({entry.rows_out:,} rows)")

            report = build_dataset(
                Lake(state.lake_path),
                name,
                sources=source,
                overrides=overrides,
                profile=profile,
                manifests_dir=manifests,
                on_step=show,
            )
    except (BuildError, IngestError, LakeError, SchemaError) as exc:
        raise CascadeError(str(exc)) from None
    m = report.manifest
    table = Table(
        "step", "rows in", "rows out", "dropped", "by reason", "seconds", title=f"{name} funnel"
    )
    first = m.inputs[0]
    table.add_row(
        "ingest", "", f"{first.rows:,}", "", "\n".join(s.path.split("/")[-1] for s in m.sources), ""
    )
    for entry in m.funnel:
        reasons = "\n".join(
            f"{r} {n:,}" for r, n in sorted(entry.dropped.items(), key=lambda x: -x[1])
        )
        table.add_row(
            entry.step,
            f"{entry.rows_in:,}",
            f"{entry.rows_out:,}",
            f"{entry.rows_in - entry.rows_out:,}",
            reasons,
            f"{entry.seconds:.2f}",
        )
    console.print(table)
    console.print(
        f"[green]published[/green] {m.output.ref}: {m.output.rows:,} rows, sha256 "
        f"{m.output.content_hash[:12]}; manifest {report.manifest_path}",
        soft_wrap=True,
    )
