"""Rows and columns cut into partitions: the columns tasks exchange (dicts of NumPy arrays,
`Columns`) cut by a partition id (`split_columns`, `split_by_block`), stacked back
(`concat_columns`), frames cut the same way (`cut_frame`), and pieces as a task's return
values (`as_returns`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

Columns = dict[str, np.ndarray]


def key_hash(keys: pl.Series, parts: int) -> np.ndarray:
    return (keys.hash(seed=0) % parts).to_numpy().astype(np.int64)


def cut_frame(frame: pl.DataFrame, part: np.ndarray, count: int) -> list[pl.DataFrame]:
    """A frame cut into `count` pieces by partition id (order kept within each)."""
    if count <= 1:
        return [frame]
    order = np.argsort(part, kind="stable")
    bounds = np.searchsorted(part[order], np.arange(count + 1))
    ordered = frame[order] if frame.height else frame
    return [ordered.slice(int(bounds[k]), int(bounds[k + 1] - bounds[k])) for k in range(count)]


def split_columns(columns: Columns, part: np.ndarray, count: int) -> list[Columns]:
    """Cut equal-length columns into `count` pieces by partition id (order kept within each)."""
    if count <= 1:
        return [columns]
    small = part.astype(np.uint16) if count <= 1 << 16 else part
    order = np.argsort(small, kind="stable")  # a radix sort for 16-bit ids
    bounds = np.searchsorted(small[order], np.arange(count + 1))
    return [
        {name: values[order[bounds[k] : bounds[k + 1]]] for name, values in columns.items()}
        for k in range(count)
    ]


def concat_columns(parts: Sequence[Columns]) -> Columns:
    """Column dicts of one schema, stacked."""
    parts = list(parts)
    if not parts:
        return {}
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def split_by_block(columns: Columns, rows: np.ndarray, starts: np.ndarray) -> list[Columns]:
    """Cut columns by the block that holds each of `rows` (`starts`: every block's first row,
    then the row count), e.g. to send pairs to the block where a row's signature lives."""
    which = np.searchsorted(starts, rows, side="right") - 1
    return split_columns(columns, which, starts.size - 1)


def as_returns(parts: Sequence[Any]) -> Any:
    """Pieces as a task's return value: a tuple for `num_returns=len(parts)` > 1, else the
    one piece (Ray wants a plain value for a single return)."""
    return tuple(parts) if len(parts) > 1 else parts[0]


def sorted_positions(keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each wanted value, its index in the sorted `keys` and whether it is there."""
    if keys.size == 0:
        return np.zeros(wanted.size, dtype=np.int64), np.zeros(wanted.size, dtype=np.bool_)
    at = np.minimum(np.searchsorted(keys, wanted), keys.size - 1)
    return at, keys[at] == wanted
