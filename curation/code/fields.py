"""Reading a field that is either a column or a key of the JSON `metadata` column.

Ingest keeps every source field it does not map to a column in `metadata` (a JSON object),
so a code prompt's `tests` or `url` lives there until a step lifts it into a column.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import polars as pl

from lake.steps import StepResult


def field_values(df: pl.DataFrame, name: str, *, required: bool = True) -> list[Any]:
    """Values of `name`: the column if present, else the key of each row's `metadata` JSON.

    Raises ValueError naming the row when `metadata` is not JSON, and (if `required`) when
    neither the column nor any row's metadata holds the field.
    """
    if name in df.columns:
        return df.get_column(name).to_list()
    values: list[Any] = [None] * df.height
    if "metadata" in df.columns:
        for n, raw in enumerate(df.get_column("metadata").to_list()):
            if not raw:
                continue
            try:
                meta = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ValueError(f"row {n}: metadata is not valid JSON ({exc.msg})") from None
            if isinstance(meta, dict):
                values[n] = meta.get(name)
    if required and df.height and all(v is None for v in values):
        raise ValueError(
            f"no field {name!r}: not a column ({df.columns}) and not in any row's metadata"
        )
    return values


def lift_fields(df: pl.DataFrame, fields: Sequence[str] = ("tests",)) -> StepResult:
    """Recipe step: copy metadata fields into columns (nested values as JSON text).

    Drops nothing. Columns already present are left as they are, so the step is idempotent.
    Downstream steps (`exact_dedup`/`near_dedup` keep rows with different `tests` apart)
    then see the field as a plain column.
    """
    columns = []
    for name in fields:
        if name in df.columns:
            continue
        values = field_values(df, name, required=False)
        text = [
            None if v is None else v if isinstance(v, str) else json.dumps(v, sort_keys=True)
            for v in values
        ]
        columns.append(pl.Series(name, text, dtype=pl.String))
    kept = df.with_columns(columns) if columns else df
    return StepResult(kept=kept, dropped=df.clear())
