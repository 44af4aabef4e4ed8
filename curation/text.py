"""Prompt normalization and stable prompt ids, shared by ingest and exact dedup.

Two prompts that differ only in Unicode form, case or whitespace get the same id, so exact
duplicates collapse to one id wherever they come from.
"""

from __future__ import annotations

import polars as pl
import xxhash


def normalized_prompt(expr: pl.Expr) -> pl.Expr:
    """NFKC, lower case, whitespace runs collapsed to one space, trimmed."""
    return (
        expr.str.normalize("NFKC")
        .str.to_lowercase()
        .str.replace_all(r"\s+", " ")
        .str.strip_chars()
    )


def prompt_ids(texts: pl.Series) -> pl.Series:
    """Stable 128-bit ids (hex) of the normalized prompt texts.

    xxh3-128 is a fixed, documented algorithm, so ids are the same on every machine and
    release, unlike Polars' built-in hash.

    >>> prompt_ids(pl.Series(["What is 1+1?", "what  is 1+1? "])).to_list()[0][:8]
    '5ef10e75'
    """
    normalized = pl.select(normalized_prompt(pl.lit(texts))).to_series()
    digest = xxhash.xxh3_128_hexdigest
    return pl.Series(
        "id", [digest(t.encode()) if t is not None else None for t in normalized], dtype=pl.String
    )
