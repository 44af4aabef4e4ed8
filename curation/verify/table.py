"""Verify a whole table: every input column kept, plus `passed`, `score` and `detail`.

The measurement (score) stays a column separate from the decision (passed), so a recipe can
re-threshold with SQL later without re-running anything. Inputs are taken as users have
them: per-row Python objects (a Polars Object column) or JSON text, with shapes that differ
between rows (a code problem's `tests` a dict in one row and a list of stdio cases in the
next; IFEval kwargs dicts with different keys). Input columns are never rewritten. The kinds
(`math`, `code`, `if`, `swe`), their default references and their table verifiers are the
reward kinds of `curation.verify.rewards` that have a `verifier`.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from curation.verify.result import Verdict
from curation.verify.rewards import verifier_named
from lake import StepResult
from lake.operators import decide
from lake.progress import phase

VERIFY_CHUNK_ROWS = 512  # rows verified between progress updates (each chunk runs in parallel)


def verify_frame(
    df: pl.DataFrame,
    kind: str,
    *,
    response_field: str = "response",
    reference_field: str | None = None,
    kwargs_field: str = "kwargs",
) -> pl.DataFrame:
    """`df` plus `passed` (bool, null = undecided), `score` (float) and `detail` (why).

    References: math = the answer string; code = the tests (any shape `parse_tests` reads,
    as objects or JSON text); if = the instruction ids with their kwargs in `kwargs_field`, or
    one dict per row holding both; swe = the gold patch (SEARCH/REPLACE answers are applied to
    the rows' `context_files` / `context_contents`, as swe_rl tables carry). When every row is
    undecided because the same field cannot be used (tests nobody can read, ids and kwargs
    that never pair up), this raises ValueError naming that field instead of returning a table of undecided rows.
    """
    reward = verifier_named(kind)
    if response_field not in df.columns:
        raise ValueError(f"no response field {response_field!r}: columns are {df.columns}")
    reference_field = reference_field or reward.columns[0]
    responses = [r or "" for r in df.get_column(response_field).to_list()]
    field_of = {"reference": reference_field, "kwargs": kwargs_field}
    verdicts: list[Verdict] = []
    passed = 0
    with phase(f"verify {kind}", df.height, "rows") as shown:
        for start in range(0, df.height, VERIFY_CHUNK_ROWS):
            part = df.slice(start, VERIFY_CHUNK_ROWS)
            chunk = reward.table(part, responses[start : start + part.height], field_of)  # type: ignore[misc]
            verdicts += chunk
            passed += sum(bool(v.passed) for v in chunk)
            shown.update(len(verdicts), note=f"{passed:,} passed")
    bad = {v.bad_input if v.passed is None else None for v in verdicts}
    if verdicts and len(bad) == 1 and None not in bad:
        field = field_of[bad.pop() or "reference"]
        raise ValueError(
            f"field {field!r} cannot be used in any of the {len(verdicts)} rows "
            f"(row 0: {verdicts[0].detail})"
        )
    return df.with_columns(
        pl.Series("passed", [v.passed for v in verdicts], dtype=pl.Boolean),
        pl.Series("score", [v.score for v in verdicts], dtype=pl.Float64),
        pl.Series("detail", [v.detail for v in verdicts], dtype=pl.String),
    )


def verify_step(
    df: pl.DataFrame, kind: str, *, keep_undecided: bool = False, **fields: Any
) -> StepResult:
    """The verifier as a recipe step: keep rows that pass, drop the rest with a reason
    (`verify_failed`, or `verify_undecided` for timeouts and unusable references unless
    `keep_undecided`). Kept rows carry `passed`, `score` and `detail` too."""
    scored = verify_frame(df, kind, **fields)
    passed = pl.col("passed")
    why = pl.when(passed.is_null()).then(pl.lit("verify_undecided"))
    reason = pl.when(~passed.fill_null(keep_undecided)).then(why.otherwise(pl.lit("verify_failed")))
    stats = {
        "passed": int(scored.get_column("passed").sum() or 0),
        "undecided": scored.get_column("passed").null_count(),
    }
    result = decide(scored, reason, stats=stats, counts=("rows_in",))
    result.stats["kept"] = result.kept.height
    return result
