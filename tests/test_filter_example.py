"""Adding a filter is one function plus its test; this file is both, for a toy filter.

`drop_short_problems`: measure each problem's length in words first (a column every kept row
keeps, so the threshold can be re-tuned with SQL later), then decide: a problem under
`min_words` words is dropped with reason `too_short`. `lake.operators.decide` keeps the books
(the split, the counts in the stats, the reason and detail on dropped rows only) and the
runner writes each drop to the lake's `drops` table with its step, reason and JSON detail. A
recipe names it as `Step("short_problems", drop_short_problems, {"min_words": 4}, scope="rows")`.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from lake import Lake, Step, StepResult, decide, run_steps
from lake.steps import StepError

# ------------------------------------------------------------ the filter: one function -----


def drop_short_problems(df: pl.DataFrame, *, min_words: int = 4) -> StepResult:
    """Drop problems of fewer than `min_words` words (reason `too_short`)."""
    measured = df.with_columns(
        pl.col("problem").str.split(" ").list.len().cast(pl.Int64).alias("problem_words")
    )
    too_short = pl.col("problem_words") < min_words
    return decide(
        measured,
        pl.when(too_short).then(pl.lit("too_short")),
        detail={"min_words": pl.lit(min_words)},
        stats={"min_words": min_words},
    )


# ------------------------------------------------------------ its test ---------------------

PROBLEMS = pl.DataFrame(
    {
        "uid": ["p1", "p2", "p3", "p4"],
        "problem": [
            "What is two plus three?",
            "Add them.",
            "How many primes are below ten?",
            "Solve it",
        ],
    }
)


def test_the_filter_decides_and_the_base_keeps_the_books() -> None:
    result = drop_short_problems(PROBLEMS, min_words=4)
    assert result.kept.get_column("uid").to_list() == ["p1", "p3"]
    assert result.kept.columns == ["uid", "problem", "problem_words"]  # the measurement stays
    assert result.dropped.select("uid", "reason", "min_words").rows() == [
        ("p2", "too_short", 4),
        ("p4", "too_short", 4),
    ]
    assert result.stats == {"rows_in": 4, "rows_out": 2, "dropped": 2, "min_words": 4}


def test_through_the_runner_drops_land_in_the_lake_with_their_reasons(tmp_path) -> None:
    lake = Lake(tmp_path / "lake")
    lake.commit("problems", PROBLEMS, producer="test")
    step = Step("short_problems", drop_short_problems, {"min_words": 4}, scope="rows")
    run = run_steps(lake, "problems", [step], out="long_problems", producer="test")

    (funnel,) = run.funnel
    assert (funnel.step, funnel.rows_in, funnel.rows_out) == ("short_problems", 4, 2)
    assert funnel.dropped == {"too_short": 2}
    assert funnel.stats["min_words"] == 4
    assert lake.resolve("long_problems").rows == 2

    drops = lake.sql(
        "SELECT uid, step, reason, detail FROM drops WHERE output_table = 'long_problems' "
        "ORDER BY uid"
    ).fetchall()
    assert [(uid, step, reason) for uid, step, reason, _ in drops] == [
        ("p2", "short_problems", "too_short"),
        ("p4", "short_problems", "too_short"),
    ]
    # the detail is what the filter measured and decided with
    assert [json.loads(detail) for *_, detail in drops] == [
        {"problem_words": 2, "min_words": 4},
        {"problem_words": 2, "min_words": 4},
    ]
    # measure first, decide second: a stricter threshold is a query, not a rebuild
    (stricter,) = lake.sql("SELECT count(*) FROM long_problems WHERE problem_words >= 6").fetchone()
    assert stricter == 1


def test_a_filter_that_loses_rows_is_refused_and_nothing_is_committed(tmp_path) -> None:
    def loses_rows(df: pl.DataFrame) -> StepResult:
        return StepResult(kept=df.head(1), dropped=df.clear())

    lake = Lake(tmp_path / "lake")
    lake.commit("problems", PROBLEMS, producer="test")
    with pytest.raises(StepError, match="4 rows in but 1 kept"):
        run_steps(lake, "problems", [Step("loses_rows", loses_rows)], out="out", producer="test")
    assert "out" not in [t.name for t in lake.tables()]
