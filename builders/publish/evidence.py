"""Why a row was dropped, shown the way a person checks it.

A drop's JSON detail says what a step measured; this module turns it into evidence a reader
can verify at a glance: the n-grams a row shares with the benchmark item it matched,
highlighted in both texts; a duplicate next to the row it duplicates, with the words that
differ marked; a failed verification with the extracted answer next to the reference.
Texts become lists of `Segment`s (plain or marked) that a template renders with escaping.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from curation.code.benchmark_tests import load_code_benchmark, tests_benchmark
from curation.code.problem_ids import load_url_list
from curation.decontaminate.benchmarks import Benchmark, load_jsonl_benchmark, resolve_name
from curation.decontaminate.tokens import tokenize
from schemas.dataset_manifest import BenchmarkUsed

TEXT_COLUMNS = ("problem", "prompt", "question", "response", "final_answer", "text", "messages")
ANSWER_COLUMNS = ("answer", "reference", "expected_answer", "solution")
RESPONSE_COLUMNS = ("response", "final_answer", "completion")
MAX_TEXT = 4000  # characters of a row shown in evidence; longer texts are cut with a note

_REFERENCE_IN_VERDICT = re.compile(r"!= reference (.+)$")


@dataclass(frozen=True)
class Segment:
    """A piece of text; `mark` is None (plain), `shared` (an n-gram both texts hold), `ngram`
    (the n-gram the step recorded), `removed` or `added` (words that differ from the twin)."""

    text: str
    mark: str | None = None


@dataclass
class Evidence:
    """What a dropped row is shown with; `kind` picks the template block that renders it."""

    kind: str  # contamination | duplicate | verification | detail
    facts: dict[str, Any] = field(default_factory=dict)
    row: list[Segment] = field(default_factory=list)
    other: list[Segment] = field(default_factory=list)  # benchmark item or the kept twin
    other_title: str = ""
    note: str = ""


@dataclass
class RowSample:
    """One row shown in the sample browser: its key, text, answer and other fields."""

    key: str
    text: str
    answer: str | None
    fields: dict[str, str]
    step: str | None = None
    reason: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    evidence: Evidence | None = None
    output: str | None = None  # the dataset version whose build dropped it


def text_of(row: dict[str, Any]) -> str:
    """The text a person reads a row by: its prompt, else its response, else any string."""
    for name in TEXT_COLUMNS:
        value = row.get(name)
        if isinstance(value, str) and value:
            return value
    strings = [v for v in row.values() if isinstance(v, str)]
    return max(strings, key=len) if strings else json.dumps(row, default=str)[:MAX_TEXT]


def answer_of(row: dict[str, Any]) -> str | None:
    for name in ANSWER_COLUMNS:
        value = row.get(name)
        if value is not None:
            return str(value)
    return None


def short_fields(row: dict[str, Any], skip: Sequence[str] = (), limit: int = 300) -> dict[str, str]:
    """Every other column as short text (for the collapsed field list of a sample)."""
    out = {}
    for name, value in row.items():
        if name in skip:
            continue
        text = "" if value is None else str(value)
        out[name] = text if len(text) <= limit else text[: limit - 3] + "..."
    return out


def parse_detail(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return {"detail": raw}
    return value if isinstance(value, dict) else {"detail": value}


# -- tokens with their places in the text ------------------------------------------------------


@dataclass(frozen=True)
class Token:
    """A decontamination token (lower-cased, normalized) and its character span in the text."""

    text: str
    start: int
    end: int


def _is_token_byte(b: int) -> bool:
    return 48 <= b <= 57 or 97 <= b <= 122 or b >= 128


def token_spans(text: str) -> list[Token]:
    """The decontamination tokenizer's tokens of `text`, each with its span in `text`.

    The tokenizer works on the lower-cased UTF-8 bytes and may glue digit groups (`24,000`);
    a token's span runs from its first byte until as many token bytes as it has were seen.
    Texts whose lower-casing changes their length (rare scripts) get no spans.
    """
    lowered = pl.Series([text], dtype=pl.String).str.to_lowercase()[0] or ""
    if len(lowered) != len(text):
        return []
    tokens = tokenize(pl.Series([text], dtype=pl.String))
    raw = lowered.encode("utf-8")
    char_of_byte = np.zeros(len(raw) + 1, dtype=np.int64)
    position = 0
    for index, char in enumerate(lowered):
        width = len(char.encode("utf-8"))
        char_of_byte[position : position + width] = index
        position += width
    char_of_byte[len(raw)] = len(lowered)
    strings = tokens.strings().to_list()
    spans = []
    for token, start, length in zip(strings, tokens.starts, tokens.lengths, strict=True):
        begin = int(start) - 1  # the tokenizer's buffer has one zero byte before the text
        at, seen = begin, 0
        while at < len(raw) and seen < int(length):
            seen += _is_token_byte(raw[at])
            at += 1
        spans.append(Token(token, int(char_of_byte[begin]), int(char_of_byte[at])))
    return spans


def _ngram_cover(tokens: Sequence[str], grams: set[tuple[str, ...]], n: int) -> np.ndarray:
    covered = np.zeros(len(tokens), dtype=bool)
    for i in range(len(tokens) - n + 1):
        if tuple(tokens[i : i + n]) in grams:
            covered[i : i + n] = True
    return covered


def _ngrams(tokens: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)}


def marked_segments(
    text: str, tokens: Sequence[Token], marks: Sequence[str | None]
) -> list[Segment]:
    """`text` cut into plain and marked segments; neighbouring marked tokens join into one
    segment with what lies between them (a colon between `11` and `40` stays highlighted)."""
    segments: list[Segment] = []
    at = 0
    i = 0
    while i < len(tokens):
        mark = marks[i]
        if mark is None:
            i += 1
            continue
        j = i
        while j + 1 < len(tokens) and marks[j + 1] == mark:
            j += 1
        if tokens[i].start > at:
            segments.append(Segment(text[at : tokens[i].start]))
        segments.append(Segment(text[tokens[i].start : tokens[j].end], mark))
        at = tokens[j].end
        i = j + 1
    if at < len(text):
        segments.append(Segment(text[at:]))
    return segments


def overlap_segments(
    row_text: str, item_text: str, ngram: str
) -> tuple[list[Segment], list[Segment], int]:
    """Both texts with the n-grams they share marked (`shared`), the recorded one as `ngram`.

    n is the recorded n-gram's length. Returns the two segment lists and how many of the
    row's tokens the shared n-grams cover.
    """
    wanted = tuple(ngram.split())
    n = max(len(wanted), 1)
    row_tokens, item_tokens = token_spans(row_text), token_spans(item_text)
    row_words = [t.text for t in row_tokens]
    item_words = [t.text for t in item_tokens]
    shared = _ngrams(row_words, n) & _ngrams(item_words, n)
    result = []
    for tokens, words in ((row_tokens, row_words), (item_tokens, item_words)):
        marks: list[str | None] = ["shared" if c else None for c in _ngram_cover(words, shared, n)]
        exact = _ngram_cover(words, {wanted}, n) if wanted else np.zeros(len(words), bool)
        marks = ["ngram" if e else m for m, e in zip(marks, exact, strict=True)]
        text = row_text if tokens is row_tokens else item_text
        result.append(marked_segments(text, tokens, marks))
    covered = int(_ngram_cover(row_words, shared | {wanted}, n).sum())
    return result[0], result[1], covered


# -- word differences between twins ------------------------------------------------------------


def diff_segments(left: str, right: str) -> tuple[list[Segment], list[Segment]]:
    """Word-level differences: words only in `left` marked `removed`, only in `right` `added`."""
    left_words = list(re.finditer(r"\S+", left))
    right_words = list(re.finditer(r"\S+", right))
    matcher = difflib.SequenceMatcher(
        None, [m.group() for m in left_words], [m.group() for m in right_words], autojunk=False
    )
    out_left: list[Segment] = []
    out_right: list[Segment] = []
    for op, a0, a1, b0, b1 in matcher.get_opcodes():
        if a1 > a0:
            out_left.extend(_span(left, left_words, a0, a1, None if op == "equal" else "removed"))
        if b1 > b0:
            out_right.extend(_span(right, right_words, b0, b1, None if op == "equal" else "added"))
    return _with_edges(left, left_words, out_left), _with_edges(right, right_words, out_right)


def _span(
    text: str, words: list[re.Match[str]], first: int, last: int, mark: str | None
) -> list[Segment]:
    """Words `first .. last - 1` with the space after them (left unmarked)."""
    end = words[last - 1].end()
    after = words[last].start() if last < len(words) else end
    segments = [Segment(text[words[first].start() : end], mark)]
    return [*segments, Segment(text[end:after])] if after > end else segments


def _with_edges(text: str, words: list[re.Match[str]], segments: list[Segment]) -> list[Segment]:
    if not words:
        return [Segment(text)] if text else []
    head = [Segment(text[: words[0].start()])] if words[0].start() else []
    tail = [Segment(text[words[-1].end() :])] if words[-1].end() < len(text) else []
    return head + segments + tail


# -- benchmarks named in a manifest -------------------------------------------------------------


def _reload(entry: BenchmarkUsed, path: Path) -> Benchmark:
    """A manifest's benchmark set read again the way the build read it."""
    if entry.kind == "tests":
        return tests_benchmark(load_code_benchmark(path), path)
    if entry.kind == "urls":
        return load_url_list(path)
    try:
        spec = resolve_name(entry.name)
    except ValueError:
        spec = None
    return load_jsonl_benchmark(path, spec)


@dataclass
class BenchmarkItems:
    """The benchmark items a report can show, from the files a manifest names."""

    loaded: dict[str, Benchmark] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)  # name -> why it is not shown

    @classmethod
    def from_manifest(cls, used: Sequence[BenchmarkUsed]) -> BenchmarkItems:
        items = cls()
        # A set's texts first: a code benchmark's tests under the same name only fill a gap.
        for entry in sorted(used, key=lambda e: e.kind != "texts"):
            if entry.kind == "repos" or (entry.kind != "texts" and entry.name in items.loaded):
                continue  # a repository drop names the repository itself
            path = Path(entry.origin)
            if "://" in entry.origin or not path.is_file():
                items.problems[entry.name] = f"{entry.origin} is not a local file here"
                continue
            try:
                bench = _reload(entry, path)
            except (OSError, ValueError) as exc:
                items.problems[entry.name] = f"{entry.origin} cannot be read ({exc})"
                continue
            if bench.content_hash != entry.content_hash:
                items.problems[entry.name] = (
                    f"{entry.origin} changed since the build (content_hash "
                    f"{bench.content_hash[:12]}, the manifest says {entry.content_hash[:12]})"
                )
            items.loaded[entry.name] = bench
        return items

    def text(self, benchmark: str, item_id: str) -> str | None:
        bench = self.loaded.get(benchmark)
        if bench is None:
            return None
        try:
            return bench.texts[bench.ids.index(str(item_id))]
        except ValueError:
            return None


# -- evidence per kind of drop ------------------------------------------------------------------


def evidence_for(
    row: dict[str, Any] | None,
    detail: dict[str, Any],
    reason: str,
    *,
    twin: dict[str, Any] | None = None,
    benchmarks: BenchmarkItems | None = None,
) -> Evidence:
    """The evidence of one dropped row, chosen by what its detail measured."""
    text = _cut(text_of(row)) if row else ""
    if "benchmark" in detail and ("ngram" in detail or "benchmark_id" in detail):
        return _contamination(text, detail, benchmarks or BenchmarkItems())
    if "duplicate_of" in detail:
        return _duplicate(text, detail, twin)
    if reason.startswith("verify") or {"passed", "score"} <= detail.keys():
        return _verification(row or {}, detail)
    facts = {k: _fact(v) for k, v in detail.items()}
    return Evidence("detail", facts=facts, row=[Segment(text)] if text else [])


def _contamination(text: str, detail: dict[str, Any], benchmarks: BenchmarkItems) -> Evidence:
    name, item_id = str(detail.get("benchmark")), str(detail.get("benchmark_id"))
    ngram = str(detail.get("ngram") or "")
    facts = {
        "benchmark": name,
        "item": item_id,
        "matched n-gram": ngram,
        **{
            k.removeprefix("decontam_").replace("_", " "): _fact(v)
            for k, v in detail.items()
            if k not in ("benchmark", "benchmark_id", "ngram")
        },
    }
    item = benchmarks.text(name, item_id)
    if item is None:
        note = benchmarks.problems.get(name) or f"item {item_id} is not in {name} as loaded"
        row, _, _ = overlap_segments(text, "", ngram)
        return Evidence("contamination", facts, row=row, note=f"benchmark item not shown: {note}")
    row, other, covered = overlap_segments(text, _cut(item), ngram)
    facts["row tokens in shared n-grams"] = str(covered)
    return Evidence(
        "contamination",
        facts,
        row=row,
        other=other,
        other_title=f"{name} item {item_id}",
        note=benchmarks.problems.get(name, ""),
    )


def _duplicate(text: str, detail: dict[str, Any], twin: dict[str, Any] | None) -> Evidence:
    facts = {k.replace("_", " "): _fact(v) for k, v in detail.items()}
    twin_of = str(detail["duplicate_of"])
    if twin is None:
        return Evidence(
            "duplicate",
            facts,
            row=[Segment(text)],
            note=f"the kept row {twin_of} is not in the version this build read",
        )
    left, right = diff_segments(text, _cut(text_of(twin)))
    return Evidence("duplicate", facts, row=left, other=right, other_title=f"kept: {twin_of}")


def _verification(row: dict[str, Any], detail: dict[str, Any]) -> Evidence:
    from curation.verify.math import extract_boxed

    response = next((row[c] for c in RESPONSE_COLUMNS if isinstance(row.get(c), str)), "")
    verdict = str(detail.get("detail", ""))
    reference = answer_of(row)
    if reference is None:
        found = _REFERENCE_IN_VERDICT.search(verdict)
        reference = found.group(1) if found else None
    extracted = extract_boxed(response) if response else None
    facts = {
        "extracted answer": "(none)" if extracted is None else extracted,
        "reference": "(none)" if reference is None else reference,
        "verdict": verdict,
        "score": _fact(detail.get("score")),
        "passed": _fact(detail.get("passed")),
    }
    prompt = next((row[c] for c in ("problem", "prompt", "question") if row.get(c)), None)
    return Evidence(
        "verification",
        facts,
        row=[Segment(_cut(response))],
        other=[Segment(_cut(str(prompt)))] if prompt else [],
        other_title="prompt",
    )


def _fact(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f" [... {len(text):,} characters]"
