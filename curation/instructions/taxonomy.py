"""The IFEval instruction taxonomy as our IF verifier checks it: kwargs, wording, conflicts.

Every instruction id of `curation.verify.ifeval.CHECKERS` (the 25 IFEval types) has a seeded
kwargs draw in IFEval's ranges and its IFEval wording (`describe`), so an attached instruction
reads the way the benchmark and the recipe's IFEval-taxonomy RL data phrase it. Three ranges
differ from IFEval's generator, because our checker could never pass them: `less than 1`
sentences, a paragraph index past the paragraph count (IFEval draws up to num + 1), and
response languages whose detected code is not their IFEval code or that we cannot write a
witness for (see `LANGUAGES`).

Conflicts (`CONFLICTS`, symmetric; every id also conflicts with itself, so no type appears
twice, e.g. two response languages) come from two places:

1. IFEval's own registry (`INSTRUCTION_CONFLICTS` in google-research
   instruction_following_eval/instructions_registry.py), restated here: a response language
   vs. sections, keywords, end phrase and English case; paragraph counts vs. each other and
   vs. sentence counts; sections vs. highlights; all capitals vs. all lowercase and vs. the
   capital-word count; quotation vs. title; the constrained answer ("My answer is yes.") vs.
   everything; JSON vs. everything but keyword existence and forbidden words (a JSON object
   needs commas and braces); two responses vs. everything but forbidden words, keywords,
   language, title and no-comma; repeating the request vs. everything but keywords and title.
2. Our reading of the checkers in curation/verify/ifeval.py: repeat-the-request vs. no commas
   (the request to repeat includes the no-comma instruction, whose IFEval wording has a
   comma), and all lowercase vs. sections (the section marker `Section`/`SECTION` is matched
   case-sensitively, so a lowercase response cannot mark a section).

`kwargs_conflict` adds the rules that depend on the drawn numbers: fewer than N sentences
cannot hold P paragraphs or S sections of at least one sentence each (N - 1 >= P, S).
Conflicts that depend on letters and words (a letter allowed fewer than 3 times while the
end phrase holds it 4 times) are left to the witness check in `attach.draw_instruction_set`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from curation.instructions.witness import compliant_response
from curation.verify.ifeval import CHECKERS

RELATIONS = ("less than", "at least")
END_PHRASES = ("Any other questions?", "Is there anything else I can help with?")
POSTSCRIPT_MARKERS = ("P.S.", "P.P.S")
SECTION_SPLITTERS = ("Section", "SECTION")
CONSTRAINED_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")

LANGUAGES: dict[str, str] = {
    "ar": "Arabic",
    "de": "German",
    "es": "Spanish",
    "fi": "Finnish",
    "fr": "French",
    "hi": "Hindi",
    "it": "Italian",
    "ko": "Korean",
    "pl": "Polish",
    "pt": "Portuguese",
    "ru": "Russian",
    "sw": "Swahili",
    "tr": "Turkish",
    "vi": "Vietnamese",
}
"""IFEval's response languages that langdetect reports under the same code and that
`witness.LANGUAGE_SAMPLES` can write (IFEval's `zh` never passes: langdetect says `zh-cn`)."""

KEYWORDS = (
    "anchor", "basket", "blanket", "bridge", "cactus", "candle", "castle", "compass",
    "cookie", "desert", "diamond", "dolphin", "dragon", "emerald", "engine", "falcon",
    "feather", "festival", "forest", "galaxy", "glacier", "guitar", "hammer", "harbor",
    "harmony", "harvest", "helmet", "honey", "iceberg", "island", "jacket", "journal",
    "jungle", "kettle", "kingdom", "ladder", "lantern", "lemon", "magnet", "marble",
    "meadow", "melody", "mirror", "napkin", "nectar", "needle", "orchid", "oyster",
    "parrot", "pencil", "pepper", "piano", "pillow", "pirate", "planet", "puzzle",
    "quartz", "rabbit", "rainbow", "ribbon", "rocket", "saddle", "shadow", "silver",
    "sunset", "thunder", "ticket", "tiger", "treasure", "tunnel", "umbrella", "valley",
    "velvet", "violin", "voyage", "wallet", "walnut", "whistle", "window", "wizard",
)  # fmt: skip
"""Words drawn for keywords, forbidden words and first words; no word contains another."""


@dataclass(frozen=True)
class InstructionType:
    """One IFEval instruction type: how its kwargs are drawn and how it is worded."""

    id: str
    draw: Callable[[random.Random, WordDraw], dict[str, Any]]
    describe: Callable[[dict[str, Any]], str]


class WordDraw:
    """Keywords for one instruction set, without repeats, none a substring of another (so
    a forbidden word or a counted keyword is never hidden inside a required one). `prompt` is
    the request the set is attached to, for draws that depend on it (a span to copy)."""

    def __init__(
        self, rng: random.Random, pool: Sequence[str] = KEYWORDS, prompt: str = ""
    ) -> None:
        self.rng = rng
        self.pool = list(pool)
        self.used: list[str] = []
        self.prompt = prompt

    def take(self) -> str:
        free = [w for w in self.pool if not any(w in u or u in w for u in self.used)]
        if not free:
            raise ValueError("keyword pool exhausted for one instruction set")
        word = self.rng.choice(free)
        self.used.append(word)
        return word


def _relation(rng: random.Random) -> str:
    return rng.choice(RELATIONS)


def _sentences(rng: random.Random, _: WordDraw) -> dict[str, Any]:
    relation = _relation(rng)
    low = 2 if relation == "less than" else 1  # fewer than 1 sentence cannot be written
    return {"relation": relation, "num_sentences": rng.randint(low, 20)}


def _nth_paragraph(rng: random.Random, words: WordDraw) -> dict[str, Any]:
    count = rng.randint(1, 5)
    return {
        "num_paragraphs": count,
        "nth_paragraph": rng.randint(1, count),
        "first_word": words.take(),
    }


def _registry() -> dict[str, InstructionType]:
    entries = [
        InstructionType(
            "change_case:capital_word_frequency",
            lambda rng, _: {
                "capital_frequency": rng.randint(1, 20),
                "capital_relation": _relation(rng),
            },
            lambda k: (
                "In your response, words with all capital letters should appear "
                f"{k['capital_relation']} {k['capital_frequency']} times."
            ),
        ),
        InstructionType(
            "change_case:english_capital",
            lambda rng, _: {},
            lambda k: "Your entire response should be in English, and in all capital letters.",
        ),
        InstructionType(
            "change_case:english_lowercase",
            lambda rng, _: {},
            lambda k: (
                "Your entire response should be in English, and in all lowercase letters. "
                "No capital letters are allowed."
            ),
        ),
        InstructionType(
            "combination:repeat_prompt",
            lambda rng, _: {"prompt_to_repeat": ""},  # set when the prompt is assembled
            lambda k: (
                "First repeat the request word for word without change, then give your "
                "answer (1. do not say any words or characters before repeating the request; 2. the "
                "request you need to repeat does not include this sentence)"
            ),
        ),
        InstructionType(
            "combination:two_responses",
            lambda rng, _: {},
            lambda k: (
                "Give two different responses. Responses and only responses should be "
                "separated by 6 asterisk symbols: ******."
            ),
        ),
        InstructionType(
            "detectable_content:number_placeholders",
            lambda rng, _: {"num_placeholders": rng.randint(1, 4)},
            lambda k: (
                f"The response must contain at least {k['num_placeholders']} placeholders "
                "represented by square brackets, such as [address]."
            ),
        ),
        InstructionType(
            "detectable_content:postscript",
            lambda rng, _: {"postscript_marker": rng.choice(POSTSCRIPT_MARKERS)},
            lambda k: (
                "At the end of your response, please explicitly add a postscript starting "
                f"with {k['postscript_marker']}"
            ),
        ),
        InstructionType(
            "detectable_format:constrained_response",
            lambda rng, _: {},
            lambda k: f"Answer with one of the following options: {CONSTRAINED_OPTIONS}",
        ),
        InstructionType(
            "detectable_format:json_format",
            lambda rng, _: {},
            lambda k: (
                "Entire output should be wrapped in JSON format. You can use markdown "
                "ticks such as ```."
            ),
        ),
        InstructionType(
            "detectable_format:multiple_sections",
            lambda rng, _: {
                "section_spliter": rng.choice(SECTION_SPLITTERS),
                "num_sections": rng.randint(1, 5),
            },
            lambda k: (
                f"Your response must have {k['num_sections']} sections. Mark the beginning "
                f"of each section with {k['section_spliter']} X, such as:\n"
                f"{k['section_spliter']} 1\n[content of section 1]\n"
                f"{k['section_spliter']} 2\n[content of section 2]"
            ),
        ),
        InstructionType(
            "detectable_format:number_bullet_lists",
            lambda rng, _: {"num_bullets": rng.randint(1, 5)},
            lambda k: (
                f"Your answer must contain exactly {k['num_bullets']} bullet points. Use "
                "the markdown bullet points such as:\n* This is point 1. \n* This is point 2"
            ),
        ),
        InstructionType(
            "detectable_format:number_highlighted_sections",
            lambda rng, _: {"num_highlights": rng.randint(1, 4)},
            lambda k: (
                f"Highlight at least {k['num_highlights']} sections in your answer with "
                "markdown, i.e. *highlighted section*."
            ),
        ),
        InstructionType(
            "detectable_format:title",
            lambda rng, _: {},
            lambda k: (
                "Your answer must contain a title, wrapped in double angular brackets, "
                "such as <<poem of joy>>."
            ),
        ),
        InstructionType(
            "keywords:existence",
            lambda rng, words: {"keywords": sorted(words.take() for _ in range(2))},
            lambda k: f"Include keywords {k['keywords']} in the response.",
        ),
        InstructionType(
            "keywords:forbidden_words",
            lambda rng, words: {"forbidden_words": sorted(words.take() for _ in range(2))},
            lambda k: f"Do not include keywords {k['forbidden_words']} in the response.",
        ),
        InstructionType(
            "keywords:frequency",
            lambda rng, words: {
                "keyword": words.take(),
                "frequency": rng.randint(1, 3),
                "relation": _relation(rng),
            },
            lambda k: (
                f"In your response, the word {k['keyword']} should appear {k['relation']} "
                f"{k['frequency']} times."
            ),
        ),
        InstructionType(
            "keywords:letter_frequency",
            lambda rng, _: {
                "letter": rng.choice("abcdefghijklmnopqrstuvwxyz"),
                "let_frequency": rng.randint(1, 10),
                "let_relation": _relation(rng),
            },
            lambda k: (
                f"In your response, the letter {k['letter']} should appear "
                f"{k['let_relation']} {k['let_frequency']} times."
            ),
        ),
        InstructionType(
            "language:response_language",
            lambda rng, _: {"language": rng.choice(sorted(LANGUAGES))},
            lambda k: (
                f"Your ENTIRE response should be in {LANGUAGES[k['language']]} language, "
                "no other language is allowed."
            ),
        ),
        InstructionType(
            "length_constraints:nth_paragraph_first_word",
            _nth_paragraph,
            lambda k: (
                f"There should be {k['num_paragraphs']} paragraphs. Paragraphs and only "
                "paragraphs are separated with each other by two new lines as if it was '\\n\\n' in "
                f"python. Paragraph {k['nth_paragraph']} must start with word {k['first_word']}."
            ),
        ),
        InstructionType(
            "length_constraints:number_paragraphs",
            lambda rng, _: {"num_paragraphs": rng.randint(1, 5)},
            lambda k: (
                f"There should be {k['num_paragraphs']} paragraphs. Paragraphs are "
                "separated with the markdown divider: ***"
            ),
        ),
        InstructionType(
            "length_constraints:number_sentences",
            _sentences,
            lambda k: (
                f"Your response should contain {k['relation']} {k['num_sentences']} sentences."
            ),
        ),
        InstructionType(
            "length_constraints:number_words",
            lambda rng, _: {"num_words": rng.randint(100, 500), "relation": _relation(rng)},
            lambda k: f"Answer with {k['relation']} {k['num_words']} words.",
        ),
        InstructionType(
            "punctuation:no_comma",
            lambda rng, _: {},
            lambda k: "In your entire response, refrain from the use of any commas.",
        ),
        InstructionType(
            "startend:end_checker",
            lambda rng, _: {"end_phrase": rng.choice(END_PHRASES)},
            lambda k: (
                f"Finish your response with this exact phrase {k['end_phrase']}. No other "
                "words should follow this phrase."
            ),
        ),
        InstructionType(
            "startend:quotation",
            lambda rng, _: {},
            lambda k: "Wrap your entire response with double quotation marks.",
        ),
    ]
    return {entry.id: entry for entry in entries}


INSTRUCTIONS: dict[str, InstructionType] = _registry()
if set(INSTRUCTIONS) != set(CHECKERS):  # the taxonomy is exactly what the verifier checks
    raise ImportError(
        f"instruction taxonomy and IF verifier differ: {sorted(set(INSTRUCTIONS) ^ set(CHECKERS))}"
    )

_ALL = frozenset(INSTRUCTIONS)
_IFEVAL_CONFLICTS: dict[str, Iterable[str]] = {
    "language:response_language": (
        "detectable_format:multiple_sections",
        "keywords:existence",
        "keywords:frequency",
        "keywords:forbidden_words",
        "startend:end_checker",
        "change_case:english_capital",
        "change_case:english_lowercase",
    ),
    "length_constraints:number_paragraphs": (
        "length_constraints:nth_paragraph_first_word",
        "length_constraints:number_sentences",
    ),
    "detectable_format:multiple_sections": ("detectable_format:number_highlighted_sections",),
    "detectable_format:constrained_response": _ALL,
    "detectable_format:json_format": _ALL - {"keywords:forbidden_words", "keywords:existence"},
    "combination:two_responses": _ALL
    - {
        "keywords:forbidden_words",
        "keywords:existence",
        "language:response_language",
        "detectable_format:title",
        "punctuation:no_comma",
    },
    "combination:repeat_prompt": _ALL
    - {"keywords:existence", "detectable_format:title", "punctuation:no_comma"},
    "change_case:capital_word_frequency": (
        "change_case:english_lowercase",
        "change_case:english_capital",
    ),
    "change_case:english_lowercase": ("change_case:english_capital",),
    "startend:quotation": ("detectable_format:title",),
}
_CHECKER_CONFLICTS: dict[str, Iterable[str]] = {
    "combination:repeat_prompt": ("punctuation:no_comma",),
    "change_case:english_lowercase": ("detectable_format:multiple_sections",),
}


def _symmetric(*tables: dict[str, Iterable[str]]) -> frozenset[frozenset[str]]:
    pairs = {frozenset((i,)) for i in INSTRUCTIONS}  # a type at most once per set
    for table in tables:
        for first, others in table.items():
            pairs.update(frozenset((first, other)) for other in others)
    return frozenset(pairs)


CONFLICTS: frozenset[frozenset[str]] = _symmetric(_IFEVAL_CONFLICTS, _CHECKER_CONFLICTS)
"""Unordered pairs of instruction ids that never share a prompt ({id} = at most once)."""


def conflicts(first: str, second: str) -> bool:
    """Whether two instruction ids may not be attached to one prompt."""
    return frozenset((first, second)) in CONFLICTS


def conflicting_pairs(ids: Sequence[str]) -> list[tuple[str, str]]:
    """The conflicting pairs within one instruction list (a repeated id counts)."""
    return [(a, b) for a, b in combinations(ids, 2) if conflicts(a, b)]


def kwargs_conflict(ids: Sequence[str], kwargs: Sequence[dict[str, Any]]) -> str | None:
    """Why the drawn numbers of a compatible id set contradict each other, or None."""
    spec = dict(zip(ids, kwargs, strict=True))
    sentences = spec.get("length_constraints:number_sentences")
    if sentences and sentences["relation"] == "less than":
        room = sentences["num_sentences"] - 1
        paragraphs = spec.get("length_constraints:nth_paragraph_first_word", {})
        sections = spec.get("detectable_format:multiple_sections", {})
        if paragraphs.get("num_paragraphs", 0) > room:
            return f"{paragraphs['num_paragraphs']} paragraphs in fewer than {room + 1} sentences"
        if sections.get("num_sections", 0) > room:
            return f"{sections['num_sections']} sections in fewer than {room + 1} sentences"
    return None


@dataclass(frozen=True)
class Taxonomy:
    """One taxonomy of instructions to attach: its types (kwargs draws and wording), the pairs
    that never share a prompt, the rules on drawn numbers, and a writer of a response the IF
    verifier accepts (None: no such response found, draw again)."""

    name: str
    types: dict[str, InstructionType]
    conflict_pairs: frozenset[frozenset[str]]
    kwargs_conflict: Callable[[Sequence[str], Sequence[dict[str, Any]]], str | None]
    witness: Callable[[Sequence[str], Sequence[dict[str, Any]]], str | None]

    def conflicts(self, first: str, second: str) -> bool:
        """Whether two of its ids may not be attached to one prompt."""
        return frozenset((first, second)) in self.conflict_pairs

    def conflicting_pairs(self, ids: Sequence[str]) -> list[tuple[str, str]]:
        """The conflicting pairs within one instruction list (a repeated id counts)."""
        return [(a, b) for a, b in combinations(ids, 2) if self.conflicts(a, b)]


IFEVAL = Taxonomy("ifeval", INSTRUCTIONS, CONFLICTS, kwargs_conflict, compliant_response)
"""IF-RL sub-stage 1's taxonomy: IFEval's 25 types."""
