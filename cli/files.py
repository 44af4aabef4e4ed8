"""Reading and writing the plain files that standalone commands take and produce.

Inputs keep their values exactly: a field whose rows hold objects or lists of different
shapes (a `tests` dict in one row and a list in the next; IFEval `kwargs` dicts with different
keys) is carried as the JSON text of each row's value, and written back as that same value,
so no key is added or lost on the way through a command.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cli.console import CascadeError, open_lake
from lake.files import json_lines  # stdlib only

if TYPE_CHECKING:
    import polars as pl

    from lake.catalog import VersionInfo

INPUT_SUFFIXES = (".jsonl", ".ndjson", ".json", ".parquet")


@dataclass
class InputRows:
    """Rows read from a file, and which columns hold nested values as JSON text."""

    frame: pl.DataFrame
    json_columns: frozenset[str]
    lines: list[int]


def read_rows(path: Path, *, required: tuple[str, ...] = (), text_fields: tuple[str, ...] = ()):
    """Rows of a .jsonl/.json/.parquet file; a bad line is named by file and line.

    `required` fields must be present in every row; `text_fields` must also be strings.
    """
    import polars as pl

    if not path.exists():
        raise CascadeError(f"input file {path} does not exist")
    suffix = path.suffix.lower()
    if suffix not in INPUT_SUFFIXES:
        raise CascadeError(f"{path}: unsupported input format (use .jsonl, .json or .parquet)")
    if suffix == ".parquet":
        try:
            frame = pl.read_parquet(path)
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise CascadeError(f"cannot read {path}: {exc}") from None
        return InputRows(frame, frozenset(), list(range(1, frame.height + 1)))
    records: list[dict] = []
    lines: list[int] = []
    try:
        for line_no, record in _records(path):
            for name in required + text_fields:
                if name not in record or record[name] is None:
                    raise CascadeError(f"{path}:{line_no}: field {name!r} is missing")
            for name in text_fields:
                if not isinstance(record[name], str):
                    raise CascadeError(
                        f"{path}:{line_no}: field {name!r} must be a string, "
                        f"got {type(record[name]).__name__}"
                    )
            records.append(record)
            lines.append(line_no)
    except ValueError as exc:
        raise CascadeError(str(exc)) from None
    if not records:
        raise CascadeError(f"{path}: no rows")
    frame, nested = frame_from_records(records)
    return InputRows(frame, nested, lines)


def _records(path: Path):
    """(line or item number, object): jsonl line by line, or the items of a JSON array."""
    with open(path, "rb") as fh:
        head = fh.read(4096).lstrip()
    if path.suffix.lower() == ".json" and head.startswith(b"["):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
        for index, item in enumerate(data, start=1):
            if not isinstance(item, dict):
                raise ValueError(f"{path}: item {index} is a {type(item).__name__}, not an object")
            yield index, item
        return
    yield from json_lines(path)


def frame_from_records(records: list[dict]) -> tuple[pl.DataFrame, frozenset[str]]:
    """A frame of the records; fields holding objects or lists become per-row JSON text.

    A row that lacks a field gets null there (the field is not written back for it).
    """
    import polars as pl

    keys = list(dict.fromkeys(k for r in records for k in r))
    nested = frozenset(k for k in keys if any(isinstance(r.get(k), dict | list) for r in records))
    columns: dict[str, pl.Series] = {}
    for key in keys:
        values = [r.get(key) for r in records]
        if key in nested:
            columns[key] = pl.Series(
                key,
                [None if v is None else json.dumps(v, ensure_ascii=False) for v in values],
                dtype=pl.String,
            )
            continue
        try:
            columns[key] = pl.Series(key, values, strict=True)
        except (TypeError, pl.exceptions.PolarsError, OverflowError):
            columns[key] = pl.Series(
                key,
                [v if v is None or isinstance(v, str) else json.dumps(v) for v in values],
                dtype=pl.String,
            )
    return pl.DataFrame(list(columns.values())), nested


def write_rows(df: pl.DataFrame, path: Path, json_columns: frozenset[str] = frozenset()) -> None:
    """Write a frame as .jsonl or .parquet (by suffix); JSON-text columns become values again."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        df.write_parquet(path)
        return
    if path.suffix not in (".jsonl", ".ndjson"):
        raise CascadeError(f"{path}: unsupported output format (use .jsonl or .parquet)")
    if not json_columns & set(df.columns):
        df.write_ndjson(path)
        return
    with open(path, "w", encoding="utf-8") as fh:
        for row in df.iter_rows(named=True):
            for key in json_columns & row.keys():
                if row[key] is not None:
                    row[key] = json.loads(row[key])
            fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")


def read_lake_table(ref: str) -> tuple[pl.DataFrame, VersionInfo]:
    """A lake table version (`name` or `name@N`) of the CLI's lake, and its catalog entry."""
    import polars as pl

    from lake.catalog import LakeError

    lake = open_lake()
    try:
        info = lake.resolve(ref)
        frame = pl.from_arrow(lake.read(info.ref))
    except LakeError as exc:
        raise CascadeError(str(exc)) from None
    assert isinstance(frame, pl.DataFrame)
    return frame, info


def is_file_target(out: str) -> bool:
    """True when `--out` names a file (by suffix) rather than a lake table."""
    return Path(out).suffix.lower() in (".jsonl", ".ndjson", ".parquet")
