"""Correctness filtering of code SFT traces (Cascade 2).

For a prompt with tests, keep only the teacher traces whose final code passes all of them,
run in the sandbox by `curation.verify.code`. For a prompt without tests nothing can be
run, so keep the longer traces, on the recipe's assumption that a longer trace is the more
thorough one: per prompt, the `untested_keep` longest (a fraction of the prompt's traces,
rounded up, or a count when >= 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import polars as pl

from curation.code.fields import field_values
from curation.verify.code import verify_code_batch
from curation.verify.sandbox import Sandbox, SandboxLimits
from lake.operators import decide
from lake.steps import StepResult


def _has_tests(value: Any) -> bool:
    if value is None:
        return False
    if isinstance(value, str):
        return value.strip() not in ("", "null", "[]", "{}")
    if isinstance(value, Sequence | dict):
        return len(value) > 0
    return True


def filter_by_correctness(
    df: pl.DataFrame,
    *,
    response_column: str = "response",
    tests_field: str = "tests",
    prompt_column: str = "prompt_id",
    length_column: str | None = "completion_tokens",
    untested_keep: float = 0.5,
    sandbox: Sandbox | None = None,
    limits: SandboxLimits | None = None,
) -> StepResult:
    """Keep traces whose code passes the prompt's tests; for untested prompts the longer ones.

    Every row gets `has_tests`, `tests_passed` (null when not run or undecided),
    `verify_detail` (the sandbox's one-line why), `trace_length` (`length_column` when the
    frame has it, else characters) and, for untested prompts, `length_rank` (1 = longest).
    Drop reasons: `tests_failed`, `verify_undecided` (unusable tests, sandbox failure),
    `shorter_trace`.
    """
    for name in (response_column, prompt_column):
        if name not in df.columns:
            raise ValueError(
                f"correctness filter input has no column {name!r}; it has {df.columns}"
            )
    if not 0 < untested_keep < math.inf:
        raise ValueError(
            f"untested_keep must be a fraction in (0, 1) or a count >= 1, got {untested_keep}"
        )
    tests = field_values(df, tests_field, required=False)
    responses = [r or "" for r in df.get_column(response_column).to_list()]
    has_tests = [_has_tests(t) for t in tests]
    tested = [i for i, h in enumerate(has_tests) if h]
    passed: list[bool | None] = [None] * df.height
    details: list[str | None] = [None] * df.height
    if tested:
        verdicts = verify_code_batch(
            [responses[i] for i in tested],
            [tests[i] for i in tested],
            sandbox=sandbox,
            limits=limits,
        )
        for i, verdict in zip(tested, verdicts, strict=True):
            passed[i] = verdict.passed
            details[i] = verdict.detail
    if length_column and length_column in df.columns:
        lengths = pl.col(length_column).cast(pl.Int64)
    else:
        lengths = pl.col(response_column).fill_null("").str.len_chars().cast(pl.Int64)
    measured = df.with_columns(
        pl.Series("has_tests", has_tests, dtype=pl.Boolean),
        pl.Series("tests_passed", passed, dtype=pl.Boolean),
        pl.Series("verify_detail", details, dtype=pl.String),
        lengths.alias("trace_length"),
    ).with_columns(
        pl.when(~pl.col("has_tests"))
        .then(
            pl.col("trace_length")
            .rank("ordinal", descending=True)
            .over(pl.col(prompt_column), pl.col("has_tests"))
            .cast(pl.Int64)
        )
        .alias("length_rank"),
        pl.len().over(prompt_column).alias("__group"),
    )
    if untested_keep >= 1:
        quota = pl.lit(int(untested_keep))
    else:
        quota = (pl.col("__group") * untested_keep).ceil().cast(pl.Int64)
    reason = (
        pl.when(pl.col("has_tests") & pl.col("tests_passed").is_null())
        .then(pl.lit("verify_undecided"))
        .when(pl.col("has_tests") & ~pl.col("tests_passed").fill_null(True))
        .then(pl.lit("tests_failed"))
        .when(~pl.col("has_tests") & (pl.col("length_rank") > quota))
        .then(pl.lit("shorter_trace"))
    )
    result = decide(
        measured.with_columns(reason.alias("reason")).drop("__group"),
        stats={
            "tested": len(tested),
            "passed": sum(p is True for p in passed),
            "undecided": sum(passed[i] is None for i in tested),
        },
    )
    kept = result.kept
    result.stats["untested_kept"] = (
        int(kept.get_column("has_tests").not_().sum()) if kept.height else 0
    )
    return result
