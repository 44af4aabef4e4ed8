"""`cascade ingest`, `cascade sql` and `cascade lake ls|log|show`."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import typer
from rich.table import Table

from cli import app
from cli.console import CascadeError, console, state
from curation.ingest import IngestError, ingest, parse_mapping
from lake.catalog import Lake, LakeError
from schemas.tables import SchemaError

lake_app = typer.Typer(help="Inspect the lake: tables, versions, lineage.", no_args_is_help=True)
app.add_typer(lake_app, name="lake")


def open_lake() -> Lake:
    """The lake the CLI was pointed at (--lake, $CASCADE_LAKE or ./lake)."""
    return Lake(state.lake_path)


@app.command("ingest")
def ingest_command(
    paths: list[str] = typer.Argument(
        ..., help="jsonl/json/parquet/csv files, saved HF datasets or hub ids."
    ),
    table: str = typer.Option(..., "--table", help="Table to write a new version of."),
    domain: str = typer.Option("math", "--domain", help="math|code|science|if|chat|swe"),
    map_: str = typer.Option(
        None, "--map", help="Field mapping, e.g. problem=question,answer=expected_answer."
    ),
    on_error: str = typer.Option(
        "raise", "--on-error", help="raise (default) or skip malformed lines."
    ),
    source: str = typer.Option(
        None, "--source", help="Source name for every row (default: file stem)."
    ),
    split: str = typer.Option(None, "--split", help="Split of a Hugging Face dataset."),
) -> None:
    """Read sources into a new version of a `prompts` table."""
    try:
        report = ingest(
            open_lake(),
            paths,
            table,
            domain=domain,
            mapping=parse_mapping(map_),
            on_error=on_error,
            source=source,
            split=split,
        )
    except (IngestError, LakeError, SchemaError) as exc:
        raise CascadeError(str(exc)) from None
    for name, rows in report.rows_by_source.items():
        console.print(f"  {name}: {rows:,} rows")
    console.print(
        f"[green]committed[/green] {report.version.ref}: {report.version.rows:,} rows, "
        f"sha256 {report.version.content_hash[:12]}"
    )
    if report.malformed:
        console.print(
            f"[yellow]skipped {len(report.malformed)} malformed lines[/yellow] "
            f"(recorded in {report.drops_version.ref if report.drops_version else 'drops'})"
        )


@app.command("sql")
def sql_command(
    query: str = typer.Argument(..., help='SQL; tables by name, pinned versions as "name@3".'),
    format_: str = typer.Option("table", "--format", help="table|csv|json|parquet"),
    out: Path = typer.Option(None, "--out", help="Write the result to this file."),
    limit: int = typer.Option(50, "--limit", help="Rows shown in table format."),
) -> None:
    """Query curated data: every table (latest), "name@N", `versions` and `drops`."""
    run_sql(open_lake(), query, format_, out, limit)


def run_sql(lake: Lake, query: str, format_: str, out: Path | None, limit: int = 50) -> None:
    """Run a query and print or write its result."""
    if format_ not in ("table", "csv", "json", "parquet"):
        raise CascadeError(f"unknown --format {format_!r}: use table, csv, json or parquet")
    if format_ == "parquet" and out is None:
        raise CascadeError("--format parquet needs --out FILE")
    try:
        rel = lake.connect(query).sql(query)
        if rel is None:
            return
        result = rel.to_arrow_table()
    except duckdb.Error as exc:
        raise CascadeError(" ".join(str(exc).split())) from None
    if format_ == "table":
        show = Table(*result.column_names, show_lines=False)
        for row in result.slice(0, limit).to_pylist():
            show.add_row(*(_cell(v) for v in row.values()))
        target = console if out is None else None
        if target is not None:
            console.print(show)
            if result.num_rows > limit:
                console.print(f"[dim]{result.num_rows:,} rows, {limit} shown (--limit)[/dim]")
            return
    import polars as pl

    frame = pl.from_arrow(result)
    if format_ == "parquet":
        frame.write_parquet(out)
    elif format_ == "csv":
        text = frame.write_csv()
        _emit(text, out)
    else:
        text = json.dumps(frame.to_dicts(), default=str, ensure_ascii=False, indent=1)
        _emit(text, out)
    if out is not None:
        console.print(f"wrote {result.num_rows:,} rows to {out}")


def _emit(text: str, out: Path | None) -> None:
    if out is None:
        print(text, end="" if text.endswith("\n") else "\n")
    else:
        out.write_text(text)


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= 120 else text[:117] + "..."


@lake_app.command("ls")
def lake_ls() -> None:
    """Every table with its latest version, rows and kind."""
    table = Table("table", "version", "kind", "mode", "rows", "sha256", "created")
    for info in open_lake().tables():
        table.add_row(
            info.name,
            str(info.version),
            info.kind,
            info.mode,
            f"{info.rows:,}",
            info.content_hash[:12],
            info.created_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
    console.print(table)


@lake_app.command("log")
def lake_log(name: str = typer.Argument(..., help="Table name.")) -> None:
    """The versions of a table, newest first, with what produced each."""
    lake = open_lake()
    try:
        versions = lake.versions(name)
        if not versions:
            lake.resolve(name)
    except LakeError as exc:
        raise CascadeError(str(exc)) from None
    table = Table("version", "rows", "sha256", "parents", "producer", "code", "created")
    for info in reversed(versions):
        table.add_row(
            str(info.version),
            f"{info.rows:,}",
            info.content_hash[:12],
            ", ".join(info.parents),
            info.producer,
            info.code_version,
            info.created_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
    console.print(table)


@lake_app.command("show")
def lake_show(ref: str = typer.Argument(..., help="name or name@N")) -> None:
    """Schema, row count, hash and lineage of one version."""
    try:
        info = open_lake().resolve(ref)
    except LakeError as exc:
        raise CascadeError(str(exc)) from None
    console.print(f"[bold]{info.ref}[/bold] ({info.kind}, {info.mode})")
    console.print(f"rows:     {info.rows:,}")
    console.print(f"sha256:   {info.content_hash}")
    console.print(f"parents:  {', '.join(info.parents) or '-'}")
    console.print(f"producer: {info.producer}")
    console.print(f"params:   {json.dumps(info.params, default=str)}", highlight=False)
    console.print(f"code:     {info.code_version}")
    console.print(f"created:  {info.created_at.isoformat()}")
    console.print(f"files:    {len(info.files)}")
    console.print("schema:")
    for line in info.schema.splitlines():
        console.print(f"  {line}", highlight=False)
