"""Instruction-following verifier: the IFEval instruction types, strict and loose.

Each instruction id maps to a checker `(response, **kwargs) -> bool`. Strict checks the
response as is; loose also accepts it if any of the usual harmless variants passes (first
line dropped, last line dropped, both, and each of those with `*` markup removed), as the
IFEval paper defines. Prompt-level = all instructions of a prompt followed; instruction-level
= the fraction followed. For thinking responses only the part after `</think>` is checked.

`CHECKERS` is IFEval's taxonomy; `taxonomies()` adds the IF-RLVR training constraints
(`curation.verify.iftrain`, IF-RL's second sub-stage) and IFBench's evaluation constraints
(`curation.verify.ifbench`). `check_instruction`, `verify_ifeval` and `ifeval_reward` decide an
id of any of the three, with the same strict and loose rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from curation.verify.result import Verdict, completion_text, final_answer_part, json_value

Checker = Callable[..., bool]
CHECKERS: dict[str, Checker] = {}


def checker(instruction_id: str) -> Callable[[Checker], Checker]:
    def register(fn: Checker) -> Checker:
        CHECKERS[instruction_id] = fn
        return fn

    return register


def _compare(count: int, relation: str, target: int) -> bool:
    if relation == "less than":
        return count < target
    if relation == "at least":
        return count >= target
    raise ValueError(f"unknown relation {relation!r} (expected 'less than' or 'at least')")


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text)


_ABBREVIATIONS = re.compile(
    r"\b(?:mr|mrs|ms|dr|prof|sr|jr|st|vs|etc|e\.g|i\.e|inc|ltd|co|no|fig|approx)\.$", re.I
)


def count_sentences(text: str) -> int:
    """Sentences end at . ! ? (runs allowed) followed by space or end, except after common
    abbreviations, single initials and inside numbers such as 3.14."""
    pieces = re.split(r"(?<=[.!?])[\"')\]]*\s+", text.strip())
    count = 0
    carry = ""
    for piece in pieces:
        carry = f"{carry} {piece}".strip() if carry else piece
        if _ABBREVIATIONS.search(carry) or re.search(r"(?:^|\s)[A-Z]\.$", carry):
            continue
        if carry.strip():
            count += 1
        carry = ""
    return count + (1 if carry.strip() else 0)


def _language(text: str) -> str | None:
    from langdetect import DetectorFactory, LangDetectException, detect

    DetectorFactory.seed = 0
    try:
        return detect(text)
    except LangDetectException:
        return None


# --------------------------------------------------------------------------- checkers


@checker("change_case:capital_word_frequency")
def _capital_words(response: str, capital_frequency: int, capital_relation: str) -> bool:
    count = sum(1 for word in _words(response) if word.isupper())
    return _compare(count, capital_relation, capital_frequency)


@checker("change_case:english_capital")
def _all_capital(response: str) -> bool:
    return response.isupper() and _language(response) in ("en", None)


@checker("change_case:english_lowercase")
def _all_lowercase(response: str) -> bool:
    return response.islower() and _language(response) in ("en", None)


@checker("combination:repeat_prompt")
def _repeat_prompt(response: str, prompt_to_repeat: str) -> bool:
    return response.strip().lower().startswith(prompt_to_repeat.strip().lower())


@checker("combination:two_responses")
def _two_responses(response: str) -> bool:
    parts = [p.strip() for p in response.split("******")]
    non_empty = [p for p in parts if p]
    edges_only = all(p for p in parts[1:-1])  # empty pieces allowed only at the ends
    return len(non_empty) == 2 and edges_only and non_empty[0] != non_empty[1]


@checker("detectable_content:number_placeholders")
def _placeholders(response: str, num_placeholders: int) -> bool:
    return len(re.findall(r"\[.*?\]", response)) >= num_placeholders


@checker("detectable_content:postscript")
def _postscript(response: str, postscript_marker: str) -> bool:
    marker = postscript_marker.strip().lower()
    if marker == "p.p.s":
        pattern = r"\s*p\.\s?p\.\s?s.*$"
    elif marker == "p.s.":
        pattern = r"\s*p\.\s?s\..*$"
    else:
        pattern = r"\s*" + re.escape(marker) + r".*$"
    return re.search(pattern, response.lower(), flags=re.MULTILINE) is not None


@checker("detectable_format:constrained_response")
def _constrained(response: str) -> bool:
    options = ("My answer is yes.", "My answer is no.", "My answer is maybe.")
    return any(option in response.strip() for option in options)


@checker("detectable_format:json_format")
def _json(response: str) -> bool:
    text = response.strip()
    text = re.sub(r"^```(?:json)?\s*", "", text, flags=re.I)
    text = re.sub(r"\s*```$", "", text)
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@checker("detectable_format:multiple_sections")
def _sections(response: str, section_spliter: str, num_sections: int) -> bool:
    pattern = r"\s?" + re.escape(section_spliter.strip()) + r"\s?\d+\s?"
    return len(re.split(pattern, response)) - 1 >= num_sections


@checker("detectable_format:number_bullet_lists")
def _bullets(response: str, num_bullets: int) -> bool:
    stars = re.findall(r"^\s*\*[^\*].*$", response, flags=re.MULTILINE)
    dashes = re.findall(r"^\s*-.*$", response, flags=re.MULTILINE)
    return len(stars) + len(dashes) == num_bullets


@checker("detectable_format:number_highlighted_sections")
def _highlights(response: str, num_highlights: int) -> bool:
    single = [h for h in re.findall(r"\*[^\n\*]*\*", response) if h.strip("*").strip()]
    double = [h for h in re.findall(r"\*\*[^\n\*]*\*\*", response) if h.strip("*").strip()]
    return len(single) + len(double) >= num_highlights


@checker("detectable_format:title")
def _title(response: str) -> bool:
    return any(t.strip("<>").strip() for t in re.findall(r"<<[^\n]+>>", response))


@checker("keywords:existence")
def _keywords_present(response: str, keywords: Sequence[str]) -> bool:
    return all(re.search(re.escape(k), response, flags=re.I) for k in keywords)


@checker("keywords:forbidden_words")
def _forbidden(response: str, forbidden_words: Sequence[str]) -> bool:
    return not any(
        re.search(r"\b" + re.escape(w) + r"\b", response, flags=re.I) for w in forbidden_words
    )


@checker("keywords:frequency")
def _keyword_frequency(response: str, keyword: str, frequency: int, relation: str) -> bool:
    count = len(re.findall(re.escape(keyword), response, flags=re.I))
    return _compare(count, relation, frequency)


@checker("keywords:letter_frequency")
def _letter_frequency(response: str, letter: str, let_frequency: int, let_relation: str) -> bool:
    return _compare(response.lower().count(letter.lower()), let_relation, let_frequency)


@checker("language:response_language")
def _response_language(response: str, language: str) -> bool:
    detected = _language(response)
    return detected is None or detected == language  # undetectable text is given the benefit


@checker("length_constraints:nth_paragraph_first_word")
def _nth_paragraph_first_word(
    response: str, num_paragraphs: int, nth_paragraph: int, first_word: str
) -> bool:
    paragraphs = [p for p in re.split(r"\n\n", response) if p.strip()]
    if len(paragraphs) != num_paragraphs or not 1 <= nth_paragraph <= len(paragraphs):
        return False
    word = paragraphs[nth_paragraph - 1].split()[0].lstrip("'\"")
    word = re.split(r"[.,?!'\"]", word)[0]
    return word.lower() == first_word.strip().lower()


@checker("length_constraints:number_paragraphs")
def _paragraphs(response: str, num_paragraphs: int) -> bool:
    parts = re.split(r"\s?\*\*\*\s?", response)
    count = len(parts)
    for index, part in enumerate(parts):
        if not part.strip():
            if index in (0, len(parts) - 1):
                count -= 1
            else:
                return False  # an empty paragraph between two separators
    return count == num_paragraphs


@checker("length_constraints:number_sentences")
def _sentences(response: str, num_sentences: int, relation: str) -> bool:
    return _compare(count_sentences(response), relation, num_sentences)


@checker("length_constraints:number_words")
def _word_count(response: str, num_words: int, relation: str) -> bool:
    return _compare(len(_words(response)), relation, num_words)


@checker("punctuation:no_comma")
def _no_comma(response: str) -> bool:
    return "," not in response


@checker("startend:end_checker")
def _ends_with(response: str, end_phrase: str) -> bool:
    return response.strip().strip('"').lower().endswith(end_phrase.strip().lower())


@checker("startend:quotation")
def _quoted(response: str) -> bool:
    text = response.strip()
    return len(text) > 1 and text[0] == '"' and text[-1] == '"'


# --------------------------------------------------------------------------- evaluation


def loose_variants(response: str) -> list[str]:
    """The response plus the IFEval loose variants (drop first/last line, strip `*`)."""
    lines = response.split("\n")
    base = [
        response,
        "\n".join(lines[1:]).strip(),
        "\n".join(lines[:-1]).strip(),
        "\n".join(lines[1:-1]).strip(),
    ]
    return base + [v.replace("*", "") for v in base]


@cache
def taxonomies() -> dict[str, dict[str, Checker]]:
    """Each instruction taxonomy's checkers by id: IFEval's 25 ("ifeval"), the IF-RLVR
    training constraints ("iftrain", 29) and IFBench's evaluation constraints ("ifbench", 58)."""
    from curation.verify.ifbench import IFBENCH_CHECKERS
    from curation.verify.iftrain import IFTRAIN_CHECKERS

    found = {"ifeval": CHECKERS, "iftrain": IFTRAIN_CHECKERS, "ifbench": IFBENCH_CHECKERS}
    ids = [i for checkers in found.values() for i in checkers]
    if len(ids) != len(set(ids)):
        raise ImportError(f"an instruction id is in two taxonomies: {sorted(ids)}")
    return found


@cache
def all_checkers() -> dict[str, Checker]:
    """Every instruction id the IF verifier decides, of any taxonomy."""
    return {i: fn for checkers in taxonomies().values() for i, fn in checkers.items()}


def check_instruction(
    instruction_id: str, kwargs: dict[str, Any] | None, response: str, *, loose: bool = False
) -> bool:
    """Whether `response` follows one instruction. ValueError for unknown ids or bad kwargs."""
    fn = all_checkers().get(instruction_id)
    if fn is None:
        raise ValueError(
            f"unknown instruction id {instruction_id!r} (not in the IFEval, IF-RLVR or IFBench "
            "taxonomy)"
        )
    args = {k: v for k, v in (kwargs or {}).items() if v is not None}
    candidates = loose_variants(response) if loose else [response]
    try:
        return any(fn(c, **args) for c in candidates if c.strip())
    except TypeError as exc:
        raise ValueError(f"{instruction_id}: bad kwargs {sorted(args)} ({exc})") from None


def follow_flags(
    response: str,
    instruction_ids: Sequence[str],
    kwargs_list: Sequence[dict[str, Any] | None],
    *,
    loose: bool = False,
) -> list[bool]:
    """Per-instruction followed flags for one response (the final answer part)."""
    if len(instruction_ids) != len(kwargs_list):
        raise ValueError(f"{len(instruction_ids)} instruction ids but {len(kwargs_list)} kwargs")
    text = final_answer_part(response)
    return [
        check_instruction(i, k, text, loose=loose)
        for i, k in zip(instruction_ids, kwargs_list, strict=True)
    ]


def verify_ifeval(
    response: str,
    instruction_ids: Sequence[str] | str,
    kwargs_list: Sequence[dict[str, Any] | None] | str | None,
    *,
    loose: bool = False,
) -> Verdict:
    """Prompt-level verdict (all followed); score = instruction-level fraction followed.

    Ids and kwargs may be Python objects or JSON text; each kwargs dict may hold its own keys
    (null values are ignored); `kwargs_list=None` means no arguments for any instruction.
    An undecided verdict says which input was unusable (`bad_input`).
    """
    ids, kwargs = json_value(instruction_ids), json_value(kwargs_list)
    if isinstance(ids, str) or not isinstance(ids, Sequence) or not ids:
        return Verdict(None, 0.0, f"no instruction id list: {ids!r:.80}", bad_input="reference")
    if kwargs is None:
        kwargs = [None] * len(ids)
    if isinstance(kwargs, (str, dict)) or not isinstance(kwargs, Sequence):
        return Verdict(None, 0.0, f"kwargs are not a list: {kwargs!r:.80}", bad_input="kwargs")
    if len(ids) != len(kwargs):
        return Verdict(
            None, 0.0, f"{len(ids)} instruction ids but {len(kwargs)} kwargs", bad_input="kwargs"
        )
    unknown = [i for i in ids if i not in all_checkers()]
    if unknown:
        return Verdict(None, 0.0, f"unknown instruction id {unknown[0]!r}", bad_input="reference")
    try:
        flags = follow_flags(response, list(ids), [json_value(k) for k in kwargs], loose=loose)
    except ValueError as exc:  # ids are known, so the arguments do not fit their checker
        return Verdict(None, 0.0, str(exc), bad_input="kwargs")
    instruction_ids = list(ids)
    missed = [i for i, ok in zip(instruction_ids, flags, strict=True) if not ok]
    detail = "followed all" if not missed else "not followed: " + ", ".join(missed)
    return Verdict(not missed, sum(flags) / len(flags), detail)


def ifeval_scores(
    responses: Sequence[str],
    instruction_ids: Sequence[Sequence[str]],
    kwargs_lists: Sequence[Sequence[dict[str, Any] | None]],
) -> dict[str, float]:
    """The four IFEval accuracies: prompt/instruction level x strict/loose."""
    scores: dict[str, float] = {}
    for mode in ("strict", "loose"):
        prompts_ok = followed = total = 0
        for response, ids, kwargs in zip(responses, instruction_ids, kwargs_lists, strict=True):
            flags = follow_flags(response, ids, kwargs, loose=mode == "loose")
            prompts_ok += all(flags)
            followed += sum(flags)
            total += len(flags)
        scores[f"prompt_{mode}"] = prompts_ok / max(len(responses), 1)
        scores[f"instruction_{mode}"] = followed / max(total, 1)
    return scores


def ifeval_reward(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    instruction_id_list: Sequence[Sequence[str]],
    kwargs: Sequence[Any],
    **columns: Any,
) -> list[float | None]:
    """TRL-style reward: 1.0 when every instruction is followed (strict), else 0.0.

    The IF verifier always decides a usable row, so a row it cannot use (an instruction id of
    no taxonomy, kwargs that do not fit their checker) is a data error: ValueError naming the
    row (its `uid` when the batch has one) and the id, not a None that the trainer would skip
    (a stage whose every row is skipped trains on nothing).
    """
    rewards: list[float | None] = []
    for row, (c, ids, kw) in enumerate(zip(completions, instruction_id_list, kwargs, strict=True)):
        verdict = verify_ifeval(completion_text(c), ids, kw)
        if verdict.passed is None:
            uids = columns.get("uid")
            name = f"row {row}" + (f" (uid {uids[row]!r})" if uids is not None else "")
            raise ValueError(f"IF reward: {name}: {verdict.detail}")
        rewards.append(float(verdict.passed))
    return rewards
