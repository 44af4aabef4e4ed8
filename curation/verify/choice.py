"""Multiple-choice verifier (GPQA, MMLU-Pro formats): the letter a response chose, after
`</think>`, against the reference letter.

Models state their choice in many ways; the letter is read from the most explicit statement
found, in this order: an "answer is / Answer:" statement, a `\\boxed{}` letter, the final line
when it is only a letter ("C", "(C)", "**C.**"), the last parenthesized letter ("I pick
(C)"). A letter outside the question's options (`A`-`J`, or fewer when the number of options
is known) does not count. A response with no readable choice fails with that reason; an
unreadable reference is undecided.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from curation.verify.math import extract_boxed
from curation.verify.result import Verdict, completion_text, final_answer_part

LETTERS = "ABCDEFGHIJ"
_STATED = re.compile(
    r"(?i:\b(?:answer|choice|option))(?:\s+is)?\s*:?\s*(?:\*\*)?\s*\(?([A-J])\)?(?![A-Za-z0-9])"
)
_ALONE = re.compile(r"^[\s*_#>]*\(?\s*([A-J])\s*\)?[.:]?[\s*_]*$")
_PARENTHESIZED = re.compile(r"\(([A-J])\)")
_TEXT_BOX = re.compile(r"^\\(?:text|textbf|mathrm)\{\s*([A-J])\s*\}$")


def extract_choice(response: str, options: int = len(LETTERS)) -> str | None:
    """The letter a response chose (see the module docstring), or None."""
    if "<think>" in response and "</think>" not in response:
        return None  # cut while thinking
    text = final_answer_part(response)
    valid = LETTERS[:options]
    stated = [m.group(1).upper() for m in _STATED.finditer(text)]
    stated = [s for s in stated if s in valid]
    if stated:
        return stated[-1]
    boxed = extract_boxed(text)
    if boxed is not None:
        inner = _TEXT_BOX.match(boxed.strip())
        letter = (inner.group(1) if inner else boxed.strip().strip("()")).upper()
        if len(letter) == 1 and letter in valid:
            return letter
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if lines:
        alone = _ALONE.match(lines[-1])
        if alone and alone.group(1).upper() in valid:
            return alone.group(1).upper()
    named = [m.group(1) for m in _PARENTHESIZED.finditer(text) if m.group(1) in valid]
    return named[-1] if named else None


def verify_choice(response: str, reference: Any, options: int | None = None) -> Verdict:
    """Pass when the chosen letter is the reference letter."""
    expected = str(reference or "").strip().strip("()").upper()
    if len(expected) != 1 or expected not in LETTERS:
        return Verdict(None, 0.0, f"reference {reference!r} is not a letter A-J", "reference")
    chosen = extract_choice(response, options or len(LETTERS))
    if chosen is None:
        return Verdict(False, 0.0, "no choice letter found")
    passed = chosen == expected
    return Verdict(passed, float(passed), f"chose {chosen}, expected {expected}")


def choice_reward(
    prompts: Sequence[Any], completions: Sequence[Any], correct_choice: Sequence[Any], **_: Any
) -> list[float | None]:
    """TRL-style reward: 1.0 when the response's chosen letter is `correct_choice`, else 0.0;
    None when the reference is not a letter."""
    return [
        verify_choice(completion_text(c), ref).reward()
        for c, ref in zip(completions, correct_choice, strict=True)
    ]
