"""`cascade verify`: run a verifier over a file or a lake table."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import typer

from cli import app
from cli.console import CascadeError, console, state
from cli.files import read_lake_table, write_rows
from curation.verify.table import KINDS, verify_frame


def _read(path: Path) -> pl.DataFrame:
    if not path.exists():
        raise CascadeError(f"input file {path} does not exist")
    try:
        if path.suffix == ".parquet":
            return pl.read_parquet(path)
        if path.suffix in (".jsonl", ".ndjson"):
            return pl.read_ndjson(path, infer_schema_length=None)
        if path.suffix == ".json":
            return pl.read_json(path)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise CascadeError(f"cannot read {path}: {exc}") from None
    raise CascadeError(f"{path}: unsupported input format (use .jsonl, .json or .parquet)")


@app.command("verify")
def verify_command(
    kind: str = typer.Option(..., "--kind", help="math | code | if | swe"),
    out: str = typer.Option(
        ..., "--out", help="Output .jsonl/.parquet file, or a lake table name with --table."
    ),
    input_: str = typer.Option(None, "--input", help="Input .jsonl/.json/.parquet file."),
    table: str = typer.Option(None, "--table", help="Lake table to read (name or name@N)."),
    response_field: str = typer.Option("response", "--response-field"),
    reference_field: str = typer.Option(
        None,
        "--reference-field",
        help="Default: answer (math), tests (code), instruction_id_list (if), patch (swe).",
    ),
) -> None:
    """Verify responses; keeps every input column and adds passed, score and detail."""
    if kind not in KINDS:
        raise CascadeError(f"unknown --kind {kind!r}; choose one of {', '.join(KINDS)}")
    if (input_ is None) == (table is None):
        raise CascadeError("give exactly one of --input FILE or --table NAME")
    parents: list[str] = []
    if table is not None:
        df, info = read_lake_table(table)
        parents = [info.ref]
    else:
        df = _read(Path(input_))
    assert isinstance(df, pl.DataFrame)
    try:
        result = verify_frame(
            df, kind, response_field=response_field, reference_field=reference_field
        )
    except ValueError as exc:
        source = input_ or table
        raise CascadeError(f"{source}: {exc}") from None
    passed = int(result.get_column("passed").sum() or 0)
    undecided = result.get_column("passed").null_count()
    out_path = Path(out)
    if table is not None and out_path.suffix not in (".jsonl", ".ndjson", ".parquet"):
        from lake.catalog import Lake

        info = Lake(state.lake_path).commit(
            out,
            result,
            kind="generic",
            parents=parents,
            producer=f"cascade verify --kind {kind}",
            params={
                "kind": kind,
                "response_field": response_field,
                "reference_field": reference_field,
            },
        )
        where = info.ref
    else:
        write_rows(result, out_path)
        where = str(out_path)
    console.print(
        f"verified {result.height:,} rows ({kind}): {passed:,} passed, "
        f"{result.height - passed - undecided:,} failed, {undecided:,} undecided -> {where}"
    )
