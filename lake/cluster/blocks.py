"""Tables in the object store and what tasks hand the driver: `Blocks` (a table as Arrow
tables in row order), `BlockResult` (a step's kept and dropped rows as blocks), `BlockMeta`
(one block's counts), and the conversions a task uses (`as_frame`, `portable`,
`block_outputs`, `conform`, `union_schema`, `merge_stats`). No Ray import here: these are
plain values that travel through the object store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from lake.steps import StepResult, count_reasons


class ClusterError(RuntimeError):
    """The cluster cannot be reached or a distributed stage failed; the message says which."""


@dataclass
class Blocks:
    """A table held in the object store: Arrow tables in row order (`refs`), the rows of
    each, and the table's schema. Row `i` of the table is row `i - starts[b]` of the block
    `b` that holds it; zero-row blocks are left out."""

    refs: list[Any]
    rows: list[int]
    schema: pl.Schema
    _key_parts: dict[tuple[str, bool, int], list[list[Any]]] = field(
        default_factory=dict, repr=False
    )

    @property
    def height(self) -> int:
        return int(sum(self.rows))

    @property
    def columns(self) -> list[str]:
        return list(self.schema)

    @property
    def starts(self) -> np.ndarray:
        """Every block's first row, then the row count."""
        return np.concatenate([[0], np.cumsum(self.rows, dtype=np.int64)]).astype(np.int64)

    def empty(self) -> pl.DataFrame:
        return pl.DataFrame(schema=self.schema)

    def __add__(self, other: Blocks) -> Blocks:
        """The rows of both, these first (the schemas must be the same)."""
        if other.schema != self.schema:
            raise ClusterError(f"cannot stack blocks of {self.schema} and {other.schema}")
        return Blocks([*self.refs, *other.refs], [*self.rows, *other.rows], self.schema)


@dataclass
class BlockResult:
    """A step's result on the cluster: the kept and dropped rows as blocks, drop counts by
    reason, and the step's stats (what `StepResult` holds, without the rows on the driver)."""

    kept: Blocks
    dropped: Blocks
    stats: dict[str, Any]
    by_reason: dict[str, int]


@dataclass
class BlockMeta:
    """What a task that produced one block's kept and dropped rows tells the driver."""

    kept: int
    dropped: int
    kept_schema: pl.Schema
    dropped_schema: pl.Schema
    by_reason: dict[str, int]
    stats: dict[str, Any]


def as_frame(block: Any) -> pl.DataFrame:
    """A block (an Arrow table from `put_table`, `read_version` or a task) as a Polars frame."""
    if isinstance(block, pl.DataFrame):
        return block
    return pl.from_arrow(block)  # type: ignore[return-value]


def portable(value: Any) -> Any:
    """What a task returns, with Polars frames as Arrow tables (Ray stores Arrow buffers as
    they are; pickling a Polars frame copies it)."""
    if isinstance(value, pl.DataFrame):
        return value.to_arrow()
    if isinstance(value, tuple):
        return tuple(portable(v) for v in value)
    return value


def block_outputs(result: StepResult, stats: dict[str, Any] | None = None) -> tuple:
    """One block's kept rows, dropped rows and `BlockMeta`, as a task's three returns."""
    meta = BlockMeta(
        kept=result.kept.height,
        dropped=result.dropped.height,
        kept_schema=result.kept.schema,
        dropped_schema=result.dropped.schema,
        by_reason=count_reasons(result.dropped),
        stats=dict(result.stats if stats is None else stats),
    )
    return result.kept.to_arrow(), result.dropped.to_arrow(), meta


def union_schema(schemas: Sequence[pl.Schema]) -> pl.Schema:
    """The schema `pl.concat(how="diagonal_relaxed")` gives frames of these schemas."""
    if all(s == schemas[0] for s in schemas[1:]):
        return schemas[0]
    return pl.concat([pl.DataFrame(schema=s) for s in schemas], how="diagonal_relaxed").schema


def conform(frame: pl.DataFrame, schema: pl.Schema) -> pl.DataFrame:
    """A frame in `schema` (missing columns null, types widened), as a diagonal concat
    of frames of both schemas would have it."""
    if frame.schema == schema:
        return frame
    return pl.concat([pl.DataFrame(schema=schema), frame], how="diagonal_relaxed").select(
        list(schema)
    )


def merge_stats(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Blocks' stats as one: numbers add up, dicts merge key by key, equal values stay, and
    values that differ between blocks become the list of them."""
    merged: dict[str, Any] = {}
    for key in dict.fromkeys(k for part in parts for k in part):  # first-seen order
        values = [p[key] for p in parts if key in p]
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            merged[key] = sum(values)
        elif all(isinstance(v, Mapping) for v in values):
            merged[key] = merge_stats(values)
        elif all(v == values[0] for v in values):
            merged[key] = values[0]
        else:
            merged[key] = values
    return merged
