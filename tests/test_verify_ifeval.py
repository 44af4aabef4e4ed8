"""IFEval checkers: one following and one breaking response per instruction id, loose vs
strict, and every prompt of the real benchmark accepted with its own kwargs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from curation.verify.ifeval import (
    CHECKERS,
    check_instruction,
    count_sentences,
    ifeval_reward,
    ifeval_scores,
    verify_ifeval,
)

ENGLISH = "The quick brown fox jumps over the lazy dog while the farmer watches from the porch."

# id -> (kwargs, a response that follows, a response that does not)
CASES: dict[str, tuple[dict, str, str]] = {
    "change_case:capital_word_frequency": (
        {"capital_frequency": 2, "capital_relation": "at least"},
        "We MUST act NOW.",
        "We MUST act now.",
    ),
    "change_case:english_capital": ({}, ENGLISH.upper(), ENGLISH),
    "change_case:english_lowercase": ({}, ENGLISH.lower(), ENGLISH),
    "combination:repeat_prompt": (
        {"prompt_to_repeat": "Write a poem about cats."},
        "Write a poem about cats. Cats are soft.",
        "Cats are soft. Write a poem about cats.",
    ),
    "combination:two_responses": ({}, "First answer.\n******\nSecond answer.", "Only one answer."),
    "detectable_content:number_placeholders": (
        {"num_placeholders": 2},
        "Dear [name], meet me at [address].",
        "Dear [name], meet me soon.",
    ),
    "detectable_content:postscript": (
        {"postscript_marker": "P.S."},
        "Hello there.\n\nP.S. See you soon.",
        "Hello there. See you soon.",
    ),
    "detectable_format:constrained_response": (
        {},
        "After thinking: My answer is yes.",
        "Yes, definitely.",
    ),
    "detectable_format:json_format": ({}, '```json\n{"a": [1, 2]}\n```', "{'a': 1,}"),
    "detectable_format:multiple_sections": (
        {"section_spliter": "SECTION", "num_sections": 2},
        "SECTION 1\nIntro.\nSECTION 2\nBody.",
        "SECTION 1\nOnly one.",
    ),
    "detectable_format:number_bullet_lists": (
        {"num_bullets": 3},
        "Points:\n* one\n* two\n- three",
        "Points:\n* one\n* two",
    ),
    "detectable_format:number_highlighted_sections": (
        {"num_highlights": 2},
        "This is *important* and *also this*.",
        "This is *important* only.",
    ),
    "detectable_format:title": ({}, "<<My Title>>\nText.", "My Title\nText."),
    "keywords:existence": (
        {"keywords": ["ocean", "blue"]},
        "The Ocean is blue.",
        "The ocean is green.",
    ),
    "keywords:forbidden_words": (
        {"forbidden_words": ["bad", "evil"]},
        "A badge of honour.",
        "An Evil plan.",
    ),
    "keywords:frequency": (
        {"keyword": "data", "frequency": 3, "relation": "at least"},
        "Data, data and more DATA.",
        "Data and data.",
    ),
    "keywords:letter_frequency": (
        {"letter": "z", "let_frequency": 2, "let_relation": "less than"},
        "A zebra.",
        "Zig zag zebra.",
    ),
    "language:response_language": (
        {"language": "de"},
        "Das ist ein kurzer Satz auf Deutsch, und er ist ganz einfach zu lesen.",
        ENGLISH,
    ),
    "length_constraints:nth_paragraph_first_word": (
        {"num_paragraphs": 3, "nth_paragraph": 2, "first_word": "however"},
        "First part.\n\nHowever, second.\n\nThird.",
        "First part.\n\nBut second.\n\nThird.",
    ),
    "length_constraints:number_paragraphs": (
        {"num_paragraphs": 3},
        "One.\n***\nTwo.\n***\nThree.",
        "One.\n***\n\n***\nThree.",
    ),
    "length_constraints:number_sentences": (
        {"num_sentences": 3, "relation": "less than"},
        "Dr. Smith arrived. He sat down.",
        "One. Two! Three? Four.",
    ),
    "length_constraints:number_words": (
        {"num_words": 5, "relation": "at least"},
        "one two three four five",
        "one two three",
    ),
    "punctuation:no_comma": ({}, "No commas here.", "Well, a comma."),
    "startend:end_checker": (
        {"end_phrase": "Any other questions?"},
        "That is all. Any other questions?",
        "Any other questions? That is all.",
    ),
    "startend:quotation": ({}, '"Wrapped in quotes."', "Not wrapped."),
}


def _benchmark(shared_data: Path) -> list[dict]:
    path = shared_data / "benchmarks" / "ifeval.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_every_benchmark_instruction_id_has_a_checker_and_a_case(shared_data: Path) -> None:
    ids = {i for row in _benchmark(shared_data) for i in row["instruction_id_list"]}
    assert ids == set(CHECKERS) == set(CASES)


@pytest.mark.parametrize("instruction_id", sorted(CASES))
def test_checker_follows_and_breaks(instruction_id: str) -> None:
    kwargs, good, bad = CASES[instruction_id]
    assert check_instruction(instruction_id, kwargs, good) is True
    assert check_instruction(instruction_id, kwargs, bad) is False


def test_loose_forgives_a_preamble_line_and_markup_but_strict_does_not() -> None:
    response = 'Sure, here it is:\n"Wrapped in quotes."'
    assert not check_instruction("startend:quotation", {}, response)
    assert check_instruction("startend:quotation", {}, response, loose=True)
    bold = "**Ending** here. Any other questions?**"
    kwargs = {"end_phrase": "Any other questions?"}
    assert not check_instruction("startend:end_checker", kwargs, bold)
    assert check_instruction("startend:end_checker", kwargs, bold, loose=True)


def test_sentence_counter_handles_abbreviations_and_numbers() -> None:
    assert count_sentences("Dr. Smith paid 3.50 dollars. Then he left!") == 2
    assert count_sentences("Wait... what? Yes.") == 3
    assert count_sentences("") == 0


def test_every_benchmark_prompt_is_checkable_with_its_kwargs(shared_data: Path) -> None:
    rows = _benchmark(shared_data)
    responses = ["A short reply, nothing more."] * len(rows)
    scores = ifeval_scores(
        responses, [r["instruction_id_list"] for r in rows], [r["kwargs"] for r in rows]
    )
    # a one-line reply follows some instructions (no title needed...) but not most prompts
    assert 0.0 < scores["instruction_strict"] < 0.6
    assert scores["prompt_strict"] <= scores["instruction_strict"]
    assert scores["prompt_strict"] <= scores["prompt_loose"]
    assert scores["instruction_strict"] <= scores["instruction_loose"]


def test_verdict_levels_and_thinking_part_ignored() -> None:
    ids = ["punctuation:no_comma", "detectable_format:title"]
    kwargs = [{}, {}]
    both = verify_ifeval("<think>hmm, well</think><<Title>>\nNo commas.", ids, kwargs)
    assert both.passed is True and both.score == 1.0
    half = verify_ifeval("<<Title>>\nYes, a comma.", ids, kwargs)
    assert half.passed is False and half.score == 0.5
    assert "punctuation:no_comma" in half.detail
    unknown = verify_ifeval("x", ["no_such:id"], [{}])
    assert unknown.passed is None and "unknown instruction id" in unknown.detail
    assert verify_ifeval("x", ids, json.dumps(kwargs)).passed is False  # kwargs as JSON text


def test_ifeval_reward_trl_style() -> None:
    rewards = ifeval_reward(
        ["p", "p"],
        ["no commas", [{"role": "assistant", "content": "a, b"}]],
        instruction_id_list=[["punctuation:no_comma"]] * 2,
        kwargs=[[{}]] * 2,
    )
    assert rewards == [1.0, 0.0]


def test_ifeval_reward_refuses_a_row_it_cannot_decide() -> None:
    """An unknown id or unusable kwargs is a data error naming the row, not a None the trainer
    would skip (a stage whose rows all went undecided trained on nothing, silently)."""
    batch = {"instruction_id_list": [["punctuation:no_comma"], ["bogus:id"]], "kwargs": [[{}]] * 2}
    with pytest.raises(ValueError, match=r"^IF reward: row 1: unknown instruction id 'bogus:id'"):
        ifeval_reward(["p", "p"], ["a", "b"], **batch)
    with pytest.raises(ValueError, match=r"row 1 \(uid 'src:7'\): unknown instruction id 'bogus"):
        ifeval_reward(["p", "p"], ["a", "b"], uid=["src:3", "src:7"], **batch)
    bad_kwargs = {"instruction_id_list": [["keywords:frequency"]], "kwargs": [[{"keyword": "x"}]]}
    with pytest.raises(ValueError, match=r"row 0: keywords:frequency: bad kwargs \['keyword'\]"):
        ifeval_reward(["p"], ["x"], **bad_kwargs)
    # the IF-RLVR and IFBench ids are decided, not refused
    ids = [["punctuation:punctuation_dot"], ["format:no_whitespace"]]
    assert ifeval_reward(["p"] * 2, ["no dot", "a b"], ids, [[{}], [{}]]) == [1.0, 0.0]
