"""Math verifier: the last `\\boxed{}` after `</think>`, checked against the reference with
math-verify (sympy-backed), under a hard per-comparison timeout that works in any thread.

math-verify's own timeouts use SIGALRM, which only works in the main thread; we switch them
off and run each comparison in a `DeadlinePool` worker instead. A comparison that times out
gives an undecided verdict (`passed=None`, detail "timeout"), never a silent 0.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from curation.verify.deadline_pool import DeadlinePool
from curation.verify.result import Verdict, completion_text, final_answer_part

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")


def extract_boxed(response: str) -> str | None:
    """Content of the last `\\boxed{...}` / `\\fbox{...}` / `\\boxed 5` in the final answer part.

    None when there is none, or when a `<think>` block was opened and never closed (the
    response was cut before answering).
    """
    if "<think>" in response and "</think>" not in response:
        return None
    text = final_answer_part(response)
    matches = list(_BOX.finditer(text))
    for match in reversed(matches):
        content = _box_content(text, match.end())
        if content is not None and content.strip():
            return content.strip()
    return None


def _box_content(text: str, pos: int) -> str | None:
    rest = text[pos:]
    stripped = rest.lstrip()
    if stripped.startswith("{"):
        start = pos + (len(rest) - len(stripped)) + 1
        depth = 1
        for i in range(start, len(text)):
            ch = text[i]
            if ch == "\\":
                continue
            if ch == "{" and text[i - 1] != "\\":
                depth += 1
            elif ch == "}" and text[i - 1] != "\\":
                depth -= 1
                if depth == 0:
                    return text[start:i]
        return None  # unbalanced
    if rest[:1].isspace():  # `\boxed 5`: the next token
        token = re.match(r"\s+([^\s$]+)", rest)
        return token.group(1) if token else None
    return None


def answer_vote_key(answer: str) -> str:
    """The key answers are compared by on the exact-match fast path and in majority votes (a
    cheap canonical form; math-verify decides the rest)."""
    text = answer.strip().strip("$").strip()
    text = re.sub(r"\\[dt]frac", r"\\frac", text)
    text = re.sub(r"\\left|\\right|\\!|\\,|\\;|\\ ", "", text)
    text = re.sub(r"\s+", "", text)
    return text.rstrip(".")


def _parse(text: str) -> list[Any]:
    from math_verify import parse

    for candidate in (f"${text}$", f"\\boxed{{{text}}}", text):
        parsed = parse(candidate, parsing_timeout=None)  # type: ignore[arg-type]
        if parsed:
            return parsed
    return []


def equivalent_unguarded(reference: str, answer: str) -> bool:
    """math-verify equivalence with its signal timeouts off (call only under a deadline).

    Raises ValueError when the reference itself cannot be parsed.
    """
    from math_verify import verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    gold = _parse(reference)
    if not gold:
        raise ValueError(f"reference answer {reference!r} cannot be parsed")
    target = _parse(answer)
    if not target:
        return False
    return bool(verify(gold, target, timeout_seconds=None))


@dataclass
class MathVerifier:
    """Checks answers against references; `timeout_s` bounds each math-verify comparison."""

    workers: int = 2
    timeout_s: float = 5.0

    def __post_init__(self) -> None:
        self._pool = DeadlinePool(equivalent_unguarded, self.workers, self.timeout_s)

    def close(self) -> None:
        self._pool.close()

    def equivalent_many(
        self, pairs: Sequence[tuple[str, str]], *, fast_path: bool = True
    ) -> list[Verdict]:
        """Verdicts for (reference, answer) pairs; equal normal forms skip the sympy check
        unless `fast_path=False`."""
        verdicts: list[Verdict | None] = [None] * len(pairs)
        todo: list[int] = []
        for i, (reference, answer) in enumerate(pairs):
            if fast_path and answer_vote_key(reference) == answer_vote_key(answer):
                verdicts[i] = Verdict(True, 1.0, f"answer {answer!r} matches")
            else:
                todo.append(i)
        for i, (kind, value) in zip(todo, self._pool.map([pairs[i] for i in todo]), strict=True):
            reference, answer = pairs[i]
            if kind == "timeout":
                verdicts[i] = Verdict(None, 0.0, f"timeout after {self.timeout_s:g}s")
            elif kind == "error":
                message = str(value).splitlines()[0]
                bad = "reference" if message.startswith("reference answer") else None
                verdicts[i] = Verdict(None, 0.0, f"verifier error: {message}", bad_input=bad)
            elif value:
                verdicts[i] = Verdict(True, 1.0, f"answer {answer!r} is equivalent")
            else:
                verdicts[i] = Verdict(False, 0.0, f"answer {answer!r} != reference {reference!r}")
        return [v for v in verdicts if v is not None]

    def verify_many(self, responses: Sequence[str], references: Sequence[str]) -> list[Verdict]:
        """Verdicts for responses: extract the boxed answer, then compare with the reference."""
        if len(responses) != len(references):
            raise ValueError(f"{len(responses)} responses but {len(references)} references")
        verdicts: list[Verdict | None] = [None] * len(responses)
        pairs: list[tuple[str, str]] = []
        where: list[int] = []
        for i, (response, reference) in enumerate(zip(responses, references, strict=True)):
            if reference is None or not str(reference).strip():
                verdicts[i] = Verdict(None, 0.0, "no reference answer", bad_input="reference")
                continue
            answer = extract_boxed(response)
            if answer is None:
                verdicts[i] = Verdict(False, 0.0, "no \\boxed{} answer after </think>")
                continue
            pairs.append((str(reference), answer))
            where.append(i)
        for i, verdict in zip(where, self.equivalent_many(pairs), strict=True):
            verdicts[i] = verdict
        return [v for v in verdicts if v is not None]

    def verify(self, response: str, reference: str) -> Verdict:
        return self.verify_many([response], [reference])[0]

    def majority_answer(self, responses: Sequence[str]) -> tuple[str | None, int]:
        """Majority-vote answer over k responses and its vote count.

        Answers are grouped by normal form first, then groups whose representatives
        math-verify finds equivalent are merged, so `1/2` and `\\frac{1}{2}` vote together.
        Ties go to the answer seen first. (None, 0) when no response has a boxed answer.
        """
        answers = [a for a in (extract_boxed(r) for r in responses) if a is not None]
        if not answers:
            return None, 0
        counts = Counter(answer_vote_key(a) for a in answers)
        first_raw = {}
        for a in answers:
            first_raw.setdefault(answer_vote_key(a), a)
        keys = list(counts)  # insertion order = first seen
        groups: list[list[str]] = []
        for key in keys:
            placed = False
            if groups:
                checks = self.equivalent_many([(first_raw[g[0]], first_raw[key]) for g in groups])
                for group, verdict in zip(groups, checks, strict=True):
                    if verdict.passed:
                        group.append(key)
                        placed = True
                        break
            if not placed:
                groups.append([key])
        best = max(groups, key=lambda g: sum(counts[k] for k in g))
        return first_raw[best[0]], sum(counts[k] for k in best)


def majority_vote_frame(
    df: pl.DataFrame,
    *,
    group_field: str = "id",
    response_field: str = "response",
    reference_field: str | None = "answer",
    verifier: MathVerifier | None = None,
) -> pl.DataFrame:
    """One row per prompt: the majority answer of its k responses, its votes, k, and (with a
    reference) whether the majority agrees with it.

    For sources whose reference answers are noisy, the recipe keeps only prompts whose
    majority answer matches the reference; `agrees` is that measurement (null when the
    check timed out or there is no majority answer) and the threshold stays with the recipe.
    """
    verifier = verifier or default_math_verifier()
    for field in (group_field, response_field, *([reference_field] if reference_field else [])):
        if field not in df.columns:
            raise ValueError(f"no field {field!r}: columns are {df.columns}")
    aggregations = [pl.col(response_field).alias("_responses")]
    if reference_field:
        aggregations.append(pl.col(reference_field).first().alias("_reference"))
    grouped = df.group_by(group_field, maintain_order=True).agg(aggregations)
    majorities = [verifier.majority_answer([r or "" for r in rs]) for rs in grouped["_responses"]]
    out = grouped.select(group_field).with_columns(
        pl.Series("majority_answer", [a for a, _ in majorities], dtype=pl.String),
        pl.Series("votes", [v for _, v in majorities], dtype=pl.Int64),
        pl.Series("k", [len(rs) for rs in grouped["_responses"]], dtype=pl.Int64),
    )
    if reference_field:
        references = grouped["_reference"].to_list()
        pairs = [
            (str(ref), answer)
            for ref, (answer, _) in zip(references, majorities, strict=True)
            if ref is not None and answer is not None
        ]
        verdicts = iter(verifier.equivalent_many(pairs))
        agrees = [
            next(verdicts).passed if ref is not None and answer is not None else None
            for ref, (answer, _) in zip(references, majorities, strict=True)
        ]
        out = out.with_columns(pl.Series("agrees", agrees, dtype=pl.Boolean))
    return out


_DEFAULT: MathVerifier | None = None
_DEFAULT_LOCK = threading.Lock()


def default_math_verifier() -> MathVerifier:
    """A process-wide verifier, started on first use."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = MathVerifier()
        return _DEFAULT


def math_reward(
    prompts: Sequence[Any], completions: Sequence[Any], answer: Sequence[str | None], **_: Any
) -> list[float | None]:
    """TRL-style reward: 1.0 if the last boxed answer after `</think>` equals `answer`, else
    0.0; None (skip) when the check timed out or the reference cannot be parsed."""
    verdicts = default_math_verifier().verify_many(
        [completion_text(c) for c in completions], list(answer)
    )
    return [v.reward() for v in verdicts]
