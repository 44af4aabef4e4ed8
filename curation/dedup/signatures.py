"""Exact and near-duplicate removal for prompt tables.

Two operators, each `(pl.DataFrame, ...) -> StepResult`:

- `exact_dedup`: rows whose normalized text is identical form a cluster.
- `near_dedup`: MinHash signatures over character n-grams, LSH banding, optional
  verification of candidate pairs, connected components, and the same choice of
  representative. For problems it is answer- and number-aware: template siblings
  ("Find $d$." vs "Find $b$." under one figure, "radius of 5 cm" vs "radius of 10 cm") are
  near-identical texts that ask different questions, so a pair whose reference answers or
  whose numbers differ is never merged (`keep_apart`).

Every cluster keeps one deterministic representative: a row with a reference (a non-empty
`answer` or `tests`) first, then the earliest row in input order. Every dropped row records
`cluster_id`, `duplicate_of` (the representative's id), `cluster_size` and, for near
duplicates, `jaccard_estimate` (signature agreement with the representative), so a user can
see what each row duplicated and re-tune the threshold with SQL.

Defaults and why:
- Normalization: NFKC, lower case, whitespace runs collapsed to one space and removed next
  to any non-alphanumeric character. Case, spacing and LaTeX re-spacing (`$ x $` vs `$x$`)
  then vanish before hashing, while `\\frac{12}{3}` and `\\frac{1}{23}` stay different.
- Shingles: byte 5-grams of the normalized text. Prompts are short (a median MATH problem
  is ~40 words); word 5-grams give such a text only ~40 shingles and one edited word
  removes five of them, so word shingles lose recall on small edits (measured in
  bench/README.md, Dedup). Character 5-grams give ~200 shingles and an edit removes only
  those that overlap it.
- threshold=0.6 and num_perm=112 give, by minimizing the equally weighted integrated
  false-positive and false-negative probability of the banding curve (the rule of
  text-dedup and datasketch, `optimal_bands`), 16 bands x 7 rows. 0.6 rather than 0.8:
  a one-line problem with an added instruction ("Problem: ...") or two edited words falls
  to a char 5-gram Jaccard of 0.6-0.7, and answer/number awareness, not a high threshold,
  is what keeps template siblings apart (measured in tests/test_dedup.py and
  bench/README.md, Dedup: recall 0.98 / precision 0.9999 on planted near-duplicates).
  Candidates are verified: by default a pair is kept only if its estimated Jaccard is
  >= threshold.
- Signatures use one-permutation MinHash with rotation densification (Li, Owen & Zhang
  2012; Shrivastava & Li 2014): one 64-bit hash per shingle picks a bin and a value, and a
  bin keeps its minimum. This costs one hash per shingle instead of num_perm, which is why
  the hot path is hand-written numpy rather than a per-row datasketch loop:
  bench/dedup.py runs it side by side with datatrove's MinHash pipeline (~40x its rows/s
  at 50K and 100K rows, one core against two) and alone at 1M rows (1.66 GiB peak).
  `scheme="classic"` computes num_perm independent universal hashes and reproduces
  datasketch's legacy MinHash bit for bit (tested), for users who need that estimator.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import numpy as np
import polars as pl
import pyarrow as pa
import xxhash

from curation.sorted_sets import sorted_isin, sorted_union, sorted_unique
from lake.steps import StepResult

Scheme = Literal["oph", "classic"]
Verify = Literal["estimate", "exact", "none"]
KEEP_APART_CHOICES = ("answer", "numbers")

_MASK32 = np.uint64(0xFFFFFFFF)
_EMPTY = np.uint32(0xFFFFFFFF)
_MERSENNE = np.uint64((1 << 61) - 1)
_ROTATE = np.uint64(0x9E3779B1)
_CHUNK_ROWS = 8_192


# --------------------------------------------------------------------------- normalization

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


def _text_buffers(texts: pl.Series) -> tuple[np.ndarray, np.ndarray]:
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


def normalize_text(texts: pl.Series) -> pl.Series:
    """Normalize for duplicate detection: NFKC, lower case, spacing that carries no meaning.

    NFKC and Unicode lower-casing run only on rows with non-ASCII characters (they are the
    slow part); the rest is byte-level numpy, so a million prompts take about a second.

    >>> normalize_text(pl.Series(["Find  $ x + 1 $ .", "Two  words"])).to_list()
    ['find$x+1$.', 'two words']
    """
    texts = texts.cast(pl.String).fill_null("")
    wide = np.flatnonzero((texts.str.len_bytes() != texts.str.len_chars()).to_numpy())
    if len(wide):
        texts = texts.scatter(wide, texts.gather(wide).str.normalize("NFKC").str.to_lowercase())
    pieces = []
    for start in range(0, len(texts), _CHUNK_ROWS):  # chunks keep the temporaries in cache
        data, offsets = _normalize_bytes(*_text_buffers(texts.slice(start, _CHUNK_ROWS)))
        pieces.append(
            pa.LargeStringArray.from_buffers(
                len(offsets) - 1, pa.py_buffer(offsets), pa.py_buffer(data)
            )
        )
    if not pieces:
        return pl.Series(texts.name, [], dtype=pl.String)
    return pl.Series(texts.name, pa.chunked_array(pieces, type=pa.large_string()), pl.String)


def normalize_answer(answers: pl.Series) -> pl.Series:
    """Normalize reference answers for equality: spacing, `$`, `\\left`/`\\right`, `\\dfrac`.

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
        _number_hashes_chunk(*_text_buffers(normalized.slice(start, _CHUNK_ROWS)))
        for start in range(0, len(normalized), _CHUNK_ROWS)
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
    np.add.at(out, doc, _mix64(token))
    return out


# --------------------------------------------------------------------------- signatures


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer, in place on a uint64 array (wrapping arithmetic)."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def shingle_hash32(shingle: bytes) -> int:
    """The 32-bit hash `minhash_signatures` gives one char shingle (for datasketch checks)."""
    packed = int.from_bytes(shingle, "little") | (len(shingle) << 56)
    value = np.array([packed], dtype=np.uint64)
    return int(_mix64(value)[0] & _MASK32)


def _char_shingles(
    data: np.ndarray, offsets: np.ndarray, ngram: int
) -> tuple[np.ndarray, np.ndarray]:
    """Hashed byte n-grams of documents stored as one byte buffer plus offsets.

    Returns (64-bit hashes, document index of each). A document shorter than `ngram` bytes
    gives one shingle, its whole text; an empty document gives none.
    """
    n_docs = len(offsets) - 1
    lengths = np.diff(offsets)
    padded = np.zeros(len(data) + 8, dtype=np.uint8)
    padded[: len(data)] = data
    windows = np.ndarray(shape=(len(data),), dtype="<u8", buffer=padded, strides=(1,))
    valid = np.ones(len(data), dtype=bool)
    long_ends = offsets[1:][lengths >= ngram]
    for back in range(1, ngram):  # the last ngram-1 positions of a document start no n-gram
        valid[long_ends - back] = False
    short = np.flatnonzero((lengths < ngram) & (lengths > 0))
    for back in range(1, ngram):
        tail = offsets[short] + back
        valid[tail[tail < offsets[short + 1]]] = False
    values = windows[valid]
    counts = np.where(lengths >= ngram, lengths - ngram + 1, (lengths > 0).astype(np.int64))
    values &= np.uint64((1 << (8 * ngram)) - 1)
    values |= np.uint64(ngram << 56)
    if len(short):  # a short document's one shingle is its whole text
        at = np.r_[0, np.cumsum(counts)][short]
        span = lengths[short].astype(np.uint64)
        values[at] &= (np.uint64(1) << (span * np.uint64(8))) - np.uint64(1)
        values[at] = (values[at] & ((np.uint64(1) << np.uint64(56)) - np.uint64(1))) | (
            span << np.uint64(56)
        )
    doc_of = np.repeat(np.arange(n_docs, dtype=np.int64), counts)
    return _mix64(values), doc_of


def _oph_signatures(hashes: np.ndarray, doc_of: np.ndarray, n_docs: int, k: int, seed: int):
    """One-permutation MinHash with rotation densification, shape (n_docs, k) uint32."""
    if seed:  # another seed, another (pseudo-random) order of the 64-bit hashes
        hashes *= np.uint64((seed * 0x9E3779B97F4A7C15 | 1) % (1 << 64))
    values = hashes.astype(np.uint32)  # low 32 bits
    hashes >>= np.uint64(32)  # high 32 bits pick the bin: floor(high * k / 2^32)
    hashes *= np.uint64(k)
    hashes >>= np.uint64(32)
    slot = doc_of * k
    slot += hashes.view(np.int64)
    sig = np.full(n_docs * k, _EMPTY, dtype=np.uint32)
    np.minimum.at(sig, slot, values)
    empty = sig == _EMPTY
    holes = np.flatnonzero(empty)
    if len(holes):
        # An empty bin borrows the next non-empty bin to its right (circularly within the
        # document), shifted by the distance, so two documents agree on it exactly when they
        # agree on the borrowed bin. Done on the flat array: one reverse running minimum.
        size = len(sig)
        filled = np.where(empty, size, np.arange(size, dtype=np.int64))
        nxt = np.minimum.accumulate(filled[::-1])[::-1][holes]
        row = holes // k
        first = row * k + np.argmin(empty.reshape(n_docs, k), axis=1)[row]
        wrap = nxt >= (row + 1) * k
        nxt = np.where(wrap, first, nxt)
        dist = (nxt - holes + np.where(wrap, k, 0)).astype(np.uint64)
        borrowed = sig[nxt].astype(np.uint64) + dist * _ROTATE
        fill = np.where(sig[nxt] == _EMPTY, _EMPTY, borrowed.astype(np.uint32))
        sig[holes] = fill  # a document with no shingles stays all-empty
    return sig.reshape(n_docs, k)


def _classic_permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's legacy (a, b) pairs for `seed`, so signatures match it bit for bit."""
    gen = np.random.RandomState(seed)
    pairs = [
        (gen.randint(1, _MERSENNE, dtype=np.uint64), gen.randint(0, _MERSENNE, dtype=np.uint64))
        for _ in range(num_perm)
    ]
    ab = np.array(pairs, dtype=np.uint64).T
    return ab[0], ab[1]


def _classic_signatures(
    hashes: np.ndarray, doc_of: np.ndarray, n_docs: int, k: int, seed: int
) -> np.ndarray:
    """num_perm universal hashes `((a*h + b) mod (2^61-1)) & (2^32-1)`, min per document."""
    a, b = _classic_permutations(k, seed)
    h32 = hashes & _MASK32
    sig = np.full((n_docs, k), _EMPTY, dtype=np.uint32)
    if len(h32) == 0:
        return sig
    starts = np.flatnonzero(np.r_[True, doc_of[1:] != doc_of[:-1]])
    docs = doc_of[starts]
    tmp = np.empty_like(h32)
    for i in range(k):
        np.multiply(h32, a[i], out=tmp)
        tmp += b[i]
        tmp %= _MERSENNE
        tmp &= _MASK32
        sig[docs, i] = np.minimum.reduceat(tmp, starts).astype(np.uint32)
    return sig


def _word_shingles(normalized: pl.Series, ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """Hashed word n-grams (words split on spaces); a shorter text is one shingle.

    A plain loop: word shingles are the option for long documents, not the hot path.
    """
    hashes: list[int] = []
    docs: list[int] = []
    for doc, text in enumerate(normalized.fill_null("").to_list()):
        words = text.split()
        if not words:
            continue
        span = max(len(words) - ngram + 1, 1)
        grams = [" ".join(words[i : i + ngram]) for i in range(span)]
        hashes.extend(xxhash.xxh3_64_intdigest(g.encode()) for g in grams)
        docs.extend([doc] * len(grams))
    return np.array(hashes, dtype=np.uint64), np.array(docs, dtype=np.int64)


def minhash_signatures(
    texts: pl.Series | Sequence[str],
    *,
    num_perm: int = 112,
    ngram: int = 5,
    shingle: Literal["char", "word"] = "char",
    scheme: Scheme = "oph",
    seed: int = 1,
    workers: int = 1,
    normalized: bool = False,
    bits: Literal[32, 16] = 32,
) -> np.ndarray:
    """MinHash signatures of texts, shape (len(texts), num_perm), dtype uint32.

    `bits=16` keeps the low 16 bits of each value (uint16): half the memory, and a chance
    agreement of 1/65536 per position, negligible for LSH and Jaccard estimates; near_dedup
    uses it so 1M rows fit in well under 2 GiB.

    `shingle="char"` hashes byte n-grams (1 <= ngram <= 7) of the normalized UTF-8 text;
    `shingle="word"` hashes word n-grams. `scheme="oph"` is one-permutation MinHash
    (fast path), `scheme="classic"` is datasketch's legacy estimator. The fraction of equal
    positions between two signatures estimates the Jaccard similarity of their shingle sets.
    `workers > 1` runs 8K-row chunks on threads. On the 2-core bench machine this gave no
    measurable gain (the `np.minimum.at` scatter holds the GIL), so the default is one and
    the benchmark figures are for one core.
    """
    series = texts if isinstance(texts, pl.Series) else pl.Series("text", list(texts), pl.String)
    if shingle == "word" and not normalized:
        series = normalize_text(series)
    if shingle == "char" and not 1 <= ngram <= 7:
        raise ValueError(f"char shingles need 1 <= ngram <= 7 bytes, got ngram={ngram}")
    if shingle not in ("char", "word"):
        raise ValueError(f"shingle must be 'char' or 'word', got {shingle!r}")
    if bits not in (16, 32):
        raise ValueError(f"bits must be 16 or 32, got {bits}")
    if scheme not in ("oph", "classic"):
        raise ValueError(f"scheme must be 'oph' or 'classic', got {scheme!r}")
    if num_perm < 1 or ngram < 1:
        raise ValueError(f"num_perm and ngram must be positive, got {num_perm}, {ngram}")
    sign = _oph_signatures if scheme == "oph" else _classic_signatures

    def one_chunk(start: int, stop: int) -> np.ndarray:
        part = series.slice(start, stop - start)
        if shingle == "char":
            data, offsets = _text_buffers(part if normalized else normalize_text(part))
            hashes, doc_of = _char_shingles(data, offsets, ngram)
        else:
            hashes, doc_of = _word_shingles(part, ngram)  # `series` is normalized
        sig = sign(hashes, doc_of, stop - start, num_perm, seed)
        return sig.astype(np.uint16) if bits == 16 else sig

    bounds = [(s, min(s + _CHUNK_ROWS, len(series))) for s in range(0, len(series), _CHUNK_ROWS)]
    if not bounds:
        return np.zeros((0, num_perm), dtype=np.uint16 if bits == 16 else np.uint32)
    if workers <= 1 or len(bounds) == 1:
        parts = [one_chunk(s, e) for s, e in bounds]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            parts = list(pool.map(lambda b: one_chunk(*b), bounds))
    return np.concatenate(parts, axis=0)


def shingle_set(text: str, *, ngram: int = 5, shingle: Literal["char", "word"] = "char") -> set:
    """The shingle set `minhash_signatures` hashes for one text (for exact Jaccard checks)."""
    return _shingles_of_normalized(normalize_text(pl.Series([text])).item(), ngram, shingle)


def _shingles_of_normalized(norm: str, ngram: int, shingle: str) -> set:
    if shingle == "word":
        words = [w for w in norm.split(" ") if w]
        if len(words) < ngram:
            return {tuple(words)} if words else set()
        return {tuple(words[i : i + ngram]) for i in range(len(words) - ngram + 1)}
    raw = norm.encode("utf-8")
    if len(raw) < ngram:
        return {raw} if raw else set()
    return {raw[i : i + ngram] for i in range(len(raw) - ngram + 1)}


def jaccard(a: set, b: set) -> float:
    """Exact Jaccard similarity of two sets (1.0 for two empty sets)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


# --------------------------------------------------------------------------- LSH parameters


def _band_curve(s: np.ndarray, bands: int, rows: int) -> np.ndarray:
    return 1.0 - (1.0 - s**rows) ** bands


def optimal_bands(
    threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5
) -> tuple[int, int]:
    """(bands, rows) with bands*rows <= num_perm minimizing the weighted FP + FN area.

    False positives: the probability mass of becoming a candidate below `threshold`;
    false negatives: the mass of not becoming one above it (text-dedup's and datasketch's
    rule, integrated here with the trapezoid rule on a fine grid).
    """
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold}")
    low = np.linspace(0.0, threshold, 1001)
    high = np.linspace(threshold, 1.0, 1001)
    best, best_err = (1, 1), float("inf")
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            fp = np.trapezoid(_band_curve(low, bands, rows), low)
            fn = np.trapezoid(1.0 - _band_curve(high, bands, rows), high)
            err = fp_weight * fp + fn_weight * fn
            if err < best_err:
                best, best_err = (bands, rows), err
    return best


# --------------------------------------------------------------------------- clustering


def _reference_mask(df: pl.DataFrame, reference_columns: Sequence[str]) -> np.ndarray:
    """True where a row has a non-empty value in any of the reference columns present."""
    mask = np.zeros(df.height, dtype=bool)
    for name in reference_columns:
        if name not in df.columns:
            continue
        col = df.get_column(name)
        if col.dtype == pl.String:
            ok = col.is_not_null() & (col.str.strip_chars() != "")
        elif isinstance(col.dtype, pl.List):
            ok = col.is_not_null() & (col.list.len() > 0)
        else:
            ok = col.is_not_null()
        mask |= ok.fill_null(False).to_numpy()
    return mask


def _representatives(labels: np.ndarray, has_ref: np.ndarray) -> np.ndarray:
    """Per row, the row index of its cluster's representative (reference first, then order)."""
    n = len(labels)
    priority = np.where(has_ref, 0, n).astype(np.int64) + np.arange(n, dtype=np.int64)
    best = np.full(labels.max() + 1 if n else 0, 2 * n, dtype=np.int64)
    np.minimum.at(best, labels, priority)
    return best[labels] % n if n else best


def _split(
    df: pl.DataFrame,
    labels: np.ndarray,
    has_ref: np.ndarray,
    *,
    id_column: str,
    reason: str,
    prefix: str,
    extra: dict[str, np.ndarray] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame, np.ndarray]:
    """Kept rows and dropped rows (with cluster_id, duplicate_of, cluster_size, extras)."""
    rep = _representatives(labels, has_ref)
    is_rep = rep == np.arange(len(labels))
    sizes = np.bincount(labels)[labels]
    ids = df.get_column(id_column).cast(pl.String)
    drop_idx = np.flatnonzero(~is_rep)
    rep_ids = ids.gather(rep[drop_idx])
    dropped = df[drop_idx].with_columns(
        pl.lit(reason).alias("reason"),
        (pl.lit(prefix) + rep_ids).alias("cluster_id"),
        rep_ids.alias("duplicate_of"),
        pl.Series("cluster_size", sizes[drop_idx], dtype=pl.Int64),
        *[pl.Series(k, v[drop_idx]) for k, v in (extra or {}).items()],
    )
    return df[np.flatnonzero(is_rep)], dropped, rep


def _check_input(df: pl.DataFrame, text_column: str, id_column: str) -> None:
    for name in (text_column, id_column):
        if name not in df.columns:
            raise ValueError(f"dedup input has no column {name!r}; columns: {df.columns}")
    nulls = df.get_column(id_column).is_null()
    if nulls.any():
        raise ValueError(f"dedup input column {id_column!r} is null at row {nulls.arg_max()}")


def exact_dedup(
    df: pl.DataFrame,
    *,
    text_column: str = "problem",
    id_column: str = "id",
    reference_columns: Sequence[str] = ("answer", "tests"),
) -> StepResult:
    """Drop rows whose normalized text equals an earlier-chosen representative's.

    The cluster key is a 64-bit hash of the normalized text; `cluster_id` is `exact:` + the
    representative's id, and `exact_key` (xxh3-64 of the normalized text, stable across
    machines and releases) is recorded on dropped rows.
    """
    _check_input(df, text_column, id_column)
    norm = normalize_text(df.get_column(text_column))
    # Group by a 64-bit hash of the normalized text (at 1M rows a collision has odds ~1e-8);
    # ranking the strings themselves costs several copies of the column in memory.
    _, labels = np.unique(norm.hash(seed=0).to_numpy(), return_inverse=True)
    labels = labels.astype(np.int64)
    has_ref = _reference_mask(df, reference_columns)
    kept, dropped, rep = _split(
        df, labels, has_ref, id_column=id_column, reason="exact_duplicate", prefix="exact:"
    )
    if dropped.height:
        keys = norm.gather(np.flatnonzero(rep != np.arange(len(rep)))).to_list()
        dropped = dropped.with_columns(
            pl.Series("exact_key", [xxhash.xxh3_64_hexdigest(k.encode()) for k in keys], pl.String)
        )
    stats = {
        "rows_in": df.height,
        "rows_out": kept.height,
        "dropped": dropped.height,
        "clusters_with_duplicates": int((np.bincount(labels) > 1).sum()) if df.height else 0,
    }
    return StepResult(kept=kept, dropped=dropped, stats=stats)


def _key_hash(series: pl.Series) -> np.ndarray:
    """Deterministic uint64 hash of a string column (null -> 0)."""
    values = series.to_list()
    return np.array(
        [0 if v is None else xxhash.xxh3_64_intdigest(v.encode()) | 1 for v in values],
        dtype=np.uint64,
    )


def reference_keys(df: pl.DataFrame, reference_columns: Sequence[str]) -> np.ndarray:
    """Per row, a uint64 hash of its reference (0 when it has none).

    The first non-empty reference column wins: `answer` is compared after
    `normalize_answer`, other columns (e.g. `tests`) by their exact text or JSON.
    """
    keys = np.zeros(df.height, dtype=np.uint64)
    for name in reference_columns:
        if name not in df.columns:
            continue
        col = df.get_column(name)
        if name == "answer" and col.dtype in (pl.String, pl.Null):
            text = normalize_answer(col)
        elif col.dtype == pl.String:
            stripped = pl.col("v").str.strip_chars()
            frame = pl.DataFrame({"v": col})
            text = frame.select(pl.when(stripped != "").then(stripped)).to_series()
        else:  # structs, lists, numbers: their canonical JSON
            values = [
                None if v is None else json.dumps(v, sort_keys=True, default=str)
                for v in col.to_list()
            ]
            text = pl.Series(name, values, dtype=pl.String)
        hashes = _key_hash(text)
        keys = np.where(keys == 0, hashes, keys)
    return keys


def _star_edges(keys: np.ndarray, order_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges from every row to the first row (in `order_rows` order) sharing its key."""
    perm = order_rows[np.argsort(keys[order_rows], kind="stable")]
    sk = keys[perm]
    starts = np.r_[True, sk[1:] != sk[:-1]]
    first = perm[np.maximum.accumulate(np.where(starts, np.arange(len(perm)), 0))]
    return perm[~starts], first[~starts]


def _agreement(sig: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Fraction of equal signature positions for each pair (a[i], b[i])."""
    out = np.empty(len(a), dtype=np.float32)
    step = 200_000
    for s in range(0, len(a), step):
        out[s : s + step] = (sig[a[s : s + step]] == sig[b[s : s + step]]).mean(axis=1)
    return out


def _pack_ordered(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Ordered pairs of indices below 2**32 as uint64 (a << 32 | b)."""
    return (a.astype(np.uint64) << np.uint64(32)) | b.astype(np.uint64)


def _pack_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Unordered pairs as sorted unique uint64 (low index << 32 | high index)."""
    lo, hi = np.minimum(a, b).astype(np.uint64), np.maximum(a, b).astype(np.uint64)
    return sorted_unique((lo << np.uint64(32)) | hi)


def _components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Connected components (union-find by min-label propagation with pointer jumping)."""
    labels = np.arange(n, dtype=np.int64)
    if len(a) == 0:
        return labels
    while True:
        la, lb = labels[a], labels[b]
        low = np.minimum(la, lb)
        before = labels.copy()
        np.minimum.at(labels, la, low)
        np.minimum.at(labels, lb, low)
        while True:  # pointer jumping: follow parents to their roots
            nxt = labels[labels]
            if np.array_equal(nxt, labels):
                break
            labels = nxt
        if np.array_equal(labels, before):
            return labels


def near_dedup(
    df: pl.DataFrame,
    *,
    text_column: str = "problem",
    id_column: str = "id",
    threshold: float = 0.6,
    num_perm: int = 112,
    bands: int | None = None,
    rows: int | None = None,
    ngram: int = 5,
    shingle: Literal["char", "word"] = "char",
    scheme: Scheme = "oph",
    verify: Verify = "estimate",
    keep_apart: Sequence[str] = KEEP_APART_CHOICES,
    reference_columns: Sequence[str] = ("answer", "tests"),
    seed: int = 1,
    workers: int = 1,
) -> StepResult:
    """Drop near-duplicates: MinHash LSH candidates -> verification -> components.

    `bands`/`rows` default to `optimal_bands(threshold, num_perm)`. `verify="estimate"`
    keeps a candidate pair whose signature agreement is >= threshold, `"exact"` computes
    the exact shingle Jaccard (slower, Python sets), `"none"` trusts LSH alone.
    `keep_apart` names what must match for a merge: `"answer"` (the reference, the first
    non-empty of `reference_columns`: a normalized answer, or a code problem's tests; a row
    without one may join a cluster only if that links it to a single reference)
    and `"numbers"` (the multiset of numbers in the text). Pass `keep_apart=()` for plain
    text dedup.
    """
    _check_input(df, text_column, id_column)
    unknown = set(keep_apart) - set(KEEP_APART_CHOICES)
    if unknown:
        raise ValueError(f"keep_apart accepts {KEEP_APART_CHOICES}, got {sorted(unknown)}")
    if verify not in ("estimate", "exact", "none"):
        raise ValueError(f"verify must be 'estimate', 'exact' or 'none', got {verify!r}")
    if (bands is None) != (rows is None):
        raise ValueError("give both bands and rows, or neither")
    if bands is None or rows is None:
        bands, rows = optimal_bands(threshold, num_perm)
    if bands * rows > num_perm:
        raise ValueError(f"bands*rows = {bands * rows} exceeds num_perm = {num_perm}")
    n = df.height
    texts = df.get_column(text_column)
    norm = normalize_text(texts)
    sig = minhash_signatures(
        norm,
        normalized=True,
        num_perm=num_perm,
        ngram=ngram,
        shingle=shingle,
        scheme=scheme,
        seed=seed,
        workers=workers,
        bits=16,
    )
    use_answer = "answer" in keep_apart
    side = np.zeros(n, dtype=np.uint64)
    if "numbers" in keep_apart:
        side ^= number_hashes(norm)
    answer_hash = np.zeros(n, dtype=np.uint64)
    if use_answer:
        answer_hash = reference_keys(df, reference_columns)
    no_answer = answer_hash == 0

    all_rows = np.arange(n, dtype=np.int64)
    answered_first = np.argsort(no_answer, kind="stable").astype(np.int64)
    same: list[np.ndarray] = []  # packed unique pairs, merged band by band to bound memory
    link_a: list[np.ndarray] = []
    link_b: list[np.ndarray] = []
    for band in range(bands):
        block = sig[:, band * rows : (band + 1) * rows].astype(np.uint64)
        h = np.full(n, np.uint64((band + 1) * 0x9E3779B97F4A7C15 % (1 << 64)), dtype=np.uint64)
        for j in range(rows):
            h = _mix64(h ^ block[:, j])
        h ^= side
        a, b = _star_edges(h ^ _mix64(answer_hash.copy()), all_rows)
        packed = _pack_pairs(a, b)
        same = [sorted_union(same[0], packed)] if same else [packed]
        if use_answer and no_answer.any() and (~no_answer).any():
            a, b = _star_edges(h, answered_first)  # a row without answer -> answered row
            cross = no_answer[a] & ~no_answer[b]
            link_a.append(a[cross])
            link_b.append(b[cross])

    def verified(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        a, b = (packed >> np.uint64(32)).astype(np.int64), (packed & _MASK32).astype(np.int64)
        found = len(a)
        if verify == "estimate":
            ok = _agreement(sig, a, b) >= threshold
            a, b = a[ok], b[ok]
        elif verify == "exact":
            sets: dict[int, set] = {}
            norm_list = norm.to_list()

            def get(i: int) -> set:
                if i not in sets:
                    sets[i] = _shingles_of_normalized(norm_list[i], ngram, shingle)
                return sets[i]

            ok = np.array(
                [jaccard(get(x), get(y)) >= threshold for x, y in zip(a, b, strict=True)], bool
            )
            a, b = a[ok], b[ok]
        return a, b, found

    ea, eb, candidates = verified(same[0] if same else np.zeros(0, np.uint64))
    labels = _components(n, ea, eb)
    attached = ambiguous = 0
    links = _pack_pairs(np.concatenate(link_a), np.concatenate(link_b)) if link_a else None
    la, lb, link_candidates = verified(
        links if links is not None else np.zeros(0, np.uint64)  # already sorted and unique
    )
    if len(la):
        la, lb = np.where(no_answer[la], la, lb), np.where(no_answer[la], lb, la)  # null first
        comp_has_answer = np.zeros(n, dtype=bool)
        np.logical_or.at(comp_has_answer, labels, ~no_answer)
        packed = sorted_unique(_pack_ordered(labels[la], labels[lb]))
        pairs = np.stack([packed >> np.uint64(32), packed & _MASK32], axis=1).astype(np.int64)
        pairs = pairs[~comp_has_answer[pairs[:, 0]]]
        null_comp, counts = np.unique(pairs[:, 0], return_counts=True)
        single = null_comp[counts == 1]
        target = pairs[sorted_isin(pairs[:, 0], single)]
        remap = np.arange(n, dtype=np.int64)
        remap[target[:, 0]] = target[:, 1]
        labels = remap[labels]
        attached, ambiguous = len(single), int((counts > 1).sum())

    has_ref = _reference_mask(df, reference_columns)
    rep = _representatives(labels, has_ref)
    extra = {"jaccard_estimate": _agreement(sig, np.arange(n), rep)}
    if verify == "exact":  # the verified similarity to the representative, as a column
        norm_list = norm.to_list()
        exact = np.full(n, np.nan, dtype=np.float32)
        for i in np.flatnonzero(rep != np.arange(n)):
            a = _shingles_of_normalized(norm_list[i], ngram, shingle)
            b = _shingles_of_normalized(norm_list[rep[i]], ngram, shingle)
            exact[i] = jaccard(a, b)
        extra["jaccard_exact"] = exact
    kept, dropped, _ = _split(
        df,
        labels,
        has_ref,
        id_column=id_column,
        reason="near_duplicate",
        prefix="near:",
        extra=extra,
    )
    stats = {
        "rows_in": n,
        "rows_out": kept.height,
        "dropped": dropped.height,
        "bands": bands,
        "rows_per_band": rows,
        "threshold": threshold,
        "candidate_pairs": candidates + link_candidates,
        "verified_pairs": int(len(ea) + len(la)),
        "clusters_with_duplicates": int((np.bincount(labels) > 1).sum()) if n else 0,
        "answerless_clusters_attached": attached,
        "answerless_clusters_ambiguous": ambiguous,
        "keep_apart": list(keep_apart),
    }
    return StepResult(kept=kept, dropped=dropped, stats=stats)
