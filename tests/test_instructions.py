"""Attached IFEval-taxonomy instructions: every set is verifiable, no conflicting pair is ever
drawn, the wording is IFEval's, and the step keeps and drops exactly the right rows."""

from __future__ import annotations

import json
import random
from typing import Any

import polars as pl
import pytest

from curation.instructions import (
    INSTRUCTIONS,
    LANGUAGES,
    attach_instructions,
    compliant_response,
    conflicting_pairs,
    conflicts,
    draw_instruction_set,
    kwargs_conflict,
)
from curation.prompt_ids import prompt_ids
from curation.verify.ifeval import CHECKERS, check_instruction, verify_ifeval

SEEDS = 400
BASE = "Write a short note to a neighbour about a lost cat."


def violation(instruction: str, kwargs: dict[str, Any]) -> str:
    """A response that breaks `instruction` (whatever else it satisfies)."""
    k = kwargs
    match instruction.split(":")[1]:
        case "capital_word_frequency":
            if k["capital_relation"] == "less than":
                return "LOUD " * k["capital_frequency"]
            return "nothing is shouted here"
        case "english_capital":
            return "this is all lower case"
        case "english_lowercase":
            return "This Has Capitals"
        case "repeat_prompt":
            return "an answer that does not repeat the request"
        case "two_responses":
            return "only one response"
        case "number_placeholders" | "number_highlighted_sections" | "title" | "json_format":
            return "plain text without markup"
        case "postscript" | "constrained_response" | "existence" | "end_checker":
            return "plain text without markup"
        case "multiple_sections":
            return "plain text without markup"
        case "number_bullet_lists":
            return "* point\n" * (k["num_bullets"] + 1)
        case "forbidden_words":
            return f"a sentence with {k['forbidden_words'][0]} in it"
        case "frequency":
            if k["relation"] == "less than":
                return " ".join([k["keyword"]] * k["frequency"])
            return "plain text without markup"
        case "letter_frequency":
            if k["let_relation"] == "less than":
                return k["letter"] * k["let_frequency"]
            return "xyz".replace(k["letter"], "")
        case "response_language":
            return "this is clearly an english sentence about the weather and the garden today"
        case "nth_paragraph_first_word":
            return "\n\n".join(["wrongword text"] * (k["num_paragraphs"] + 1))
        case "number_paragraphs":
            return "\n***\n".join(["text"] * (k["num_paragraphs"] + 1))
        case "number_sentences":
            if k["relation"] == "less than":
                return "One. " * k["num_sentences"]
            return "one sentence" if k["num_sentences"] > 1 else "\n"
        case "number_words":
            if k["relation"] == "less than":
                return "word " * k["num_words"]
            return "too few words"
        case "no_comma":
            return "one, two"
        case "quotation":
            return "not quoted"
    raise AssertionError(f"no violation for {instruction}")


def test_the_taxonomy_is_exactly_what_the_verifier_checks() -> None:
    assert set(INSTRUCTIONS) == set(CHECKERS) and len(INSTRUCTIONS) == 25


def test_no_conflicting_pair_is_ever_drawn() -> None:
    seen: set[str] = set()
    for seed in range(SEEDS):
        drawn = draw_instruction_set(random.Random(seed), BASE, per_prompt=(1, 8))
        assert drawn is not None
        ids, kwargs, _, _ = drawn
        assert conflicting_pairs(ids) == [], (seed, ids)
        assert len(set(ids)) == len(ids)
        assert kwargs_conflict(ids, kwargs) is None
        seen.update(ids)
    assert seen == set(INSTRUCTIONS)  # every type can be drawn


def test_the_conflicts_named_in_the_taxonomy() -> None:
    # IFEval's registry, stated by example ...
    assert conflicts("change_case:english_lowercase", "change_case:english_capital")
    assert conflicts("punctuation:no_comma", "detectable_format:json_format")  # JSON needs commas
    assert conflicts("language:response_language", "language:response_language")
    assert conflicts("length_constraints:number_paragraphs", "length_constraints:number_sentences")
    assert conflicts("detectable_format:constrained_response", "startend:quotation")
    # ... and what our checkers add, each shown on the verifier itself:
    assert conflicts("combination:repeat_prompt", "punctuation:no_comma")
    request = "Tell me a joke.\n" + INSTRUCTIONS["punctuation:no_comma"].describe({})
    assert "," in request  # the request to repeat holds the no-comma instruction's comma
    assert conflicts("change_case:english_lowercase", "detectable_format:multiple_sections")
    sections = {"section_spliter": "Section", "num_sections": 1}
    assert not check_instruction("detectable_format:multiple_sections", sections, "section 1 x")
    # Symmetric, and compatible pairs stay allowed.
    assert conflicts("punctuation:no_comma", "combination:repeat_prompt")
    assert not conflicts("punctuation:no_comma", "startend:quotation")
    # Paragraphs that cannot each hold a sentence within the sentence limit.
    ids = ["length_constraints:number_sentences", "length_constraints:nth_paragraph_first_word"]
    tight = [
        {"relation": "less than", "num_sentences": 3},
        {"num_paragraphs": 3, "nth_paragraph": 1, "first_word": "lemon"},
    ]
    assert kwargs_conflict(ids, tight) == "3 paragraphs in fewer than 3 sentences"
    tight[0]["num_sentences"] = 4
    assert kwargs_conflict(ids, tight) is None


def test_every_drawn_set_is_verifiable_and_each_instruction_can_be_violated() -> None:
    for seed in range(SEEDS):
        ids, kwargs, _, _ = draw_instruction_set(random.Random(seed), BASE, per_prompt=(1, 4))
        witness = compliant_response(ids, kwargs)
        assert witness is not None and verify_ifeval(witness, ids, kwargs).passed, (ids, kwargs)
        for instruction, args in zip(ids, kwargs, strict=True):
            bad = violation(instruction, args)
            assert check_instruction(instruction, args, bad) is False, (instruction, args, bad)
            assert verify_ifeval(bad, ids, kwargs).passed is False


def test_hand_written_responses_against_drawn_kwargs() -> None:
    """Responses written by hand (not by our witness) for fixed sets and kwargs."""
    ids = ["punctuation:no_comma", "detectable_format:title", "startend:end_checker"]
    kwargs: list[dict] = [{}, {}, {"end_phrase": "Any other questions?"}]
    good = "<<a lost cat>>\nDear neighbour our grey cat Milo is missing.\nAny other questions?"
    assert verify_ifeval(good, ids, kwargs).passed
    assert not verify_ifeval(good.replace("neighbour our", "neighbour, our"), ids, kwargs).passed
    assert not verify_ifeval(good.replace("<<a lost cat>>", "A lost cat"), ids, kwargs).passed

    ids = ["length_constraints:nth_paragraph_first_word", "detectable_format:number_bullet_lists"]
    kwargs = [{"num_paragraphs": 2, "nth_paragraph": 2, "first_word": "lemon"}, {"num_bullets": 2}]
    good = "Our cat is missing.\n\nLemon is her name.\n* grey fur\n* green eyes"
    assert verify_ifeval(good, ids, kwargs).passed
    assert not verify_ifeval(good.replace("Lemon", "Mint"), ids, kwargs).passed
    assert not verify_ifeval(good + "\n* white paws", ids, kwargs).passed


def test_the_wording_is_ifevals(shared_data) -> None:
    """Rendered from an IFEval item's own kwargs, our text appears verbatim in its prompt
    (the benchmark's prompts were edited by hand, so not every item keeps the template)."""
    items = [json.loads(line) for line in (shared_data / "benchmarks/ifeval.jsonl").open()]
    verbatim = set()
    for item in items:
        for instruction, args in zip(item["instruction_id_list"], item["kwargs"], strict=True):
            args = {k: v for k, v in args.items() if v is not None}
            try:
                text = INSTRUCTIONS[instruction].describe(args)
            except KeyError:
                continue
            if text in item["prompt"]:
                verbatim.add(instruction)
    assert verbatim >= {
        "combination:repeat_prompt",
        "change_case:english_capital",
        "change_case:capital_word_frequency",
        "detectable_content:postscript",
        "detectable_content:number_placeholders",
        "detectable_format:number_highlighted_sections",
        "keywords:forbidden_words",
        "keywords:frequency",
        "length_constraints:number_sentences",
        "length_constraints:number_words",
        "startend:quotation",
    }


def test_repeat_the_request_names_the_text_before_it() -> None:
    only = ["combination:repeat_prompt", "detectable_format:title"]
    for seed in range(20):
        ids, kwargs, prompt, _ = draw_instruction_set(
            random.Random(seed), BASE, per_prompt=(2, 2), instruction_ids=only
        )
        assert ids[-1] == "combination:repeat_prompt"
        request = kwargs[-1]["prompt_to_repeat"]
        assert prompt == request + "\n" + INSTRUCTIONS[ids[-1]].describe(kwargs[-1])
        assert request.startswith(BASE) and "<<poem of joy>>" in request


def test_language_witnesses_are_detected_as_their_language() -> None:
    for code in LANGUAGES:
        ids = ["language:response_language"]
        assert compliant_response(ids, [{"language": code}]) is not None, code


def frame(texts: list[str]) -> pl.DataFrame:
    n = len(texts)
    return pl.DataFrame(
        {
            "uid": [f"chat:{i + 1}" for i in range(n)],
            "id": prompt_ids(pl.Series(texts)),
            "source": ["chat"] * n,
            "source_id": [str(i) for i in range(n)],
            "domain": ["if"] * n,
            "problem": texts,
            "answer": [None] * n,
            "metadata": ["{}"] * n,
        },
        schema_overrides={"answer": pl.String},
    )


def test_attach_keeps_and_drops_exactly_the_right_rows() -> None:
    texts = [
        "Describe your favourite season.",
        "",
        "   ",
        "word " * 41,
        "Explain how a bicycle gear works.",
        "Plan a birthday party for a ten year old.",
    ]
    result = attach_instructions(frame(texts), per_prompt=(1, 3), seed=7, max_prompt_words=40)
    assert result.kept["uid"].to_list() == ["chat:1", "chat:5", "chat:6"]
    dropped = {r["uid"]: (r["reason"], r["prompt_words"]) for r in result.dropped.to_dicts()}
    assert dropped == {
        "chat:2": ("empty_prompt", None),
        "chat:3": ("empty_prompt", None),
        "chat:4": ("too_long", 41),
    }
    for row in result.kept.to_dicts():
        ids, kwargs = row["instruction_id_list"], json.loads(row["kwargs"])
        assert 1 <= len(ids) <= 3 and conflicting_pairs(ids) == []
        assert row["problem"].startswith(row["base_problem"] + "\n")
        for instruction, args in zip(ids, kwargs, strict=True):
            assert INSTRUCTIONS[instruction].describe(args) in row["problem"]
        assert row["id"] == prompt_ids(pl.Series([row["problem"]]))[0]
        assert row["base_id"] == prompt_ids(pl.Series([row["base_problem"]]))[0]
        assert json.loads(row["messages"]) == [{"role": "user", "content": row["problem"]}]
        assert verify_ifeval(compliant_response(ids, kwargs) or "", ids, kwargs).passed
    # A row's instructions depend on (seed, uid) only, not on the rows around it.
    alone = attach_instructions(frame(texts).slice(4, 1), per_prompt=(1, 3), seed=7)
    assert alone.kept.row(0, named=True)["kwargs"] == result.kept.row(1, named=True)["kwargs"]
    other = attach_instructions(frame(texts), per_prompt=(1, 3), seed=8, max_prompt_words=40)
    assert other.kept["problem"].to_list() != result.kept["problem"].to_list()


def test_attach_restricted_to_given_types() -> None:
    only = ["punctuation:no_comma", "startend:quotation"]
    result = attach_instructions(
        frame(["Say hello.", "Name three rivers."]), per_prompt=(2, 2), instruction_ids=only
    )
    assert [sorted(ids) for ids in result.kept["instruction_id_list"].to_list()] == [only, only]


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="per_prompt"):
        attach_instructions(frame(["Hi."]), per_prompt=(3, 1))
    with pytest.raises(ValueError, match="per_prompt"):
        attach_instructions(frame(["Hi."]), per_prompt=(1, 26))
    with pytest.raises(ValueError, match="unknown instruction ids"):
        attach_instructions(frame(["Hi."]), instruction_ids=["keywords:rhyme"])
