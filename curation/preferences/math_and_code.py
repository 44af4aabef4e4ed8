"""Which prompts are math or competitive programming: the RLHF prompt set leaves them out.

The Cascade recipe's RLHF stage trains on a subset of the reward model's preference prompts
with math and competitive-programming prompts excluded (leaving math in cost about 2 points
on AIME25). A prompt is excluded by its source's own category when it has one that names
math or code (HelpSteer3's `domain` is general, stem, code or multilingual), and otherwise by
content rules read on the user's turns:

- math: LaTeX math (`$...$` holding a command or operator, `\\(...\\)`, `\\[...\\]`),
  LaTeX math commands (`\\frac`, `\\int`, `\\sqrt`, ...), "compute / find / evaluate the value,
  sum, integral ... of" followed by a formula or a variable, bare arithmetic ("calculate
  15% of 80", "what is 17 * 23"), "solve for x" / "solve the equation", "the probability
  that / of drawing ...", "how many positive integers / solutions / roots", powers (`x^2`)
  and linear equations (`3x + 5 = 20`);
- code: fenced code blocks, input/output format sections ("Input format", "Sample input",
  "the first line contains", stdin), online-judge phrasing (Codeforces, LeetCode, AtCoder,
  "time limit per test", constraints such as `1 <= n <= 10^5`).

Measure first, decide second: every row gets `math_evidence` and `code_evidence` (JSON lists
of {rule, match}: the rule's name and the text it matched), so the rules can be audited and
re-decided with SQL; a dropped row's detail carries them and `excluded_by` (category or
content).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import polars as pl

from curation.preferences.contexts import ContextError, context_messages, user_text
from lake.operators import decide
from lake.steps import StepResult

_I = re.IGNORECASE
_VARIABLE = r"(?:\$|\\|-?\d|(?!a\b)[a-z]\b|the\s+(?:expression|function|series|integral|sequence|polynomial|equation|sum|product))"  # noqa: E501
_LE = r"(?:<=|≤|\\leq?|<)"
MATH_RULES: dict[str, re.Pattern[str]] = {
    "latex_math": re.compile(
        r"\$\$.+?\$\$|\$[^$\n]*(?:\\[a-zA-Z]+|[\^_=]|\d\s*[+\-*/]\s*\d)[^$\n]*\$|\\\(.+?\\\)|\\\[.+?\\\]",
        re.DOTALL,
    ),
    "latex_command": re.compile(
        r"\\(?:d?frac|sqrt|int|iint|oint|sum|prod|lim|binom|cdot|leq|geq|neq|infty|mathbb|"
        r"mathrm|boxed|begin\{(?:align|equation|cases|[pbv]?matrix)\*?\})(?![a-zA-Z])"
    ),
    "compute_value": re.compile(
        r"\b(?:compute|calculate|evaluate|find|determine|what\s+is)\s+(?:the\s+)?"
        r"(?:exact\s+|numerical\s+|minimum\s+|maximum\s+|smallest\s+|largest\s+|total\s+)?"
        r"(?:value|sum|product|remainder|integral|derivative|limit|area|volume|probability)"
        rf"\s+of\s+{_VARIABLE}",
        _I,
    ),
    "arithmetic": re.compile(
        r"\b(?:compute|calculate|evaluate|simplify)\s*:?\s*(?:\$|\\|-?\d[\d.,%]*|\()"
        r"|\bwhat\s+is\s+-?\d+(?:\.\d+)?\s*(?:[+\-*/×÷^]|times|plus|minus|divided\s+by)\s*-?\d+",
        _I,
    ),
    "solve_equation": re.compile(
        r"\bsolve\s+(?:for\s+[a-z]\b|the\s+(?:following\s+)?(?:equation|system|inequality)"
        r"|[^.?!\n]{0,40}=)",
        _I,
    ),
    "probability": re.compile(
        r"\bprobability\s+(?:that\b|of\s+(?:rolling|drawing|getting|selecting|choosing|"
        r"picking|flipping|obtaining)\b)",
        _I,
    ),
    "how_many_numbers": re.compile(
        r"\bhow\s+many\s+(?:(?:positive|negative|distinct|real|ordered|prime|even|odd)\s+)*"
        r"(?:integers|solutions|roots|digits|divisors|primes|pairs\s+of\s+integers)\b",
        _I,
    ),
    "power_or_equation": re.compile(
        r"\b[a-z]\s*\^\s*\{?-?\d|\b\d+\s*[a-z]\s*[+\-]\s*\d+\s*=\s*-?\d+", _I
    ),
}
CODE_RULES: dict[str, re.Pattern[str]] = {
    "code_block": re.compile(r"```"),
    "io_format": re.compile(
        r"\b(?:input|output)\s+(?:format|specification)\b|\bsample\s+(?:input|output)\b"
        r"|\bstandard\s+(?:input|output)\b|\bstd(?:in|out)\b"
        r"|\bthe\s+(?:first|second|next|following)\s+line\s+(?:of\s+(?:the\s+)?input\s+)?"
        r"contains?\b|\beach\s+test\s+case\b",
        _I,
    ),
    "online_judge": re.compile(
        r"\b(?:codeforces|leetcode|atcoder|hackerrank|codechef|spoj|topcoder|kattis|"
        r"hackerearth)\b|\b(?:time|memory)\s+limit(?:\s+per\s+test)?\s*[:\d]"
        rf"|\b[01]\s*{_LE}\s*[a-z_]\w*(?:\s*,\s*[a-z_]\w*)*\s*{_LE}\s*\d",
        _I,
    ),
}
MATH_CATEGORIES = ("math", "mathematics")
CODE_CATEGORIES = ("code", "coding", "competitive_programming", "programming")


def topic_evidence(text: str, rules: dict[str, re.Pattern[str]]) -> list[dict[str, str]]:
    """Each rule that matches `text`, with the first text it matched (at most 80 chars).

    >>> topic_evidence("Find the value of $x$ if $2x+3=7$.", MATH_RULES)[0]
    {'rule': 'latex_math', 'match': '$2x+3=7$'}
    >>> topic_evidence("Write a poem about the value of friendship.", MATH_RULES)
    []
    """
    found = []
    for name, pattern in rules.items():
        match = pattern.search(text)
        if match:
            found.append({"rule": name, "match": match.group(0)[:80]})
    return found


def exclude_math_and_code(
    df: pl.DataFrame,
    *,
    prompt_column: str = "problem",
    messages_column: str = "messages",
    category_column: str = "category",
    math_categories: Sequence[str] = MATH_CATEGORIES,
    code_categories: Sequence[str] = CODE_CATEGORIES,
    math_rules: Sequence[str] | None = None,
    code_rules: Sequence[str] | None = None,
) -> StepResult:
    """Drop math prompts (`math_prompt`) and code prompts (`code_prompt`).

    Reads the user's turns of `messages_column` (JSON turns) when the frame has it, else
    `prompt_column`. A category in `math_categories` / `code_categories` (case-insensitive)
    decides alone; any other category, or none, leaves it to the content rules
    (`math_rules` / `code_rules`: names of rules to use, default all). A row with both kinds
    of evidence is a `math_prompt`. Every row gets `math_evidence` / `code_evidence`.
    """
    math = _chosen(MATH_RULES, math_rules)
    code = _chosen(CODE_RULES, code_rules)
    math_names = {c.lower() for c in math_categories}
    code_names = {c.lower() for c in code_categories}
    categories = (
        df.get_column(category_column).to_list()
        if category_column in df.columns
        else [None] * df.height
    )
    texts = _user_texts(df, prompt_column, messages_column)
    math_found, code_found, reasons, by = [], [], [], []
    for text, category in zip(texts, categories, strict=True):
        m, c = topic_evidence(text, math), topic_evidence(text, code)
        math_found.append(json.dumps(m, ensure_ascii=False))
        code_found.append(json.dumps(c, ensure_ascii=False))
        label = (category or "").strip().lower()
        if label in math_names:
            reasons.append("math_prompt")
            by.append("category")
        elif label in code_names:
            reasons.append("code_prompt")
            by.append("category")
        elif m or c:
            reasons.append("math_prompt" if m else "code_prompt")
            by.append("content")
        else:
            reasons.append(None)
            by.append(None)
    measured = df.with_columns(
        pl.Series("math_evidence", math_found, dtype=pl.String),
        pl.Series("code_evidence", code_found, dtype=pl.String),
        pl.Series("reason", reasons, dtype=pl.String),
        pl.Series("excluded_by", by, dtype=pl.String),
    )
    stats = {
        "rows_in": df.height,
        "math_prompt": reasons.count("math_prompt"),
        "code_prompt": reasons.count("code_prompt"),
        "by_category": by.count("category"),
        "by_content": by.count("content"),
    }
    return decide(measured, "reason", drop_only=("excluded_by",), stats=stats, counts=())


def _chosen(
    rules: dict[str, re.Pattern[str]], names: Sequence[str] | None
) -> dict[str, re.Pattern[str]]:
    if names is None:
        return rules
    unknown = sorted(set(names) - set(rules))
    if unknown:
        raise ValueError(f"unknown rules {unknown}; known: {sorted(rules)}")
    return {n: rules[n] for n in names}


def _user_texts(df: pl.DataFrame, prompt_column: str, messages_column: str) -> list[str]:
    if messages_column not in df.columns:
        if prompt_column not in df.columns:
            raise ValueError(f"no {messages_column!r} or {prompt_column!r} column to classify")
        return [t or "" for t in df.get_column(prompt_column).to_list()]
    texts = []
    for n, raw in enumerate(df.get_column(messages_column).to_list()):
        try:
            texts.append(user_text(context_messages(raw)))
        except ContextError as exc:
            raise ValueError(f"row {n}: {messages_column} is not chat turns ({exc})") from None
    return texts
