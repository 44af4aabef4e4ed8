"""Verify a whole table: every input column kept, plus `passed`, `score` and `detail`.

The measurement (score) stays a column separate from the decision (passed), so a recipe can
re-threshold with SQL later without re-running anything. Inputs are taken as users have
them: per-row Python objects (a Polars Object column) or JSON text, with shapes that differ
between rows (a code problem's `tests` a dict in one row and a list of stdio cases in the
next; IFEval kwargs dicts with different keys). Input columns are never rewritten.
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from curation.verify.result import Verdict, json_value
from lake import StepResult

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
                meta = (json.loads(raw) if isinstance(raw, str) else raw) if raw else {}
            except json.JSONDecodeError as exc:
                raise ValueError(f"row {n}: metadata is not valid JSON ({exc})") from None
            values.append(meta.get(field))
        if any(v is not None for v in values):
            return values
    raise ValueError(f"no field {field!r}: columns are {df.columns} (and not in metadata)")


def _instruction_inputs(
    df: pl.DataFrame, reference_field: str, kwargs_field: str
) -> tuple[list[Any], list[Any], str]:
    """Per row, IFEval's instruction ids and kwargs, and the name of the kwargs' field.

    The reference is a list of ids (kwargs in `kwargs_field`), or one dict per row holding
    `instruction_id_list` and `kwargs` (as IFEval's own records do).
    """
    references = [json_value(v) for v in _column_values(df, reference_field)]
    dicts = all(isinstance(r, dict) for r in references if r is not None)
    if dicts and any(isinstance(r, dict) and "instruction_id_list" in r for r in references):
        ids = [r.get("instruction_id_list") if r else None for r in references]
        kwargs = [r.get("kwargs") if r else None for r in references]
        return ids, kwargs, f"{reference_field}.kwargs"
    return references, _column_values(df, kwargs_field), kwargs_field


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
    if kind not in KINDS:
        raise ValueError(f"unknown verifier kind {kind!r}; choose one of {', '.join(KINDS)}")
    if response_field not in df.columns:
        raise ValueError(f"no response field {response_field!r}: columns are {df.columns}")
    reference_field = reference_field or DEFAULT_REFERENCE[kind]
    responses = [r or "" for r in df.get_column(response_field).to_list()]
    field_of = {"reference": reference_field, "kwargs": kwargs_field}
    verdicts: list[Verdict]
    if kind == "math":
        from curation.verify.math import default_math_verifier

        references = _column_values(df, reference_field)
        verdicts = default_math_verifier().verify_many(
            responses, [None if r is None else str(r) for r in references]
        )
    elif kind == "code":
        from curation.verify.code import verify_code_batch

        verdicts = verify_code_batch(responses, _column_values(df, reference_field))
    elif kind == "if":
        from curation.verify.ifeval import verify_ifeval

        ids, kwargs, field_of["kwargs"] = _instruction_inputs(df, reference_field, kwargs_field)
        verdicts = [
            verify_ifeval(r, i, kw) for r, i, kw in zip(responses, ids, kwargs, strict=True)
        ]
    else:
        from curation.verify.swe import shown_files, verify_patch

        paths, texts = (
            df.get_column(c).to_list() if c in df.columns else None
            for c in ("context_files", "context_contents")
        )
        files = shown_files(len(responses), paths, texts)
        field_of["files"] = "context_contents"
        verdicts = [
            verify_patch(r, ref, files=f)
            if ref
            else Verdict(None, 0.0, "no reference patch", "reference")
            for r, ref, f in zip(responses, _column_values(df, reference_field), files, strict=True)
        ]
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
