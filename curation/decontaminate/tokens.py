"""Benchmark decontamination: drop training rows that share word n-grams with test items.

Texts are normalized (case, whitespace, punctuation, LaTeX spacing and formatting commands
such as `$ x $` vs `$x$`, `\\dfrac` vs `\\frac`, `\\left(`) into word tokens, and every run of
`n` tokens (default 9, as in the Nemotron-Cascade recipe) is hashed to 64 bits. Rows are
scanned in bulk: Polars lower-cases a batch of texts into one UTF-8 buffer, NumPy skips
figure code, LaTeX layout commands and thousands separators on the bytes, finds the tokens
and packs each into a uint64 (no per-token strings), window hashes are rolled over those,
membership is a bitmap probe plus a sorted search against the benchmark n-gram hashes, and
every candidate hit is verified token by token on the bytes, so a hash collision can never
drop a row. bench/decontam.py measures this against an open-r1-style set scan.

Measurement and decision are separate (Data-Juicer style). Every row gets, for the benchmark
item it overlaps most: `decontam_hits` (distinct shared n-grams), `decontam_informative_hits`
(shared n-grams that are not stock phrases), `decontam_coverage` (fraction of the item's
n-grams found in the row), plus `benchmark`, `benchmark_id`, `ngram`. Two rules decide:

- `literal`: the paper's rule; any shared n-gram drops the row.
- `boilerplate-aware` (default): ignore stock n-grams (frequent across the input rows, the
  benchmarks, or a reference corpus of problems, see `build_stock_ngrams`), then drop a row
  when its informative hits against one item reach `min_hits`, or the item coverage reaches
  `min_coverage`. A verbatim,
  re-spaced, prefixed, embedded or half-quoted copy shares many item-specific n-grams and
  is still caught; a clean problem that only shares "where m and n are relatively prime
  positive integers find m n" with an AIME item is not.

Benchmark items shorter than `n` tokens are matched as whole normalized strings contained in
the row text (at token boundaries).
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import cache, partial

import numpy as np
import polars as pl
import pyarrow as pa

from curation.benchmarks import Benchmark
from curation.sorted_sets import sorted_isin, sorted_unique
from lake.steps import StepResult

RULES = ("literal", "boilerplate-aware")
DEFAULT_N = 9

# LaTeX layout and font commands carry no words: `\left(` reads as `(`, `\text{cm}` as `cm`.
# A command is a backslash and a whole token (`\textbf`, not `\text` + `bf`); it is dropped.
LAYOUT_COMMANDS = (
    *("left", "right", "big", "bigl", "bigr", "bigg", "biggl", "biggr", "quad", "qquad"),
    *("displaystyle", "textstyle", "mathrm", "mathbf", "mathit", "textbf", "textit", "text"),
    *("mbox", "operatorname"),
)
# Display variants fold into the plain command: `\dfrac` and `\tfrac` read as `\frac`.
FOLDED_COMMANDS = ("dfrac", "tfrac", "dbinom", "tbinom")

_PACK_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [2**64 - 1], dtype=np.uint64)
_MIX_A = np.uint64(0x9E3779B97F4A7C15)
_MIX_B = np.uint64(0xBF58476D1CE4E5B9)
_ROLL_BASE = np.uint64(0xD6E8FEB86659FD93)  # odd, so the rolling hash mixes every token
_SHIFT = np.uint64(31)
_MAX_BITMAP_BITS = 24
_BACKSLASH, _COMMA, _BANG, _BRACKET = 92, 44, 33, 91
_ASY_OPEN, _ASY_CLOSE = b"[asy]", b"[/asy]"


@cache
def _is_letter_or_digit(code: int) -> bool:
    """Whether a code point below 0x30000 is a letter or digit (Unicode L* or N*)."""
    return code < 0x30000 and unicodedata.category(chr(code))[0] in "LN"


def _mark_non_ascii_separators(data: np.ndarray, is_token: np.ndarray) -> None:
    """Clear `is_token` on the bytes of non-ASCII characters that are not letters or digits.

    Decodes only the (few) multi-byte UTF-8 sequences; the same as replacing
    `[^\\p{L}\\p{N}\\x00-\\x7F]` with a space, without a regex pass over every byte.
    """
    leads = np.flatnonzero(data >= 0xC0)
    if leads.size == 0:
        return
    b = [data[leads].astype(np.int64)] + [
        data[leads + k].astype(np.int64) & 0x3F for k in (1, 2, 3)
    ]
    width = np.where(b[0] >= 0xF0, 4, np.where(b[0] >= 0xE0, 3, 2))
    code = np.where(
        width == 2,
        ((b[0] & 0x1F) << 6) | b[1],
        np.where(
            width == 3,
            ((b[0] & 0x0F) << 12) | (b[1] << 6) | b[2],
            ((b[0] & 0x07) << 18) | (b[1] << 12) | (b[2] << 6) | b[3],
        ),
    )
    distinct, which = np.unique(code, return_inverse=True)  # a few hundred in 1M rows
    letter_or_digit = np.array([_is_letter_or_digit(int(c)) for c in distinct], dtype=np.bool_)
    separator = ~letter_or_digit[which]
    for k in range(4):
        is_token[leads[separator & (width > k)] + k] = False


def _mark_figures(
    data: np.ndarray, is_token: np.ndarray, brackets: np.ndarray, byte_offsets: np.ndarray
) -> None:
    """Clear `is_token` over Asymptote figure code, `[asy]` to the next `[/asy]` of the text.

    Drawing commands such as `label("A", A, N)` are boilerplate, not problem text.
    `brackets`: the offsets of every `[`.
    """

    def starting(pattern: bytes) -> np.ndarray:
        found = brackets
        for k, byte in enumerate(pattern[1:], start=1):
            found = found[data[found + k] == byte]
        return found

    opens = starting(_ASY_OPEN)
    if opens.size == 0:
        return
    closes = starting(_ASY_CLOSE)
    text_end = byte_offsets[np.searchsorted(byte_offsets, opens, side="right")]
    next_close = np.searchsorted(closes, opens)
    covered = -1
    for start, k, limit in zip(opens.tolist(), next_close.tolist(), text_end.tolist(), strict=True):
        if start < covered or k == closes.size:
            continue  # inside a figure already skipped, or never closed
        end = int(closes[k]) + len(_ASY_CLOSE)
        if end <= limit:  # closed in the same text
            is_token[start:end] = False
            covered = end


def _packed_names(names: Sequence[str]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per name length: the first 8 bytes of each name and the rest, as little-endian ints."""
    by_length: dict[int, list[tuple[int, int]]] = {}
    for name in names:
        raw = name.encode()
        head = int.from_bytes(raw[:8], "little")
        by_length.setdefault(len(raw), []).append((head, int.from_bytes(raw[8:], "little")))
    return {
        length: (
            np.array([h for h, _ in pairs], np.uint64),
            np.array([r for _, r in pairs], np.uint64),
        )
        for length, pairs in sorted(by_length.items())
    }


_LAYOUT_NAMES = _packed_names(LAYOUT_COMMANDS)
_FOLDED_NAMES = _packed_names(FOLDED_COMMANDS)


def _mark_commands(data: np.ndarray, is_token: np.ndarray, backslashes: np.ndarray) -> None:
    """Clear `is_token` over LaTeX layout command names (LAYOUT_COMMANDS) and over the `d` or
    `t` of display variants (FOLDED_COMMANDS), so `\\dfrac` tokenizes as `frac`.

    A command is a backslash, then one of the names as a whole token.
    """
    at = backslashes + 1
    at = at[is_token[at]]
    if at.size == 0:
        return
    words = np.ndarray(buffer=data, dtype="<u8", shape=(data.size - 8,), strides=(1,))
    head = words[at]
    for names, fold in ((_LAYOUT_NAMES, False), (_FOLDED_NAMES, True)):
        for length, (heads, rests) in names.items():
            if length < 8:
                hit = at[np.isin(head & _PACK_MASKS[length], heads) & ~is_token[at + length]]
            else:
                maybe = np.flatnonzero(np.isin(head, heads) & ~is_token[at + length])
                rest = words[at[maybe] + 8] & _PACK_MASKS[length - 8]
                same = np.zeros(maybe.size, dtype=np.bool_)
                for h, r in zip(heads, rests, strict=True):
                    same |= (head[maybe] == h) & (rest == r)
                hit = at[maybe[same]]
            for k in range(1 if fold else length):
                is_token[hit + k] = False


def _thousands_separators(data: np.ndarray, is_token: np.ndarray, commas: np.ndarray) -> np.ndarray:
    """The bytes of thousands separators among `commas`: `,` or `,\\!` between a digit and a
    group of exactly three digits, so that `24,000`, `24,\\!000` and `24000` read alike."""

    def digit(at: np.ndarray) -> np.ndarray:
        return (data[at] - np.uint8(48) <= 9) & is_token[at]

    commas = commas[digit(commas - 1)]
    bang = (data[commas + 1] == _BACKSLASH) & (data[commas + 2] == _BANG)
    first = commas + 1 + 2 * bang
    group = digit(first) & digit(first + 1) & digit(first + 2) & ~is_token[first + 3]
    banged = commas[group & bang]
    return np.concatenate([commas[group], banged + 1, banged + 2])


def _pack(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """A uint64 per token: its bytes (exact up to 8), further 8-byte chunks folded in, mixed."""
    words = np.ndarray(buffer=data, dtype="<u8", shape=(data.size - 8,), strides=(1,))
    values = words[starts] & np.take(_PACK_MASKS, np.minimum(lengths, 8))
    with np.errstate(over="ignore"):
        pending, chunk = np.flatnonzero(lengths > 8), 8
        while pending.size:  # fold the further 8-byte chunks of long tokens in
            rest = words[starts[pending] + chunk] & np.take(
                _PACK_MASKS, np.minimum(lengths[pending] - chunk, 8)
            )
            values[pending] = (values[pending] * _MIX_A) ^ rest
            chunk += 8
            pending = pending[lengths[pending] > chunk]
        values *= _MIX_A
        values ^= values >> _SHIFT
        values *= _MIX_B
    return values


def _close_gaps(
    data: np.ndarray,
    is_token: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    which: np.ndarray,
) -> None:
    """Make the tokens `which` contiguous: move their token bytes left over the non-token
    bytes inside them (thousands separators) and shorten `lengths` to match."""
    spans = _expand(starts[which], lengths[which])  # every byte of these tokens
    owner = np.repeat(np.arange(which.size), lengths[which])
    keep = is_token[spans]
    new_lengths = np.bincount(owner[keep], minlength=which.size).astype(np.int64)
    rank = np.arange(int(keep.sum())) - np.repeat(np.cumsum(new_lengths) - new_lengths, new_lengths)
    data[starts[which][owner[keep]] + rank] = data[spans[keep]]
    lengths[which] = new_lengths


@dataclass
class Tokens:
    """The word tokens of a batch of texts, located in one UTF-8 buffer.

    No per-token Python or Arrow strings are made: a token is a byte span of `data`.
    `values` (uint64) is exact for tokens of at most 8 bytes (their bytes packed, then a
    bijective mix) and a hash of all 8-byte chunks for longer ones (`long`); `offsets` are
    per-text token offsets (len + 1).
    """

    data: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    offsets: np.ndarray
    values: np.ndarray

    def equal(self, mine: np.ndarray, other: Tokens, theirs: np.ndarray) -> np.ndarray:
        """Exact byte equality of tokens `mine` here and `theirs` in `other` (vectorized)."""
        lengths = self.lengths[mine]
        same = (lengths == other.lengths[theirs]) & (self.values[mine] == other.values[theirs])
        pending, chunk = np.flatnonzero(same & (lengths > 8)), 0
        while pending.size:  # values of long tokens are hashes: compare every 8-byte chunk
            mask = np.take(_PACK_MASKS, np.minimum(lengths[pending] - chunk, 8))
            a = self.words[self.starts[mine[pending]] + chunk] & mask
            b = other.words[other.starts[theirs[pending]] + chunk] & mask
            same[pending[a != b]] = False
            chunk += 8
            pending = pending[(a == b) & (lengths[pending] > chunk)]
        return same

    @property
    def words(self) -> np.ndarray:
        """Little-endian 8-byte loads at every byte offset of `data` (a strided view)."""
        return np.ndarray(buffer=self.data, dtype="<u8", shape=(self.data.size - 8,), strides=(1,))

    def token(self, index: int) -> str:
        start = int(self.starts[index])
        return self.data[start : start + int(self.lengths[index])].tobytes().decode("utf-8")

    def window_text(self, first: int, length: int) -> str:
        """The space-joined tokens `first .. first + length - 1`."""
        return " ".join(self.token(t) for t in range(first, first + length))

    def strings(self) -> pl.Series:
        """Every token as a string, built in bulk from the byte spans."""
        token_offsets = np.zeros(self.lengths.size + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=token_offsets[1:])
        within = np.arange(int(token_offsets[-1]), dtype=np.int64) - np.repeat(
            token_offsets[:-1], self.lengths
        )
        buffer = self.data[np.repeat(self.starts, self.lengths) + within]
        array = pa.LargeStringArray.from_buffers(
            self.lengths.size, pa.py_buffer(token_offsets), pa.py_buffer(buffer)
        )
        return pl.Series("token", array, dtype=pl.String)


def tokenize(texts: pl.Series) -> Tokens:
    """Tokenize a batch of texts: Polars lower-cases them into one buffer, NumPy does the rest.

    Tokens are runs of Unicode letters and digits, so `$ x + y $` and `$x+y$` tokenize alike
    (operators are dropped; 9-word n-grams can afford it). On the way: `[asy]...[/asy]` figure
    code is skipped, thousands separators join their digits, LaTeX layout commands
    (LAYOUT_COMMANDS) are dropped and display variants fold (FOLDED_COMMANDS).
    """
    lowered = texts.fill_null("").str.to_lowercase()
    lengths = lowered.str.len_bytes().to_numpy().astype(np.int64) + 1  # one space after each
    byte_offsets = np.zeros(len(lowered) + 1, dtype=np.int64)
    np.cumsum(lengths, out=byte_offsets[1:])
    byte_offsets += 1  # the leading zero byte
    if len(lowered) == 0:
        return _tokenize_buffer(b"", byte_offsets=byte_offsets)
    joined = lowered.str.join(" ").to_arrow()
    if joined.type != pa.large_string():
        joined = joined.cast(pa.large_string())
    _, offsets, buffer = joined.buffers()
    begin = int(np.frombuffer(offsets, dtype=np.int64)[joined.offset])
    size = int(byte_offsets[-1] - 2)
    raw = np.frombuffer(buffer, dtype=np.uint8, count=size, offset=begin)
    return _tokenize_buffer(raw, byte_offsets=byte_offsets)


def _tokenize_buffer(raw: np.ndarray | bytes, byte_offsets: np.ndarray | None = None) -> Tokens:
    """Tokens of lower-cased texts stored back to back in `raw`, one separator byte after
    each (text k starts at `byte_offsets[k] - 1`)."""
    raw = np.frombuffer(raw, dtype=np.uint8) if isinstance(raw, bytes) else raw
    if byte_offsets is None:
        byte_offsets = np.array([1, raw.size + 2], dtype=np.int64)
    data = np.zeros(raw.size + 18, dtype=np.uint8)  # a zero byte before, zero padding after
    data[1 : raw.size + 1] = raw
    # token bytes: ASCII digits and lower-case letters, and the UTF-8 bytes of non-ASCII
    # letters and digits
    is_token = (data - np.uint8(48) <= 9) | (data - np.uint8(97) <= 25) | (data >= 128)
    _mark_non_ascii_separators(data, is_token)
    special = np.flatnonzero((data == _COMMA) | (data == _BACKSLASH) | (data == _BRACKET))
    kind = data[special]
    brackets = special[kind == _BRACKET]
    if brackets.size:
        _mark_figures(data, is_token, brackets, byte_offsets)
    _mark_commands(data, is_token, special[kind == _BACKSLASH])
    glue = _thousands_separators(data, is_token, special[kind == _COMMA])
    in_run = is_token.copy()
    in_run[glue] = True  # a separator joins the digit groups around it into one run
    # runs of token bytes: data starts and ends with non-token bytes, so edges alternate
    edges = np.flatnonzero(in_run[1:] != in_run[:-1])
    edges += 1
    starts = edges[0::2].copy()
    lengths = edges[1::2] - starts
    if glue.size:  # numbers with separators: move their digits together
        glued = sorted_unique(np.searchsorted(starts, glue, side="right") - 1)
        _close_gaps(data, is_token, starts, lengths, glued)
    offsets = np.searchsorted(starts, byte_offsets).astype(np.int64)
    return Tokens(data, starts, lengths, offsets, _pack(data, starts, lengths))


def normalize_text(text: str) -> str:
    """The normalized form of one text: its tokens joined by single spaces."""
    tokens = tokenize(pl.Series([text], dtype=pl.String))
    return tokens.window_text(0, int(tokens.values.size))


class HashSet:
    """A sorted uint64 set with a bitmap prefilter: bulk membership in ~1 gather per probe."""

    def __init__(self, values: np.ndarray) -> None:
        self.sorted = sorted_unique(values.astype(np.uint64))
        bits = int(min(_MAX_BITMAP_BITS, max(10, np.ceil(np.log2(self.sorted.size * 64 + 1)))))
        self.shift = np.uint64(64 - bits)
        self.bitmap = np.zeros(1 << bits, dtype=np.bool_)
        self.bitmap[(self.sorted >> self.shift).astype(np.int64)] = True

    def __len__(self) -> int:
        return int(self.sorted.size)

    def positions(self, values: np.ndarray) -> np.ndarray:
        """Indices of `values` that are in the set."""
        if self.sorted.size == 0:
            return np.empty(0, dtype=np.int64)
        if self.sorted.size <= 4:
            hit = values == self.sorted[0]
            for value in self.sorted[1:]:
                hit |= values == value
            return np.flatnonzero(hit)
        maybe = np.flatnonzero(np.take(self.bitmap, (values >> self.shift).view(np.int64)))
        if maybe.size == 0:
            return maybe
        found = values[maybe]
        pos = np.searchsorted(self.sorted, found)
        pos[pos == self.sorted.size] = 0
        return maybe[self.sorted[pos] == found]


def rolling_windows(
    tokens: Tokens, probes: dict[int, HashSet | None]
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Hash every window of each probed length and keep those that fall in its set.

    The window hash is a polynomial over token values (mod 2**64), built one token at a
    time, so windows of every length 1..max come out of the same pass. Returns, per length,
    `(first_token, window_hash)` of windows inside one text whose hash is in the set (all
    windows when the set is None). Candidates only: callers verify them exactly.
    """
    values, offsets = tokens.values, tokens.offsets
    total = values.shape[0]
    empty = (np.empty(0, np.int64), np.empty(0, np.uint64))
    if not probes or total == 0:
        return dict.fromkeys(probes, empty)
    acc = values.copy()
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    with np.errstate(over="ignore"):
        for length in range(1, max(probes) + 1):
            if length > 1:
                if acc.size <= 1:
                    out.update(dict.fromkeys([k for k in probes if k >= length], empty))
                    break
                acc = acc[:-1]
                acc *= _ROLL_BASE
                acc += values[length - 1 :]
            if length not in probes:
                continue
            target = probes[length]
            idx = np.arange(acc.size, dtype=np.int64) if target is None else target.positions(acc)
            ends = offsets[np.searchsorted(offsets, idx, side="right")]  # end of idx's text
            idx = idx[idx + length <= ends]
            out[length] = (idx, acc[idx])
    return out


def anchored_windows(
    tokens: Tokens, probes: dict[int, HashSet], anchors: HashSet
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Like `rolling_windows`, but only for windows starting at an anchor token.

    Used for the few benchmark items shorter than n: they can only start at one of their
    first tokens, so one membership pass finds every possible start, and their short window
    hashes are built there alone instead of over every token of every row.
    """
    values, offsets = tokens.values, tokens.offsets
    starts = anchors.positions(values)
    ends = offsets[np.searchsorted(offsets, starts, side="right")]
    acc = values[starts]
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    with np.errstate(over="ignore"):
        for length in range(1, max(probes, default=0) + 1):
            if length > 1:
                fits = starts + length <= ends
                starts, ends, acc = starts[fits], ends[fits], acc[fits]
                acc = acc * _ROLL_BASE + values[starts + length - 1]
            if length in probes:
                hit = probes[length].positions(acc)
                out[length] = (starts[hit], acc[hit])
    return out


def _window_strings(strings: pl.Series, firsts: np.ndarray, length: int) -> pl.Series:
    """The space-joined tokens of each `length`-token window starting at `firsts`."""
    if firsts.size == 0:
        return pl.Series("ngram", [], dtype=pl.String)
    frame = pl.DataFrame({f"t{k}": strings.gather(firsts + k) for k in range(length)})
    return frame.select(pl.concat_str(pl.all(), separator=" ").alias("ngram")).to_series()


@dataclass
class BenchmarkIndex:
    """The n-grams of a set of benchmarks, ready for bulk membership tests.

    `grams` has one row per distinct (n-gram, item): `gram_hash`, `ngram`, `length` (n, or the
    item length for items shorter than n, whose whole text is their only "n-gram"), `item`,
    `first` (token index of one occurrence in `tokens`), `gram` (id of the n-gram string).
    `gram_table` has one row per distinct n-gram: `gram`, `ngram`, `gram_hash`, `length`,
    `first`, `bench_df` (benchmarks holding it: items of one benchmark often share a context,
    which is content, not boilerplate). `items` has one row per item: `item`, `benchmark`, `benchmark_id`,
    `item_ngrams` (distinct n-grams of the item, 1 for a short item) and `short`.
    """

    n: int
    grams: pl.DataFrame
    gram_table: pl.DataFrame
    items: pl.DataFrame
    tokens: Tokens
    probes: dict[int, HashSet]
    anchors: HashSet  # first tokens of the items shorter than n
    benchmarks: list[Benchmark]
    # per length: the distinct n-grams sorted by hash (hash, gram id, one occurrence's first
    # token); per gram id: its items (CSR: items[item_offsets[g] : item_offsets[g + 1]])
    lookup: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]
    item_offsets: np.ndarray
    item_ids: np.ndarray

    @classmethod
    def build(cls, benchmarks: Sequence[Benchmark], n: int = DEFAULT_N) -> BenchmarkIndex:
        """Tokenize every benchmark item and hash its n-grams (or its whole text if short)."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if not benchmarks:
            raise ValueError("no benchmarks to decontaminate against")
        texts = pl.Series("text", [t for b in benchmarks for t in b.texts], dtype=pl.String)
        tokens = tokenize(texts)
        strings = tokens.strings()
        lengths = np.diff(tokens.offsets)
        item_of_token = np.repeat(np.arange(len(texts), dtype=np.int64), lengths)
        short_lengths = sorted({int(x) for x in lengths if 0 < x < n})
        windows = rolling_windows(tokens, dict.fromkeys([*short_lengths, n]))
        parts = []
        for length, (firsts, gram_hashes) in windows.items():
            items = item_of_token[firsts]
            if length < n:  # a short item contributes its whole text, nothing shorter
                whole = (firsts == tokens.offsets[items]) & (lengths[items] == length)
                firsts, gram_hashes, items = firsts[whole], gram_hashes[whole], items[whole]
            parts.append(
                pl.DataFrame(
                    {
                        "gram_hash": gram_hashes,
                        "ngram": _window_strings(strings, firsts, length),
                        "length": np.full(firsts.size, length, dtype=np.int64),
                        "item": items,
                        "first": firsts,
                    }
                )
            )
        grams = (
            pl.concat(parts)
            .unique(
                subset=["gram_hash", "ngram", "length", "item"], keep="first", maintain_order=True
            )
            .with_columns(gram=(pl.col("ngram").rank("dense") - 1).cast(pl.Int64))
        )
        benchmark_of_item = pl.Series([b.name for b in benchmarks for _ in b.texts])
        gram_table = (
            grams.with_columns(benchmark=benchmark_of_item.gather(grams["item"]))
            .group_by("gram")
            .agg(
                pl.col("ngram", "gram_hash", "length", "first").first(),
                bench_df=pl.col("benchmark").n_unique().cast(pl.Int64),
            )
            .sort("gram")  # ids are dense, so row k holds gram k
        )
        per_item = grams.group_by("item").agg(item_ngrams=pl.len().cast(pl.Int64))
        items_frame = (
            pl.DataFrame(
                {
                    "item": np.arange(len(texts), dtype=np.int64),
                    "benchmark": [b.name for b in benchmarks for _ in b.texts],
                    "benchmark_id": [i for b in benchmarks for i in b.ids],
                    "short": (lengths > 0) & (lengths < n),
                }
            )
            .join(per_item, on="item", how="left")
            .with_columns(pl.col("item_ngrams").fill_null(0))
            .sort("item")  # row k holds item k
        )
        probes = {
            int(length): HashSet(part["gram_hash"].to_numpy())
            for (length,), part in grams.group_by("length")
        }
        short_firsts = grams.filter(pl.col("length") < n)["first"].to_numpy()
        anchors = HashSet(tokens.values[short_firsts])
        lookup = {
            int(length): (
                part["gram_hash"].to_numpy(),
                part["gram"].to_numpy(),
                part["first"].to_numpy(),
            )
            for (length,), part in gram_table.sort("gram_hash").group_by("length")
        }
        pairs = grams.select("gram", "item").unique().sort("gram", "item")
        item_offsets = np.searchsorted(
            pairs["gram"].to_numpy(), np.arange(gram_table.height + 1, dtype=np.int64)
        )
        return cls(
            n,
            grams,
            gram_table,
            items_frame,
            tokens,
            probes,
            anchors,
            list(benchmarks),
            lookup,
            item_offsets,
            pairs["item"].to_numpy(),
        )


def find_overlaps(
    texts: pl.Series, index: BenchmarkIndex, tokens: Tokens | None = None
) -> pl.DataFrame:
    """Every verified (row, benchmark n-gram) occurrence: the measurement step's raw data.

    Columns: `row` (position in `texts`), `start` (token offset in the row), `item`, `gram`
    (id of the n-gram string in `index.gram_table`).
    Candidates come from 64-bit window hashes; each is then checked token by token against
    the benchmark n-gram (packed bytes for tokens up to 8 bytes, the strings for longer ones),
    so a hash collision never produces a match. `tokens`: `tokenize(texts)`, if already done.
    """
    if tokens is None:
        tokens = tokenize(texts)
    n = index.n
    windows = rolling_windows(tokens, {n: index.probes[n]} if n in index.probes else {})
    short = {length: probe for length, probe in index.probes.items() if length < n}
    if short:
        windows.update(anchored_windows(tokens, short, index.anchors))
    found_firsts, found_grams = [], []
    for length, (firsts, gram_hashes) in windows.items():
        if firsts.size == 0:
            continue
        # each window against the distinct n-gram(s) with its hash, verified token by token
        table_hash, table_gram, table_first = index.lookup[length]
        lo = np.searchsorted(table_hash, gram_hashes, side="left")
        count = np.searchsorted(table_hash, gram_hashes, side="right") - lo
        mine, at = np.repeat(firsts, count), _expand(lo, count)
        theirs = table_first[at]
        same = np.ones(mine.size, dtype=np.bool_)
        for k in range(length):
            same &= tokens.equal(mine + k, index.tokens, theirs + k)
        found_firsts.append(mine[same])
        found_grams.append(table_gram[at[same]])
    mine = np.concatenate([np.empty(0, np.int64), *found_firsts])
    gram = np.concatenate([np.empty(0, np.int64), *found_grams])
    rows = np.searchsorted(tokens.offsets, mine, side="right") - 1
    # then every item holding that n-gram
    first_item = index.item_offsets[gram]
    count = index.item_offsets[gram + 1] - first_item
    return pl.DataFrame(
        {
            "row": np.repeat(rows, count),
            "start": np.repeat(mine - tokens.offsets[rows], count),
            "item": index.item_ids[_expand(first_item, count)],
            "gram": np.repeat(gram, count),
        },
        schema={"row": pl.Int64, "start": pl.Int64, "item": pl.Int64, "gram": pl.Int64},
    )


def _expand(firsts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The ranges firsts[i] .. firsts[i] + counts[i] - 1, concatenated."""
    ends = np.cumsum(counts)
    return np.repeat(firsts - ends + counts, counts) + np.arange(int(ends[-1]) if ends.size else 0)


def build_stock_ngrams(
    texts: Iterable[str] | pl.Series, n: int = DEFAULT_N, min_df: int = 3
) -> StockNgrams:
    """N-grams that occur in at least `min_df` distinct texts of a reference corpus.

    The corpus should hold many problems of the kind being cleaned (training sources, all
    benchmarks): a phrase that recurs in `min_df` unrelated problems ("find the remainder when
    n is divided by 1000") is no evidence that a row copies one benchmark item. Identical texts
    count once, so a problem repeated in the corpus does not make its own n-grams stock.
    """
    series = texts if isinstance(texts, pl.Series) else pl.Series("t", list(texts), pl.String)
    series = series.drop_nulls().unique()
    tokens = tokenize(series)
    firsts, gram_hashes = rolling_windows(tokens, {n: None})[n]
    rows = np.searchsorted(tokens.offsets, firsts, side="right") - 1
    frequent = (
        pl.DataFrame({"row": rows, "first": firsts, "h": gram_hashes})
        .unique(subset=["row", "h"])
        .group_by("h")
        .agg(df=pl.len(), first=pl.col("first").first())
        .filter(pl.col("df") >= min_df)
    )
    grams = frozenset(tokens.window_text(int(f), n) for f in frequent["first"])
    return StockNgrams(n=n, ngrams=grams, min_df=min_df, corpus_rows=len(series))


@dataclass(frozen=True)
class StockNgrams:
    """Stock-phrase n-grams (normalized strings) found frequent in a reference corpus."""

    n: int
    ngrams: frozenset[str]
    min_df: int
    corpus_rows: int

    def __len__(self) -> int:
        return len(self.ngrams)


@dataclass(frozen=True)
class ContaminationRule:
    """When overlap measurements make a row contaminated.

    A row is dropped when, against one benchmark item, its hits reach `min_hits` or the item
    coverage reaches `min_coverage` (None: coverage never decides alone). With `ignore_stock`,
    hits count only informative n-grams: not in `stock` and seen in fewer than `min_df`
    distinct texts among the input rows plus the number of benchmarks holding them. Input rows
    that cover at least `copy_coverage` of some item (or share `copy_hits` n-grams with it),
    are (partial) copies, not evidence of a stock phrase, and are left out of that count:
    otherwise an item copied with small edits, or half-quoted, into three training rows would
    turn its own n-grams into "stock phrases" and hide all three.
    Coverage always counts every shared n-gram, so a full copy of a stock-heavy item is
    still a copy.
    """

    name: str
    min_hits: int
    min_coverage: float | None
    ignore_stock: bool
    min_df: int = 3
    copy_coverage: float = 0.4
    copy_hits: int | None = None

    def __post_init__(self) -> None:
        if self.min_hits < 1:
            raise ValueError(f"min_hits must be >= 1, got {self.min_hits}")
        if self.min_coverage is not None and not 0 < self.min_coverage <= 1:
            raise ValueError(f"min_coverage must be in (0, 1], got {self.min_coverage}")
        if self.min_df < 2:
            raise ValueError(f"min_df must be >= 2, got {self.min_df}")
        if not 0 < self.copy_coverage <= 1:
            raise ValueError(f"copy_coverage must be in (0, 1], got {self.copy_coverage}")


def rule_named(name: str, **overrides: object) -> ContaminationRule:
    """The `literal` rule (the paper's: any shared n-gram drops) or `boilerplate-aware`.

    Boilerplate-aware defaults, chosen on AIME 1983-2023 and MATH train against AIME 24/25,
    AMC and MATH-500 (bench/README.md, Decontamination): an n-gram is stock when >= 3 distinct texts
    hold it; 5 informative n-grams (13 consecutive item-specific words: a half-quote of a
    26-word item) or 90% of an item's n-grams (a copy with a few words changed) mark a copy.
    With 3 informative n-grams, AIME flags grow 12 -> 19 and MATH train 69 -> 117, nearly all
    shared answer-format sentences; with 8, real half-quotes of shorter items slip through.
    """
    presets = {
        "literal": {"min_hits": 1, "min_coverage": None, "ignore_stock": False},
        "boilerplate-aware": {"min_hits": 5, "min_coverage": 0.9, "ignore_stock": True},
    }
    if name not in presets:
        raise ValueError(f"unknown decontamination rule {name!r}; choose one of {', '.join(RULES)}")
    params = {**presets[name], **{k: v for k, v in overrides.items() if v is not None}}
    return ContaminationRule(name=name, **params)  # type: ignore[arg-type]


MEASURE_COLUMNS = {
    "decontam_hits": pl.Int64,
    "decontam_informative_hits": pl.Int64,
    "decontam_coverage": pl.Float64,
    "benchmark": pl.String,
    "benchmark_id": pl.String,
    "ngram": pl.String,
    "contaminated": pl.Boolean,
}


@dataclass
class ItemOverlaps:
    """Overlaps summed per (row, item), sorted by row then item: `hits` (distinct shared
    n-grams), `informative` (those not stock), `gram` (the first informative one by
    position, else the first), `coverage` (hits / the item's n-grams)."""

    row: np.ndarray
    item: np.ndarray
    hits: np.ndarray
    informative: np.ndarray
    gram: np.ndarray
    coverage: np.ndarray

    @classmethod
    def of(
        cls, overlaps: pl.DataFrame, index: BenchmarkIndex, is_stock: np.ndarray | None = None
    ) -> ItemOverlaps:
        """`is_stock[gram]` marks stock n-grams (None: none are)."""
        row, start, item, gram = (overlaps[c].to_numpy() for c in ("row", "start", "item", "gram"))
        key = row * index.items.height + item
        stock = is_stock[gram] if is_stock is not None else np.zeros(gram.size, dtype=np.bool_)
        # distinct (key, gram) pairs, then per key
        order = np.lexsort((gram, key))
        key_s, gram_s = key[order], gram[order]
        new_pair = np.ones(key_s.size, dtype=np.bool_)
        new_pair[1:] = (key_s[1:] != key_s[:-1]) | (gram_s[1:] != gram_s[:-1])
        pair_key, pair_stock = key_s[new_pair], stock[order][new_pair]
        new_key = np.ones(pair_key.size, dtype=np.bool_)
        new_key[1:] = pair_key[1:] != pair_key[:-1]
        group = np.cumsum(new_key) - 1
        keys = pair_key[new_key]
        hits = np.bincount(group).astype(np.int64)
        informative = np.bincount(group, weights=~pair_stock, minlength=keys.size).astype(np.int64)
        # the representative n-gram: informative first, then earliest in the row
        first = np.lexsort((start, stock, key))
        leads = np.ones(first.size, dtype=np.bool_)
        leads[1:] = key[first][1:] != key[first][:-1]
        rows, items = np.divmod(keys, index.items.height)
        coverage = hits / index.items["item_ngrams"].to_numpy()[items]
        return cls(rows, items, hits, informative, gram[first[leads]], coverage)

    def contaminated(self, rule: ContaminationRule) -> np.ndarray:
        """`decide` on these arrays."""
        verdict = (self.informative if rule.ignore_stock else self.hits) >= rule.min_hits
        if rule.min_coverage is not None:
            verdict |= self.coverage >= rule.min_coverage
        return verdict


def document_grams(
    overlaps: pl.DataFrame, index: BenchmarkIndex, rule: ContaminationRule, row_keys: np.ndarray
) -> pl.DataFrame:
    """Distinct (`gram`, `key`) pairs: which input texts (by key) hold each shared n-gram.

    Rows that are clear copies (they cover `copy_coverage` of some item, or share `copy_hits`
    n-grams with it) are left out, so copies never make their own item look like
    boilerplate. Depends on each row alone, so it can run per chunk of rows; the union of
    the chunks' pairs gives the global document frequencies (`stock_grams`).
    `row_keys[row]` is a hash of the row's text (identical texts count once).
    """
    if overlaps.height == 0:
        return pl.DataFrame(schema={"gram": pl.Int64, "key": pl.UInt64})
    per_item = ItemOverlaps.of(overlaps, index)
    copy = (per_item.coverage >= rule.copy_coverage) | (per_item.hits >= (rule.copy_hits or 2**62))
    row, gram = overlaps["row"].to_numpy(), overlaps["gram"].to_numpy()
    keep = ~sorted_isin(row, per_item.row[copy])
    pairs = pl.DataFrame(
        {"gram": gram[keep], "key": row_keys[row[keep]]},
        schema={"gram": pl.Int64, "key": pl.UInt64},
    )
    return pairs.unique()


def stock_grams(
    documents: pl.DataFrame,
    index: BenchmarkIndex,
    rule: ContaminationRule,
    stock: StockNgrams | None = None,
) -> pl.Series:
    """Ids of stock n-grams: distinct input texts (`document_grams` over all rows) plus
    benchmarks holding them reach `rule.min_df`, or listed in `stock`."""
    doc_freq = (
        documents.group_by("gram")
        .agg(input_df=pl.col("key").n_unique())
        .join(index.gram_table.select("gram", "bench_df", "ngram"), on="gram", how="right")
    )
    return doc_freq.filter(
        (pl.col("input_df").fill_null(0) + pl.col("bench_df") >= rule.min_df)
        | pl.col("ngram").is_in(
            pl.Series(sorted(stock.ngrams) if stock else [], dtype=pl.String).implode()
        )
    )["gram"]


def measure_rows(
    overlaps: pl.DataFrame,
    index: BenchmarkIndex,
    rule: ContaminationRule,
    stock: pl.Series | None = None,
) -> pl.DataFrame:
    """Per-row measurements and decision, given the stock n-gram ids (`stock_grams`).

    Each row's result depends only on its own overlaps, so this runs per chunk of rows
    (in NumPy: on a chunk's few overlaps, a dozen Polars calls cost more in overhead).
    """
    if overlaps.height == 0:
        return pl.DataFrame(schema={"row": pl.Int64, **MEASURE_COLUMNS})
    is_stock = None
    if rule.ignore_stock and stock is not None:
        is_stock = np.zeros(index.gram_table.height, dtype=np.bool_)
        is_stock[stock.to_numpy()] = True
    m = ItemOverlaps.of(overlaps, index, is_stock)
    contaminated = m.contaminated(rule)
    # per row, the item that makes it contaminated if any, else the most informative hits,
    # then the highest coverage, then the most hits, then the first item
    order = np.lexsort((m.item, -m.hits, -m.coverage, -m.informative, ~contaminated, m.row))
    best = order[np.r_[True, m.row[order][1:] != m.row[order][:-1]]]
    item, gram = m.item[best], m.gram[best]
    return pl.DataFrame(
        {
            "row": m.row[best],
            "decontam_hits": m.hits[best],
            "decontam_informative_hits": m.informative[best],
            "decontam_coverage": m.coverage[best],
            "benchmark": index.items["benchmark"].gather(item),
            "benchmark_id": index.items["benchmark_id"].gather(item),
            "ngram": index.gram_table["ngram"].gather(gram),
            "contaminated": contaminated[best],
        },
        schema={"row": pl.Int64, **MEASURE_COLUMNS},
    )


def measure(
    overlaps: pl.DataFrame,
    index: BenchmarkIndex,
    rule: ContaminationRule,
    row_keys: np.ndarray,
    stock: StockNgrams | None = None,
) -> pl.DataFrame:
    """Per-row measurements and decision from raw overlaps (one row per overlapping row).

    Returns `row` plus MEASURE_COLUMNS for the row's best item: the one that makes it
    contaminated if any, else the one with most informative hits, then highest coverage.
    `row_keys` (a hash of each input text) lets identical texts count once in document
    frequencies. `decontaminate` runs the same steps per chunk of rows (`scan_and_measure`).
    """
    if overlaps.height == 0:
        return pl.DataFrame(schema={"row": pl.Int64, **MEASURE_COLUMNS})
    stock_ids = None
    if rule.ignore_stock:
        stock_ids = stock_grams(document_grams(overlaps, index, rule, row_keys), index, rule, stock)
    return measure_rows(overlaps, index, rule, stock_ids)


def decide(measured: pl.DataFrame, rule: ContaminationRule) -> pl.DataFrame:
    """Add `contaminated` from the measurement columns (re-runnable with other thresholds)."""
    hits = "decontam_informative_hits" if rule.ignore_stock else "decontam_hits"
    verdict = pl.col(hits) >= rule.min_hits
    if rule.min_coverage is not None:
        verdict = verdict | (pl.col("decontam_coverage") >= rule.min_coverage)
    return measured.with_columns(contaminated=verdict.fill_null(False))


def _chunks(length: int, size: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + size, length)) for lo in range(0, length, size)] or [(0, 0)]


def scan_and_measure(
    texts: pl.Series,
    index: BenchmarkIndex | Callable[[], BenchmarkIndex],
    rule: ContaminationRule,
    stock: StockNgrams | None = None,
    workers: int = 1,
    chunk_rows: int = 20_000,
) -> tuple[pl.DataFrame, BenchmarkIndex]:
    """`measure(find_overlaps(texts, index), ...)`, by chunks of rows on `workers` threads.

    Threads, not processes: Polars and NumPy release the GIL in their kernels, and the index
    is shared without copies. `index` may be a function that builds it: it then runs on one
    worker while the others already tokenize rows (that needs no index). Only the stock
    n-grams need the whole input: each chunk also returns its (n-gram, text key) pairs, their
    union gives the document frequencies, then a second parallel pass measures each chunk's
    rows. The literal rule measures each chunk in the scan itself. Returns the measurements
    (`measure`'s frame) and the index. Chunks of 20K rows keep each chunk's NumPy buffers
    small enough for the allocator to reuse (at 50K, page faults took 1-2.5 s of system time
    per 1M rows; at 20K, about 0.6 s).
    """
    bounds = _chunks(len(texts), chunk_rows)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        built: Future[BenchmarkIndex] = Future()
        if isinstance(index, BenchmarkIndex):
            built.set_result(index)
        else:
            built = pool.submit(index)  # first in the queue: no chunk waits on an unstarted build

        def overlaps(bound: tuple[int, int]) -> tuple[pl.DataFrame, pl.DataFrame | None]:
            lo, hi = bound
            chunk = texts.slice(lo, hi - lo)
            tokens = tokenize(chunk)
            ready = built.result()
            found = find_overlaps(chunk, ready, tokens)
            if not rule.ignore_stock:
                return measure_rows(found.with_columns(pl.col("row") + lo), ready, rule), None
            rows = found["row"].unique().to_numpy()
            row_keys = np.zeros(hi - lo, dtype=np.uint64)
            row_keys[rows] = chunk.gather(rows).fill_null("").hash().to_numpy()
            documents = document_grams(found, ready, rule, row_keys)
            return found.with_columns(pl.col("row") + lo), documents

        scanned = list(pool.map(overlaps, bounds))
        ready = built.result()
        if not rule.ignore_stock:
            return pl.concat([measured for measured, _ in scanned]), ready
        documents = pl.concat([docs for _, docs in scanned if docs is not None])
        stock_ids = stock_grams(documents, ready, rule, stock)
        parts = pool.map(
            lambda found: measure_rows(found, ready, rule, stock_ids),
            [found for found, _ in scanned],
        )
        return pl.concat(list(parts)), ready


def decontaminate(
    df: pl.DataFrame,
    benchmarks: Sequence[Benchmark] | BenchmarkIndex,
    n: int = DEFAULT_N,
    rule: str | ContaminationRule = "boilerplate-aware",
    *,
    text_column: str = "problem",
    min_hits: int | None = None,
    min_coverage: float | None = None,
    min_df: int | None = None,
    stock: StockNgrams | None = None,
    workers: int | None = None,
    chunk_rows: int = 20_000,
) -> StepResult:
    """Drop rows of `df` that overlap a benchmark item, recording which item and n-gram.

    `rule` is `"literal"`, `"boilerplate-aware"` (default) or a ContaminationRule; `min_hits`,
    `min_coverage` and `min_df` override the named rule's thresholds. `stock` adds stock
    phrases from a reference corpus (see `build_stock_ngrams`). Kept rows carry the
    measurement columns `decontam_hits`, `decontam_informative_hits`, `decontam_coverage`
    (0 / null when nothing overlaps) so thresholds can be re-tuned in SQL later; dropped rows
    also carry `reason` ("contaminated"), `benchmark`, `benchmark_id`, `ngram`.
    """
    if text_column not in df.columns:
        raise ValueError(f"decontaminate: input has no column {text_column!r}; it has {df.columns}")
    if df.schema[text_column] != pl.String:
        raise ValueError(
            f"decontaminate: column {text_column!r} is {df.schema[text_column]}, expected strings"
        )
    if isinstance(rule, str):
        rule = rule_named(rule, min_hits=min_hits, min_coverage=min_coverage, min_df=min_df)
    index: BenchmarkIndex | Callable[[], BenchmarkIndex]
    if isinstance(benchmarks, BenchmarkIndex):
        if benchmarks.n != n:
            raise ValueError(f"benchmark index was built for n={benchmarks.n}, asked for n={n}")
        index = benchmarks
    else:
        index = partial(BenchmarkIndex.build, benchmarks, n)
    if stock is not None and stock.n != n:
        raise ValueError(f"stock n-grams were built for n={stock.n}, asked for n={n}")
    workers = workers or min(os.cpu_count() or 1, 4)
    texts = df.get_column(text_column)
    measured, index = scan_and_measure(
        texts, index, rule, stock, workers=workers, chunk_rows=chunk_rows
    )
    # scatter the per-row measurements back (cheaper than a join that copies every column)
    rows = measured["row"].to_numpy()
    hits = np.zeros(df.height, dtype=np.int64)
    informative = np.zeros(df.height, dtype=np.int64)
    coverage = np.full(df.height, np.nan)
    drop_mask = np.zeros(df.height, dtype=np.bool_)
    hits[rows] = measured["decontam_hits"].to_numpy()
    informative[rows] = measured["decontam_informative_hits"].to_numpy()
    coverage[rows] = measured["decontam_coverage"].to_numpy()
    drop_mask[rows] = measured["contaminated"].to_numpy()
    # a second pass (e.g. against more benchmarks) replaces the previous pass's measurements
    columns = [c for c in df.columns if c not in MEASURE_COLUMNS]
    measures = {
        "decontam_hits": pl.Series(hits),
        "decontam_informative_hits": pl.Series(informative),
        "decontam_coverage": pl.Series(coverage).fill_nan(None),
    }
    measured_rows = df.select(columns).with_columns(**measures)
    kept = measured_rows.filter(pl.Series(~drop_mask))
    chosen = measured.filter(pl.col("contaminated"))  # sorted by row, like the filter below
    dropped = (
        measured_rows.filter(pl.Series(drop_mask))
        .with_columns(
            reason=pl.lit("contaminated"),
            benchmark=chosen["benchmark"],
            benchmark_id=chosen["benchmark_id"],
            ngram=chosen["ngram"],
            rule=pl.lit(rule.name),
        )
        .select(
            *columns,
            "reason",
            "benchmark",
            "benchmark_id",
            "ngram",
            *measures,
            "rule",
        )
    )
    stats: dict[str, object] = {
        "rows_in": df.height,
        "rows_out": kept.height,
        "dropped": dropped.height,
        "overlapping_rows": measured.height,
        "dropped_by_benchmark": dict(
            dropped.group_by("benchmark").len().sort("benchmark").iter_rows()
        ),
        "n": n,
        "rule": asdict(rule),
        "benchmarks": [b.manifest_entry() for b in index.benchmarks],
        "stock_ngrams": len(stock) if stock is not None else 0,
    }
    return StepResult(kept=kept, dropped=dropped, stats=stats)
