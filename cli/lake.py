"""`cascade ingest`, `cascade sql` and `cascade lake ls|log|show|attach|gc|migrate`."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from cli.app import app
from cli.console import (
    CascadeError,
    console,
    format_option,
    open_lake,
    plain,
    print_records,
    print_table,
)

if TYPE_CHECKING:
    from lake.catalog import Lake

lake_app = typer.Typer(help="Inspect the lake: tables, versions, lineage.", no_args_is_help=True)
app.add_typer(lake_app, name="lake")

SQL_FORMATS = ("table", "csv", "json", "jsonl", "parquet")


@app.command("ingest")
def ingest_command(
    paths: list[str] = typer.Argument(
        ..., help="jsonl/json/parquet/csv files, saved HF datasets, hub ids or lake tables."
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
    from curation.ingest import IngestError, ingest, parse_mapping
    from lake.catalog import LakeError
    from schemas.tables import SchemaError

    try:
        report = ingest(
            open_lake(write=True),
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
        console.print(plain(f"  {name}: {rows:,} rows"))
    console.print(
        plain(
            f"committed {report.version.ref}: {report.version.rows:,} rows, content_hash "
            f"{report.version.content_hash[:12]}",
            "green",
        )
    )
    if report.malformed:
        where = report.drops_version.ref if report.drops_version else "drops"
        console.print(
            plain(
                f"skipped {len(report.malformed)} malformed lines (recorded in {where})", "yellow"
            )
        )


@app.command("sql")
def sql_command(
    query: str = typer.Argument(..., help='SQL; tables by name, pinned versions as "name@3".'),
    format_: str = typer.Option("table", "--format", help="|".join(SQL_FORMATS)),
    out: Path = typer.Option(None, "--out", help="Write the result to this file."),
    limit: int = typer.Option(50, "--limit", help="Rows shown in table format."),
) -> None:
    """Query curated data: every table (latest), "name@N", `versions` and `drops`."""
    run_sql(open_lake(read_only=True), query, format_, out, limit)


def run_sql(lake: Lake, query: str, format_: str, out: Path | None, limit: int = 50) -> None:
    """Run a query and print or write its result (json and jsonl are what --input reads)."""
    if format_ not in SQL_FORMATS:
        raise CascadeError(f"unknown --format {format_!r}: use {', '.join(SQL_FORMATS)}")
    if format_ == "parquet" and out is None:
        raise CascadeError("--format parquet needs --out FILE")
    import duckdb

    try:
        rel = lake.connect(query).sql(query)
        if rel is None:
            return
        result = rel.to_arrow_table()
    except duckdb.Error as exc:
        raise CascadeError(" ".join(str(exc).split())) from None
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
    if format_ == "table" and out is None:
        show = Table(*result.column_names, show_lines=False)
        for row in result.slice(0, limit).to_pylist():
            show.add_row(*(plain(_cell(v)) for v in row.values()))
        print_table(show)
        if result.num_rows > limit:
            console.print(plain(f"{result.num_rows:,} rows, {limit} shown (--limit)", "dim"))
        return
    import polars as pl

    frame = pl.from_arrow(result)
    assert isinstance(frame, pl.DataFrame)
    if format_ == "parquet":
        frame.write_parquet(out)
    elif format_ == "csv" or format_ == "table":
        _emit(frame.write_csv(), out)
    elif format_ == "jsonl":
        _emit(
            "".join(
                json.dumps(r, default=str, ensure_ascii=False) + "\n" for r in frame.to_dicts()
            ),
            out,
        )
    else:
        _emit(json.dumps(frame.to_dicts(), default=str, ensure_ascii=False, indent=1), out)
    if out is not None:
        console.print(plain(f"wrote {result.num_rows:,} rows to {out}"))


def _emit(text: str, out: Path | None) -> None:
    if out is None:
        print(text, end="" if text.endswith("\n") else "\n")
    else:
        out.write_text(text)


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    return text if len(text) <= 120 else text[:117] + "..."


@lake_app.command("ls")
def lake_ls(format_: str = format_option()) -> None:
    """Every table with its latest version, rows and kind."""
    records = [
        {
            "table": info.name,
            "version": info.version,
            "kind": info.kind,
            "mode": info.mode,
            "rows": info.rows,
            "content_hash": info.content_hash,
            "created": info.created_at.strftime("%Y-%m-%d %H:%M:%S"),
        }
        for info in open_lake().tables()
    ]
    print_records(records, format_, shown={"content_hash": _short_hash})


@lake_app.command("log")
def lake_log(
    name: str = typer.Argument(..., help="Table name."), format_: str = format_option()
) -> None:
    """The versions of a table, newest first, with what produced each."""
    from lake.catalog import LakeError

    lake = open_lake()
    try:
        versions = lake.versions(name)
        if not versions:
            lake.resolve(name)
    except LakeError as exc:
        raise CascadeError(str(exc)) from None
    records = [
        {
            "version": info.version,
            "rows": info.rows,
            "snapshot": info.snapshot_id,
            "content_hash": info.content_hash,
            "parents": list(info.parents),
            "producer": info.producer,
            "code": info.code_version,
            "created": info.created_at.strftime("%Y-%m-%d %H:%M:%S"),
        }
        for info in reversed(versions)
    ]
    print_records(records, format_, shown={"content_hash": _short_hash, "snapshot": str})


@lake_app.command("show")
def lake_show(
    ref: str = typer.Argument(..., help="name or name@N"), format_: str = format_option()
) -> None:
    """Schema, row count, hash and lineage of one version."""
    from lake.catalog import LakeError

    try:
        info = open_lake().resolve(ref)
    except LakeError as exc:
        raise CascadeError(str(exc)) from None
    if format_ != "table":
        record = {
            "ref": info.ref,
            "kind": info.kind,
            "mode": info.mode,
            "rows": info.rows,
            "content_hash": info.content_hash,
            "snapshot": info.snapshot_id,
            "parents": list(info.parents),
            "producer": info.producer,
            "params": info.params,
            "code": info.code_version,
            "build": info.build_id,
            "created": info.created_at.isoformat(),
            "files": len(info.files),
            "schema": info.schema,
        }
        print_records([record], format_)
        return
    lines = [
        f"{info.ref} ({info.kind}, {info.mode})",
        f"rows:     {info.rows:,}",
        f"content_hash: {info.content_hash}",
        f"snapshot: {info.snapshot_id}",
        f"parents:  {', '.join(info.parents) or '-'}",
        f"producer: {info.producer}",
        f"params:   {json.dumps(info.params, default=str)}",
        f"code:     {info.code_version}",
        f"build:    {info.build_id}",
        f"created:  {info.created_at.isoformat()}",
        f"files:    {len(info.files)} added by this version",
        "schema:",
        *(f"  {line}" for line in info.schema.splitlines()),
    ]
    for line in lines:
        console.print(plain(line), soft_wrap=True)


def _short_hash(value: str) -> str:
    return value[:12]


@lake_app.command("verify")
def lake_verify(ref: str = typer.Argument(..., help="name or name@N")) -> None:
    """Recompute a version's content hash from every data file it reads."""
    from lake.catalog import LakeError

    try:
        info = open_lake().verify_hash(ref)
    except LakeError as exc:
        raise CascadeError(str(exc)) from None
    console.print(plain(f"{info.ref}: content_hash {info.content_hash} matches its files", "green"))


@lake_app.command("attach")
def lake_attach(
    write: bool = typer.Option(False, "--write", help="Attach read-write (one writer at a time)."),
) -> None:
    """Print the SQL that opens this lake in any DuckDB client (CLI, notebook)."""
    import duckdb

    lake = open_lake()
    console.print(
        plain(f"-- DuckDB {duckdb.__version__}; the extensions load from their PyPI packages")
    )
    for statement in lake.attach_statements(read_only=not write):
        console.print(plain(statement + ";"), soft_wrap=True)
    console.print(plain("USE lake;"))
    console.print(plain("-- cascade's versions are rows of cascade_versions; time travel:"))
    for info in lake.tables():
        console.print(
            plain(
                f'-- {info.ref}: SELECT * FROM "{info.name}" AT (VERSION => {info.snapshot_id});'
            ),
            soft_wrap=True,
        )


@lake_app.command("gc")
def lake_gc(
    older_than_hours: float = typer.Option(
        24.0,
        "--older-than-hours",
        help="Grace period: other orphans go only when at least this old (a commit in "
        "flight may still register a younger file).",
    ),
) -> None:
    """Delete data files that no version refers to (left by killed writers).

    A killed writer's files go at once when its lease shows it has ended (the next commit
    of its table deletes them too); any other orphan only after the grace period.
    """
    orphans = open_lake(write=True).remove_orphans(timedelta(hours=older_than_hours))
    console.print(plain(f"removed {orphans.removed} orphaned data files"))
    if orphans.young:
        console.print(
            plain(
                f"kept {orphans.young} orphaned files younger than {older_than_hours:g} h (a "
                "commit in flight may still register them); --older-than-hours changes the "
                "grace period",
                "yellow",
            )
        )
    if orphans.running:
        console.print(
            plain(f"kept {orphans.running} files of writers that are still running", "yellow")
        )


@lake_app.command("migrate")
def lake_migrate(
    old: Path = typer.Argument(..., help="A lake written by cascade before DuckLake."),
    new: Path = typer.Argument(..., help="Where to write the DuckLake lake (must not exist)."),
) -> None:
    """Convert a lake from cascade's own catalog (catalog.duckdb) to DuckLake, version by version."""
    from lake.catalog import LakeError
    from lake.migrate import migrate_lake

    try:
        counts = migrate_lake(old, new)
    except LakeError as exc:
        raise CascadeError(str(exc)) from None
    for name, versions in counts.items():
        console.print(plain(f"  {name}: {versions} versions"))
    console.print(plain(f"migrated {len(counts)} tables into {new}", "green"))
