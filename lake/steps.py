"""The one contract between operators and the runner: what a step keeps and what it drops.

An operator is a plain function `(pl.DataFrame, ...params) -> StepResult`. `dropped` holds
the dropped input rows with all their columns plus `reason` (a short code such as
`contaminated` or `near_duplicate`) and any detail columns the step wants recorded
(`benchmark`, `duplicate_of`, ...). The runner turns those into rows of the `drops` table.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl


@dataclass
class StepResult:
    """Rows an operator keeps, rows it drops (with `reason` + detail columns), and stats."""

    kept: pl.DataFrame
    dropped: pl.DataFrame
    stats: dict[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.dropped.height and "reason" not in self.dropped.columns:
            raise ValueError("StepResult.dropped must have a 'reason' column")


@dataclass(frozen=True)
class Step:
    """One recipe step: a name, an operator `(df, **params) -> StepResult`, its parameters."""

    name: str
    run: Callable[..., StepResult]
    params: dict[str, Any] = field(default_factory=dict)



def drop_rows(
    dropped: pl.DataFrame,
    *,
    input_columns: list[str],
    table: str,
    version: int,
    step: str,
    id_column: str = "id",
) -> pl.DataFrame:
    """Turn a step's dropped frame into rows of the `drops` table.

    Every column of `dropped` that was not an input column (other than `reason`) is packed
    into the JSON `detail`, so a reader sees exactly what the step measured.
    """
    detail_cols = [c for c in dropped.columns if c not in input_columns and c != "reason"]
    if dropped.height == 0:
        return pl.DataFrame(
            schema={
                "table": pl.String,
                "version": pl.Int64,
                "row_id": pl.String,
                "step": pl.String,
                "reason": pl.String,
                "detail": pl.String,
            }
        )
    if detail_cols:
        detail = dropped.select(detail_cols).to_dicts()
        detail_json = [json.dumps(d, default=str, ensure_ascii=False) for d in detail]
    else:
        detail_json = [None] * dropped.height
    return pl.DataFrame(
        {
            "table": [table] * dropped.height,
            "version": [version] * dropped.height,
            "row_id": dropped.get_column(id_column).cast(pl.String),
            "step": [step] * dropped.height,
            "reason": dropped.get_column("reason").cast(pl.String),
            "detail": detail_json,
        },
        schema_overrides={"version": pl.Int64, "detail": pl.String},
    )
