"""The decontamination tokenizer: texts to word tokens packed as uint64, in bulk.

Polars lower-cases a batch of texts into one UTF-8 buffer; NumPy skips figure code, LaTeX
layout commands and thousands separators on the bytes, finds the tokens and packs each into a
uint64 (no per-token strings). `ngram_text` spells the same normalization for one text.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
import polars as pl
import pyarrow as pa

from curation.sorted_sets import sorted_unique

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
_SHIFT = np.uint64(31)
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
    spans = expand_ranges(starts[which], lengths[which])  # every byte of these tokens
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


def ngram_text(text: str) -> str:
    """The text n-grams are read from: one text's tokens joined by single spaces.

    >>> ngram_text(r"Find $ x + y $ if $\\dfrac{1}{2}$ of 24,\\!000.")
    'find x y if frac 1 2 of 24000'
    """
    tokens = tokenize(pl.Series([text], dtype=pl.String))
    return tokens.window_text(0, int(tokens.values.size))


def expand_ranges(firsts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The ranges firsts[i] .. firsts[i] + counts[i] - 1, concatenated."""
    ends = np.cumsum(counts)
    return np.repeat(firsts - ends + counts, counts) + np.arange(int(ends[-1]) if ends.size else 0)
