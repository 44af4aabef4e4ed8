"""English text measures the IF-RLVR and IFBench checkers share: sentences, word tokens, stop
words, verbs, syllables, emoji.

IFBench defines its checks over NLTK's Punkt sentence splitter, its Treebank word tokenizer, its
English stop words and part-of-speech tagger. Punkt's and the tagger's trained models are data
files NLTK downloads at run time, which our machines cannot, so: sentences are Punkt's
unsupervised splitter with our own list of abbreviations, words are NLTK's Treebank tokenizer
over those sentences (what `nltk.word_tokenize` does), "starts with a verb" asks lemminflect's
English lexicon whether the word is a verb form, and the stop words are our own list of English
function words. Syllables come from syllapy, emoji from the emoji package.
"""

from __future__ import annotations

import re
import string
from functools import cache

PUNCTUATION = string.punctuation
"""ASCII punctuation, what IFBench strips from word edges."""


def word_set(text: str) -> frozenset[str]:
    """The whitespace-separated words of `text` (word lists written as text)."""
    return frozenset(text.split())


ABBREVIATIONS = word_set(
    "mr mrs ms dr prof sr jr st vs etc e.g i.e inc ltd co fig approx cf al u.s a.m p.m "
    "dept est gov jan feb mar apr jun jul aug sep sept oct nov dec mt"
)
"""Words that a period after does not end a sentence with (lower case, without that period)."""

STOP_WORDS = word_set(
    """
    a an the this that these those
    i me my mine myself we us our ours ourselves you your yours yourself yourselves he him his
    himself she her hers herself it its itself they them their theirs themselves
    who whom whose which what whoever whatever
    am is are was were be been being have has had having do does did doing
    will would shall should can could may might must ought
    and but or nor so yet for if then else than because as until while although though unless
    of at by with about against between into through during before after above below to from
    up down in out on off over under again further once here there when where why how
    all any both each few more most other some such no not only own same too very just now
    s t d ll m o re ve y don doesn didn isn aren wasn weren hasn haven hadn won wouldn shan
    shouldn can couldn mightn mustn needn ain
    """
)
"""English function words: articles, pronouns, auxiliaries, conjunctions, prepositions and the
usual adverbs, plus the pieces `\\w+` cuts contractions into (don't -> don, t)."""


@cache
def _sentence_splitter():  # noqa: ANN202 - an NLTK object
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    params = PunktParameters()
    params.abbrev_types = {a.rstrip(".") for a in ABBREVIATIONS}
    return PunktSentenceTokenizer(params)


@cache
def _word_tokenizer():  # noqa: ANN202 - an NLTK object
    from nltk.tokenize import NLTKWordTokenizer

    return NLTKWordTokenizer()


def split_sentences(text: str) -> list[str]:
    """The sentences of `text` (Punkt: a sentence ends at . ! ? before a space, not after an
    abbreviation; line breaks alone do not end one)."""
    return _sentence_splitter().tokenize(text)


def word_tokens(text: str) -> list[str]:
    """Treebank tokens of each sentence: words, contraction parts (n't, 's) and punctuation."""
    tokenizer = _word_tokenizer()
    return [token for sentence in split_sentences(text) for token in tokenizer.tokenize(sentence)]


def word_tokens_without_punctuation(text: str) -> list[str]:
    """`word_tokens` less the tokens without a letter or digit."""
    return [t for t in word_tokens(text) if any(ch.isalnum() for ch in t)]


def count_words(text: str) -> int:
    """Words as runs of word characters (`\\w+`), as IFEval counts them."""
    return len(re.findall(r"\w+", text))


def count_stop_words(text: str) -> int:
    """How many `\\w+` words of `text` are stop words."""
    return sum(1 for w in re.findall(r"\w+", text) if w.lower() in STOP_WORDS)


def strip_punctuation(word: str) -> str:
    """The word without ASCII punctuation and spaces at either end."""
    return word.strip(PUNCTUATION + " ")


def remove_punctuation(text: str) -> str:
    """The text with every ASCII punctuation character removed."""
    return text.translate(str.maketrans("", "", PUNCTUATION))


def is_verb(word: str) -> bool:
    """Whether an English word is a verb form (base, past, participle, -s, -ing)."""
    from lemminflect import getAllLemmas

    return "VERB" in getAllLemmas(word.lower()) or "AUX" in getAllLemmas(word.lower())


def syllables(word: str) -> int:
    """Syllables of an English word (syllapy: a lookup table, else a rule)."""
    import syllapy

    return syllapy.count(word)


def is_emoji(char: str) -> bool:
    """Whether `char` is an emoji."""
    import emoji

    return emoji.is_emoji(char)


def compare(count: int, relation: str, target: int) -> bool:
    """`count` against `target` by IFEval's relations, "less than" or "at least"."""
    if relation == "less than":
        return count < target
    if relation == "at least":
        return count >= target
    raise ValueError(f"unknown relation {relation!r} (expected 'less than' or 'at least')")
