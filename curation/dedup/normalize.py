"""Normalization for duplicate detection: the text shingles are taken from, answer keys, and
number hashes (what `keep_apart="numbers"` compares).

Byte-level NumPy over whole columns: NFKC and Unicode lower-casing run only on rows with
non-ASCII characters (the slow part), so a million prompts take about a second.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

CHUNK_ROWS = 8_192


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer, in place on a uint64 array (wrapping arithmetic)."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[[9, 10, 11, 12, 13, 32]] = True
_WORD = np.zeros(256, dtype=bool)  # ASCII letters, digits and every non-ASCII byte
_WORD[48:58] = _WORD[65:91] = _WORD[97:123] = _WORD[128:] = True
_LOWER = np.arange(256, dtype=np.uint8)
_LOWER[65:91] += 32


def _normalize_bytes(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Byte-level normalization of UTF-8 documents given as (bytes, offsets).

    ASCII lower case; each whitespace run becomes one space if it separates two word
    characters of the same document and disappears otherwise (at the ends, next to
    punctuation and LaTeX symbols, or after a LaTeX command such as `\\cdot`).
    """
    data = _LOWER[data]
    n = len(data)
    if n == 0:
        return data, offsets.copy()
    ws = _WHITESPACE[data]
    nonempty = np.diff(offsets) > 0
    first = np.zeros(n, dtype=bool)
    first[offsets[:-1][nonempty]] = True
    last = np.zeros(n, dtype=bool)
    last[offsets[1:][nonempty] - 1] = True
    run_start = np.flatnonzero(ws & (first | ~np.r_[False, ws[:-1]]))
    run_end = np.flatnonzero(ws & (last | ~np.r_[ws[1:], False]))  # pairs with run_start
    keep_space = (
        ~first[run_start]
        & ~last[run_end]
        & _WORD[data[np.maximum(run_start - 1, 0)]]
        & _WORD[data[np.minimum(run_end + 1, n - 1)]]
    )
    # A space after a LaTeX command ("\\cdot 3" vs "\\cdot3") carries no meaning either.
    word = _WORD[data]
    last_other = np.maximum.accumulate(np.where(word, -1, np.arange(n, dtype=np.int64)))
    before_word = last_other[np.maximum(run_start - 1, 0)]
    after_command = (before_word >= 0) & (data[np.maximum(before_word, 0)] == 92)
    keep_space &= ~after_command
    keep = ~ws
    spaces = run_start[keep_space]
    keep[spaces] = True
    data[spaces] = 32
    new_offsets = np.r_[0, np.cumsum(keep, dtype=np.int64)][offsets]
    return data[keep], new_offsets


def text_buffers(texts: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """A string column as (utf-8 bytes, int64 offsets starting at 0); nulls are empty."""
    arr = texts.cast(pl.String).fill_null("").to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.type != pa.large_string():  # a same-type cast still copies
        arr = arr.cast(pa.large_string())
    _, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    if data_buf is None:
        return np.zeros(0, dtype=np.uint8), offsets - offsets[0]
    data = np.frombuffer(data_buf, dtype=np.uint8)[offsets[0] : offsets[-1]]
    return data, offsets - offsets[0]


def shingle_text(texts: pl.Series) -> pl.Series:
    """The text shingles are taken from: NFKC, lower case, spacing that carries no meaning.

    NFKC and Unicode lower-casing run only on rows with non-ASCII characters (they are the
    slow part); the rest is byte-level numpy, so a million prompts take about a second.

    >>> shingle_text(pl.Series(["Find  $ x + 1 $ .", "Two  words"])).to_list()
    ['find$x+1$.', 'two words']
    """
    texts = texts.cast(pl.String).fill_null("")
    wide = np.flatnonzero((texts.str.len_bytes() != texts.str.len_chars()).to_numpy())
    if len(wide):
        texts = texts.scatter(wide, texts.gather(wide).str.normalize("NFKC").str.to_lowercase())
    pieces = []
    for start in range(0, len(texts), CHUNK_ROWS):  # chunks keep the temporaries in cache
        data, offsets = _normalize_bytes(*text_buffers(texts.slice(start, CHUNK_ROWS)))
        pieces.append(
            pa.LargeStringArray.from_buffers(
                len(offsets) - 1, pa.py_buffer(offsets), pa.py_buffer(data)
            )
        )
    if not pieces:
        return pl.Series(texts.name, [], dtype=pl.String)
    return pl.Series(texts.name, pa.chunked_array(pieces, type=pa.large_string()), pl.String)


def answer_key(answers: pl.Series) -> pl.Series:
    """The key two reference answers are compared by (keep-apart by answer): without spacing,
    `$`, `\\left`/`\\right`, with `\\dfrac` as `\\frac`, lower case.

    Empty answers become null (no reference).
    """
    cleaned = (
        pl.col("a")
        .cast(pl.String)
        .str.replace_all(r"\s+|\$|\\left|\\right|\\!|\\,", "")
        .str.replace_all(r"\\[dt]frac", r"\frac")
        .str.to_lowercase()
    )
    frame = pl.DataFrame({"a": answers})
    return frame.select(pl.when(cleaned != "").then(cleaned).alias(answers.name)).to_series()


def number_hashes(normalized: pl.Series) -> np.ndarray:
    """Per text, a uint64 hash of its sequence of digit runs (0 when it has no digits).

    Two texts get the same hash exactly when they contain the same numbers in the same
    order ("radius of 5 cm" and "radius of 10 cm" differ), up to 64-bit collisions.
    """
    parts = [
        _number_hashes_chunk(*text_buffers(normalized.slice(start, CHUNK_ROWS)))
        for start in range(0, len(normalized), CHUNK_ROWS)
    ]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)


def _number_hashes_chunk(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    out = np.zeros(len(offsets) - 1, dtype=np.uint64)
    digit = (data >= 48) & (data <= 57)
    if not digit.any():
        return out
    at_doc_start = np.zeros(len(data), dtype=bool)
    at_doc_start[offsets[:-1][np.diff(offsets) > 0]] = True
    run_start = digit & (at_doc_start | ~np.r_[False, digit[:-1]])
    runs_before = np.r_[0, np.cumsum(run_start, dtype=np.int64)]
    pos = np.flatnonzero(digit)
    doc = np.searchsorted(offsets, pos, side="right") - 1
    run_in_doc = runs_before[pos + 1] - runs_before[offsets[doc]]
    last_start = np.maximum.accumulate(np.where(run_start, np.arange(len(data)), 0))
    in_run = pos - last_start[pos]
    token = (
        (run_in_doc.astype(np.uint64) << np.uint64(32))
        | (in_run.astype(np.uint64) << np.uint64(8))
        | data[pos].astype(np.uint64)
    )
    np.add.at(out, doc, mix64(token))
    return out


# Numbers outside the problem: a source header ("2019 AMC 10A Problem 5.", "(2003)",
# "Problem 12:"), a trailing tag ("#481516", "(AIME 2011 #4)", "Source: AMC 12B 2019,
# problem 5"). A header or tag is a run of header words (capitalized or all-caps words, small
# numbers, "10A", roman numerals) holding a mark (a year, "problem N", "#N"), cut off from the
# problem by punctuation: a header ends in `.`, `:`, `)` or a line break; a tag follows a
# sentence end, stands in brackets after a space, or is a `#` id. A year or a number that the
# problem's own words lead up to ("2019 people attend", "divided by 2019") is neither.
_TAG_YEAR = r"(?:19|20)\d{2}"
_TAG_MARK = rf"(?:{_TAG_YEAR}|(?i:problem|question|exercise|no\.?)\s?#?\s?\d+[a-z]?|#\s?\d+)"
_TAG_WORD = rf"(?:{_TAG_MARK}|[A-Z][A-Za-z0-9]+|\d{{1,2}}[A-Z]|#?\d{{1,3}}[a-z]?|[IVX]+)"
_TAG_RUN = rf"(?:{_TAG_WORD}[ \t,/-]+)*{_TAG_MARK}(?:[ \t,/-]+{_TAG_WORD})*"
_TAG_RUN_NO_COMMA = rf"(?:{_TAG_WORD}[ \t/-]+)*{_TAG_MARK}(?:[ \t/-]+{_TAG_WORD})*"
SOURCE_HEADER = rf"^\s*[\(\[]?\s*{_TAG_RUN}\s*(?:[.:)\]]|\n)"
SOURCE_TAG = (
    rf"(?:\s*#\s?\d+|(?:[.?!$]|\n)\s+[\(\[]?\s*(?:(?i:source|from)\s*:?\s*)?{_TAG_RUN}\s*[\)\]]?"
    rf"|\s[\(\[]\s*{_TAG_RUN_NO_COMMA}\s*[\)\]])\s*\.?\s*$"
)


def without_source_tags(texts: pl.Series) -> pl.Series:
    """The texts without a leading source header or a trailing id tag (SOURCE_HEADER,
    SOURCE_TAG), for the numbers key only: punctuation next to a removed tag may go too.

    >>> without_source_tags(pl.Series(["2019 AMC 10A Problem 5. Find 2x.", "Find 2x. #4815"])).to_list()
    [' Find 2x.', 'Find 2x']
    """
    texts = texts.cast(pl.String).fill_null("")
    stripped = pl.col("t").str.replace(SOURCE_HEADER, "").str.replace(SOURCE_TAG, "")
    return pl.DataFrame({"t": texts}).select(stripped.alias(texts.name)).to_series()


def problem_number_hashes(texts: pl.Series, normalized: pl.Series | None = None) -> np.ndarray:
    """`number_hashes` of the problems without their source headers and id tags, so a copy
    that only gained "2019 AMC 10A Problem 5." or "#481516" keeps the same numbers key.

    `normalized`: `shingle_text(texts)` if already computed (reused for rows without tags,
    nearly all of them: only the tagged rows are stripped and normalized again).
    """
    if normalized is None:
        normalized = shingle_text(texts)
    hashes = number_hashes(normalized)
    frame = pl.DataFrame({"t": texts.cast(pl.String).fill_null("")})
    found = frame.select(
        header=pl.col("t").str.contains(SOURCE_HEADER), tag=pl.col("t").str.contains(SOURCE_TAG)
    )
    tagged = np.flatnonzero((found["header"] | found["tag"]).to_numpy())
    if tagged.size:
        stripped = without_source_tags(frame["t"].gather(tagged))
        hashes[tagged] = number_hashes(shingle_text(stripped))
    return hashes
