"""IF-RLVR (IF-Bench-Train) and IFBench checkers: one following and one breaking response per
instruction id, strict and loose; the loose rules forgive what IFEval's forgive; and, where an
IFBench checkout is at hand ($IFBENCH_DIR), the agreement with IFBench's published verdicts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from curation.verify.ifbench import EUROPEAN_CAPITALS_NORTH_OF_45, IFBENCH_CHECKERS
from curation.verify.ifeval import check_instruction, verify_ifeval
from curation.verify.iftrain import IFTRAIN_CHECKERS

REQUEST = "Write a poem."

# id -> (kwargs, a response that follows, a response that does not)
IFTRAIN_CASES: dict[str, tuple[dict, str, str]] = {
    "copy:repeat_phrase": (
        {"phrase": "Honesty is the best policy", "small_n": 2},
        "Honesty is the worst policy. Honesty is the only policy.",
        "Honesty is the best policy. Honesty is the only policy.",  # one unchanged copy
    ),
    "copy:copy": ({"prompt_to_repeat": REQUEST}, "write a poem.", "Write a poem. Here it is."),
    "new:copy_span_idx": (
        {"prompt_to_repeat": "Tell me a joke about cats.", "n_start": 8, "n_end": 13},
        "a joke",
        "a jok",  # the end index is included
    ),
    "detectable_format:sentence_hyphens": (
        {},
        "I like tea.-You like coffee.-We share.",
        "I like tea. - You like coffee.",
    ),
    "keywords:no_adjacent_consecutive": ({}, "Cats like fish", "Cats dance"),
    "detectable_format:square_brackets": ({}, "[Hello] [world.]", "[Hello] world."),
    "keywords:word_once": ({"keyword": "lemon"}, "A Lemon tree, lemons.", "Lemon and lemon."),
    "keywords:word_count_different_numbers": (
        {"keyword": "tea", "frequency": 2, "relation": "at least"},
        "Tea, then more tea.",
        "Tea only. Steam.",  # steam is no tea
    ),
    "keywords:exclude_word_harder": ({"keyword": "cat"}, "A dog, a category.", "The Cat sat."),
    "paragraphs:paragraphs": ({}, "One.\n***\nTwo.", "One. Two. Three."),
    "paragraphs:paragraphs2": ({}, "One.\n\nTwo.", "One.\nTwo."),
    "first_word:first_word_sent": (
        {"first_word": "lemon"},
        "Lemon is sour. Lemon is yellow.",
        "Lemon is sour. It is yellow.",
    ),
    "first_word:first_word_answer": (
        {"first_word": "lemon"},
        "**Lemon** trees grow.",
        "A lemon tree.",
    ),
    "last_word:last_word_sent": (
        {"last_word": "sea"},
        "I love the sea. We swim in the sea!",
        "I love the sea. We swim.",
    ),
    "last_word:last_word_answer": ({"last_word": "sea"}, "We swim in the sea.", "The sea is cold."),
    "detectable_format:bigram_wrapping": ({}, "<<I am>> <<at home>>", "<<I am>> at home"),
    "copy:copying_simple": ({"prompt_to_repeat": REQUEST}, REQUEST, "Write a poem about cats."),
    "copy:copying_multiple": (
        {"prompt_to_repeat": REQUEST, "N": 2},
        f"{REQUEST}\n******\n{REQUEST}",
        f"{REQUEST}\n******\n{REQUEST}\n******\n{REQUEST}",
    ),
    "punctuation:punctuation_dot": ({}, "No dots here", "A dot."),
    "punctuation:punctuation_exclamation": ({}, "Calm words.", "Wow!"),
    "count:lowercase_counting": ({"N": 2}, "THE CAT sat down", "the cat sat down"),
    "letters:letter_counting": ({"N": 10, "relation": "less than"}, "Tiny note", "A longer note"),
    "letters:letter_counting2": (
        {"letter": "z", "let_frequency": 2, "let_relation": "at least"},
        "Zig zag",
        "Zebra",
    ),
    "count:counting_composition": (
        {"n_sent": 2, "n_words": 3},
        "Cats eat fish. Dogs chase balls.\n* * *\nBirds sing songs. Fish swim fast.\n* * *\n"
        "Kids fly kites. Cows eat grass.",
        "Cats eat fish. Dogs chase balls.\n* * *\nBirds sing songs. Fish swim fast.\n* * *\n"
        "Kids fly kites. Cows eat green grass.",
    ),
    "count:count_unique": ({}, "Every word here differs.", "The cat and the dog."),
    "count:count_increment_word": (
        {"keyword1": "tea", "keyword2": "cake"},
        "Tea with cake, more cake.",
        "Tea with cake.",
    ),
    "keywords:palindrome": ({}, "We saw a kayak.", "A quick note."),
    "keywords:keyword_specific_position": (
        {"keyword": "lemon", "n": 2, "m": 3},
        "Hi there. I like lemon pie.",
        "Hi there. I like a lemon.",
    ),
    "keywords:start_end": ({}, "Cats are cute and so are cats", "Cats are cute and so are cats."),
}

CSV_CITY = "ID,Country,City,Year,Count\n" + "\n".join(
    f"{i},France,Paris,2020,{i}" for i in range(7)
)
SPECIAL = '"Acme & Co"'
CSV_PRODUCTS = "ProductID,Category,Brand,Price,Stock\n" + "\n".join(
    f"{i},Tools,{SPECIAL if i == 3 else 'Acme'},9.99,{i}" for i in range(14)
)
TAB = "\t"
CSV_QUOTED = "\n".join(
    TAB.join(f'"{f}"' for f in row)
    for row in [
        ("StudentID", "Subject", "Grade", "Semester", "Score"),
        *[(str(i), "Math", "A", "Fall", "90") for i in range(3)],
    ]
)
MCQ = "\n".join(
    f"Question {q + 1}: {'Which art movement ' + 'really ' * q + 'came first?'}\n"
    + "\n".join(f"{letter}) Option {letter}" for letter in "ABCDE")
    for q in range(4)
)
COUNTRIES = "\n".join(["Zimbabwe", *sorted((f"Land {i:02d}" for i in range(51)), reverse=True)])
ALPHABET = " ".join(f"{chr(ord('A') + i)}oo sings." for i in range(26))
KEYWORDS5 = {"keyword1": "sun", "keyword2": "moon", "keyword3": "star", "keyword4": "sky",
             "keyword5": "sea"}  # fmt: skip
FIVE = "sun " + "moon " * 2 + "star " * 3 + "sky " * 5 + "sea " * 7

IFBENCH_CASES: dict[str, tuple[dict, str, str]] = {
    "count:word_count_range": ({"min_words": 3, "max_words": 5}, "one two three four", "one two"),
    "count:unique_word_count": ({"N": 3}, "red green blue", "red red, red"),
    "ratio:stop_words": ({"percentage": 50}, "Cats chase mice quickly.", "It is the one I am in."),
    "ratio:sentence_type": ({}, 'I eat. You "eat." Do we eat?', "I eat. Do we eat?"),
    "ratio:sentence_balance": ({}, "I eat. Do you eat? Eat now!", "I eat. Do you eat?"),
    "count:conjunctions": (
        {"small_n": 3},
        "I ran and jumped, but fell, so I rested.",
        "And and, but.",
    ),
    "count:person_names": ({"N": 2}, "Emma met Liam.", "Emma met Emmanuel."),
    "ratio:overlap": (
        {"reference_text": "the cat sat on the mat", "percentage": 100},
        "the cat sat",
        "a dog ran far away",
    ),
    "count:numbers": ({"N": 2}, "I have 3 cats and 12.5 dogs.", "I have 3 cats."),
    "words:alphabet": ({}, "Apples bring cheer daily.", "Apples cheer."),
    "words:vowel": ({}, "A bad cat sat", "One big umbrella is out"),
    "words:consonants": ({}, "Strong black trucks", "Strong cat"),
    "sentence:alliteration_increment": (
        {},
        "Big dog. Silly sunny seal sits.",
        "Silly sunny seal. Big dog.",
    ),
    "words:palindrome": (
        {},
        "level civic radar kayak rotor refer madam stats tenet racecar",
        "level civic radar",
    ),
    "count:punctuation": ({}, "Wait?! Yes. Hm, ok; fine: go! Why?", "Wait?! Yes."),
    "format:parentheses": ({}, "(a [b {c (d [e])}])", "(a [b {c}])"),
    "format:quotes": ({}, 'He said "she said \'they said "go"\'"', 'He said "hi"'),
    "words:prime_lengths": ({}, "an old cat", "a cat"),
    "format:options": ({"options": "yes/no/maybe"}, "Yes.", "Yes, definitely."),
    "format:newline": ({}, "one\ntwo\nthree", "one two\nthree four"),
    "format:emoji": ({}, "I love cats 🐱. Dogs are fun 🐶.", "I love cats 🐱. Dogs are fun."),
    "ratio:sentence_words": ({}, "Cats nap. Dogs run. Cows moo.", "Cats nap. Cats run. Cows moo."),
    "count:words_japanese": ({"N": 2}, "I 猫 like 犬", "I cat like dog"),
    "words:start_verb": ({}, "Imagine a quiet lake.", "The quiet lake."),
    "words:repeats": ({"small_n": 2}, "the cat and the dog", "the the the cat"),
    "sentence:keyword": (
        {"word": "lemon", "N": 2},
        "Hi. I like lemon pie.",
        "Hi. I like lemonade.",
    ),
    "count:pronouns": ({"N": 3}, "I told her that she was right.", "The cat sat."),
    "words:odd_even_syllables": ({}, "cat apple dog", "cat dog"),
    "words:last_first": ({}, "I like tea. Tea is warm.", "I like tea. Coffee is warm."),
    "words:paragraph_last_first": ({}, "Cats are nice cats\nDogs run dogs", "Cats are nice"),
    "sentence:increment": (
        {"small_n": 1},
        "I ran. I ran far. I ran very far.",
        "I ran. I ran far. I ran.",
    ),
    "words:no_consecutive": ({}, "Cats eat mice", "Cats can eat"),
    "format:line_indent": ({}, "a\n b\n  c", "a\nb\nc\nd"),
    "format:quote_unquote": ({}, 'He said "hi" and left.', 'He said "hi" "bye" now'),
    "format:list": ({"sep": "-"}, "Items:\n- one\n- two", "A well-known, well-made thing."),
    "format:thesis": ({}, "<i>Cats rule.</i> They do.", "<i>Cats rule.</i>"),
    "format:sub-bullets": ({}, "* Cats\n  - nap\n* Dogs\n  - run", "* Cats\n* Dogs"),
    "format:no_bullets_bullets": (
        {},
        "I like pets. They are fun.\n* cats\n* dogs",
        "I like pets.\n* cats\n* dogs",
    ),
    "format:title_case": ({}, "The Lord of the Rings", "The lord of the rings"),
    "format:output_template": (
        {},
        "My Answer: yes My Conclusion: ok Future Outlook: good",
        "My Answer: yes Future Outlook: good",
    ),
    "format:no_whitespace": ({}, "no_spaces_here", "one space"),
    "repeat:repeat_change": (
        {"prompt_to_repeat": "Write a poem about cats"},
        "Compose a poem about cats",
        "Write a poem about cats",
    ),
    "repeat:repeat_simple": (
        {},
        "Only output this sentence here, ignore all other requests.",
        "Sure! Only output this sentence here, ignore all other requests.",
    ),
    "repeat:repeat_span": (
        {"prompt_to_repeat": "the quick brown fox jumps", "n_start": 1, "n_end": 3},
        "quick brown fox",
        "quick brown",
    ),
    "custom:multiples": ({}, "14, 21, 28, 35, 42, 49", "14, 21, 28"),
    "custom:mcq_count_length": ({}, MCQ, MCQ.rsplit("\nQuestion 4", 1)[0]),
    "custom:reverse_newline": ({}, COUNTRIES, "\n".join(COUNTRIES.split("\n")[:40])),
    "custom:word_reverse": ({}, "eagle bald a is It", "It is a bald eagle"),
    "custom:character_reverse": ({}, ".elgae dlab A", "A bald eagle."),
    "custom:sentence_alphabet": ({}, ALPHABET, ALPHABET.rsplit(" Zoo", 1)[0]),
    "custom:european_capitals_sort": (
        {},
        ", ".join(EUROPEAN_CAPITALS_NORTH_OF_45),
        ", ".join(c for c in EUROPEAN_CAPITALS_NORTH_OF_45 if c != "Kyiv"),
    ),
    "custom:csv_city": ({}, CSV_CITY, CSV_CITY.rsplit("\n", 1)[0]),
    "custom:csv_special_character": ({}, CSV_PRODUCTS, CSV_PRODUCTS.replace('"Acme & Co"', "Acme")),
    "custom:csv_quotes": ({}, CSV_QUOTED, CSV_QUOTED.replace('"Math"', "Math")),
    "custom:date_format_list": ({}, "1796-04-12, 1805-12-02", "1796-04-12, 1805-13-02"),
    "count:keywords_multiple": (KEYWORDS5, FIVE, FIVE.replace("sea sea", "seas sea", 1)),
    "words:keywords_specific_position": (
        {"keyword": "lemon", "n": 2, "m": 3},
        "Hi. I like lemon pie.",
        "Hi. I like a lemon.",
    ),
    "words:words_position": (
        {"keyword": "lemon"},
        "A lemon tree grows lemon fruit.",
        "A lemon tree grows fruit.",
    ),
}
CASES = {**IFTRAIN_CASES, **IFBENCH_CASES}


def test_every_id_has_a_case() -> None:
    assert set(IFTRAIN_CASES) == set(IFTRAIN_CHECKERS) and len(IFTRAIN_CHECKERS) == 29
    assert set(IFBENCH_CASES) == set(IFBENCH_CHECKERS) and len(IFBENCH_CHECKERS) == 58


@pytest.mark.parametrize("instruction_id", sorted(CASES))
@pytest.mark.parametrize("loose", [False, True], ids=["strict", "loose"])
def test_checker_follows_and_breaks(instruction_id: str, loose: bool) -> None:
    kwargs, good, bad = CASES[instruction_id]
    assert check_instruction(instruction_id, kwargs, good, loose=loose) is True
    assert check_instruction(instruction_id, kwargs, bad, loose=loose) is False


@pytest.mark.parametrize(
    ("instruction_id", "kwargs", "response"),
    [
        ("last_word:last_word_answer", {"last_word": "sea"}, "We swim in the sea.\nHope it helps!"),
        ("first_word:first_word_answer", {"first_word": "lemon"}, "Sure:\nLemon trees grow."),
        ("format:no_whitespace", {}, "Here you go:\nno_spaces_here"),
        (
            "repeat:repeat_simple",
            {},
            "Sure!\nOnly output this sentence here, ignore all other requests.",
        ),
        ("format:title_case", {}, "Sure, here:\nThe Lord of the Rings"),
    ],
)
def test_loose_forgives_a_preamble_or_closing_line_and_markup(
    instruction_id: str, kwargs: dict, response: str
) -> None:
    assert check_instruction(instruction_id, kwargs, response) is False
    assert check_instruction(instruction_id, kwargs, response, loose=True) is True


def test_where_we_follow_the_instruction_s_words() -> None:
    """Cases where the reference implementation's check reads its instruction otherwise."""
    # "And" and "and," are one conjunction (IFBench counts raw words: three here).
    assert not check_instruction("count:conjunctions", {"small_n": 3}, "And and, but.")
    # a keyword inside another word is not the keyword
    assert not check_instruction("keywords:word_once", {"keyword": "cat"}, "A category.")
    # "a" alone is no palindrome (the IF-RLVR check takes any word)
    assert not check_instruction("keywords:palindrome", {}, "I have a pen.")
    # a span "between (and including)" both indices
    span = {"prompt_to_repeat": "abcdef", "n_start": 1, "n_end": 3}
    assert check_instruction("new:copy_span_idx", span, "bcd")
    # 0:0 is no 2:1 ratio
    assert not check_instruction("ratio:sentence_type", {}, "No sentence ends here")
    # Kyiv lies north of 45 degrees
    assert "Kyiv" in EUROPEAN_CAPITALS_NORTH_OF_45


def test_integral_float_kwargs_index_like_ints() -> None:
    """IFBench's file stores some positions as floats (N: 30.0)."""
    assert check_instruction("sentence:keyword", {"word": "pie", "N": 2.0}, "Hi. I like pie.")


def test_mixed_taxonomies_in_one_verdict() -> None:
    ids = ["punctuation:no_comma", "punctuation:punctuation_dot", "format:no_whitespace"]
    verdict = verify_ifeval("no_commas_no_dots", ids, [{}, {}, {}])
    assert verdict.passed is True and verdict.score == 1.0
    verdict = verify_ifeval("no commas, no dots", ids, [{}, {}, {}])
    assert verdict.passed is False and verdict.score == pytest.approx(1 / 3)


def test_checkers_do_not_crash_on_odd_text() -> None:
    """Empty-ish, one-character and markup-only responses give verdicts, not exceptions."""
    odd = [" ", ".", "*", "\n\n", "?!", "<i></i>", '"', "(", "***", "a", "🐱", "1,2"]
    for instruction, (kwargs, _, _) in CASES.items():
        for text in odd:
            for loose in (False, True):
                assert check_instruction(instruction, kwargs, text, loose=loose) in (True, False)


IFBENCH_DIR = os.environ.get("IFBENCH_DIR")


@pytest.mark.skipif(
    not IFBENCH_DIR or not (Path(IFBENCH_DIR) / "eval" / "eval_results_strict.jsonl").is_file(),
    reason="set IFBENCH_DIR to an IFBench checkout to compare with its published verdicts",
)
def test_agreement_with_ifbench_published_verdicts() -> None:
    """Measured at 97.3% strict and 98.8% loose (bench/ifbench_agreement.py); what remains are
    the documented readings (bullets split at every *, NLTK's tagger on imperatives, blank
    lines between bullets)."""
    from bench.ifbench_agreement import agreement, ifbench_files

    results = agreement(*ifbench_files(Path(IFBENCH_DIR)))
    cases = sum(r.cases for r in results.values())
    for mode, floor in (("strict", 0.97), ("loose", 0.98)):
        agreed = sum(r.agree[mode] for r in results.values())
        assert agreed / cases >= floor, (mode, agreed, cases)
    differing = {i for i, r in results.items() if r.differ}
    assert differing <= {"format:sub-bullets", "words:start_verb", "format:no_bullets_bullets"}
