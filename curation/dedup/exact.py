"""Exact dedup: rows whose normalized text is identical form a cluster."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl
import xxhash

from curation.dedup.clusters import check_input, reference_mask, split_clusters
from curation.dedup.normalize import shingle_text
from lake import StepResult
from lake.operators import counted


def group_keys(norm: pl.Series) -> np.ndarray:
    """The key rows are grouped by: a 64-bit hash of the normalized text (at 1M rows a
    collision has odds ~1e-8); ranking the strings themselves costs several copies of the
    column in memory. Each row's key depends on that row alone (a cluster maps it)."""
    return norm.hash(seed=0).to_numpy()


def exact_dedup(
    df: pl.DataFrame,
    *,
    text_column: str = "problem",
    id_column: str = "id",
    reference_columns: Sequence[str] = ("answer", "tests"),
) -> StepResult:
    """Drop rows whose normalized text equals an earlier-chosen representative's.

    The cluster key is a 64-bit hash of the normalized text; `cluster_id` is `exact:` + the
    representative's id, and `exact_key` (xxh3-64 of the normalized text, stable across
    machines and releases) is recorded on dropped rows.
    """
    check_input(df, text_column, id_column)
    norm = shingle_text(df.get_column(text_column))
    _, labels = np.unique(group_keys(norm), return_inverse=True)
    labels = labels.astype(np.int64)
    has_ref = reference_mask(df, reference_columns)
    kept, dropped, rep = split_clusters(
        df, labels, has_ref, id_column=id_column, reason="exact_duplicate", prefix="exact:"
    )
    if dropped.height:
        keys = norm.gather(np.flatnonzero(rep != np.arange(len(rep)))).to_list()
        dropped = dropped.with_columns(
            pl.Series("exact_key", [xxhash.xxh3_64_hexdigest(k.encode()) for k in keys], pl.String)
        )
    clusters = int((np.bincount(labels) > 1).sum()) if df.height else 0
    return counted(df.height, kept, dropped, {"clusters_with_duplicates": clusters})
