"""The `cascade` command line: a thin layer over the packages.

Each sub-module registers commands on `app`; every command calls a function a user could
call from Python. Errors print one sentence (a traceback only with --debug).
"""

from __future__ import annotations

import os
import sys

import typer

from cli.console import CascadeError, console, state

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
        help="Lake directory (default: $CASCADE_LAKE or ./lake).",
        envvar="CASCADE_LAKE",
    ),
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks on errors."),
) -> None:
    state.lake_path = lake or os.environ.get("CASCADE_LAKE") or "lake"
    state.debug = debug


def _register() -> None:
    """Import every `cli.<name>` module so each adds its commands to `app`."""
    import importlib
    import pkgutil

    for module in pkgutil.iter_modules(__path__):
        if module.name != "console":
            importlib.import_module(f"cli.{module.name}")


def main() -> None:
    """Console-script entry point."""
    _register()
    debug = "--debug" in sys.argv
    try:
        app()
    except CascadeError as exc:
        if debug:
            raise
        console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise SystemExit(1) from None
    except (ValueError, FileNotFoundError, KeyError, RuntimeError, OSError) as exc:
        if debug:
            raise
        console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        raise SystemExit(1) from None
    except Exception as exc:  # noqa: BLE001 - a bug: say so in one line, details with --debug
        if debug:
            raise
        console.print(
            f"[red]internal error:[/red] {type(exc).__name__}: {exc} (rerun with --debug for the "
            "traceback)",
            highlight=False,
            soft_wrap=True,
        )
        raise SystemExit(2) from None
