"""Cluster bookkeeping shared by exact and near dedup: which row represents a cluster, and
the kept / dropped frames with what each dropped row duplicated."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl


def reference_mask(df: pl.DataFrame, reference_columns: Sequence[str]) -> np.ndarray:
    """True where a row has a non-empty value in any of the reference columns present."""
    mask = np.zeros(df.height, dtype=bool)
    for name in reference_columns:
        if name not in df.columns:
            continue
        col = df.get_column(name)
        if col.dtype == pl.String:
            ok = col.is_not_null() & (col.str.strip_chars() != "")
        elif isinstance(col.dtype, pl.List):
            ok = col.is_not_null() & (col.list.len() > 0)
        else:
            ok = col.is_not_null()
        mask |= ok.fill_null(False).to_numpy()
    return mask


def representatives(labels: np.ndarray, has_ref: np.ndarray) -> np.ndarray:
    """Per row, the row index of its cluster's representative (reference first, then order)."""
    n = len(labels)
    priority = np.where(has_ref, 0, n).astype(np.int64) + np.arange(n, dtype=np.int64)
    best = np.full(labels.max() + 1 if n else 0, 2 * n, dtype=np.int64)
    np.minimum.at(best, labels, priority)
    return best[labels] % n if n else best


def split_clusters(
    df: pl.DataFrame,
    labels: np.ndarray,
    has_ref: np.ndarray,
    *,
    id_column: str,
    reason: str,
    prefix: str,
    extra: dict[str, np.ndarray] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, np.ndarray]:
    """Kept rows and dropped rows (with cluster_id, duplicate_of, cluster_size, extras)."""
    rep = representatives(labels, has_ref)
    is_rep = rep == np.arange(len(labels))
    sizes = np.bincount(labels)[labels]
    ids = df.get_column(id_column).cast(pl.String)
    drop_idx = np.flatnonzero(~is_rep)
    rep_ids = ids.gather(rep[drop_idx])
    dropped = df[drop_idx].with_columns(
        pl.lit(reason).alias("reason"),
        (pl.lit(prefix) + rep_ids).alias("cluster_id"),
        rep_ids.alias("duplicate_of"),
        pl.Series("cluster_size", sizes[drop_idx], dtype=pl.Int64),
        *[pl.Series(k, v[drop_idx]) for k, v in (extra or {}).items()],
    )
    return df[np.flatnonzero(is_rep)], dropped, rep


def check_input(df: pl.DataFrame, text_column: str, id_column: str) -> None:
    for name in (text_column, id_column):
        if name not in df.columns:
            raise ValueError(f"dedup input has no column {name!r}; columns: {df.columns}")
    nulls = df.get_column(id_column).is_null()
    if nulls.any():
        raise ValueError(f"dedup input column {id_column!r} is null at row {nulls.arg_max()}")
