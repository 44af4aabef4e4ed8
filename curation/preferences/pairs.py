"""Pair rows in the `preference_pairs` shape, and the helpers every pair builder shares.

A builder makes `PairRow`s and turns them into a frame with `pair_frame`; the frame also
carries two texts the set-level steps read (`context_text` for decontamination, `pair_text`
for dedup of whole pairs), which `select_pair_columns` removes at the end of a recipe.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import polars as pl

import schemas.preferences  # noqa: F401  (registers the preference_pairs table kind)
from curation.preferences.contexts import context_text, messages_json
from curation.prompt_ids import prompt_ids
from lake.steps import StepResult
from schemas.preferences import PREFERENCE_PAIRS

PAIR_COLUMNS = tuple(f.name for f in PREFERENCE_PAIRS.schema)
HELPER_COLUMNS = ("context_text", "pair_text")
PROMPT_ONLY_COLUMNS = ("id", "problem", "answer", "domain")
"""Columns of the ingested prompt rows that a pair does not keep (its own columns say it)."""

PAIR_SCHEMA: dict[str, pl.DataType] = {
    "uid": pl.String(),
    "prompt_uid": pl.String(),
    "prompt_id": pl.String(),
    "source": pl.String(),
    "source_id": pl.String(),
    "source_rows": pl.List(pl.String()),
    "method": pl.String(),
    "prompt": pl.String(),
    "messages": pl.String(),
    "chosen": pl.String(),
    "rejected": pl.String(),
    "margin": pl.Float64(),
    "category": pl.String(),
    "metadata": pl.String(),
    "context_text": pl.String(),
    "pair_text": pl.String(),
}


@dataclass
class PairRow:
    """One pair as a builder makes it; `pair_frame` adds the derived columns."""

    uid: str
    prompt_uid: str
    source: str
    source_id: str | None
    source_rows: list[str]
    method: str
    turns: list[dict[str, str]]
    chosen: str
    rejected: str
    margin: float | None = None
    category: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def pair_frame(rows: list[PairRow]) -> pl.DataFrame:
    """Pair rows as a frame: the contract's columns, `source_id` and the two helper texts."""
    records = []
    for row in rows:
        record = asdict(row)
        turns = record.pop("turns")
        text = context_text(turns)
        record.update(
            prompt=turns[-1]["content"],
            messages=messages_json(turns),
            context_text=text,
            pair_text="\n\n".join((text, row.chosen, row.rejected)),
            metadata=json.dumps(row.metadata, ensure_ascii=False, sort_keys=True),
        )
        records.append(record)
    frame = pl.DataFrame(records, schema={k: v for k, v in PAIR_SCHEMA.items() if k != "prompt_id"})
    frame = frame.with_columns(prompt_ids(frame.get_column("context_text")).alias("prompt_id"))
    return frame.select(list(PAIR_SCHEMA))


def select_pair_columns(df: pl.DataFrame) -> StepResult:
    """Last step of a pair recipe: the contract's columns first, then what the recipe added
    (source_id, measurements, lineage), without the helper texts and prompt-only columns.

    Drops no row; fails with the missing column's name if a pair column is absent.
    """
    missing = [c for c in PAIR_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"select_pair_columns: rows lack pair columns {missing}")
    leave_out = set(HELPER_COLUMNS) | set(PROMPT_ONLY_COLUMNS)
    rest = [c for c in df.columns if c not in PAIR_COLUMNS and c not in leave_out]
    return StepResult(kept=df.select(*PAIR_COLUMNS, *rest), dropped=df.clear())


def json_object(raw: str | None) -> dict[str, Any]:
    """A row's `metadata` JSON as a dict (empty when null); ValueError if it is not an object."""
    if raw is None or raw == "":
        return {}
    meta = json.loads(raw)
    if not isinstance(meta, dict):
        raise ValueError(f"metadata is a JSON {type(meta).__name__}, expected an object")
    return meta


def drops_frame(df: pl.DataFrame, drops: list[dict[str, Any]]) -> pl.DataFrame:
    """The input rows named by `drops` (dicts with `uid`, `reason` and detail keys), with
    their reason and detail columns, in input order. Detail values are stored as text."""
    if not drops:
        return df.clear().with_columns(reason=pl.lit(None, pl.String))
    keys = list(dict.fromkeys(k for d in drops for k in d))
    detail = pl.DataFrame(
        {k: [_text(d.get(k)) for d in drops] for k in keys},
        schema={k: pl.String for k in keys},
    )
    return (
        df.with_row_index("_order")
        .join(detail, on="uid", how="inner")
        .sort("_order")
        .drop("_order")
    )


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
