"""Ground-truth mismatch: drop teacher responses that disagree with a verifiable reference.

The Cascade recipe regenerates general-domain responses and, where a prompt has a verifiable
ground truth (multiple choice, a math answer), drops the generations that disagree. A
reference that is one option letter (`letters`, A-J by default, optionally in parentheses) is
a multiple-choice answer: the chosen letter is read from the final answer (after `</think>`):
a boxed letter, "answer is (B)" / "Answer: B", or a last line that is only the letter. Any
other reference is a math answer: the boxed answer, else the one stated as "the answer is X",
compared by the math verifier (math-verify, with its timeout). Rows without a reference are
not judged; an undecided comparison (a timeout, a reference math-verify cannot read) keeps
the row. Measurements stay as columns: `reference_kind` (mcq | math | null),
`extracted_answer`, `ground_truth_match` (null = not judged or undecided).
"""

from __future__ import annotations

import re

import polars as pl

from curation.verify.math import MathVerifier, default_math_verifier, extract_boxed
from curation.verify.result import final_answer_part
from lake import StepResult
from lake.operators import decide

_STATED = re.compile(
    r"(?:final\s+)?answer\s*(?:is|:)\s*[:\-]?\s*(?:\*\*)?\(?(?P<answer>[^\n]*?)\)?(?:\*\*)?\s*\.?\s*$",
    re.IGNORECASE | re.MULTILINE,
)


def mcq_letter(reference: str | None, letters: str) -> str | None:
    """The option letter a reference names ("B", "(B)", "b."), or None if it is not one."""
    if reference is None:
        return None
    match = re.fullmatch(r"\s*\(?([A-Za-z])\)?\.?\s*", reference)
    if match and match.group(1).upper() in letters:
        return match.group(1).upper()
    return None


def chosen_letter(response: str, letters: str) -> str | None:
    """The option a response picks, read from its final answer; None if it names none."""
    text = final_answer_part(response or "")
    option = f"[{re.escape(letters)}]"
    boxed = extract_boxed(response or "")
    if boxed is not None:
        inner = re.sub(r"\\text\{(.*)\}", r"\1", boxed).strip()
        if mcq_letter(inner, letters):
            return mcq_letter(inner, letters)
    stated = re.findall(rf"answer\s*(?:is|:)\s*[:\-]?\s*(?:\*\*)?\(?({option})\b", text, re.I)
    if stated:
        return stated[-1].upper()
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if lines:
        last = re.fullmatch(rf"[*(\s]*({option})[).:*\s]*", lines[-1])
        if last:
            return last.group(1)
    return None


def stated_answer(response: str) -> str | None:
    """A math response's answer: the last boxed one, else the last "answer is X" statement."""
    boxed = extract_boxed(response or "")
    if boxed is not None:
        return boxed
    found = [m.group("answer").strip() for m in _STATED.finditer(final_answer_part(response or ""))]
    found = [a.strip("$ ") for a in found if a.strip("$ ")]
    return found[-1] if found else None


def ground_truth_check(
    df: pl.DataFrame,
    *,
    reference_field: str = "answer",
    response_field: str = "response",
    letters: str = "ABCDEFGHIJ",
    verifier: MathVerifier | None = None,
) -> StepResult:
    """Drop `ground_truth_mismatch` responses: a different option letter, a different math
    answer, or no answer at all where the prompt has a reference (the detail says which).
    Math answers are compared by `verifier` (default: the process-wide one, 5 s per pair)."""
    for name in (reference_field, response_field):
        if name not in df.columns:
            raise ValueError(f"ground_truth_check needs column {name!r}; columns are {df.columns}")
    references = df.get_column(reference_field).cast(pl.String).to_list()
    responses = df.get_column(response_field).cast(pl.String).to_list()
    kinds: list[str | None] = []
    answers: list[str | None] = []
    matches: list[bool | None] = []
    details: list[str | None] = []
    math_rows: list[int] = []
    for i, (reference, response) in enumerate(zip(references, responses, strict=True)):
        letter = mcq_letter(reference, letters)
        if letter is not None:
            chosen = chosen_letter(response or "", letters)
            kinds.append("mcq")
            answers.append(chosen)
            matches.append(chosen == letter)
            details.append(
                "no option chosen" if chosen is None else f"chose {chosen}, reference {letter}"
            )
        elif reference is not None and reference.strip():
            kinds.append("math")
            answers.append(stated_answer(response or ""))
            matches.append(None)
            details.append(None)
            math_rows.append(i)
        else:
            kinds.append(None)
            answers.append(None)
            matches.append(None)
            details.append(None)
    pairs = [(str(references[i]), answers[i]) for i in math_rows if answers[i] is not None]
    verifier = verifier or default_math_verifier()
    verdicts = iter(verifier.equivalent_many(pairs)) if pairs else iter(())
    for i in math_rows:
        if answers[i] is None:
            matches[i], details[i] = False, "no answer stated"
        else:
            verdict = next(verdicts)
            matches[i], details[i] = verdict.passed, verdict.detail
    marked = df.with_columns(
        pl.Series("reference_kind", kinds, dtype=pl.String),
        pl.Series("extracted_answer", answers, dtype=pl.String),
        pl.Series("ground_truth_match", matches, dtype=pl.Boolean),
        pl.Series("ground_truth_detail", details, dtype=pl.String),
    )
    mismatch = pl.col("ground_truth_match").eq(False).fill_null(False)
    stats = {
        "judged": sum(m is not None for m in matches),
        "mcq": kinds.count("mcq"),
        "math": kinds.count("math"),
        "undecided": sum(k is not None and m is None for k, m in zip(kinds, matches, strict=True)),
        "mismatch": sum(m is False for m in matches),
    }
    return decide(
        marked,
        pl.when(mismatch).then(pl.lit("ground_truth_mismatch")),
        drop_only=("ground_truth_detail",),
        stats=stats,
        counts=(),
    )
