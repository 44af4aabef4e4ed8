"""The IF-RLVR training taxonomy (IF-Bench-Train, "IFTrain") as our IF verifier checks it:
kwargs draws, wording, conflicts, and a witness writer.

IF-RL's second sub-stage trains on these 29 constraints of Pyatkin et al. 2025 (checked by
`curation.verify.iftrain`), attached to general prompts the way sub-stage 1 attaches IFEval's.
The wording is the IF-RLVR data's, except where it contradicts its own check: the keyword
count states its relation ("at least 2 times", as IFEval's does) and "word once" says once.

Conflicts (`IFTRAIN_CONFLICTS`, symmetric, each id also with itself):
1. The reference registry's (open-instruct IFEvalG `INSTRUCTION_CONFLICTS`): every copying
   instruction (copy, copy span, repeat the request once or N times) vs. everything; the two
   two-paragraph layouts vs. each other; first word of each sentence vs. first word of the
   answer; the 3-paragraph composition vs. unique words, the keyword-count pair, the
   paragraph layouts, the letter count and the keyword count.
2. Ours, from the checkers: pairs no response can satisfy (unique words vs. anything that
   repeats a word: a keyword twice, a phrase repeated, a word opening or closing every
   sentence, a response that starts and ends with one word; at most N lowercase words vs. a
   phrase with lowercase words; the last word of the answer vs. the last word of every
   sentence or vs. starting and ending alike; the first word of the answer vs. starting and
   ending alike), and layouts that do not nest (hyphen-joined sentences vs. paragraphs and
   vs. bracketed words; bracketed words vs. bigram wrapping; bigram wrapping and bracketing
   vs. sentence-level word positions; a repeated phrase vs. consecutive-letter words and vs.
   sentence-level words).

`iftrain_witness` writes a response the verifier accepts for a set, or None (the set is drawn
again): plain filler words laid out the way each constraint asks, then `verify_ifeval`.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

from curation.instructions.taxonomy import RELATIONS, InstructionType, Taxonomy, WordDraw
from curation.verify.english import STOP_WORDS
from curation.verify.ifeval import verify_ifeval
from curation.verify.iftrain import IFTRAIN_CHECKERS

PHRASES = (
    "Where there is smoke there is fire",
    "Too many cooks spoil the broth",
    "Honesty is the best policy",
    "Two heads are better than one",
    "Rome was not built in a day",
    "Beauty is in the eye of the beholder",
    "Actions speak louder than words",
    "Every cloud has a silver lining",
)
"""Proverbs to repeat with one inner word changed (first word not repeated inside)."""

COPY = ("copy:copy", "copy:copying_simple", "copy:copying_multiple", "new:copy_span_idx")
"""Instructions whose whole answer is (a part of) the request: they stand alone."""


def _relation(rng: random.Random) -> str:
    return rng.choice(RELATIONS)


def _prompt_word(rng: random.Random, words: WordDraw) -> dict[str, Any]:
    """A word of the request itself (the temptation is the point), else a pool keyword."""
    found = sorted(
        {w.strip(".,;:!?\"'()").lower() for w in words.prompt.split()}
        - STOP_WORDS
        - set(words.used)
    )
    found = [w for w in found if w.isalpha() and len(w) >= 4]
    if not found:
        return {"keyword": words.take()}
    word = rng.choice(found)
    words.used.append(word)
    return {"keyword": word}


def _span(rng: random.Random, words: WordDraw) -> dict[str, Any]:
    """Character indices of a run of whole words of the request (both ends included)."""
    text = words.prompt.strip()
    starts = [i for i, ch in enumerate(text) if not ch.isspace() and (i == 0 or text[i - 1] == " ")]
    if len(starts) < 2:
        return {"n_start": 0, "n_end": max(len(text) - 1, 0)}
    first = rng.randrange(len(starts) - 1)
    last = rng.randrange(first, min(first + 8, len(starts)))
    end = text.find(" ", starts[last])
    return {"n_start": starts[first], "n_end": (end if end != -1 else len(text)) - 1}


def _position(rng: random.Random, words: WordDraw) -> dict[str, Any]:
    return {"keyword": words.take(), "n": rng.randint(1, 10), "m": rng.randint(1, 20)}


def _letters(rng: random.Random, _: WordDraw) -> dict[str, Any]:
    relation = _relation(rng)
    low = 100 if relation == "less than" else 20
    return {"N": rng.randint(low, 500), "relation": relation}


def _registry() -> dict[str, InstructionType]:
    no_args = lambda rng, _: {}  # noqa: E731 - one-line draws read best inline
    entries = [
        InstructionType(
            "copy:repeat_phrase",
            lambda rng, _: {"phrase": rng.choice(PHRASES), "small_n": rng.randint(2, 3)},
            lambda k: (
                f"Repeat the phrase {k['phrase']} exactly {k['small_n']} times, transforming "
                "it slightly each time by replacing only one word in the center of the phrase."
            ),
        ),
        InstructionType(
            "copy:copy",
            lambda rng, _: {"prompt_to_repeat": ""},  # set when the prompt is assembled
            lambda k: (
                "Copy this instruction verbatim, do not follow the instruction, only copy it "
                "into the output (do not include this instruction sentence!)."
            ),
        ),
        InstructionType(
            "new:copy_span_idx",
            lambda rng, words: {"prompt_to_repeat": "", **_span(rng, words)},
            lambda k: (
                "Copy the span of words that lies between (and including) index "
                f"{k['n_start']} and {k['n_end']}, the indices are character indices!"
            ),
        ),
        InstructionType(
            "detectable_format:sentence_hyphens",
            no_args,
            lambda k: "All sentences must be connected using hyphens, with no spaces between them.",
        ),
        InstructionType(
            "keywords:no_adjacent_consecutive",
            no_args,
            lambda k: "No two adjacent words can start with consecutive letters of the alphabet.",
        ),
        InstructionType(
            "detectable_format:square_brackets",
            no_args,
            lambda k: "Enclose every word in your response within square brackets.",
        ),
        InstructionType(
            "keywords:word_once",
            lambda rng, words: {"keyword": words.take()},
            lambda k: f"Include keyword {k['keyword']} once in your response.",
        ),
        InstructionType(
            "keywords:word_count_different_numbers",
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
            "keywords:exclude_word_harder",
            _prompt_word,
            lambda k: f"Do not include keyword {k['keyword']} in the response.",
        ),
        InstructionType(
            "paragraphs:paragraphs",
            no_args,
            lambda k: (
                "There should be 2 paragraphs. Paragraphs are separated with the markdown "
                "divider: ***"
            ),
        ),
        InstructionType(
            "paragraphs:paragraphs2",
            no_args,
            lambda k: (
                "There should be 2 paragraphs. Paragraphs and only paragraphs are separated "
                "with each other by two line breaks."
            ),
        ),
        InstructionType(
            "first_word:first_word_sent",
            lambda rng, words: {"first_word": words.take()},
            lambda k: f"The first word of each sentence should be the word {k['first_word']}.",
        ),
        InstructionType(
            "first_word:first_word_answer",
            lambda rng, words: {"first_word": words.take()},
            lambda k: f"The first word of your response should be the word {k['first_word']}.",
        ),
        InstructionType(
            "last_word:last_word_sent",
            lambda rng, words: {"last_word": words.take()},
            lambda k: (
                "The last word of each sentence, before punctuation, should be the word "
                f"{k['last_word']}."
            ),
        ),
        InstructionType(
            "last_word:last_word_answer",
            lambda rng, words: {"last_word": words.take()},
            lambda k: f"The last word of your response should be the word {k['last_word']}.",
        ),
        InstructionType(
            "detectable_format:bigram_wrapping",
            no_args,
            lambda k: (
                "Wrap every word bigram in double angular brackets, such as <<I am>> <<at "
                "home>> <<with my>> <<cute dog>>."
            ),
        ),
        InstructionType(
            "copy:copying_simple",
            lambda rng, _: {"prompt_to_repeat": ""},
            lambda k: (
                "Repeat the request without change (do not say anything before repeating the "
                "request; the request you need to repeat does not include this sentence) and "
                "do not answer the actual request!"
            ),
        ),
        InstructionType(
            "copy:copying_multiple",
            lambda rng, _: {"prompt_to_repeat": "", "N": rng.randint(2, 3)},
            lambda k: (
                f"Repeat the request without change {k['N']} times, separated by 6 asterisk "
                "symbols (do not say anything before repeating the request; the request you "
                "need to repeat does not include this sentence) and do not answer the actual "
                "request!"
            ),
        ),
        InstructionType(
            "punctuation:punctuation_dot",
            no_args,
            lambda k: (
                "In your entire response, refrain from the use of . (i.e. dots) as punctuation "
                "and in general."
            ),
        ),
        InstructionType(
            "punctuation:punctuation_exclamation",
            no_args,
            lambda k: (
                "In your entire response, refrain from the use of ! (i.e. exclamation marks) as "
                "punctuation and in general."
            ),
        ),
        InstructionType(
            "count:lowercase_counting",
            lambda rng, _: {"N": rng.randint(2, 3)},
            lambda k: (
                f"In your response, all lowercase words should appear at most {k['N']} times."
            ),
        ),
        InstructionType(
            "letters:letter_counting",
            _letters,
            lambda k: f"Answer with {k['relation']} {k['N']} letters.",
        ),
        InstructionType(
            "letters:letter_counting2",
            lambda rng, _: {
                "letter": rng.choice("abcdefghijklmnopqrstuvwxyz"),
                "let_frequency": rng.randint(1, 10),
                "let_relation": _relation(rng),
            },
            lambda k: (
                f"In your response, the letter {k['letter']} should appear {k['let_relation']} "
                f"{k['let_frequency']} times."
            ),
        ),
        InstructionType(
            "count:counting_composition",
            lambda rng, _: {"n_sent": rng.randint(2, 3), "n_words": rng.randint(3, 6)},
            lambda k: (
                "Write 3 paragraphs, delimited by the markdown divider: * * *, with exactly "
                f"{k['n_sent']} sentences each, with exactly {k['n_words']} words in each "
                "sentence."
            ),
        ),
        InstructionType(
            "count:count_unique",
            no_args,
            lambda k: "Only use unique words in your response, no word should be repeated!",
        ),
        InstructionType(
            "count:count_increment_word",
            lambda rng, words: {"keyword1": words.take(), "keyword2": words.take()},
            lambda k: (
                f"Include keyword {k['keyword1']} once in your response, keyword "
                f"{k['keyword2']} twice in your response."
            ),
        ),
        InstructionType(
            "keywords:palindrome",
            no_args,
            lambda k: "Include a palindrome in your response.",
        ),
        InstructionType(
            "keywords:keyword_specific_position",
            _position,
            lambda k: (
                f"Include keyword {k['keyword']} in the {k['n']}-th sentence, as the "
                f"{k['m']}-th word of that sentence."
            ),
        ),
        InstructionType(
            "keywords:start_end",
            no_args,
            lambda k: (
                "Start and end your response with the same word (do not write anything after "
                "the last word, not even punctuation)."
            ),
        ),
    ]
    return {entry.id: entry for entry in entries}


IFTRAIN_INSTRUCTIONS: dict[str, InstructionType] = _registry()
if set(IFTRAIN_INSTRUCTIONS) != set(IFTRAIN_CHECKERS):  # exactly what the verifier checks
    raise ImportError(
        "IF-RLVR taxonomy and verifier differ: "
        f"{sorted(set(IFTRAIN_INSTRUCTIONS) ^ set(IFTRAIN_CHECKERS))}"
    )

_ALL = frozenset(IFTRAIN_INSTRUCTIONS)
_UNIQUE = "count:count_unique"
_REFERENCE_CONFLICTS: dict[str, Iterable[str]] = {
    **{c: _ALL for c in COPY},
    "paragraphs:paragraphs": ("paragraphs:paragraphs2",),
    "first_word:first_word_sent": ("first_word:first_word_answer",),
    "count:counting_composition": (
        _UNIQUE,
        "count:count_increment_word",
        "paragraphs:paragraphs",
        "paragraphs:paragraphs2",
        "letters:letter_counting2",
        "keywords:word_count_different_numbers",
    ),
}
_CHECKER_CONFLICTS: dict[str, Iterable[str]] = {
    _UNIQUE: (
        "keywords:word_count_different_numbers",
        "count:count_increment_word",
        "copy:repeat_phrase",
        "first_word:first_word_sent",
        "last_word:last_word_sent",
        "keywords:start_end",
    ),
    "count:lowercase_counting": ("copy:repeat_phrase",),
    "last_word:last_word_answer": ("last_word:last_word_sent", "keywords:start_end"),
    "first_word:first_word_answer": ("keywords:start_end",),
    "keywords:start_end": (
        "first_word:first_word_sent",
        "last_word:last_word_sent",
        "detectable_format:sentence_hyphens",
        "detectable_format:bigram_wrapping",
        "detectable_format:square_brackets",
        "count:counting_composition",
    ),
    "detectable_format:sentence_hyphens": (  # "one.-Two." is one sentence to the splitter
        "paragraphs:paragraphs",
        "paragraphs:paragraphs2",
        "count:counting_composition",
        "detectable_format:square_brackets",
        "detectable_format:bigram_wrapping",
        "copy:repeat_phrase",
        "first_word:first_word_sent",
        "last_word:last_word_sent",
        "keywords:keyword_specific_position",
    ),
    "detectable_format:square_brackets": (  # the *** divider is a word without brackets
        "detectable_format:bigram_wrapping",
        "copy:repeat_phrase",
        "paragraphs:paragraphs",
        "count:counting_composition",
    ),
    "detectable_format:bigram_wrapping": (
        "first_word:first_word_sent",
        "last_word:last_word_sent",
        "keywords:keyword_specific_position",
        "count:counting_composition",
        "copy:repeat_phrase",
        "paragraphs:paragraphs",
    ),
    "copy:repeat_phrase": (
        "keywords:no_adjacent_consecutive",
        "first_word:first_word_sent",
        "last_word:last_word_sent",
        "count:counting_composition",
    ),
    "keywords:keyword_specific_position": (
        "first_word:first_word_sent",
        "last_word:last_word_sent",
    ),
}


def _symmetric(*tables: dict[str, Iterable[str]]) -> frozenset[frozenset[str]]:
    pairs = {frozenset((i,)) for i in IFTRAIN_INSTRUCTIONS}
    for table in tables:
        for first, others in table.items():
            pairs.update(frozenset((first, other)) for other in others)
    return frozenset(pairs)


IFTRAIN_CONFLICTS: frozenset[frozenset[str]] = _symmetric(_REFERENCE_CONFLICTS, _CHECKER_CONFLICTS)
"""Unordered pairs of IF-RLVR ids that never share a prompt ({id} = at most once)."""


def iftrain_kwargs_conflict(ids: Sequence[str], kwargs: Sequence[dict[str, Any]]) -> str | None:
    """Why drawn numbers contradict each other, or None: the word position must fit the
    3-paragraph composition's sentences and words."""
    spec = dict(zip(ids, kwargs, strict=True))
    position = spec.get("keywords:keyword_specific_position")
    composition = spec.get("count:counting_composition")
    if position and composition:  # noqa: SIM102 - the condition reads better apart
        if position["n"] > 3 * composition["n_sent"] or position["m"] > composition["n_words"]:
            return (
                f"word {position['m']} of sentence {position['n']} outside 3 paragraphs of "
                f"{composition['n_sent']} sentences of {composition['n_words']} words"
            )
    return None


# --------------------------------------------------------------------------- witness

FILLERS = (
    "apple", "brick", "cloud", "dune", "eagle", "fern", "grape", "hill", "ink", "jam",
    "kite", "lake", "moss", "nest", "oak", "pond", "quill", "reed", "sand", "tree",
    "urn", "vine", "wave", "yarn", "zinc", "acorn", "barn", "coat", "drum", "elm",
    "flag", "gate", "hat", "iris", "jar", "knot", "leaf", "mint", "nut", "owl",
    "pine", "quest", "rose", "sail", "tent", "unit", "vase", "wolf", "yak", "zebra",
    "ant", "bell", "cart", "desk", "egg", "fox", "goat", "hawk", "ivy", "jet",
    "kelp", "lamp", "mole", "net", "orb", "plum", "quay", "rug", "seal", "toad",
    "veil", "wren", "yawn", "zone", "arch", "bowl", "crab", "dove", "ember", "frog",
    "gull", "hive", "isle", "jug", "kiln", "lily", "mule", "nook", "opal", "pear",
    "raft", "shed", "tusk", "vole", "wick", "yolk", "bark", "cork", "dusk", "fig",
)  # fmt: skip
"""Plain words the witness fills with: distinct, none a keyword or a palindrome."""

PALINDROMES = ("level", "civic", "radar", "kayak", "rotor", "noon", "refer", "madam")


class _NoWitness(Exception):
    """This writer cannot satisfy the set."""


def iftrain_witness(ids: Sequence[str], kwargs: Sequence[dict[str, Any] | None]) -> str | None:
    """A response `verify_ifeval` accepts for an IF-RLVR set, or None if none is found."""
    spec = {i: dict(k or {}) for i, k in zip(ids, kwargs, strict=True)}
    try:
        text = _TrainWriter(spec).write()
    except _NoWitness:
        return None
    return text if verify_ifeval(text, list(ids), list(kwargs)).passed else None


class _TrainWriter:
    """Sentences of filler words with the constrained words fixed in their places, laid out
    (brackets, bigrams, hyphens, paragraphs) and padded to the letter counts."""

    def __init__(self, spec: dict[str, dict[str, Any]]) -> None:
        self.spec = spec
        letter = spec.get("letters:letter_counting2")
        self.banned = (
            letter["letter"].lower() if letter and letter["let_relation"] == "less than" else ""
        )
        avoid = {k.lower() for args in spec.values() for k in _words_in(args)}
        self.fillers = [
            w for w in FILLERS if w not in avoid and (not self.banned or self.banned not in w)
        ]
        self.used = 0
        self.previous: str | None = None  # the last word written, across sentences
        self.capital = "count:lowercase_counting" in spec
        self.stop = "?" if "punctuation:punctuation_dot" in spec else "."

    def filler(self, before: str | None, after: str | None) -> str:
        unique = "count:count_unique" in self.spec
        spread = "keywords:no_adjacent_consecutive" in self.spec
        for offset in range(len(self.fillers)):
            word = self.fillers[(self.used + offset) % len(self.fillers)]
            if spread and (
                (before and _follows(before, word)) or (after and _follows(word, after))
            ):
                continue
            if unique and self.used + offset >= len(self.fillers):
                break
            self.used += offset + 1
            return word
        raise _NoWitness("no filler word fits")

    def write(self) -> str:
        spec = self.spec
        for copy in COPY:
            if copy in spec:
                return _copy_answer(copy, spec[copy])
        composition = spec.get("count:counting_composition")
        position = spec.get("keywords:keyword_specific_position")
        if composition:
            count, width = 3 * composition["n_sent"], composition["n_words"]
        else:
            count = max(2, position["n"] if position else 1)
            width = max(4, position["m"] if position else 0)
        slots: list[list[str | None]] = [[None] * width for _ in range(count)]
        first = spec.get("first_word:first_word_sent", {}).get("first_word")
        last = spec.get("last_word:last_word_sent", {}).get("last_word")
        for sentence in slots:
            if first:
                sentence[0] = first
            if last:
                sentence[-1] = last
        answer_first = spec.get("first_word:first_word_answer", {}).get("first_word")
        if answer_first:
            slots[0][0] = answer_first
        if position:
            if position["n"] > count or position["m"] > width:
                raise _NoWitness("the word position lies outside the composition")
            slots[position["n"] - 1][position["m"] - 1] = position["keyword"]
        phrase = spec.get("copy:repeat_phrase")
        answer_last = spec.get("last_word:last_word_answer", {}).get("last_word")
        if answer_last and (phrase or slots[-1][-1] is not None):
            slots.append([None, None, answer_last])  # a closing sentence of its own
        elif answer_last:
            slots[-1][-1] = answer_last
        self._place(slots, self._extras(), fixed_size=bool(composition))
        sentences = [self._fill(s) for s in slots]
        if phrase:
            variants = [self._variant(phrase["phrase"]) for _ in range(phrase["small_n"])]
            sentences[-1:-1] = variants if answer_last else []
            sentences += [] if answer_last else variants
        for _ in range(200):
            text = self._render(sentences)
            grow = self._short_of(text)
            if grow is None:
                return text
            if composition:
                raise _NoWitness("the composition's fixed size is short of letters")
            sentences.insert(len(sentences) - 1, self._fill(self._free_sentence(grow)))
        raise _NoWitness("padding did not converge")

    def _extras(self) -> list[str]:
        """Words to place anywhere: keywords the counts ask for, a palindrome."""
        spec, extra = self.spec, []
        if "keywords:word_once" in spec:
            extra.append(spec["keywords:word_once"]["keyword"])
        count = spec.get("keywords:word_count_different_numbers")
        if count and count["relation"] == "at least":
            extra += [count["keyword"]] * count["frequency"]
        pair = spec.get("count:count_increment_word")
        if pair:
            extra += [pair["keyword1"], pair["keyword2"], pair["keyword2"]]
        if "keywords:palindrome" in spec:
            fits = [p for p in PALINDROMES if not self.banned or self.banned not in p]
            if not fits:
                raise _NoWitness("every palindrome holds the banned letter")
            extra.append(fits[0])
        return extra

    def _place(self, slots: list[list[str | None]], extras: list[str], *, fixed_size: bool) -> None:
        position = self.spec.get("keywords:keyword_specific_position")
        held = position["n"] - 1 if position else -1
        for word in extras:
            free = [(i, j) for i, s in enumerate(slots) for j, w in enumerate(s) if w is None]
            free = [(i, j) for i, j in free if i != held or j > position["m"] - 1]  # type: ignore[index]
            if free:
                i, j = free[-1]
                slots[i][j] = word
            elif fixed_size:
                raise _NoWitness("no free word slot for a keyword")
            else:
                target = slots[-1] if held != len(slots) - 1 else slots[0]
                target.insert(max(len(target) - 1, 1), word)

    def _free_sentence(self, grow: str) -> list[str | None]:
        sentence: list[str | None] = [None] * 5
        first = self.spec.get("first_word:first_word_sent", {}).get("first_word")
        last = self.spec.get("last_word:last_word_sent", {}).get("last_word")
        if first:
            sentence[0] = first
        if last:
            sentence[-1] = last
        if grow == "letter":
            letter = self.spec["letters:letter_counting2"]["letter"].lower()
            rich = [w for w in self.fillers if letter in w]
            if not rich:
                raise _NoWitness("no filler word holds the letter")
            sentence[1] = rich[self.used % len(rich)]
        return sentence

    def _fill(self, slots: list[str | None]) -> list[str]:
        words: list[str] = []
        for index, word in enumerate(slots):
            if word is None:
                after = next((w for w in slots[index + 1 :] if w is not None), None)
                word = self.filler(self.previous, after)
            words.append(word)
            self.previous = word
        return words

    def _variant(self, phrase: str) -> list[str]:
        words = phrase.split()
        center = len(words) // 2
        words[center] = self.filler(words[center - 1], words[center + 1])
        self.previous = words[-1]
        return words

    def _render(self, sentences: list[list[str]]) -> str:
        spec = self.spec
        start_end = "keywords:start_end" in spec
        words_of = [list(s) for s in sentences]
        if start_end:
            words_of[-1].append(words_of[0][0])
        if self.capital:
            words_of = [[w.capitalize() for w in s] for s in words_of]
        else:
            words_of = [[s[0].capitalize(), *s[1:]] for s in words_of]
        flat = [w for s in words_of for w in s]
        if "detectable_format:square_brackets" in spec:
            flat = [f"[{w}]" for w in flat]
        elif "detectable_format:bigram_wrapping" in spec:
            flat = [
                f"<<{w}" if i % 2 == 0 and i + 1 < len(flat) else f"{w}>>" if i % 2 else w
                for i, w in enumerate(flat)
            ]
        rendered, at = [], 0
        for index, sentence in enumerate(words_of):
            piece = flat[at : at + len(sentence)]
            at += len(sentence)
            stop = "" if start_end and index == len(words_of) - 1 else self.stop
            if piece[-1].endswith(("]", ">>")) and stop:
                tail = 1 if piece[-1].endswith("]") else 2
                piece[-1] = piece[-1][:-tail] + stop + piece[-1][-tail:]
            else:
                piece[-1] += stop
            rendered.append(" ".join(piece))
        return self._layout(rendered)

    def _layout(self, sentences: list[str]) -> str:
        spec = self.spec
        composition = spec.get("count:counting_composition")
        if composition:
            n = composition["n_sent"]
            groups = [sentences[i : i + n] for i in range(0, len(sentences), n)]
            return "\n* * *\n".join(" ".join(g) for g in groups)
        if "detectable_format:sentence_hyphens" in spec:
            return "-".join(sentences)
        for paragraphs, divider in (
            ("paragraphs:paragraphs", "\n***\n"),
            ("paragraphs:paragraphs2", "\n\n"),
        ):
            if paragraphs in spec:
                half = max(1, len(sentences) // 2)
                return " ".join(sentences[:half]) + divider + " ".join(sentences[half:])
        return " ".join(sentences)

    def _short_of(self, text: str) -> str | None:
        letters = self.spec.get("letters:letter_counting")
        count = sum(ch.isascii() and ch.isalpha() for ch in text)
        if letters and letters["relation"] == "at least" and count < letters["N"]:
            return "letters"
        if letters and letters["relation"] == "less than" and count >= letters["N"]:
            raise _NoWitness("the required words alone exceed the letter limit")
        frequency = self.spec.get("letters:letter_counting2")
        if frequency and frequency["let_relation"] == "at least":
            found = text.lower().count(frequency["letter"].lower())
            return "letter" if found < frequency["let_frequency"] else None
        return None


def _words_in(args: dict[str, Any]) -> list[str]:
    """The words a constraint's kwargs name (keywords, first and last words, phrase words)."""
    found = [
        v
        for k, v in args.items()
        if k in ("keyword", "keyword1", "keyword2", "first_word", "last_word")
    ]
    if "phrase" in args:
        found += args["phrase"].split()
    return [w for w in found if isinstance(w, str)]


def _follows(before: str, word: str) -> bool:
    """Whether `word` starts with the letter right after `before`'s first letter."""
    a, b = before[:1].lower(), word[:1].lower()
    return a.isalpha() and b.isalpha() and ord(b) - ord(a) == 1


def _copy_answer(copy: str, args: dict[str, Any]) -> str:
    request = args["prompt_to_repeat"]
    if copy == "copy:copying_multiple":
        return "\n******\n".join([request] * args["N"])
    if copy == "new:copy_span_idx":
        return request[args["n_start"] : args["n_end"] + 1]
    return request


IFTRAIN = Taxonomy(
    "iftrain", IFTRAIN_INSTRUCTIONS, IFTRAIN_CONFLICTS, iftrain_kwargs_conflict, iftrain_witness
)
"""IF-RL sub-stage 2's taxonomy: the 29 IF-RLVR training constraints."""
