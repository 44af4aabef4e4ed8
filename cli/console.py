"""Shared CLI state (lake path, --debug, --quiet), the rich consoles, and opening the lake."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
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


def open_lake(*, write: bool = False, read_only: bool = False):
    """The lake the CLI was pointed at (--lake, $CASCADE_LAKE or ./lakehouse).

    A command that writes creates a missing lake and says so; one that only reads refuses.
    `read_only` attaches the catalog READ_ONLY (what `sql` runs user queries on).
    """
    from lake.catalog import Lake, LakeError

    try:
        lake = Lake(state.lake_path, create=write, read_only=read_only)
    except LakeError as exc:
        raise CascadeError(str(exc)) from None
    if lake.created:
        err_console.print(plain(f"created a new lake at {lake.path.resolve()}", "yellow"))
    return lake


LIST_FORMATS = ("table", "csv", "json", "jsonl")


def format_option() -> Any:
    """The `--format` option of every listing command."""
    return typer.Option("table", "--format", help="|".join(LIST_FORMATS))


def print_table(table: Table) -> None:
    """A rich table on stdout with no cell cut: in a terminal long cells wrap; elsewhere (a
    pipe, a file, CI) the table is printed at its natural width, however wide."""
    for column in table.columns:
        column.overflow = "fold"
    if console.is_terminal:
        console.print(table)
        return
    natural = Measurement.get(console, console.options.update(width=100_000), table).maximum
    Console(width=max(natural, console.width), soft_wrap=False).print(table)


def print_records(
    records: list[dict[str, Any]],
    format_: str,
    *,
    shown: dict[str, Callable[[Any], str]] | None = None,
    title: str | None = None,
) -> None:
    """Records on stdout as a table, csv, json or jsonl (what `sql --format` also writes).

    json and jsonl keep every value as it is; `shown` formats a column's cells for the table
    only (thousands separators, a short hash), csv writes nested values as JSON.
    """
    if format_ not in LIST_FORMATS:
        raise CascadeError(f"unknown --format {format_!r}: use {', '.join(LIST_FORMATS)}")
    if format_ == "json":
        print(json.dumps(records, default=str, ensure_ascii=False, indent=1))
        return
    if format_ == "jsonl":
        for record in records:
            print(json.dumps(record, default=str, ensure_ascii=False))
        return
    columns = list(records[0]) if records else []
    if format_ == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(columns)
        for record in records:
            writer.writerow([_csv_cell(record[c]) for c in columns])
        return
    shown = shown or {}
    table = Table(*columns, title=title)
    for record in records:
        table.add_row(
            *(plain(shown[c](record[c]) if c in shown else _cell(record[c])) for c in columns)
        )
    print_table(table)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, default=str)
    return str(value)


def _csv_cell(value: Any) -> Any:
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, default=str, ensure_ascii=False)
    return "" if value is None else value
