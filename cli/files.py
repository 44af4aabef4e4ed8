"""Reading and writing the plain files that standalone commands take and produce."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from cli.console import CascadeError, state
from lake.catalog import Lake, LakeError, VersionInfo
from lake.files import json_lines


def read_jsonl(path: Path, text_field: str, id_field: str | None = None) -> pl.DataFrame:
    """Rows of a jsonl file; a bad line is reported by file, line and field.

    With `id_field` and no such column, each row's id is its 1-based line number.
    """
    if not path.exists():
        raise CascadeError(f"input file {path} does not exist")
    records: list[dict] = []
    lines: list[int] = []
    try:
        for line_no, record in json_lines(path):
            if not isinstance(record.get(text_field), str):
                raise CascadeError(
                    f"{path}:{line_no}: field {text_field!r} must be a string, "
                    f"got {type(record.get(text_field)).__name__}"
                )
            records.append(record)
            lines.append(line_no)
    except ValueError as exc:
        raise CascadeError(str(exc)) from None
    if not records:
        raise CascadeError(f"{path}: no rows")
    df = pl.DataFrame(records, infer_schema_length=None)
    if id_field is None:
        return df
    if id_field not in df.columns:
        df = df.with_columns(pl.Series(id_field, [str(n) for n in lines], dtype=pl.String))
    missing = df.get_column(id_field).is_null()
    if missing.any():
        raise CascadeError(
            f"{path}:{lines[int(missing.arg_max() or 0)]}: field {id_field!r} is null"
        )
    return df


def write_rows(df: pl.DataFrame, path: Path) -> None:
    """Write a frame as .jsonl or .parquet, chosen by the file's suffix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        df.write_parquet(path)
    elif path.suffix in (".jsonl", ".ndjson"):
        df.write_ndjson(path)
    else:
        raise CascadeError(f"{path}: unsupported output format (use .jsonl or .parquet)")


def read_lake_table(ref: str) -> tuple[pl.DataFrame, VersionInfo]:
    """A lake table version (`name` or `name@N`) of the CLI's lake, and its catalog entry."""
    lake = Lake(state.lake_path)
    try:
        info = lake.resolve(ref)
        frame = pl.from_arrow(lake.read(info.ref))
    except LakeError as exc:
        raise CascadeError(str(exc)) from None
    assert isinstance(frame, pl.DataFrame)
    return frame, info
