"""A verifier's inputs read from a table: a column, or a key of the JSON `metadata` column.

Inputs are taken as users have them: per-row Python objects (a Polars Object column) or JSON
text, with shapes that differ between rows. Shared by the table verifiers of every reward
kind (`curation.verify.rewards`).
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from curation.verify.result import json_value


def column_values(df: pl.DataFrame, field: str) -> list[Any]:
    """Values of `field`: a column, or a key of the JSON `metadata` column (prompts tables)."""
    if field in df.columns:
        return df.get_column(field).to_list()
    if "metadata" in df.columns:
        values = []
        for n, raw in enumerate(df.get_column("metadata").to_list()):
            try:
                meta = (json.loads(raw) if isinstance(raw, str) else raw) if raw else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"row {n}: metadata is not valid JSON ({exc})") from None
            values.append(meta.get(field))
        if any(v is not None for v in values):
            return values
    raise ValueError(f"no field {field!r}: columns are {df.columns} (and not in metadata)")


def instruction_inputs(
    df: pl.DataFrame, reference_field: str, kwargs_field: str
) -> tuple[list[Any], list[Any], str]:
    """Per row, IFEval's instruction ids and kwargs, and the name of the kwargs' field.

    The reference is a list of ids (kwargs in `kwargs_field`), or one dict per row holding
    `instruction_id_list` and `kwargs` (as IFEval's own records do).
    """
    references = [json_value(v) for v in column_values(df, reference_field)]
    dicts = all(isinstance(r, dict) for r in references if r is not None)
    if dicts and any(isinstance(r, dict) and "instruction_id_list" in r for r in references):
        ids = [r.get("instruction_id_list") if r else None for r in references]
        kwargs = [r.get("kwargs") if r else None for r in references]
        return ids, kwargs, f"{reference_field}.kwargs"
    return references, column_values(df, kwargs_field), kwargs_field
