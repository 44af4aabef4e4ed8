"""Which code problems a reward can check by running tests: the Code RL prompt filter.

Code RL rewards a response 1 only if all tests pass, comparing stdout or evaluating asserts.
That works for problems whose tests exist and whose answer is unique; the recipe drops the
rest: problems without tests (`no_tests`), interactive problems (`interactive`: the judge
talks back), and problems with a special judge (`special_judge`: several answers are right,
or floats are compared within a tolerance, which stdout comparison cannot do). The phrase
that decided a drop is kept as `checkable_evidence`.
"""

from __future__ import annotations

import re

import polars as pl

from curation.code.fields import field_values
from curation.verify.code import parse_tests
from lake.operators import count_by, decide
from lake.steps import StepResult

INTERACTIVE = re.compile(
    r"this is an interactive problem|interactive problem\b|\binteractor\b|"
    r"flush the output|fflush\(stdout\)|System\.out\.flush|stdout\.flush",
    re.IGNORECASE,
)
SPECIAL_JUDGE = re.compile(
    r"if there (?:are|exist) (?:several|multiple|many) (?:possible |correct |valid )?"
    r"(?:answers|solutions)|print any (?:of them|one of them|valid|correct|such)|"
    r"output any (?:of them|one of them|valid|correct|such)|any of them will be accepted|"
    r"(?:absolute or relative|relative or absolute) error|special judge|\bchecker\b",
    re.IGNORECASE,
)


def filter_checkable_by_tests(
    df: pl.DataFrame, *, text_column: str = "problem", tests_field: str = "tests"
) -> StepResult:
    """Keep problems a test run can judge; drop `no_tests`, `interactive`, `special_judge`."""
    texts = df.get_column(text_column).to_list()
    tests = field_values(df, tests_field, required=False)
    reasons: list[str | None] = []
    evidence: list[str | None] = []
    for text, value in zip(texts, tests, strict=True):
        found = INTERACTIVE.search(text or "")
        if found:
            reasons.append("interactive")
            evidence.append(found.group(0))
            continue
        found = SPECIAL_JUDGE.search(text or "")
        if found:
            reasons.append("special_judge")
            evidence.append(found.group(0))
            continue
        try:
            usable = bool(parse_tests(value)) if value is not None else False
        except ValueError as exc:
            reasons.append("no_tests")
            evidence.append(f"tests unreadable: {exc}")
            continue
        reasons.append(None if usable else "no_tests")
        evidence.append(None if usable else "no tests")
    marked = df.with_columns(
        pl.Series("reason", reasons, dtype=pl.String),
        pl.Series("checkable_evidence", evidence, dtype=pl.String),
    )
    result = decide(marked, "reason", drop_only=("checkable_evidence",), counts=())
    result.stats = count_by(result.dropped, "reason")
    return result
