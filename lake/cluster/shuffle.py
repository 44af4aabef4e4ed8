"""Shuffles and lookups that plans build from tasks: frames exchanged between tasks by a hash
of their key columns (`exchange`, reduced once per partition), the first row of each value
(`first_rows`), a function mapped over every block (`map_frames`), and columns added by
looking keys up in a partitioned table (`lookup`). Each runs as Ray tasks passing Arrow or
NumPy partitions through the object store (see the package docstring for why not Ray
Data's hash shuffle).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from lake.cluster.blocks import Blocks, as_frame, portable
from lake.cluster.executor import RayExecutor
from lake.cluster.partitions import (
    Columns,
    as_returns,
    concat_columns,
    cut_frame,
    sorted_positions,
    split_columns,
)


def map_frames(
    ex: RayExecutor, table: Blocks, fn: Callable[..., pl.DataFrame], *args: Any
) -> Blocks:
    """`fn(frame, start, *args)` on every block (a new table of the frames it returns,
    in block order; `start` is the block's first row in the table)."""
    starts = table.starts
    outs = [
        ex.call(_map_frame, 2, fn, ref, int(starts[b]), *args) for b, ref in enumerate(table.refs)
    ]
    metas = ex.get([o[1] for o in outs])
    return ex.as_blocks([o[0] for o in outs], [m[0] for m in metas], [m[1] for m in metas])


def exchange(
    ex: RayExecutor,
    sources: Sequence[Sequence[Any]],
    by: Sequence[Sequence[str]],
    reduce: Callable[..., Any],
    *args: Any,
    returns: int = 1,
) -> list[list[Any]]:
    """A shuffle of frames: every source (refs of frames) is cut on its `by` columns'
    hash into the shuffle partitions, and `reduce(*frames, *args)` runs once per
    partition with each source's rows of it (rows of one key meet in one partition).
    Returns, per partition, `returns` refs of what `reduce` returned (frames travel as
    Arrow tables; `as_frame` reads them back)."""
    p = ex.num_partitions
    cut = [
        [ex.call(_hash_cut, p, ref, list(cols), p) for ref in refs]
        for refs, cols in zip(sources, by, strict=True)
    ]
    counts = [len(c) for c in cut]
    return [
        ex.call(
            _reduce_partition,
            returns,
            reduce,
            counts,
            returns,
            args,
            *[c[q] for src in cut for c in src],
        )
        for q in range(p)
    ]


def first_rows(ex: RayExecutor, table: Blocks, column: str) -> Blocks:
    """The rows whose `column` value is its first occurrence in the table, in order
    (`unique(column, keep="first", maintain_order=True)`): a shuffle on the value."""
    if not table.height:
        return table
    starts = table.starts
    indexed = map_frames(ex, table, _with_row_and, [column])
    firsts = exchange(ex, [indexed.refs], [[column]], _first_row_of)
    nb = len(table.refs)
    routed = [ex.call(_cut_rows_by_block, nb, f[0], starts) for f in firsts]
    outs = [
        ex.call(_take_rows, 2, ref, int(starts[b]), *[r[b] for r in routed])
        for b, ref in enumerate(table.refs)
    ]
    metas = ex.get([o[1] for o in outs])
    return ex.as_blocks([o[0] for o in outs], [m[0] for m in metas], [m[1] for m in metas])


def lookup(
    ex: RayExecutor,
    queries: Sequence[Any],
    key: str,
    table: Sequence[Any],
    table_key: str,
    values: Mapping[str, tuple[str, Any]],
) -> list[Any]:
    """Add columns to `queries` (refs of column dicts) by looking `key` up in `table`
    (refs of column dicts partitioned by `table_key % len(table)`, sorted by it).

    `values` maps each new column to (table column, default for keys not found). Returns
    one ref per table partition of the queries routed there, with the new columns.
    """
    p = len(table)
    routed = [ex.call(_route_by_modulo, p, q, key, p) for q in queries]
    return [
        ex.remote(_lookup_partition).remote(
            table[t], key, table_key, dict(values), *[r[t] for r in routed]
        )
        for t in range(p)
    ]


def _map_frame(fn: Callable[..., pl.DataFrame], block: Any, start: int, *args: Any) -> tuple:
    frame = fn(as_frame(block), start, *args)
    return frame.to_arrow(), (frame.height, frame.schema)


def _hash_cut(block: Any, columns: list[str], parts: int) -> Any:
    frame = as_frame(block)
    if parts <= 1:
        return frame.to_arrow()
    part = (frame.select(columns).hash_rows(seed=0) % parts).to_numpy().astype(np.int64)
    return as_returns([c.to_arrow() for c in cut_frame(frame, part, parts)])


def _reduce_partition(
    reduce: Callable[..., Any], counts: list[int], returns: int, args: tuple, *parts: Any
) -> Any:
    frames, at = [], 0
    for count in counts:
        got = [as_frame(p) for p in parts[at : at + count]]
        at += count
        full = [f for f in got if f.height]
        if not got:
            frames.append(pl.DataFrame())
        elif len(full) > 1:
            frames.append(pl.concat(full, how="vertical_relaxed"))
        else:
            frames.append(full[0] if full else got[0])
    out = portable(reduce(*frames, *args))
    return out if returns == 1 else tuple(out)


def _with_row_and(frame: pl.DataFrame, start: int, columns: list[str]) -> pl.DataFrame:
    return frame.select(columns).with_columns(
        pl.int_range(start, start + frame.height, dtype=pl.Int64).alias("_row")
    )


def _first_row_of(frame: pl.DataFrame) -> pl.DataFrame:
    if not frame.height:
        return pl.DataFrame({"_row": pl.Series([], dtype=pl.Int64)})
    value = [c for c in frame.columns if c != "_row"]
    return frame.group_by(value).agg(pl.col("_row").min()).select("_row")


def _cut_rows_by_block(frame: Any, starts: np.ndarray) -> Any:
    """Row numbers (a frame's `_row`) cut by the block that holds each, as NumPy arrays."""
    rows = as_frame(frame).get_column("_row").to_numpy()
    count = starts.size - 1
    which = np.searchsorted(starts, rows, side="right") - 1
    return as_returns([p["row"] for p in split_columns({"row": rows}, which, count)])


def _take_rows(block: Any, start: int, *rows: np.ndarray) -> tuple:
    wanted = np.sort(np.concatenate(rows)) - start if rows else np.empty(0, np.int64)
    frame = as_frame(block)[wanted]
    return frame.to_arrow(), (frame.height, frame.schema)


def _route_by_modulo(columns: Columns, key: str, count: int) -> Any:
    return as_returns(split_columns(columns, (columns[key] % count).astype(np.int64), count))


def _lookup_partition(
    table: Columns, key: str, table_key: str, values: dict[str, tuple[str, Any]], *queries: Columns
) -> Columns:
    found = concat_columns(queries)
    if not found:
        return found
    at, hit = sorted_positions(table[table_key], found[key])
    for name, (column, default) in values.items():
        source = table[column]
        out = np.full(found[key].size, default, dtype=source.dtype)
        out[hit] = source[at[hit]]
        found[name] = out
    return found
