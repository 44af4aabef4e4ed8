"""The `cascade` Typer app and its global options; command modules add their commands to it."""

from __future__ import annotations

import os

import typer

from cli.console import state

app = typer.Typer(
    name="cascade",
    help="Curate post-training data for reasoning LLMs and train on it.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(
    lake: str = typer.Option(
        None,
        "--lake",
        help="Lake directory (default: $CASCADE_LAKE or ./lakehouse). Accepted anywhere on the line.",
        envvar="CASCADE_LAKE",
    ),
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress displays (for CI logs)."),
) -> None:
    state.lake_path = lake or os.environ.get("CASCADE_LAKE") or "lakehouse"
    state.debug = debug
    state.quiet = quiet
