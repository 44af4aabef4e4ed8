"""IFBench's out-of-distribution constraints (the benchmark the IF-RL stages are evaluated on).

The 58 constraints of IFBench (Pyatkin et al. 2025), each checked as the benchmark defines it
and written here from those definitions: count, ratio, words, sentence, format, custom and
repeat constraints. They are evaluation-only (never attached to training prompts). Where the
benchmark's own check contradicts its instruction's words, ours follows the words, and says so
in the checker's docstring; `bench/ifbench_agreement.py` measures how often we agree with the
benchmark's published verdicts. Strict and loose are IFEval's (`curation.verify.ifeval`).
"""

from __future__ import annotations

import csv
import io
import re
import unicodedata
from collections import Counter
from collections.abc import Callable

from curation.verify.english import (
    PUNCTUATION,
    count_stop_words,
    count_words,
    is_emoji,
    is_verb,
    remove_punctuation,
    split_sentences,
    strip_punctuation,
    syllables,
    word_set,
    word_tokens,
    word_tokens_without_punctuation,
)

Checker = Callable[..., bool]
IFBENCH_CHECKERS: dict[str, Checker] = {}


def _checker(instruction_id: str) -> Callable[[Checker], Checker]:
    def register(fn: Checker) -> Checker:
        IFBENCH_CHECKERS[instruction_id] = fn
        return fn

    return register


def _keyword_count(keyword: str, text: str) -> int:
    """Occurrences of `keyword` as a whole word (case-insensitive)."""
    return len(re.findall(r"\b" + re.escape(keyword.strip()) + r"\b", text, flags=re.I))


def _ascii(text: str) -> str:
    """Accents dropped: São Tomé -> Sao Tome."""
    return unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")


# --------------------------------------------------------------------------- count


@_checker("count:word_count_range")
def _word_count_range(response: str, min_words: int, max_words: int) -> bool:
    """Between `min_words` and `max_words` words (inclusive)."""
    return min_words <= count_words(response) <= max_words


@_checker("count:unique_word_count")
def _unique_word_count(response: str, N: int) -> bool:  # noqa: N803 - IFBench's kwarg
    """At least N distinct words (lower case, punctuation stripped)."""
    words = {strip_punctuation(w) for w in response.lower().split()}
    return len(words - {""}) >= N


@_checker("count:conjunctions")
def _conjunctions(response: str, small_n: int) -> bool:
    """At least `small_n` different coordinating conjunctions. (IFBench counts "and" and "And,"
    as two different ones; we count each conjunction once.)"""
    found = {strip_punctuation(w).lower() for w in response.split()}
    return len(found & {"and", "but", "for", "nor", "or", "so", "yet"}) >= small_n


PERSON_NAMES = (  # noqa: SIM905
    "Emma Liam Sophia Jackson Olivia Noah Ava Lucas Isabella Mason Mia Ethan Charlotte "
    "Alexander Amelia Benjamin Harper Leo Zoe Daniel Chloe Samuel Lily Matthew Grace Owen "
    "Abigail Gabriel Ella Jacob Scarlett Nathan Victoria Elijah Layla Nicholas Audrey David "
    "Hannah Christopher Penelope Thomas Nora Andrew Aria Joseph Claire Ryan Stella Jonathan"
).split()
"""The names the instruction's own text lists."""


@_checker("count:person_names")
def _person_names(response: str, N: int) -> bool:  # noqa: N803
    """At least N different names of the instruction's list, each as a whole word."""
    return sum(1 for name in PERSON_NAMES if re.search(rf"\b{name}\b", response)) >= N


@_checker("count:numbers")
def _numbers(response: str, N: int) -> bool:  # noqa: N803
    """Exactly N numbers (digit runs once punctuation is removed, so 3.14 and 1,000 are one)."""
    return len(re.findall(r"\d+", remove_punctuation(response))) == N


@_checker("count:punctuation")
def _punctuation(response: str) -> bool:
    """An interrobang (?!, !? or ‽) and, besides it, each of . , ! ? ; : at least once."""
    if not ("?!" in response or "!?" in response or "‽" in response):
        return False
    rest = response.replace("?!", "", 1) if "?!" in response else response.replace("!?", "", 1)
    return set(".,!?;:") <= set(rest)


PRONOUNS = word_set(
    """
    i me we us you he him she her it they them
    my mine our ours your yours his hers its their theirs
    myself ourselves yourself yourselves himself herself itself themselves
    this that these those who whom whose which what whoever whomever whatever whichever
    anybody anyone anything everybody everyone everything nobody nothing somebody someone
    something each either neither both all some any none
    """
)
"""Personal, possessive, reflexive, demonstrative, interrogative, relative and indefinite."""


@_checker("count:pronouns")
def _pronouns(response: str, N: int) -> bool:  # noqa: N803
    """At least N pronouns (word tokens; she/her/hers counts three)."""
    tokens = word_tokens(response.replace("/", " ").lower())
    return sum(1 for t in tokens if t in PRONOUNS) >= N


@_checker("count:words_japanese")
def _words_japanese(response: str, N: int) -> bool:  # noqa: N803
    """Every N-th word (numbers aside) holds Japanese (kana or kanji)."""
    for position, word in enumerate(response.split(), start=1):
        word = strip_punctuation(word)
        japanese = re.search(r"[\u3040-\u30ff\u4e00-\u9fff]", word)
        if position % N == 0 and word and not word.isdigit() and not japanese:
            return False
    return True


@_checker("count:keywords_multiple")
def _keywords_multiple(
    response: str, keyword1: str, keyword2: str, keyword3: str, keyword4: str, keyword5: str
) -> bool:
    """Keywords 1-5 exactly 1, 2, 3, 5 and 7 times. (IFBench counts substrings, so "whispers"
    counts as "whisper"; we count whole words.)"""
    wanted = zip((keyword1, keyword2, keyword3, keyword4, keyword5), (1, 2, 3, 5, 7), strict=True)
    return all(_keyword_count(k, response) == n for k, n in wanted)


# --------------------------------------------------------------------------- ratio


@_checker("ratio:stop_words")
def _stop_words(response: str, percentage: int) -> bool:
    """Stop words at most `percentage`% of the words."""
    total = count_words(response)
    return total > 0 and count_stop_words(response) * 100 / total <= percentage


def _sentence_types(response: str) -> Counter[str]:
    """Sentences by their final mark (. ? !), closing quotes and brackets aside."""
    return Counter(s.rstrip("\"')]\u201d\u2019 ")[-1:] for s in split_sentences(response))


@_checker("ratio:sentence_type")
def _sentence_type(response: str) -> bool:
    """Twice as many declarative (.) as interrogative (?) sentences. (IFBench also passes a
    response with neither; 0:0 is no 2:1 ratio, so we ask for a question.)"""
    types = _sentence_types(response)
    return types["?"] > 0 and types["."] == 2 * types["?"]


@_checker("ratio:sentence_balance")
def _sentence_balance(response: str) -> bool:
    """As many declarative (.) as interrogative (?) as exclamatory (!) sentences, at least one
    of each (IFBench also passes none of any)."""
    types = _sentence_types(response)
    return types["."] > 0 and types["."] == types["?"] == types["!"]


@_checker("ratio:overlap")
def _overlap(response: str, reference_text: str, percentage: int) -> bool:
    """Character trigrams: the share of the response's distinct trigrams that the reference
    also has is within 2 points of `percentage` (IFBench's trigrams are of characters)."""
    mine = {response[i : i + 3] for i in range(len(response) - 2)}
    if not mine:
        return False
    theirs = {reference_text[i : i + 3] for i in range(len(reference_text) - 2)}
    return abs(len(mine & theirs) * 100 / len(mine) - percentage) <= 2


@_checker("ratio:sentence_words")
def _sentence_words(response: str) -> bool:
    """Three sentences of the same number of characters that share no word. (IFBench checks
    the lengths only; the instruction also asks for all different words.)"""
    sentences = [s.strip() for s in split_sentences(response)]
    if len(sentences) != 3 or len({len(s) for s in sentences}) != 1:
        return False
    vocab = [{w.lower() for w in word_tokens_without_punctuation(s)} for s in sentences]
    return not (vocab[0] & vocab[1] or vocab[0] & vocab[2] or vocab[1] & vocab[2])


# --------------------------------------------------------------------------- words


@_checker("words:alphabet")
def _alphabet(response: str) -> bool:
    """Each word starts with the letter after the previous word's, Z wrapping to A."""
    words = [w for w in remove_punctuation(response).lower().split() if w]
    if not words or not "a" <= words[0][0] <= "z":
        return False
    letter = words[0][0]
    for word in words[1:]:
        letter = chr((ord(letter) - ord("a") + 1) % 26 + ord("a"))
        if word[0] != letter:
            return False
    return True


@_checker("words:vowel")
def _vowel(response: str) -> bool:
    """One paragraph (one line) using at most three of the vowels a e i o u."""
    lines = response.strip().split("\n")
    return len(lines) == 1 and len(set(lines[0].lower()) & set("aeiou")) <= 3


_CONSONANTS = set("bcdfghjklmnpqrstvwxyz")


@_checker("words:consonants")
def _consonants(response: str) -> bool:
    """Every word has two consonant letters in a row."""
    return all(
        any(a in _CONSONANTS and b in _CONSONANTS for a, b in zip(w, w[1:], strict=False))
        for w in response.lower().split()
    )


@_checker("words:palindrome")
def _palindrome(response: str) -> bool:
    """At least 10 words of 5 or more characters that read the same backwards."""
    words = remove_punctuation(response).lower().split()
    return sum(1 for w in words if len(w) >= 5 and w == w[::-1]) >= 10


_PRIMES = {n for n in range(2, 100) if all(n % d for d in range(2, n))}


@_checker("words:prime_lengths")
def _prime_lengths(response: str) -> bool:
    """Every word (punctuation removed) is a prime number of characters long."""
    return all(len(w) in _PRIMES for w in remove_punctuation(response).split())


@_checker("words:start_verb")
def _start_verb(response: str) -> bool:
    """The first word is a verb. (IFBench asks NLTK's tagger, which often calls a capitalized
    imperative such as "Build" a proper noun; we ask an English lexicon whether the word is a
    verb form, and a word that is also a noun must not open a heading such as "Design:".)"""
    tokens = word_tokens(response)
    words = [t for t in tokens if any(ch.isalnum() for ch in t)]
    if not words or tokens[0] != words[0] or not words[0].isalpha():
        return False
    from lemminflect import getAllLemmas

    if not is_verb(words[0]):
        return False
    heading = len(tokens) > 1 and tokens[1] in (":", "-")
    return not (heading and "NOUN" in getAllLemmas(words[0].lower()))


@_checker("words:repeats")
def _repeats(response: str, small_n: int) -> bool:
    """No word (lower case, punctuation removed) more than `small_n` times."""
    counts = Counter(remove_punctuation(response.lower()).split())
    return all(n <= small_n for n in counts.values())


@_checker("words:odd_even_syllables")
def _odd_even_syllables(response: str) -> bool:
    """Words alternate between odd and even syllable counts."""
    parity = [syllables(w) % 2 for w in remove_punctuation(response).lower().split()]
    return all(a != b for a, b in zip(parity, parity[1:], strict=False))


@_checker("words:last_first")
def _last_first(response: str) -> bool:
    """Each sentence's last word is the next sentence's first word."""
    sentences = split_sentences(response)
    for this, following in zip(sentences, sentences[1:], strict=False):
        last = this.rstrip(PUNCTUATION + " ").split()
        first = following.lstrip(PUNCTUATION + " ").split()
        if not last or not first or last[-1].lower() != first[0].lower():
            return False
    return True


@_checker("words:paragraph_last_first")
def _paragraph_last_first(response: str) -> bool:
    """Each paragraph (line) ends with the word it starts with."""
    for line in response.split("\n"):
        words = strip_punctuation(line.strip().lower()).split()
        if words and words[0] != words[-1]:
            return False
    return True


@_checker("words:no_consecutive")
def _no_consecutive(response: str) -> bool:
    """No two words in a row start with the same letter."""
    words = remove_punctuation(response.lower()).split()
    return all(a[0] != b[0] for a, b in zip(words, words[1:], strict=False))


@_checker("words:keywords_specific_position")
def _keywords_specific_position(response: str, keyword: str, n: int, m: int) -> bool:
    """The n-th sentence's m-th word (punctuation tokens aside) is `keyword`."""
    sentences, n, m = split_sentences(response), int(n), int(m)
    if not 1 <= n <= len(sentences):
        return False
    words = word_tokens_without_punctuation(sentences[n - 1])
    return 1 <= m <= len(words) and words[m - 1].lower() == keyword.strip().lower()


@_checker("words:words_position")
def _words_position(response: str, keyword: str) -> bool:
    """The second word and the second-to-last word are `keyword` (punctuation aside)."""
    words = word_tokens_without_punctuation(response)
    target = keyword.strip().lower()
    return len(words) >= 2 and words[1].lower() == target == words[-2].lower()


# --------------------------------------------------------------------------- sentence


@_checker("sentence:alliteration_increment")
def _alliteration_increment(response: str) -> bool:
    """Each sentence has a longer run of words sharing their first letter than the one before
    (a run of k such words scores k)."""
    previous = -1
    for sentence in split_sentences(response):
        words = [w.lstrip(PUNCTUATION + " ") for w in sentence.lower().split()]
        words = [w for w in words if w]
        score, in_run = 0, False
        for a, b in zip(words, words[1:], strict=False):
            if a[0] == b[0]:
                score += 1 if in_run else 2
                in_run = True
            else:
                in_run = False
        if score <= previous:
            return False
        previous = score
    return True


@_checker("sentence:keyword")
def _sentence_keyword(response: str, word: str, N: int) -> bool:  # noqa: N803
    """The N-th sentence holds `word` as a whole word (case-insensitive)."""
    sentences, n = split_sentences(response), int(N)
    return 1 <= n <= len(sentences) and _keyword_count(word, sentences[n - 1]) > 0


@_checker("sentence:increment")
def _sentence_increment(response: str, small_n: int) -> bool:
    """Each sentence has exactly `small_n` more words than the one before."""
    counts = [len(remove_punctuation(s).split()) for s in split_sentences(response)]
    return bool(counts) and all(b == a + small_n for a, b in zip(counts, counts[1:], strict=False))


# --------------------------------------------------------------------------- format


@_checker("format:parentheses")
def _parentheses(response: str) -> bool:
    """Brackets ( [ { nested at least 5 deep, closed in order (a mismatch starts over)."""
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    deepest = 0
    for ch in response:
        if ch in "([{":
            stack.append(ch)
            deepest = max(deepest, len(stack))
        elif ch in pairs:
            if stack and stack[-1] == pairs[ch]:
                stack.pop()
                if deepest >= 5:
                    return True
            else:
                stack, deepest = [], 0
    return False


@_checker("format:quotes")
def _quotes(response: str) -> bool:
    """Quotes within quotes at least 3 deep, alternating " and ' (a quote mark closes the
    innermost open quote of its kind, else opens a new level)."""
    stack: list[str] = []
    deepest = 0
    for ch in response:
        if stack and ch == stack[-1]:
            stack.pop()
            if deepest - len(stack) >= 3:
                return True
        elif ch in "\"'":
            stack.append(ch)
            deepest = max(deepest, len(stack))
    return False


@_checker("format:options")
def _options(response: str, options: str) -> bool:
    """The response is one of the options and nothing else: exactly, for lettered options
    ("a), b), c)"), else up to case and surrounding punctuation."""
    lettered = re.match(r"\W*[aA]\W*[bB]\W*[cC]\W*", options) is not None
    separator = "/" if "/" in options else "or" if "or" in options else ","
    choices = [o.strip() for o in options.split(separator)]
    if lettered:
        return response in choices
    answer = strip_punctuation(response).lower()
    return any(strip_punctuation(choice).lower() == answer for choice in choices)


@_checker("format:newline")
def _newline(response: str) -> bool:
    """Each word on a line of its own (blank lines and punctuation aside)."""
    lines = [line for line in remove_punctuation(response).split("\n") if line.strip()]
    return bool(lines) and all(len(line.split()) == 1 for line in lines)


@_checker("format:emoji")
def _emoji(response: str) -> bool:
    """Every sentence ends with an emoji (one the splitter moved to the next sentence's start
    counts)."""
    sentences = [remove_punctuation(s).strip() for s in split_sentences(response)]
    for index, sentence in enumerate(sentences):
        if not sentence:
            return False
        if is_emoji(sentence[-1]) or is_emoji(sentence[-2:-1] or sentence[-1]):
            continue
        following = sentences[index + 1] if index + 1 < len(sentences) else ""
        if not following or not is_emoji(following[0]):
            return False
    return True


@_checker("format:line_indent")
def _line_indent(response: str) -> bool:
    """Each non-blank line is indented by more spaces than the one before."""
    indents = [len(line) - len(line.lstrip(" ")) for line in response.split("\n") if line.strip()]
    return all(b > a for a, b in zip(indents, indents[1:], strict=False))


@_checker("format:quote_unquote")
def _quote_unquote(response: str) -> bool:
    """Every quoted phrase is followed by unquoted text: no two quotes meet (whitespace aside)
    and the text does not end on a quote."""
    text = response.replace("\u201c", '"').replace("\u201d", '"').replace("'\"'", "")
    text = "".join(text.split())
    if '""' in text:
        return False
    tail = text.strip("0123456789" + PUNCTUATION.replace('"', ""))
    return not tail.endswith('"')


@_checker("format:list")
def _list(response: str, sep: str) -> bool:
    """A list of at least two items marked by `sep` instead of bullets. (IFBench counts `sep`
    anywhere, so two hyphenated words make a list of "-"; we count it only where it stands
    alone, between spaces or line ends.)"""
    marker = re.escape(sep.strip())
    return len(re.findall(rf"(?:^|(?<=\s)){marker}(?=\s|$)", response)) >= 2


@_checker("format:thesis")
def _thesis(response: str) -> bool:
    """An HTML-italic thesis (<i>...</i> or <em>...</em>, not blank) with text after it."""
    match = re.search(r"<(i|em)>(.*?)</\1>(.*)", response, flags=re.S)
    return bool(match) and bool(match.group(2).strip()) and bool(match.group(3).strip())


@_checker("format:sub-bullets")
def _sub_bullets(response: str) -> bool:
    """Bullets marked * with at least one sub-bullet marked - under each. (IFBench splits the
    text at every *, so a response without bullets passes, and bold text counts; we read
    lines.)"""
    bullets = 0
    under = 0
    for line in response.split("\n"):
        text = line.strip()
        if re.match(r"\*(?!\*)", text):
            if bullets and not under:
                return False
            bullets, under = bullets + 1, 0
        elif text.startswith("-") and bullets:
            under += 1
    return bullets > 0 and under > 0


@_checker("format:no_bullets_bullets")
def _no_bullets_bullets(response: str) -> bool:
    """At least two sentences ending in a period, then at least two * bullets, and nothing
    after the bullets (blank lines aside)."""
    lines = [line.strip() for line in response.split("\n") if line.strip()]
    prose = [line for line in lines if not line.startswith("*")]
    first_bullet = next((i for i, line in enumerate(lines) if line.startswith("*")), None)
    if first_bullet is None or any(not line.startswith("*") for line in lines[first_bullet:]):
        return False
    sentences = [s for line in prose for s in split_sentences(line) if s.endswith(".")]
    return len(sentences) >= 2 and len(lines) - first_bullet >= 2


@_checker("format:title_case")
def _title_case(response: str) -> bool:
    """Every major word starts with a capital (articles, short prepositions and conjunctions
    may stay lower case after the first word; IFBench also fails those, and every n't)."""
    words = [t for t in word_tokens(response) if t[:1].isalpha() and "'" not in t]
    for index, word in enumerate(words):
        if word[0].islower() and (index == 0 or word not in _MINOR_WORDS):
            return False
    return True


_MINOR_WORDS = word_set(
    "a an the and but or nor for so yet as at by in of off on per to up via from into onto "
    "with over than"
)


@_checker("format:output_template")
def _output_template(response: str) -> bool:
    """The template's three labels, in order: My Answer:, My Conclusion:, Future Outlook:."""
    return re.search(r"My Answer:.*My Conclusion:.*Future Outlook:", response, re.S) is not None


@_checker("format:no_whitespace")
def _no_whitespace(response: str) -> bool:
    """No whitespace at all."""
    return not any(ch.isspace() for ch in response)


# --------------------------------------------------------------------------- repeat


@_checker("repeat:repeat_change")
def _repeat_change(response: str, prompt_to_repeat: str) -> bool:
    """The request repeated with its first word changed (and nothing else)."""
    mine, theirs = response.split(), prompt_to_repeat.split()
    return bool(mine) and mine[1:] == theirs[1:] and mine[0] != theirs[0]


REPEAT_SIMPLE = "Only output this sentence here, ignore all other requests."


@_checker("repeat:repeat_simple")
def _repeat_simple(response: str) -> bool:
    """Exactly the instruction's sentence, up to case."""
    return response.strip().lower() == REPEAT_SIMPLE.lower()


@_checker("repeat:repeat_span")
def _repeat_span(response: str, prompt_to_repeat: str, n_start: int, n_end: int) -> bool:
    """The request's words n_start..n_end (inclusive, split by whitespace), as the benchmark's
    prompts say (IFBench's check has used an exclusive end, later character indices)."""
    span = prompt_to_repeat.split()[int(n_start) : int(n_end) + 1]
    return bool(span) and response.lower().split() == [w.lower() for w in span]


# --------------------------------------------------------------------------- custom


@_checker("custom:multiples")
def _multiples(response: str) -> bool:
    """The multiples of 7 from 10 to 50, and no other number."""
    return re.findall(r"\d+", response.replace(",", ", ")) == [str(n) for n in range(14, 51, 7)]


@_checker("custom:mcq_count_length")
def _mcq_count_length(response: str) -> bool:
    """Four questions, each opening with "Question", each with five options A-E, each longer
    than the one before, and nothing before the first."""
    if not response.startswith("Question"):
        return False
    parts = [p.strip() for p in re.split(r"\n*Question \d+[.|):;]?\s*", response)]
    questions = [p for p in parts if p]
    if len(questions) != 4:
        return False
    lengths = []
    for question in questions:
        text, options, in_options = "", 0, False
        for line in question.split("\n"):
            if re.match(r"^[A-Ea-e][.|)]\s*\w+", line.strip()):
                options, in_options = options + 1, True
            elif not in_options:
                text += " " + line.strip()
        if options != 5:
            return False
        lengths.append(len(text.strip()))
    return all(a < b for a, b in zip(lengths, lengths[1:], strict=False))


@_checker("custom:reverse_newline")
def _reverse_newline(response: str) -> bool:
    """Africa's countries in reverse alphabetical order, one a line, from Zimbabwe on (at
    least 52 lines)."""
    lines = [strip_punctuation(line) for line in response.split("\n")]
    lines = [line for line in lines if line]
    start = next((i for i, line in enumerate(lines) if "Zimbabwe" in line), None)
    if start is None or len(lines) - start < 52:
        return False
    names = [_ascii(line) for line in lines[start:]]
    return names == sorted(names, reverse=True)


@_checker("custom:word_reverse")
def _word_reverse(response: str) -> bool:
    """The answer's words in reverse order: read backwards it says "bald eagle"."""
    words = remove_punctuation(response.lower().strip()).split()
    return "bald eagle" in " ".join(reversed(words))


@_checker("custom:character_reverse")
def _character_reverse(response: str) -> bool:
    """The answer's letters in reverse order: "bald eagle" backwards appears."""
    return "elgae dlab" in response.lower()


@_checker("custom:sentence_alphabet")
def _sentence_alphabet(response: str) -> bool:
    """26 sentences whose first words start with a, b, c, ... z in turn."""
    sentences = split_sentences(response)
    if len(sentences) != 26:
        return False
    firsts = [s.split()[0].lower() if s.split() else "" for s in sentences]
    return all(w[:1] == chr(ord("a") + i) for i, w in enumerate(firsts))


EUROPEAN_CAPITALS_NORTH_OF_45 = (  # noqa: SIM905
    "Reykjavik Helsinki Oslo Tallinn Stockholm Riga Moscow Copenhagen Vilnius Minsk Dublin "
    "Berlin Amsterdam Warsaw London Brussels Kyiv Prague Luxembourg Paris Vienna Bratislava "
    "Budapest Vaduz Chisinau Bern Ljubljana Zagreb"
).split()
"""Capitals of European countries north of 45 degrees, from north to south. (IFBench's list
leaves out Kyiv, at 50.45 N.)"""


@_checker("custom:european_capitals_sort")
def _european_capitals_sort(response: str) -> bool:
    """The capitals north of 45 N, comma-separated, from north to south, nothing else."""
    names = [n.strip() for n in _ascii(response).split(",") if n.strip()]
    accepted = {"Kiev": "Kyiv"}
    return [accepted.get(n, n) for n in names] == list(EUROPEAN_CAPITALS_NORTH_OF_45)


@_checker("custom:csv_city")
def _csv_city(response: str) -> bool:
    """CSV with the header ID,Country,City,Year,Count and 7 rows of 5 fields."""
    rows = list(csv.reader(io.StringIO(response)))
    return (
        len(rows) == 8
        and rows[0] == ["ID", "Country", "City", "Year", "Count"]
        and all(len(r) == 5 for r in rows[1:])
    )


def _quoted_fields(text: str, delimiter: str) -> list[list[str]]:
    """CSV rows whose fields keep their double quotes ("a,b" stays one field, with quotes)."""
    return list(csv.reader(io.StringIO(text.replace('"', '"""')), delimiter=delimiter))


@_checker("custom:csv_special_character")
def _csv_special_character(response: str) -> bool:
    """CSV with the header ProductID,Category,Brand,Price,Stock, 14 rows of 5 fields, and a
    field that holds a special character enclosed in double quotes."""
    names = ("ProductID", "Category", "Brand", "Price", "Stock")
    header = r"^" + r",[ \t]*".join(f'({n}|"{n}")' for n in names) + r"$"
    if not re.match(header, response.split("\n")[0].strip()):
        return False
    rows = _quoted_fields(response, ",")
    if len(rows) != 15 or any(len(r) != 5 for r in rows[1:]):
        return False
    return any(re.match(r'".*[^\d\w\s].*"', f) for r in rows[1:] for f in r)


@_checker("custom:csv_quotes")
def _csv_quotes(response: str) -> bool:
    """Tab-separated, header StudentID Subject Grade Semester Score, 3 rows of 5 fields, every
    field in double quotes."""
    names = ("StudentID", "Subject", "Grade", "Semester", "Score")
    header = r"^" + r"\t *".join(f'({n}|"{n}")' for n in names) + r"$"
    if not re.match(header, response.split("\n")[0].strip()):
        return False
    rows = _quoted_fields(response, "\t")
    return len(rows) == 4 and all(
        len(r) == 5 and all(f.strip()[:1] == '"' and f.strip()[-1:] == '"' for f in r) for r in rows
    )


_MONTH_DAYS = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30}


@_checker("custom:date_format_list")
def _date_format_list(response: str) -> bool:
    """Comma-separated YYYY-MM-DD dates within Napoleon's fighting years (1769-1821), each a
    real calendar day, and nothing else."""
    for date in response.strip().split(","):
        match = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", date.strip())
        if not match:
            return False
        year, month, day = (int(g) for g in match.groups())
        if not 1769 <= year <= 1821 or not 1 <= month <= 12:
            return False
        if not 1 <= day <= _MONTH_DAYS.get(month, 31):
            return False
    return True
