"""Rule filters for math RL prompts: drop what a verifier cannot reward or does not belong.

Nemotron-Cascade's Math RL data removes multiple-choice and true/false questions, proofs,
multi-part questions, non-English text and questions that reference a figure, and RL needs
a reference answer the verifier can parse. Each of those is a named rule here; the rule name
is also the `reason` code of the rows it drops:

| rule | flags a row when |
|---|---|
| `missing_answer` | the reference answer is null or blank |
| `unparseable_answer` | math-verify cannot parse the answer into an expression |
| `non_english` | the prose (outside LaTeX) is not English |
| `multiple_choice` | the problem lists lettered options or asks "which of the following" |
| `proof` | the problem asks for a proof ("Prove that", ", show that") |
| `figure_reference` | the problem points at a figure that is not in the text |
| `multi_question` | the problem asks two or more separate questions |

Rules compute their measurement first (what matched, ratios, counts: `measure_rules`) and
decide second, so flags can be reviewed and thresholds tuned with SQL after the fact.
`filter_math_rl_prompts` applies a list of rules and drops each flagged row once, with the
first flagging rule (in list order) as `reason` and every flagging rule in `flagged_by`.

Precision decisions, checked on MATH, AIME and GSM8K (see tests/test_filters.py):
- An Asymptote figure (`[asy]...[/asy]`) or a table/array inlined in the problem *is* the
  figure: "In the diagram, ..." followed by `[asy]` is kept. A reference with no figure in
  the text, or a link to an image file, is flagged.
- Conditions labelled (a), (b), (c) are one question; parts are counted only when two or
  more labelled parts each ask something. "Find x. ... What is a+b?" (find a quantity, then
  report a function of its form) is one question, and so are format instructions such as
  "Express your answer as a common fraction." and restatements ("That is, ...?").
- "Prove" anywhere, and "show/demonstrate/verify that" as an imperative (sentence start,
  after a comma or part label) mark proofs; "records show that" and "it can be shown" do not.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from lake.operators import decide
from lake.steps import StepResult

# -- text preparation ------------------------------------------------------------------

_MATH_SPANS = re.compile(
    r"\[asy\].*?\[/asy\]"
    r"|\\begin\{(\w+\*?)\}.*?\\end\{\1\}"
    r"|\$\$.*?\$\$|\$.*?\$|\\\[.*?\\\]|\\\(.*?\\\)",
    re.S,
)
_QUOTED = re.compile(r"\"[^\"\n]*\"|``[^\n]*?''|\u201c[^\u201d]*\u201d")
_LATEX_COMMAND = re.compile(r"\\[A-Za-z]+\*?")
_URL = re.compile(r"https?://\S+")


def prose(text: str) -> str:
    """The problem with math, figures, tables, quotes and commands replaced by `X`.

    A question mark that ends a math span (`between $100$ and $999?$`) is kept after the
    placeholder so questions are still seen.
    """

    def placeholder(match: re.Match[str]) -> str:
        return " X?" if match.group(0).rstrip("$").rstrip().endswith("?") else " X"

    text = _MATH_SPANS.sub(placeholder, text)
    text = _QUOTED.sub(" Q ", text)
    text = _URL.sub(" ", text)
    return _LATEX_COMMAND.sub(" ", text)


# -- rule: multiple choice ---------------------------------------------------------------

# "(A)" not preceded by a letter/digit (so f(A), P(B) are not options); covers \textbf{(A)}.
_PAREN_LABEL = re.compile(r"(?<![\w^_])\(([A-E])\)")
# "A." / "A)" / "A)." at a line start, after \qquad/\quad/\[ /\text, or after "$".
_BARE_LABEL = re.compile(
    r"(?:^|\n|\\qquad|\\quad|\\\[|\\text\s*\{?|\\textbf\s*\{|\\mathrm\s*\{|\$)"
    r"[ \t]*([A-E])(?:\)\.|\.|\))(?=[\s\\$}~])"
)
_MCQ_PHRASE = re.compile(
    r"\bwhich\s+(?:one\s+)?of\s+the\s+following\b|\btrue\s+or\s+false\b"
    r"|\b(?:choose|select|pick)\s+the\s+(?:correct|best)\b|\bcorrect\s+option\b",
    re.I,
)


_ASY = re.compile(r"\[asy\].*?\[/asy\]", re.S)
# "(A) each digit is odd, (B) ..." after "the following conditions" labels conditions.
_CONDITIONS = re.compile(r"\bconditions?\b|\bpropert(?:y|ies)\b|\brules?\b", re.I)


def _option_run(labels: list[str]) -> bool:
    """True if the labels contain A, B, C in that order (a lettered option list)."""
    want = "ABC"
    at = 0
    for label in labels:
        if label == want[at]:
            at += 1
            if at == len(want):
                return True
    return False


def measure_multiple_choice(problems: Sequence[str], answers: Sequence[str | None]) -> pl.DataFrame:
    """`mcq_evidence`: the option labels or phrase that make a problem multiple choice."""
    evidence: list[str | None] = []
    for text in problems:
        text = _ASY.sub(" ", text)  # Asymptote code is full of dot(A); draw(B)
        phrase = _MCQ_PHRASE.search(text)
        found = None
        for pattern in (_PAREN_LABEL, _BARE_LABEL):
            labels = list(pattern.finditer(text))
            if _option_run([label.group(1) for label in labels]):
                lead = text[: labels[0].start()]
                if phrase or not _CONDITIONS.search(lead):
                    found = "options " + " ".join(dict.fromkeys(m.group(1) for m in labels))
                    break
        if found is None and phrase:
            found = phrase.group(0)
        evidence.append(found)
    flag = [e is not None for e in evidence]
    return pl.DataFrame(
        {"multiple_choice": flag, "mcq_evidence": evidence},
        schema={"multiple_choice": pl.Boolean, "mcq_evidence": pl.String},
    )


# -- rule: proof -------------------------------------------------------------------------

_PROOF = re.compile(
    r"\b(?:dis)?prove\b"
    r"|(?:^|[.!?:;,]\s*|\n\s*|\)\s+|\bthen\s+|\band\s+|\bX\s+)"
    r"(?:show|demonstrate|verify|establish|justify)\s+(?:that|why|how)\b"
    r"|\b(?:give|write|provide)\s+a\s+proof\b",
    re.I,
)
_PROOF_ANSWER = re.compile(r"^\s*(?:\\text\{)?\s*(?:proof|see proof|qed)\b", re.I)


def measure_proof(
    problems: Sequence[str],
    answers: Sequence[str | None],
    *,
    masked: Sequence[str] | None = None,
) -> pl.DataFrame:
    """`proof_evidence`: the phrase asking for a proof (or a reference answer that says so)."""
    evidence: list[str | None] = []
    masked = masked if masked is not None else [prose(text) for text in problems]
    for text, answer in zip(masked, answers, strict=True):
        match = _PROOF.search(text)
        if match:
            evidence.append(match.group(0).strip(" .,;:!?\r\n\t"))
        elif answer is not None and _PROOF_ANSWER.match(answer):
            evidence.append(f"answer: {answer.strip()[:40]}")
        else:
            evidence.append(None)
    return pl.DataFrame(
        {"proof": [e is not None for e in evidence], "proof_evidence": evidence},
        schema={"proof": pl.Boolean, "proof_evidence": pl.String},
    )


# -- rule: figure reference --------------------------------------------------------------

# "image" (of a point under a map) and "drawing" (a scale drawing) are usually not figures;
# "in the picture" is as often a story's photo (a selfie) as a figure, so "picture" counts
# only as "the picture below/shows", "see the picture" or "pictured".
_VISUAL = r"(?:figures?|diagrams?|illustrations?|sketch(?:es)?)"
# Reference phrases, matched on prose() text (math and [asy] code masked out).
_FIGURE_PHRASE = re.compile(
    r"\b(?:in|see|from|on|to|into)\s+the\s+(?:above\s+|below\s+|following\s+|accompanying\s+"
    r"|adjoining\s+|adjacent\s+|given\s+|first\s+|second\s+)?" + _VISUAL + r"\b"
    r"|\bthe\s+(?:accompanying\s+|adjoining\s+|following\s+|given\s+)?(?:diagrams?"
    r"|illustrations?)\b"
    r"|\bthe\s+(?:" + _VISUAL + r"|picture)\s+(?:below|above|shows?|shown"
    r"|at\s+(?:the\s+)?(?:right|left)|to\s+the\s+(?:right|left)|indicates?)\b"
    r"|\bsee\s+(?:the\s+)?(?:" + _VISUAL + r"|picture)\b"
    r"|\bthe\s+(?:graph|drawing|image)\s+(?:below|above|shown|at\s+(?:the\s+)?(?:right|left))\b"
    r"|\bpictured\b|\bnot\s+(?:drawn\s+)?to\s+scale\b",
    re.I,
)
_SHOWN_PHRASE = re.compile(
    r"\bas\s+shown\b|\bshown\s+(?:below|above|here|at\s+(?:the\s+)?(?:right|left)"
    r"|to\s+the\s+(?:right|left)|in\s+(?:red|blue|black|green|bold))\b"
    r"|\b(?:is|are)\s+shown\s*[.:]",
    re.I,
)
_NEGATED_FIGURE = re.compile(r"^\s*(?:was|is|were)\s+not\s+(?:given|provided|shown)", re.I)
_IMAGE_LINK = re.compile(
    r"\\includegraphics|!\[[^\]]*\]\(|<img\b|https?://\S+?\.(?:png|jpe?g|gif|svg|bmp)\b", re.I
)
_INLINE_FIGURE = re.compile(r"\[asy\]|\\begin\{(?:tabular|array)\}|\\chemfig\b")
_INLINE_DISPLAY = re.compile(r"\[asy\]|\\begin\{\w+\*?\}|\$\$|\\\[")


def _has_listing(text: str) -> bool:
    """Three or more non-empty lines after the first: a list or grid written out as text."""
    lines = [line for line in text.splitlines()[1:] if line.strip()]
    return len(lines) >= 3


def measure_figure_reference(
    problems: Sequence[str],
    answers: Sequence[str | None],
    *,
    masked: Sequence[str] | None = None,
) -> pl.DataFrame:
    """`figure_evidence`: the reference to a figure that the text does not contain.

    `inline_figure` records whether the text carries a figure (Asymptote code, a table or an
    array); a reference to a figure/diagram/picture is satisfied by one, a generic "shown
    below" also by display math or a written-out list.
    """
    evidence: list[str | None] = []
    inline: list[bool] = []
    masked = masked if masked is not None else [prose(text) for text in problems]
    for text, masked_text in zip(problems, masked, strict=True):
        has_figure = bool(_INLINE_FIGURE.search(text))
        inline.append(has_figure)
        if link := _IMAGE_LINK.search(text):
            evidence.append(f"image link: {link.group(0)[:60]}")
            continue
        found = None
        if not has_figure:
            for match in _FIGURE_PHRASE.finditer(masked_text):
                if not _NEGATED_FIGURE.match(masked_text[match.end() :]):
                    found = match.group(0)
                    break
        if found is None and not (has_figure or _INLINE_DISPLAY.search(text) or _has_listing(text)):
            match = _SHOWN_PHRASE.search(masked_text)
            found = match.group(0).rstrip(".: ") if match else None
        evidence.append(found)
    return pl.DataFrame(
        {
            "figure_reference": [e is not None for e in evidence],
            "figure_evidence": evidence,
            "inline_figure": inline,
        },
        schema={
            "figure_reference": pl.Boolean,
            "figure_evidence": pl.String,
            "inline_figure": pl.Boolean,
        },
    )


# -- rule: multiple questions --------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.?!])\s+|\n\s*\n")
_ASK_VERBS = r"(?:find|compute|determine|evaluate|calculate|simplify|solve|prove|show)"
# A sentence ending in '?' asks only if it has a question word or starts with an auxiliary
# ("A zoo has 21 penguins and twice as many bears?" is a statement with a typo).
_QUESTION_WORD = re.compile(
    r"\b(?:what|how|which|who|whom|whose|when|where|why)\b"
    r"|^\W*(?:is|are|does|do|did|can|could|will|would|should|was|were|has|have|must|may)\b",
    re.I,
)
_IMPERATIVE = re.compile(
    r"(?:^[\s(]*(?:(?:[a-h]|i{1,3}|iv|vi{0,3}|\d{1,2})[.)]\s*)?|,\s*)"
    r"(?:then\s+|and\s+|also\s+|hence\s+|now\s+)?" + _ASK_VERBS + r"\b",
    re.I,
)
_NOT_AN_ASK = re.compile(
    r"^\W*(?:express|enter|give\s+(?:your|the)\s+answer|write\s+(?:your|the)\s+answer|round"
    r"|your\s+answer|(?:the\s+)?answer|type|note|include|use|assume|recall|hint|remember"
    r"|(?:please\s+)?(?:solve|answer|read|consider)\s+the\s+(?:following|next|given)\s+"
    r"(?:math\s+|word\s+)?(?:problem|question|exercise)s?"
    r"|simplify\s+your|submit|put|state\s+your|list\s+(?:the|your|all\s+the)|that\s+is"
    r"|i\.\s*e\b|in\s+other\s+words"
    r"|show\s+(?:your|all)\s+(?:work|steps|reasoning)|explain\s+your"
    r"|equivalently)\b",
    re.I,
)
# Part labels: (a) (b), a) b), (i) (ii), 1. 2. / 1) 2) at line start.
_PART_LABEL = re.compile(
    r"(?:^|(?<=[\s\]>]))(?:\(([a-h])\)|([a-h])\)|\((i{1,3}|iv|vi{0,3})\)|(?<![^\n\]>])[ \t]*"
    r"(\d{1,2})[.)])(?=\s)",
    re.M,
)
_ANSWER_FORM = re.compile(
    r"\b(?:in|of)\s+the\s+form\b|\bcan\s+be\s+(?:written|expressed|simplified)\s+as\b"
    r"|\bis\s+of\s+the\s+form\b",
    re.I,
)
_ROMAN = ("i", "ii", "iii", "iv", "v", "vi", "vii", "viii")


def _asks(text: str) -> tuple[list[str], list[str]]:
    """Sentences that ask a question: (ending in '?', starting with an imperative).

    Once a sentence says the answer takes a form ("can be written in the form m/n"), the
    asks that follow ("What is m+n?") report that same answer and are not counted.
    """
    questions: list[str] = []
    imperatives: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        sentence = sentence.strip()
        if _ANSWER_FORM.search(sentence):
            break
        if not sentence or _NOT_AN_ASK.match(sentence):
            continue
        if sentence.endswith("?") and _QUESTION_WORD.search(sentence):
            questions.append(sentence)
        elif _IMPERATIVE.search(sentence):
            imperatives.append(sentence)
    return questions, imperatives


def _parts(text: str) -> list[str]:
    """Split at a run of consecutive part labels ((a),(b).. / (i),(ii).. / 1.,2. ..)."""
    runs: dict[str, list[tuple[int, int]]] = {"letter": [], "roman": [], "number": []}
    for match in _PART_LABEL.finditer(text):
        letter = match.group(1) or match.group(2)
        if letter:
            runs["letter"].append((ord(letter) - ord("a"), match.start()))
        elif match.group(3):
            runs["roman"].append((_ROMAN.index(match.group(3)), match.start()))
        else:
            runs["number"].append((int(match.group(4)) - 1, match.start()))
    best: list[int] = []
    for found in runs.values():
        starts: list[int] = []
        for index, start in found:
            if index == len(starts):
                starts.append(start)
        if len(starts) >= 2 and len(starts) > len(best):
            best = starts
    if not best:
        return []
    bounds = [*best, len(text)]
    return [text[bounds[i] : bounds[i + 1]] for i in range(len(best))]


def measure_multi_question(
    problems: Sequence[str],
    answers: Sequence[str | None],
    *,
    masked: Sequence[str] | None = None,
) -> pl.DataFrame:
    """`question_count` (asks found) and `asking_parts` (labelled parts that each ask).

    Flags two or more labelled parts that ask, two or more questions ending in '?', or two
    or more imperative asks ("Find a. Find b."); one imperative plus one question is the
    "find it in this form, then report a+b" idiom and stays.
    """
    counts: list[int] = []
    parts_asking: list[int] = []
    flags: list[bool] = []
    masked = masked if masked is not None else [prose(text) for text in problems]
    for text in masked:
        questions, imperatives = _asks(text)
        asking = sum(1 for part in _parts(text) if any(_asks(part)))
        counts.append(len(questions) + len(imperatives))
        parts_asking.append(asking)
        flags.append(asking >= 2 or len(questions) >= 2 or len(imperatives) >= 2)
    return pl.DataFrame(
        {"multi_question": flags, "question_count": counts, "asking_parts": parts_asking},
        schema={
            "multi_question": pl.Boolean,
            "question_count": pl.Int32,
            "asking_parts": pl.Int32,
        },
    )


# -- rule: non-English -------------------------------------------------------------------


# Function words of French, Spanish, Portuguese, Italian, German, Dutch, Indonesian and
# Vietnamese that are not English words: their count against English function words
# separates Latin-script languages, which the letter ratio alone does not.
def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


_FOREIGN_WORDS = _word_set(
    "le les des du une est et que qui pour dans sur avec sont cette soit ou trouver montrer "
    "el los las del una es y que por para con sus se como cual cuantos sea hallar "
    "os um uma não são com seja qual quantos "
    "il lo gli della di che per sono dei trovare sia "
    "der die das und ist ein eine den dem mit von zu für sei man zeige bestimme wie viele "
    "het een en van zijn voor dat met "
    "dan yang adalah dari untuk dengan tentukan jika "
    "cho và của là các một có tìm số với"
) - {"die", "a", "an", "in", "on", "son", "come", "per", "me", "no", "is", "den", "man"}
_ENGLISH_WORDS = _word_set(
    "the of and is are a an to in that what how many find let be for with if then which "
    "number value sum each this from by at has have as it its there where when than all "
    "integer integers positive real such given"
)
_WORD = re.compile(r"[^\W\d_]+")


def measure_non_english(
    problems: Sequence[str],
    answers: Sequence[str | None],
    *,
    min_ascii_letter_ratio: float = 0.9,
    min_foreign_words: int = 3,
    masked: Sequence[str] | None = None,
) -> pl.DataFrame:
    """`ascii_letter_ratio` and `foreign_word_share` of the prose outside LaTeX.

    A row is non-English when fewer than `min_ascii_letter_ratio` of its letters are ASCII
    (another script or heavy diacritics), or when it has at least `min_foreign_words`
    non-English function words and they outnumber the English ones (French, Spanish, ...).
    """
    ratios: list[float] = []
    shares: list[float] = []
    flags: list[bool] = []
    masked = masked if masked is not None else [prose(text) for text in problems]
    for text in masked:
        if text.isascii():  # most rows: every letter is ASCII
            ratio = 1.0
        else:
            text = unicodedata.normalize("NFC", text)
            letters = [c for c in text if c.isalpha()]
            ascii_letters = sum(1 for c in letters if c.isascii())
            ratio = ascii_letters / len(letters) if letters else 1.0
        words = _WORD.findall(text.lower())
        foreign = sum(1 for w in words if w in _FOREIGN_WORDS)
        english = sum(1 for w in words if w in _ENGLISH_WORDS)
        share = foreign / (foreign + english) if foreign + english else 0.0
        ratios.append(round(ratio, 4))
        shares.append(round(share, 4))
        flags.append(
            ratio < min_ascii_letter_ratio or (foreign >= min_foreign_words and share > 0.5)
        )
    return pl.DataFrame(
        {"non_english": flags, "ascii_letter_ratio": ratios, "foreign_word_share": shares},
        schema={
            "non_english": pl.Boolean,
            "ascii_letter_ratio": pl.Float64,
            "foreign_word_share": pl.Float64,
        },
    )


# -- rules: reference answer ---------------------------------------------------------------


def _blank(answer: str | None) -> bool:
    return answer is None or not answer.strip()


def measure_missing_answer(problems: Sequence[str], answers: Sequence[str | None]) -> pl.DataFrame:
    """Flag rows whose reference answer is null or blank: RL has nothing to reward against."""
    return pl.DataFrame(
        {"missing_answer": [_blank(a) for a in answers]}, schema={"missing_answer": pl.Boolean}
    )


# Numbers, simple fractions, roots and multiples of pi: forms math-verify always parses
# (tests check this on every such answer of MATH train), so they skip the sympy parse,
# which costs 5-25 ms per distinct answer.
_SIMPLE_ANSWER = re.compile(
    r"^\s*-?(?:\d+(?:\.\d+)?|\\[dt]?frac\{-?\d+\}\{\d+\}|\d*\\sqrt\{\d+\}|\d*\\pi)\s*$"
)
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")


def answer_parse_error(answer: str, timeout_s: int = 5) -> str | None:
    """None if math-verify parses `answer` into an expression, else why it did not.

    The answer is tried as `\\boxed{answer}` (how a policy states its final answer) and, if
    that fails, as `$answer$`; text already carrying `$` or `\\boxed` is parsed as is.
    """
    if _SIMPLE_ANSWER.match(answer):
        return None
    from math_verify import parse

    if _UNESCAPED_DOLLAR.search(answer) or "\\boxed" in answer:
        forms = [answer]
    else:
        forms = [f"\\boxed{{{answer}}}", f"${answer}$"]
    error = "no expression"
    for text in forms:
        try:
            parsed = parse(text, parsing_timeout=timeout_s, raise_on_error=True)
        except Exception as exc:  # math-verify raises many kinds; all mean "unusable"
            error = f"{type(exc).__name__}: {str(exc)[:80]}"
            continue
        if any(not isinstance(item, str) for item in parsed):
            return None
    return error


def measure_unparseable_answer(
    problems: Sequence[str],
    answers: Sequence[str | None],
    *,
    timeout_s: int = 5,
    workers: int = 1,
) -> pl.DataFrame:
    """`answer_parse_error`: why math-verify could not parse a non-blank reference answer.

    Blank answers are left to `missing_answer`. Each distinct answer is parsed once; with
    `workers > 1` the distinct answers are parsed by a process pool (math-verify's timeout
    uses signals, so threads would not do).
    """
    distinct = sorted({a for a in answers if not _blank(a)})  # type: ignore[misc]
    if workers > 1 and len(distinct) > 64:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        from functools import partial

        context = multiprocessing.get_context("spawn")  # no fork of Polars' thread pool
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            results = list(
                pool.map(
                    partial(answer_parse_error, timeout_s=timeout_s),
                    distinct,
                    chunksize=max(1, len(distinct) // (workers * 8)),
                )
            )
    else:
        results = [answer_parse_error(a, timeout_s) for a in distinct]
    cache = dict(zip(distinct, results, strict=True))
    errors = [None if _blank(a) else cache[a] for a in answers]  # type: ignore[index]
    return pl.DataFrame(
        {"unparseable_answer": [e is not None for e in errors], "answer_parse_error": errors},
        schema={"unparseable_answer": pl.Boolean, "answer_parse_error": pl.String},
    )


# -- registry and runner ---------------------------------------------------------------


@dataclass(frozen=True)
class FilterRule:
    """A named rule: `measure(problems, answers, **params)` returns a frame whose column
    `name` is the flag and whose other columns are the measurement; `evidence` names the
    column that says why a row was flagged (recorded as the drop's detail)."""

    name: str
    description: str
    measure: Callable[..., pl.DataFrame]
    evidence: str | None
    reads_prose: bool = False  # measure takes `masked=` (prose() of each problem)


RULES: dict[str, FilterRule] = {
    rule.name: rule
    for rule in (
        FilterRule(
            "missing_answer",
            "The reference answer is null or blank.",
            measure_missing_answer,
            None,
        ),
        FilterRule(
            "unparseable_answer",
            "math-verify cannot parse the reference answer into an expression.",
            measure_unparseable_answer,
            "answer_parse_error",
        ),
        FilterRule(
            "non_english",
            "The prose outside LaTeX is in another script or another language.",
            measure_non_english,
            "ascii_letter_ratio",
            reads_prose=True,
        ),
        FilterRule(
            "multiple_choice",
            "Lettered options (A)(B)(C)..., 'which of the following', true/false.",
            measure_multiple_choice,
            "mcq_evidence",
        ),
        FilterRule(
            "proof",
            "The problem asks for a proof (prove, show that, ...).",
            measure_proof,
            "proof_evidence",
            reads_prose=True,
        ),
        FilterRule(
            "figure_reference",
            "The problem refers to a figure or image that is not in the text.",
            measure_figure_reference,
            "figure_evidence",
            reads_prose=True,
        ),
        FilterRule(
            "multi_question",
            "The problem asks two or more separate questions.",
            measure_multi_question,
            "question_count",
            reads_prose=True,
        ),
    )
}
DEFAULT_RULES: tuple[str, ...] = tuple(RULES)


def _rule(name: str) -> FilterRule:
    try:
        return RULES[name]
    except KeyError:
        raise ValueError(f"unknown filter rule {name!r}; known rules: {sorted(RULES)}") from None


def _inputs(df: pl.DataFrame) -> tuple[list[str], list[str | None]]:
    for column in ("problem", "answer"):
        if column not in df.columns:
            raise ValueError(f"rule filters need a {column!r} column; the frame has {df.columns}")
    nulls = df.get_column("problem").is_null()
    if nulls.any():
        row = int(nulls.arg_max())
        raise ValueError(
            f"rule filters: row {row} (id {df['id'][row] if 'id' in df.columns else '?'}) has a null problem"
        )
    return df.get_column("problem").to_list(), df.get_column("answer").cast(pl.String).to_list()


def measure_rules(
    df: pl.DataFrame,
    rules: Sequence[str] = DEFAULT_RULES,
    params: Mapping[str, Mapping[str, Any]] | None = None,
) -> pl.DataFrame:
    """`df` plus, for each rule, its boolean flag column (named after the rule) and its
    measurement columns. Use it to review flags or tune thresholds without filtering."""
    params = params or {}
    unknown = set(params) - set(rules)
    if unknown:
        raise ValueError(f"params given for rules not applied: {sorted(unknown)}")
    problems, answers = _inputs(df)
    chosen = [_rule(name) for name in rules]
    masked = [prose(text) for text in problems] if any(r.reads_prose for r in chosen) else None
    measured = [
        rule.measure(
            problems,
            answers,
            **({"masked": masked} if rule.reads_prose else {}),
            **params.get(rule.name, {}),
        )
        for rule in chosen
    ]
    return pl.concat([df, *measured], how="horizontal") if measured else df


def filter_math_rl_prompts(
    df: pl.DataFrame,
    rules: Sequence[str] = DEFAULT_RULES,
    params: Mapping[str, Mapping[str, Any]] | None = None,
) -> StepResult:
    """Apply `rules` in order; drop each flagged row once.

    `dropped` carries `reason` (the first flagging rule), `flagged_by` (every flagging rule)
    and `evidence` (the first rule's measurement as text). `stats` holds rows in/out,
    `flags` (rows each rule flagged, overlaps included) and `drops` (rows dropped by reason).
    """
    rules = list(dict.fromkeys(rules))
    measured = measure_rules(df, rules, params)
    flag_matrix = measured.select(rules) if rules else pl.DataFrame()
    reason = pl.lit(None, dtype=pl.String)
    evidence = pl.lit(None, dtype=pl.String)
    for name in reversed(rules):
        column = RULES[name].evidence
        reason = pl.when(pl.col(name)).then(pl.lit(name)).otherwise(reason)
        shown = pl.col(column).cast(pl.String) if column else pl.lit(name)
        evidence = pl.when(pl.col(name)).then(shown).otherwise(evidence)
    flagged_by = (
        pl.concat_list(
            [pl.when(pl.col(n)).then(pl.lit(n)).otherwise(None) for n in rules]
        ).list.drop_nulls()
        if rules
        else pl.lit([], dtype=pl.List(pl.String))
    )
    decided = measured.with_columns(
        reason.alias("reason"), evidence.alias("evidence"), flagged_by.alias("flagged_by")
    )
    drops = decided.get_column("reason").drop_nulls().value_counts()
    stats: dict[str, object] = {
        "rules": rules,
        "flags": {name: int(flag_matrix.get_column(name).sum()) for name in rules},
        "drops": {name: int(n) for name, n in drops.iter_rows()},
    }
    return decide(
        decided.select([*df.columns, "reason", "flagged_by", "evidence"]),
        "reason",
        drop_only=("flagged_by", "evidence"),
        stats=stats,
        counts=("rows_in", "rows_out"),
    )


def apply_rule(df: pl.DataFrame, name: str, **params: Any) -> StepResult:
    """Apply one named rule: what it keeps and what it drops (reason = the rule name)."""
    return filter_math_rl_prompts(df, [name], {name: params} if params else None)


def multiple_choice(df: pl.DataFrame) -> StepResult:
    """Drop multiple-choice and true/false problems (rule `multiple_choice`)."""
    return apply_rule(df, "multiple_choice")


def proof(df: pl.DataFrame) -> StepResult:
    """Drop problems that ask for a proof (rule `proof`)."""
    return apply_rule(df, "proof")


def multi_question(df: pl.DataFrame) -> StepResult:
    """Drop problems that ask several questions (rule `multi_question`)."""
    return apply_rule(df, "multi_question")


def non_english(df: pl.DataFrame, **params: Any) -> StepResult:
    """Drop problems whose prose is not English (rule `non_english`)."""
    return apply_rule(df, "non_english", **params)


def figure_reference(df: pl.DataFrame) -> StepResult:
    """Drop problems that refer to a figure the text does not contain (rule `figure_reference`)."""
    return apply_rule(df, "figure_reference")


def missing_answer(df: pl.DataFrame) -> StepResult:
    """Drop problems without a reference answer (rule `missing_answer`)."""
    return apply_rule(df, "missing_answer")


def unparseable_answer(df: pl.DataFrame, **params: Any) -> StepResult:
    """Drop problems whose reference answer math-verify cannot parse (rule `unparseable_answer`)."""
    return apply_rule(df, "unparseable_answer", **params)
