"""Shared CLI state (lake path, --debug, --quiet), the rich consoles, and opening the lake."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.text import Text

console = Console(stderr=False)
err_console = Console(stderr=True)


class CascadeError(Exception):
    """An error whose message is meant for the user as one sentence."""


@dataclass
class CliState:
    lake_path: str = "lakehouse"
    debug: bool = False
    quiet: bool = False


state = CliState()


def plain(text: str, style: str | None = None) -> Text:
    """Text printed as is: brackets in names (`stages[sft]`) are not read as rich markup."""
    return Text(text, style=style or "")


def say_error(message: str, label: str = "error") -> None:
    err_console.print(Text.assemble((f"{label}: ", "bold red"), message), soft_wrap=True)


def open_lake(*, write: bool = False):
    """The lake the CLI was pointed at (--lake, $CASCADE_LAKE or ./lakehouse).

    A command that writes creates a missing lake and says so; one that only reads refuses.
    """
    from lake.catalog import Lake, LakeError

    try:
        lake = Lake(state.lake_path, create=write)
    except LakeError as exc:
        raise CascadeError(str(exc)) from None
    if lake.created:
        err_console.print(plain(f"created a new lake at {lake.path.resolve()}", "yellow"))
    return lake
