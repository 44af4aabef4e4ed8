"""Prompts from preference pairs (the RLHF prompt set), and a seeded subsample.

The RLHF stage trains on prompts from the reward model's own preference data (prompts
outside the RM's distribution destabilize training). Ingesting a `preference_pairs` table
with `problem=prompt` gives prompts rows whose `metadata` holds the pair's other columns;
`prompts_from_pairs` lifts what an RL prompt needs back into columns.
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl
import xxhash

from curation.preferences.contexts import ContextError, context_messages, context_text
from curation.preferences.pairs import drops_frame, json_object
from curation.prompt_ids import prompt_ids
from lake.steps import StepResult

LEFT_OUT_OF_METADATA = ("chosen", "rejected", "messages")
"""Left out of the prompts' metadata: `messages` becomes a column, and an RL prompt set does
not carry the responses (they stay in the pinned preference table the build read)."""


def prompts_from_pairs(df: pl.DataFrame) -> StepResult:
    """Prompts rows from ingested preference pairs: `messages`, `category`, `pair_source`
    (the pair's own source) and `pair_method` lifted from metadata, `context_text` (the whole
    context as one text, what dedup and decontamination read), and `id` recomputed from it
    so two conversations that end with the same user turn stay apart.

    Raises if no row carries pair fields (the source is not a preference_pairs table); a row
    whose messages are not chat turns is dropped as `malformed`.
    """
    if df.height and not any(
        "chosen" in _keys(raw) and "messages" in _keys(raw)
        for raw in df.get_column("metadata").to_list()
    ):
        raise ValueError(
            "rlhf prompts read preference_pairs tables (rows with prompt, messages, chosen, "
            "rejected), ingested with problem=prompt; no row's metadata has 'messages' and "
            "'chosen'"
        )
    rows: list[dict[str, Any]] = []
    drops: list[dict[str, Any]] = []
    for row in df.iter_rows(named=True):
        meta = json_object(row["metadata"])
        try:
            turns = context_messages(meta.get("messages"))
        except ContextError as exc:
            drops.append(
                {"uid": row["uid"], "reason": "malformed", "field": "messages", "error": str(exc)}
            )
            continue
        rows.append(
            {
                "uid": row["uid"],
                "messages": json.dumps(turns, ensure_ascii=False),
                "context_text": context_text(turns),
                "category": _text_or_none(meta.get("category")),
                "pair_source": _text_or_none(meta.get("source")),
                "pair_method": _text_or_none(meta.get("method")),
                "metadata": json.dumps(
                    {k: v for k, v in meta.items() if k not in LEFT_OUT_OF_METADATA},
                    ensure_ascii=False,
                ),
            }
        )
    lifted = pl.DataFrame(
        rows,
        schema={
            "uid": pl.String,
            "messages": pl.String,
            "context_text": pl.String,
            "category": pl.String,
            "pair_source": pl.String,
            "pair_method": pl.String,
            "metadata": pl.String,
        },
    )
    replaced = [c for c in lifted.columns if c != "uid" and c in df.columns]
    kept = df.drop(replaced).join(lifted, on="uid", how="inner", maintain_order="left")
    kept = kept.with_columns(prompt_ids(kept.get_column("context_text")).alias("id"))
    stats = {"rows_in": df.height, "prompts": kept.height, "multi_turn": _multi_turn(kept)}
    return StepResult(kept=kept, dropped=drops_frame(df, drops), stats=stats)


def subsample(df: pl.DataFrame, *, size: int, seed: int = 0, key: str = "uid") -> StepResult:
    """Keep `size` rows chosen by a seeded hash of `key` (0 or >= rows: keep all).

    The rows with the smallest xxh3(seed, key) are kept, so the choice does not depend on row
    order and growing the input changes the sample only where new rows outrank old ones.
    Dropped rows are `subsampled`, with their `sample_rank`.
    """
    if size < 0:
        raise ValueError(f"subsample size must be >= 0, got {size}")
    if size == 0 or df.height <= size:
        return StepResult(kept=df, dropped=df.clear().with_columns(reason=pl.lit("")))
    ranks = pl.Series(
        [xxhash.xxh3_64_intdigest(str(v).encode(), seed=seed) for v in df.get_column(key)],
        dtype=pl.UInt64,
    ).rank("ordinal")
    chosen = ranks <= size
    kept = df.filter(chosen)
    dropped = df.filter(~chosen).with_columns(
        reason=pl.lit("subsampled"), sample_rank=ranks.filter(~chosen)
    )
    return StepResult(kept=kept, dropped=dropped, stats={"size": size, "seed": seed})


def _keys(raw: str | None) -> set[str]:
    try:
        return set(json_object(raw))
    except ValueError:
        return set()


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _multi_turn(df: pl.DataFrame) -> int:
    return sum(len(json.loads(m)) > 1 for m in df.get_column("messages").to_list())
