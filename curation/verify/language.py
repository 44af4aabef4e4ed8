"""Code-switching detection: letters from a non-English script in a reply to an English prompt.

The recipe penalizes any non-English token when the prompt is English (RLHF: lowest reward in
the batch minus 10; Math RL: -1). We look at Unicode scripts, not at a language model: a
letter whose Unicode name does not start with an allowed script (Latin by default, plus
Greek and mathematical alphanumerics, which math uses as symbols) is foreign.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Sequence
from typing import Any

from curation.verify.result import Verdict, completion_text

ALLOWED_SCRIPTS = ("LATIN", "GREEK", "MATHEMATICAL", "DOUBLE-STRUCK", "SCRIPT", "BLACK-LETTER")


def script_of(ch: str) -> str:
    """First word of the character's Unicode name (CJK, CYRILLIC, ARABIC, HANGUL, ...)."""
    return unicodedata.name(ch, "UNKNOWN").split()[0]


def foreign_letters(text: str, allowed: Sequence[str] = ALLOWED_SCRIPTS) -> Counter[str]:
    """Count of letters per script outside `allowed` (ASCII is always allowed)."""
    counts: Counter[str] = Counter()
    for ch in text:
        if ch.isascii() or not ch.isalpha():
            continue
        script = script_of(ch)
        if script not in allowed:
            counts[script] += 1
    return counts


def is_english_prompt(prompt: str, min_latin_share: float = 0.9) -> bool:
    """A prompt counts as English when at least `min_latin_share` of its letters are Latin."""
    letters = [ch for ch in prompt if ch.isalpha()]
    if not letters:
        return True
    latin = sum(1 for ch in letters if ch.isascii() or script_of(ch) == "LATIN")
    return latin / len(letters) >= min_latin_share


def verify_no_code_switching(prompt: str, response: str) -> Verdict:
    """Passed when an English prompt's reply has no foreign-script letters; undecided when
    the prompt is not English (then mixing scripts may be intended)."""
    if not is_english_prompt(prompt):
        return Verdict(None, 0.0, "prompt is not English")
    foreign = foreign_letters(response)
    if not foreign:
        return Verdict(True, 1.0, "no foreign script")
    scripts = ", ".join(f"{s} x{n}" for s, n in foreign.most_common())
    return Verdict(False, 0.0, f"code-switching: {scripts}")


def code_switching_penalty(
    prompts: Sequence[Any], completions: Sequence[Any], penalty: float = -1.0, **_: Any
) -> list[float | None]:
    """TRL-style reward term: `penalty` when an English prompt gets foreign script, else 0."""
    out: list[float | None] = []
    for prompt, completion in zip(prompts, completions, strict=True):
        verdict = verify_no_code_switching(completion_text(prompt), completion_text(completion))
        out.append(penalty if verdict.passed is False else 0.0)
    return out
