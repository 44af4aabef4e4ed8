"""Console-script entry point: register the commands, run, and turn errors into one line."""

from __future__ import annotations

import sys

from cli.console import CascadeError, say_error

GLOBAL_OPTIONS = {"--lake": True, "--debug": False, "--quiet": False}
"""Options accepted anywhere on the command line (True: the option takes a value)."""


def hoist_global_options(argv: list[str]) -> list[str]:
    """Move global options written after the subcommand to the front, where Typer reads them.

    >>> hoist_global_options(["sql", "SELECT 1", "--lake", "x"])
    ['--lake', 'x', 'sql', 'SELECT 1']
    """
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if name in GLOBAL_OPTIONS:
            takes_value = GLOBAL_OPTIONS[name] and "=" not in arg
            front.extend(argv[i : i + 2] if takes_value else [arg])
            i += 2 if takes_value else 1
            continue
        if arg == "--":
            rest.extend(argv[i:])
            break
        rest.append(arg)
        i += 1
    return front + rest


def command_app():
    """The Typer app with every command registered (each module adds its own)."""
    from cli import (  # noqa: F401
        build,
        decontaminate,
        dedup,
        evaluate,
        export,
        generate,
        lake,
        manifest,
        report,
        reward,
        serve,
        train,
        verify,
    )
    from cli.app import app

    return app


def main() -> None:
    """Run `cascade`; errors print one sentence (a traceback only with --debug)."""
    app = command_app()
    argv = hoist_global_options(sys.argv[1:])
    debug = "--debug" in argv
    try:
        app(args=argv, prog_name="cascade")
    except CascadeError as exc:
        if debug:
            raise
        say_error(str(exc))
        raise SystemExit(1) from None
    except (ValueError, FileNotFoundError, KeyError, RuntimeError, OSError) as exc:
        if debug:
            raise
        say_error(" ".join(str(exc).split()) if "\n" not in str(exc).strip() else str(exc))
        raise SystemExit(1) from None
    except Exception as exc:  # noqa: BLE001 - a bug: say so in one line, details with --debug
        if debug:
            raise
        say_error(
            f"{type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
            label="internal error",
        )
        raise SystemExit(2) from None
