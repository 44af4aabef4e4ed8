"""The small base operators stand on: an operator decides, the base keeps the books.

Like datatrove's filters, an operator answers one question per row, `keep or not, and why`,
but for the whole table at once: it measures (adds columns, which kept rows keep, so a
threshold can be re-tuned with SQL) and gives each row a reason, null to keep it. `decide`
splits the rows on that reason, puts the reason and the drop detail on dropped rows only,
and opens the step's stats with the counts (`rows_in`, `rows_out`, `dropped`). `counted` is
the counting alone, for operators that split rows their own way (clusters, joins). The
runner (`lake.steps.run_steps`) then checks rows in = kept + dropped and writes every
dropped row with its step, reason and detail.

>>> import polars as pl
>>> df = pl.DataFrame({"uid": ["a", "b", "c"], "words": [5, 1, 7]})
>>> result = decide(df, pl.when(pl.col("words") < 3).then(pl.lit("too_short")))
>>> result.kept.get_column("uid").to_list(), result.dropped.get_column("reason").to_list()
(['a', 'c'], ['too_short'])
>>> result.stats
{'rows_in': 3, 'rows_out': 2, 'dropped': 1}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from lake.steps import StepResult

COUNTS = ("rows_in", "rows_out", "dropped")


def decide(
    measured: pl.DataFrame,
    reason: pl.Expr | str = "reason",
    *,
    drop_only: Sequence[str] = (),
    detail: Mapping[str, pl.Expr] | None = None,
    stats: Mapping[str, object] | None = None,
    counts: Sequence[str] = COUNTS,
) -> StepResult:
    """Keep the rows whose `reason` is null, drop the others with it.

    `reason` is an expression over `measured` (a `pl.when(...).then(pl.lit("why"))` chain)
    or the name of a column that already holds it. Dropped rows carry every column of
    `measured`, then `reason`, then the `detail` expressions (evaluated on dropped rows
    only); kept rows carry `measured`'s columns except `drop_only` (what only a drop needs
    to say, such as the benchmark item matched). `stats` follow the counts named in
    `counts` (of `COUNTS`; a step whose stats never had some names fewer, or none).
    """
    column = reason if isinstance(reason, str) else "reason"
    marked = measured if isinstance(reason, str) else measured.with_columns(reason.alias(column))
    dropping = pl.col(column).is_not_null()
    kept = marked.filter(~dropping).drop(column, *drop_only)
    dropped = marked.filter(dropping)
    if column != "reason":
        dropped = dropped.rename({column: "reason"})
    if detail:
        dropped = dropped.with_columns(**detail)
    return counted(measured.height, kept, dropped, stats, counts=counts)


def counted(
    rows_in: int,
    kept: pl.DataFrame,
    dropped: pl.DataFrame,
    stats: Mapping[str, object] | None = None,
    *,
    counts: Sequence[str] = COUNTS,
) -> StepResult:
    """A step's result with its stats opening on the `counts` it names: `rows_in`,
    `rows_out` and `dropped` unless told fewer."""
    unknown = set(counts) - set(COUNTS)
    if unknown:
        raise ValueError(f"unknown counts {sorted(unknown)}; counts are {COUNTS}")
    values = {"rows_in": rows_in, "rows_out": kept.height, "dropped": dropped.height}
    opening = {name: values[name] for name in COUNTS if name in counts}
    return StepResult(kept=kept, dropped=dropped, stats={**opening, **(stats or {})})


def count_by(frame: pl.DataFrame, column: str) -> dict[object, int]:
    """Rows per value of `column`, sorted by value (`{}` for no rows): a step's
    `dropped_by_...` stats.

    >>> count_by(pl.DataFrame({"benchmark": ["b", "a", "b"]}), "benchmark")
    {'a': 1, 'b': 2}
    """
    if not frame.height:
        return {}
    return dict(frame.group_by(column).len().sort(column).iter_rows())
