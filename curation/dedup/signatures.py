"""MinHash signatures of texts (one-permutation or datasketch's classic scheme) and the LSH
banding parameters derived from a target threshold."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import numpy as np
import polars as pl
import xxhash

from curation.dedup.normalize import CHUNK_ROWS, mix64, shingle_text, text_buffers

Scheme = Literal["oph", "classic"]

_MASK32 = np.uint64(0xFFFFFFFF)
_EMPTY = np.uint32(0xFFFFFFFF)
_MERSENNE = np.uint64((1 << 61) - 1)
_ROTATE = np.uint64(0x9E3779B1)


def shingle_hash32(shingle: bytes) -> int:
    """The 32-bit hash `minhash_signatures` gives one char shingle (for datasketch checks)."""
    packed = int.from_bytes(shingle, "little") | (len(shingle) << 56)
    value = np.array([packed], dtype=np.uint64)
    return int(mix64(value)[0] & _MASK32)


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
    return mix64(values), doc_of


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
        series = shingle_text(series)
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
            data, offsets = text_buffers(part if normalized else shingle_text(part))
            hashes, doc_of = _char_shingles(data, offsets, ngram)
        else:
            hashes, doc_of = _word_shingles(part, ngram)  # `series` is normalized
        sig = sign(hashes, doc_of, stop - start, num_perm, seed)
        return sig.astype(np.uint16) if bits == 16 else sig

    bounds = [(s, min(s + CHUNK_ROWS, len(series))) for s in range(0, len(series), CHUNK_ROWS)]
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
    return shingles_of_normalized(shingle_text(pl.Series([text])).item(), ngram, shingle)


def shingles_of_normalized(norm: str, ngram: int, shingle: str) -> set:
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
