"""`cascade build dataset|list|show`: run a recipe and print its funnel; list and explain recipes."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from cli.app import app
from cli.console import (
    LIST_FORMATS,
    CascadeError,
    console,
    format_option,
    open_lake,
    plain,
    print_records,
    print_table,
    state,
)
from cli.executors import EXECUTOR_OPTION, RAY_ADDRESS_OPTION, executor_session

if TYPE_CHECKING:
    from schemas.dataset_manifest import FunnelStep

build_app = typer.Typer(help="Build versioned datasets from recipes.", no_args_is_help=True)
app.add_typer(build_app, name="build")


@build_app.command("dataset")
def build_dataset_command(
    name: str = typer.Argument(
        ..., help="Recipe name, e.g. math_rl_v2 (see `cascade build list`)."
    ),
    source: list[str] = typer.Option(
        None, "--source", help="Source file(s) or lake table(s) (name or name@N)."
    ),
    map_: str = typer.Option(
        None, "--map", help="Field mapping for the sources, e.g. problem=question."
    ),
    set_: list[str] = typer.Option(None, "--set", help="Override a recipe parameter: key=value."),
    profile: str = typer.Option(
        "default", "--profile", help="default, or a recipe's bundled profile (demo, toy)."
    ),
    manifests: str = typer.Option(
        None, "--manifests", help="Where manifests are written (default: the lake's manifests/)."
    ),
    out: str = typer.Option(
        None, "--out", help="Output table (default: the recipe's name), e.g. one per SWE sub-task."
    ),
    executor: str = EXECUTOR_OPTION,
    ray_address: str = RAY_ADDRESS_OPTION,
) -> None:
    """Run a recipe: ingest -> its steps -> a new dataset version + manifest."""
    from builders.recipes import recipe_named
    from builders.runner import BuildError, build_dataset, parse_overrides
    from curation.ingest import IngestError, parse_mapping
    from lake.catalog import LakeError
    from lake.steps import StepError
    from schemas.tables import SchemaError

    try:
        recipe = recipe_named(name)
        overrides = parse_overrides(set_ or [], recipe.DEFAULTS)
        with (
            executor_session(executor, ray_address) as runner,
            build_progress(name, recipe, overrides, enabled=not state.quiet) as show,
        ):
            report = build_dataset(
                open_lake(write=True),
                recipe,
                sources=source,
                overrides=overrides,
                mapping=parse_mapping(map_),
                profile=profile,
                manifests_dir=manifests,
                on_step=show,
                out=out,
                executor=runner,
            )
    except (BuildError, IngestError, LakeError, SchemaError, StepError) as exc:
        raise CascadeError(str(exc)) from None
    m = report.manifest
    table = Table(
        "step", "rows in", "rows out", "dropped", "by reason", "seconds", title=f"{name} funnel"
    )
    first = m.inputs[0]
    table.add_row(
        "ingest",
        "",
        f"{first.rows:,}",
        "",
        plain("\n".join(s.path.split("/")[-1] for s in m.sources)),
        "",
    )
    for entry in m.funnel:
        reasons = "\n".join(
            f"{r} {n:,}" for r, n in sorted(entry.dropped.items(), key=lambda x: -x[1])
        )
        if entry.skipped:
            reasons = f"skipped: {entry.skipped}"
        table.add_row(
            plain(entry.step),
            f"{entry.rows_in:,}",
            f"{entry.rows_out:,}",
            f"{sum(entry.dropped.values()):,}",
            plain(reasons),
            f"{entry.seconds:.2f}",
        )
    print_table(table)
    console.print(
        plain(
            f"published {m.output.ref}: {m.output.rows:,} rows, content_hash "
            f"{m.output.content_hash[:12]}; manifest {report.manifest_path}",
            "green",
        ),
        soft_wrap=True,
    )
    if report.report_path:
        console.print(plain(f"report {report.report_path}"), soft_wrap=True)
    if report.report_error:
        console.print(
            plain(
                f"warning: the report could not be written ({report.report_error}); "
                f"run `cascade report {m.output.ref}` to retry",
                "yellow",
            ),
            soft_wrap=True,
        )


@contextlib.contextmanager
def build_progress(name: str, recipe, overrides: dict, *, enabled: bool):
    """A build's progress: its steps as a phase, every long phase inside them (a step, model
    training, generation, verification, pass rates) shown as it runs; nothing with --quiet.
    Yields the runner's `on_step` callback."""
    from builders.runner import recipe_steps
    from cli.progress import show_progress
    from lake.progress import phase

    names = [s.name for s in recipe_steps(recipe, overrides)]
    build = phase(f"build {name}", len(names), "steps", estimate=False)
    with show_progress(enabled), build as steps:

        def on_step(entry: FunnelStep) -> None:
            rate = entry.rows_in / entry.seconds if entry.seconds else 0.0
            steps.advance(
                note=f"last: {entry.step} {entry.rows_in:,} -> {entry.rows_out:,} rows, "
                f"{rate:,.0f} rows/s"
            )

        yield on_step


@build_app.command("list")
def build_list(format_: str = format_option()) -> None:
    """Every recipe with its domain, profiles and first docstring line."""
    from builders.recipes import RECIPES

    records = [
        {
            "recipe": name,
            "domain": module.DOMAIN,
            "profiles": ["default", *getattr(module, "PROFILES", {})],
            "what it builds": (module.__doc__ or "").strip().split("\n")[0],
        }
        for name, module in sorted(RECIPES.items())
    ]
    print_records(records, format_)


@build_app.command("show")
def build_show(
    name: str = typer.Argument(..., help="Recipe name."), format_: str = format_option()
) -> None:
    """A recipe's description, its parameters with defaults, and its steps in order."""
    from builders.recipes import recipe_named
    from builders.runner import BuildError, recipe_steps

    try:
        recipe = recipe_named(name)
    except BuildError as exc:
        raise CascadeError(str(exc)) from None
    steps = []
    for number, step in enumerate(recipe_steps(recipe), start=1):
        operator = getattr(step.run, "func", step.run)  # a step may bind some arguments
        steps.append(
            {
                "number": number,
                "step": step.name,
                "operator": f"{operator.__module__}.{operator.__qualname__}",
                "doc": (operator.__doc__ or "").strip().split("\n")[0],
                "params": {
                    k: json.loads(json.dumps(v, default=_describe))
                    for k, v in step.params.items()
                    if k != "lake"
                },
            }
        )
    if format_ not in LIST_FORMATS:
        raise CascadeError(f"unknown --format {format_!r}: use {', '.join(LIST_FORMATS)}")
    if format_ in ("csv", "jsonl"):  # one row per step
        print_records(steps, format_)
        return
    if format_ == "json":
        described = {
            "recipe": name,
            "description": (recipe.__doc__ or "").strip(),
            "profiles": ["default", *getattr(recipe, "PROFILES", {})],
            "parameters": recipe.DEFAULTS,
            "steps": steps,
        }
        print(json.dumps(described, default=str, ensure_ascii=False, indent=1))
        return
    console.print(plain((recipe.__doc__ or name).strip()), soft_wrap=True)
    console.print(plain("\nparameters (--set key=value):", "bold"))
    for key, value in recipe.DEFAULTS.items():
        console.print(plain(f"  {key} = {json.dumps(value)}"), soft_wrap=True)
    console.print(plain("\nsteps:", "bold"))
    for step in steps:
        console.print(
            plain(f"  {step['number']}. {step['step']} ({step['operator']})"), soft_wrap=True
        )
        if step["doc"]:
            console.print(plain(f"     {step['doc']}", "dim"), soft_wrap=True)
        for key, value in step["params"].items():
            console.print(plain(f"     {key} = {json.dumps(value)}"), soft_wrap=True)


def _describe(value: object) -> object:
    """How a step parameter that is not JSON shows in `build show`."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return type(value).__name__
