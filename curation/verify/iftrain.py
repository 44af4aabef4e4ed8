"""The IF-RLVR training constraints of IFBench (IF-Bench-Train, "IFTrain"): what IF-RL's second
sub-stage trains on.

Pyatkin et al. 2025 add 29 verifiable constraints to IFEval's for RL with verifiable rewards
(copying, word positions, counting, punctuation, bracketing, ...), held apart from IFBench's 58
evaluation constraints (`curation.verify.ifbench`). Each checker is written here from the
constraint's instruction text. Where the reference implementation's check and its words part
(a span "including" its end index that the check excludes, a palindrome that one letter "a"
satisfies, keywords counted inside other words, punctuation counted as words), ours follows
the words and the docstring says so. Strict and loose are IFEval's (`curation.verify.ifeval`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from curation.verify.english import (
    compare,
    split_sentences,
    strip_punctuation,
    word_tokens,
    word_tokens_without_punctuation,
)

Checker = Callable[..., bool]
IFTRAIN_CHECKERS: dict[str, Checker] = {}


def _checker(instruction_id: str) -> Callable[[Checker], Checker]:
    def register(fn: Checker) -> Checker:
        IFTRAIN_CHECKERS[instruction_id] = fn
        return fn

    return register


def keyword_count(keyword: str, text: str) -> int:
    """Occurrences of `keyword` as a whole word or phrase (case-insensitive)."""
    return len(re.findall(r"\b" + re.escape(keyword.strip()) + r"\b", text, flags=re.I))


def _same_text(response: str, expected: str) -> bool:
    return response.strip().lower() == expected.strip().lower()


def paragraphs(text: str, divider: str) -> list[str] | None:
    """Paragraphs split at `divider` (a regex), empty ones at either end ignored; None when an
    empty paragraph sits between two dividers."""
    parts = re.split(divider, text)
    inner = parts[1:-1]
    if any(not p.strip() for p in inner):
        return None
    return [p for p in parts if p.strip()]


# --------------------------------------------------------------------------- copy


@_checker("copy:repeat_phrase")
def _repeat_phrase(response: str, phrase: str, small_n: int) -> bool:
    """The phrase `small_n` times, each time with exactly one word (not its first or last)
    replaced. A run of words from the phrase's first word to its last counts as one repeat."""
    ref = [w.lower() for w in phrase.split()]
    words = [strip_punctuation(w).lower() for w in response.split()]
    width = len(ref)
    found = 0
    for start in range(len(words) - width + 1):
        window = words[start : start + width]
        if window[0] != ref[0] or window[-1] != ref[-1]:
            continue
        if sum(a != b for a, b in zip(window, ref, strict=True)) != 1:
            return False  # an unchanged copy, or more than one word changed
        found += 1
    return found == small_n


@_checker("copy:copy")
def _copy(response: str, prompt_to_repeat: str) -> bool:
    """The instruction copied verbatim (up to case and surrounding space), nothing else."""
    return _same_text(response, prompt_to_repeat)


@_checker("new:copy_span_idx")
def _copy_span_idx(response: str, prompt_to_repeat: str, n_start: int, n_end: int) -> bool:
    """The request's characters n_start..n_end, both included as the instruction says (the
    reference check leaves out the character at n_end)."""
    return _same_text(response, prompt_to_repeat[int(n_start) : int(n_end) + 1])


@_checker("copy:copying_simple")
def _copying_simple(response: str, prompt_to_repeat: str) -> bool:
    """The request repeated without change, nothing else."""
    return _same_text(response, prompt_to_repeat)


@_checker("copy:copying_multiple")
def _copying_multiple(response: str, prompt_to_repeat: str, N: int) -> bool:  # noqa: N803
    """The request N times, separated by ******."""
    copies = response.split("******")
    return len(copies) == N and all(_same_text(c, prompt_to_repeat) for c in copies)


# --------------------------------------------------------------------------- format


@_checker("detectable_format:sentence_hyphens")
def _sentence_hyphens(response: str) -> bool:
    """Two or more sentences joined by hyphens with no spaces around them: every piece between
    hyphens is one whole sentence."""
    pieces = response.strip().split("-")
    return len(pieces) >= 2 and all(
        p and p == p.strip() and len(split_sentences(p)) == 1 for p in pieces
    )


@_checker("detectable_format:square_brackets")
def _square_brackets(response: str) -> bool:
    """Every word enclosed in square brackets."""
    words = response.split()
    return bool(words) and all(w.startswith("[") and w.endswith("]") for w in words)


@_checker("detectable_format:bigram_wrapping")
def _bigram_wrapping(response: str) -> bool:
    """Every pair of words wrapped in << >>: <<I am>> <<at home>> (a last odd word may stand)."""
    words = response.split()
    return len(words) >= 2 and all(
        words[i].startswith("<<") and words[i + 1].endswith(">>")
        for i in range(0, len(words) - 1, 2)
    )


@_checker("paragraphs:paragraphs")
def _two_paragraphs_divider(response: str) -> bool:
    """Two paragraphs separated by the markdown divider ***."""
    found = paragraphs(response, r"\s?\*\*\*\s?")
    return found is not None and len(found) == 2


@_checker("paragraphs:paragraphs2")
def _two_paragraphs_blank_line(response: str) -> bool:
    """Two paragraphs separated by a blank line (two line breaks)."""
    found = paragraphs(response, r"\n\n")
    return found is not None and len(found) == 2


# --------------------------------------------------------------------------- words


@_checker("keywords:no_adjacent_consecutive")
def _no_adjacent_consecutive(response: str) -> bool:
    """No word starts with the letter after the previous word's first letter (cat dog)."""
    firsts = [w[0].lower() for w in response.split()]
    return not any(
        a.isalpha() and b.isalpha() and ord(b) - ord(a) == 1
        for a, b in zip(firsts, firsts[1:], strict=False)
    )


@_checker("keywords:word_once")
def _word_once(response: str, keyword: str) -> bool:
    """The keyword exactly once (as a word: "cats" is not "cat")."""
    return keyword_count(keyword, response) == 1


@_checker("keywords:word_count_different_numbers")
def _word_count_different_numbers(
    response: str, keyword: str, frequency: int, relation: str
) -> bool:
    """The keyword `relation` (less than / at least) `frequency` times, as a word."""
    return compare(keyword_count(keyword, response), relation, frequency)


@_checker("keywords:exclude_word_harder")
def _exclude_word_harder(response: str, keyword: str) -> bool:
    """The keyword never, as a word in any case (the reference only looks for it between two
    spaces, in the given case)."""
    return keyword_count(keyword, response) == 0


@_checker("keywords:palindrome")
def _palindrome(response: str) -> bool:
    """A word of three or more letters or digits that reads the same backwards (the reference
    takes any word, so "a" or "I" alone passes)."""
    words = (strip_punctuation(w).lower() for w in response.split())
    return any(len(w) >= 3 and w.isalnum() and w == w[::-1] for w in words)


@_checker("keywords:keyword_specific_position")
def _keyword_specific_position(response: str, keyword: str, n: int, m: int) -> bool:
    """The keyword as the m-th word of the n-th sentence (punctuation is not a word)."""
    sentences, n, m = split_sentences(response), int(n), int(m)
    if not 1 <= n <= len(sentences):
        return False
    words = word_tokens_without_punctuation(sentences[n - 1])
    return 1 <= m <= len(words) and words[m - 1].lower() == keyword.strip().lower()


@_checker("keywords:start_end")
def _start_end(response: str) -> bool:
    """The first and the last word are the same word and nothing follows it, not even
    punctuation."""
    tokens = word_tokens(response)
    return (
        len(tokens) >= 2
        and any(ch.isalnum() for ch in tokens[0])
        and tokens[0].lower() == tokens[-1].lower()
    )


def _first_word(text: str) -> str:
    """The first word, punctuation aside (a *** divider or a bullet mark is no word)."""
    words = (strip_punctuation(w) for w in text.split())
    return next((w.lower() for w in words if w), "")


@_checker("first_word:first_word_sent")
def _first_word_sent(response: str, first_word: str) -> bool:
    """Every sentence starts with `first_word`."""
    sentences = split_sentences(response)
    target = first_word.strip().lower()
    return bool(sentences) and all(_first_word(s) == target for s in sentences)


@_checker("first_word:first_word_answer")
def _first_word_answer(response: str, first_word: str) -> bool:
    """The response starts with `first_word`."""
    return _first_word(response) == first_word.strip().lower()


def _last_word(text: str) -> str:
    words = text.split()
    return re.sub(r"[^\w\s]", "", words[-1]).lower() if words else ""


@_checker("last_word:last_word_sent")
def _last_word_sent(response: str, last_word: str) -> bool:
    """Every sentence ends with `last_word` (before its punctuation)."""
    sentences = split_sentences(response)
    target = last_word.strip().lower()
    return bool(sentences) and all(_last_word(s) == target for s in sentences)


@_checker("last_word:last_word_answer")
def _last_word_answer(response: str, last_word: str) -> bool:
    """The response ends with `last_word` (before any punctuation)."""
    return _last_word(response) == last_word.strip().lower()


# --------------------------------------------------------------------------- punctuation


@_checker("punctuation:punctuation_dot")
def _no_dot(response: str) -> bool:
    """No dot (.) anywhere."""
    return "." not in response


@_checker("punctuation:punctuation_exclamation")
def _no_exclamation(response: str) -> bool:
    """No exclamation mark (!) anywhere."""
    return "!" not in response


# --------------------------------------------------------------------------- count


@_checker("count:lowercase_counting")
def _lowercase_counting(response: str, N: int) -> bool:  # noqa: N803
    """At most N all-lowercase words in the whole response."""
    return len(re.findall(r"\b[a-z]+\b", response)) <= N


@_checker("letters:letter_counting")
def _letter_counting(response: str, N: int, relation: str) -> bool:  # noqa: N803
    """`relation` (less than / at least) N letters (a-z, A-Z) in all."""
    return compare(len(re.findall(r"[a-zA-Z]", response)), relation, N)


@_checker("letters:letter_counting2")
def _letter_counting2(response: str, letter: str, let_frequency: int, let_relation: str) -> bool:
    """The letter (either case) `let_relation` `let_frequency` times (IFEval's letter
    frequency, under IFTrain's id)."""
    return compare(response.lower().count(letter.lower()), let_relation, let_frequency)


@_checker("count:counting_composition")
def _counting_composition(response: str, n_sent: int, n_words: int) -> bool:
    """3 paragraphs split by the divider * * * (or ***), each of exactly `n_sent` sentences of
    exactly `n_words` words (the reference counts punctuation marks as words and splits at
    *** only, which the instruction's own "* * *" does not match)."""
    found = paragraphs(response, r"\s?\*\s?\*\s?\*\s?")
    if found is None or len(found) != 3:
        return False
    for paragraph in found:
        sentences = split_sentences(paragraph.strip())
        if len(sentences) != n_sent:
            return False
        if any(len(word_tokens_without_punctuation(s)) != n_words for s in sentences):
            return False
    return True


@_checker("count:count_unique")
def _count_unique(response: str) -> bool:
    """No word used twice (case aside; the reference also counts two commas as a repeat)."""
    words = [w.lower() for w in word_tokens_without_punctuation(response)]
    return bool(words) and len(words) == len(set(words))


@_checker("count:count_increment_word")
def _count_increment_word(response: str, keyword1: str, keyword2: str) -> bool:
    """`keyword1` exactly once and `keyword2` exactly twice, as words."""
    return keyword_count(keyword1, response) == 1 and keyword_count(keyword2, response) == 2
