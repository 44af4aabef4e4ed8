"""The competitive-coding cutoff rule: problems released after the cutoff are evaluation's.

Competitive-coding evaluation uses only problems released after the training data cutoff
(August 2024 in the Cascade recipe), so training keeps only problems released on or before
it. A source that records a release date (`release_date`, `contest_date`, ...) is held to
the rule row by row; rows without a date are kept by default (`undated="keep"`) and marked,
or dropped with `undated="drop"` for a strict build.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Literal

import polars as pl

from curation.code.fields import field_values
from lake.operators import decide
from lake.steps import StepResult

DEFAULT_CUTOFF = "2024-08-01"


def _as_datetime(value: object, row: int, field: str) -> datetime | None:
    """A release date from ISO text, a date/datetime, or Unix seconds; ValueError names the
    row when it is none of them."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(float(value), tz=UTC)
    if isinstance(value, str):
        text = value.strip().replace("Z", "+00:00")
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(
                f"row {row}: {field} {value!r} is not an ISO date (YYYY-MM-DD[THH:MM:SS])"
            ) from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    raise ValueError(f"row {row}: {field} has type {type(value).__name__}, not a date")


def drop_after_cutoff(
    df: pl.DataFrame,
    *,
    cutoff: str = DEFAULT_CUTOFF,
    date_field: str = "release_date",
    undated: Literal["keep", "drop"] = "keep",
) -> StepResult:
    """Drop rows released after `cutoff` (an ISO date or datetime; a date means its end).

    Every row gets `release_date` parsed into `released_at` (UTC, null when unknown). Dropped
    rows carry reason `released_after_cutoff` (or `release_date_unknown` with
    `undated="drop"`) and `cutoff`.
    """
    if undated not in ("keep", "drop"):
        raise ValueError(f"undated must be 'keep' or 'drop', got {undated!r}")
    limit = _as_datetime(cutoff, 0, "cutoff")
    if limit is None:
        raise ValueError("cutoff is empty; give an ISO date such as 2024-08-01")
    if len(cutoff.strip()) == 10:  # a bare date: the whole day is before the cutoff
        limit = limit.replace(hour=23, minute=59, second=59, microsecond=999999)
    values = field_values(df, date_field, required=False)
    released = [_as_datetime(v, n, date_field) for n, v in enumerate(values)]
    measured = df.with_columns(pl.Series("released_at", released, dtype=pl.Datetime("us", "UTC")))
    unknown = pl.col("released_at").is_null()
    reason = pl.when((pl.col("released_at") > pl.lit(limit)).fill_null(False)).then(
        pl.lit("released_after_cutoff")
    )
    if undated == "drop":
        reason = reason.when(unknown).then(pl.lit("release_date_unknown"))
    return decide(
        measured,
        reason,
        detail={"cutoff": pl.lit(cutoff)},
        stats={"undated": sum(r is None for r in released), "cutoff": cutoff},
    )
