"""Verify a whole table: every input column kept, plus `passed`, `score` and `detail`.

The measurement (score) stays a column separate from the decision (passed), so a recipe can
re-threshold with SQL later without re-running anything.
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from curation.verify.result import Verdict
from lake.steps import StepResult

KINDS: tuple[str, ...] = ("math", "code", "if", "swe")
DEFAULT_REFERENCE: dict[str, str] = {
    "math": "answer",
    "code": "tests",
    "if": "instruction_id_list",
    "swe": "patch",
}


def _column_values(df: pl.DataFrame, field: str) -> list[Any]:
    """Values of `field`: a column, or a key of the JSON `metadata` column (prompts tables)."""
    if field in df.columns:
        return df.get_column(field).to_list()
    if "metadata" in df.columns:
        values = []
        for n, raw in enumerate(df.get_column("metadata").to_list()):
            try:
                meta = json.loads(raw) if raw else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"row {n}: metadata is not valid JSON ({exc})") from None
            values.append(meta.get(field))
        if any(v is not None for v in values):
            return values
    raise ValueError(f"no field {field!r}: columns are {df.columns} (and not in metadata)")


def verify_frame(
    df: pl.DataFrame,
    kind: str,
    *,
    response_field: str = "response",
    reference_field: str | None = None,
    kwargs_field: str = "kwargs",
) -> pl.DataFrame:
    """`df` plus `passed` (bool, null = undecided), `score` (float) and `detail` (why).

    References: math = the answer string; code = the tests (any shape `parse_tests` reads);
    if = the instruction ids, with their kwargs in `kwargs_field`; swe = the gold patch.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown verifier kind {kind!r}; choose one of {', '.join(KINDS)}")
    if response_field not in df.columns:
        raise ValueError(f"no response field {response_field!r}: columns are {df.columns}")
    reference_field = reference_field or DEFAULT_REFERENCE[kind]
    responses = [r or "" for r in df.get_column(response_field).to_list()]
    references = _column_values(df, reference_field)
    verdicts: list[Verdict]
    if kind == "math":
        from curation.verify.math import default_math_verifier

        verdicts = default_math_verifier().verify_many(
            responses, [None if r is None else str(r) for r in references]
        )
    elif kind == "code":
        from curation.verify.code import verify_code_batch

        verdicts = verify_code_batch(responses, references)
    elif kind == "if":
        from curation.verify.ifeval import verify_ifeval

        kwargs = _column_values(df, kwargs_field)
        verdicts = [
            verify_ifeval(r, ids or [], kw if kw is not None else [{}] * len(ids or []))
            for r, ids, kw in zip(responses, references, kwargs, strict=True)
        ]
    else:
        from curation.verify.swe import verify_patch

        verdicts = [
            verify_patch(r, ref) if ref else Verdict(None, 0.0, "no reference patch")
            for r, ref in zip(responses, references, strict=True)
        ]
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
    keep = passed.fill_null(keep_undecided)
    kept = scored.filter(keep)
    dropped = scored.filter(~keep).with_columns(
        pl.when(passed.is_null())
        .then(pl.lit("verify_undecided"))
        .otherwise(pl.lit("verify_failed"))
        .alias("reason")
    )
    stats = {
        "rows_in": scored.height,
        "passed": int(scored.get_column("passed").sum() or 0),
        "undecided": scored.get_column("passed").null_count(),
        "kept": kept.height,
    }
    return StepResult(kept=kept, dropped=dropped, stats=stats)
