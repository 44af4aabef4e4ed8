"""Near dedup: MinHash LSH candidates, verification, connected components, and the answer-
and number-aware keep-apart rules that keep template siblings apart."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl
import xxhash

from curation.dedup.clusters import check_input, reference_mask, representatives, split_clusters
from curation.dedup.normalize import answer_key, mix64, problem_number_hashes, shingle_text
from curation.dedup.signatures import (
    Scheme,
    jaccard,
    minhash_signatures,
    optimal_bands,
    shingles_of_normalized,
)
from curation.sorted_sets import sorted_isin, sorted_union, sorted_unique
from lake import StepResult
from lake.operators import counted

Verify = Literal["estimate", "exact", "none"]
KEEP_APART_CHOICES = ("answer", "numbers")
MASK32 = np.uint64(0xFFFFFFFF)


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
    `answer_key`, other columns (e.g. `tests`) by their exact text or JSON.
    """
    keys = np.zeros(df.height, dtype=np.uint64)
    for name in reference_columns:
        if name not in df.columns:
            continue
        col = df.get_column(name)
        if name == "answer" and col.dtype in (pl.String, pl.Null):
            text = answer_key(col)
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


@dataclass(frozen=True)
class RowSketch:
    """What near dedup computes for each row before banding (`sketch_rows`)."""

    norm: pl.Series  # the normalized text (`shingle_text`)
    sig: np.ndarray  # MinHash signatures, (rows, num_perm) uint16
    side: np.ndarray  # uint64 hash of the problem's numbers (0 without keep_apart "numbers")
    answer_hash: np.ndarray  # uint64 hash of the reference (0: none, or no keep_apart "answer")

    @property
    def no_answer(self) -> np.ndarray:
        return self.answer_hash == 0


def sketch_rows(
    df: pl.DataFrame,
    *,
    text_column: str,
    num_perm: int,
    ngram: int,
    shingle: Literal["char", "word"],
    scheme: Scheme,
    seed: int,
    keep_apart: Sequence[str],
    reference_columns: Sequence[str],
    workers: int = 1,
) -> RowSketch:
    """Signatures and keep-apart hashes of `df`'s rows; each row's depend on that row alone,
    so a cluster executor computes them block by block."""
    texts = df.get_column(text_column)
    norm = shingle_text(texts)
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
    side = np.zeros(df.height, dtype=np.uint64)
    if "numbers" in keep_apart:
        side ^= problem_number_hashes(texts, norm)
    answer_hash = np.zeros(df.height, dtype=np.uint64)
    if "answer" in keep_apart:
        answer_hash = reference_keys(df, reference_columns)
    return RowSketch(norm=norm, sig=sig, side=side, answer_hash=answer_hash)


def band_keys(sig: np.ndarray, bands: int, rows: int, side: np.ndarray) -> Iterator[np.ndarray]:
    """Each band's LSH key per row, band by band: the band's `rows` signature values mixed
    (SplitMix64) into a seed that names the band, xor `side` (the row's numbers hash). Rows
    with equal keys in some band are candidate pairs. Mix the answer hash in as well
    (`key ^ mix64(answer_hash)`) for keys that keep different answers apart."""
    n = sig.shape[0]
    for band in range(bands):
        block = sig[:, band * rows : (band + 1) * rows].astype(np.uint64)
        h = np.full(n, np.uint64((band + 1) * 0x9E3779B97F4A7C15 % (1 << 64)), dtype=np.uint64)
        for j in range(rows):
            h = mix64(h ^ block[:, j])
        yield h ^ side


def star_edges(keys: np.ndarray, order_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges from every row to the first row (in `order_rows` order) sharing its key: a
    bucket of m rows gives m - 1 edges, not m(m-1)/2, and the same components."""
    if order_rows.size == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
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


def pack_ordered(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Ordered pairs of indices below 2**32 as uint64 (a << 32 | b)."""
    return (a.astype(np.uint64) << np.uint64(32)) | b.astype(np.uint64)


def pack_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
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
    and `"numbers"` (the sequence of numbers in the problem, leaving out a source header or
    an id tag: `problem_number_hashes`). Pass `keep_apart=()` for plain text dedup.
    """
    check_input(df, text_column, id_column)
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
    sketch = sketch_rows(
        df,
        text_column=text_column,
        num_perm=num_perm,
        ngram=ngram,
        shingle=shingle,
        scheme=scheme,
        seed=seed,
        keep_apart=keep_apart,
        reference_columns=reference_columns,
        workers=workers,
    )
    norm, sig, no_answer = sketch.norm, sketch.sig, sketch.no_answer
    use_answer = "answer" in keep_apart

    all_rows = np.arange(n, dtype=np.int64)
    answered_first = np.argsort(no_answer, kind="stable").astype(np.int64)
    answer_mix = mix64(sketch.answer_hash.copy())
    same: list[np.ndarray] = []  # packed unique pairs, merged band by band to bound memory
    link_a: list[np.ndarray] = []
    link_b: list[np.ndarray] = []
    for h in band_keys(sig, bands, rows, sketch.side):
        a, b = star_edges(h ^ answer_mix, all_rows)
        packed = pack_pairs(a, b)
        same = [sorted_union(same[0], packed)] if same else [packed]
        if use_answer and no_answer.any() and (~no_answer).any():
            a, b = star_edges(h, answered_first)  # a row without answer -> answered row
            cross = no_answer[a] & ~no_answer[b]
            link_a.append(a[cross])
            link_b.append(b[cross])

    def verified(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        a, b = (packed >> np.uint64(32)).astype(np.int64), (packed & MASK32).astype(np.int64)
        found = len(a)
        if verify == "estimate":
            ok = _agreement(sig, a, b) >= threshold
            a, b = a[ok], b[ok]
        elif verify == "exact":
            sets: dict[int, set] = {}
            norm_list = norm.to_list()

            def get(i: int) -> set:
                if i not in sets:
                    sets[i] = shingles_of_normalized(norm_list[i], ngram, shingle)
                return sets[i]

            ok = np.array(
                [jaccard(get(x), get(y)) >= threshold for x, y in zip(a, b, strict=True)], bool
            )
            a, b = a[ok], b[ok]
        return a, b, found

    ea, eb, candidates = verified(same[0] if same else np.zeros(0, np.uint64))
    labels = _components(n, ea, eb)
    attached = ambiguous = 0
    links = pack_pairs(np.concatenate(link_a), np.concatenate(link_b)) if link_a else None
    la, lb, link_candidates = verified(
        links if links is not None else np.zeros(0, np.uint64)  # already sorted and unique
    )
    if len(la):
        la, lb = np.where(no_answer[la], la, lb), np.where(no_answer[la], lb, la)  # null first
        comp_has_answer = np.zeros(n, dtype=bool)
        np.logical_or.at(comp_has_answer, labels, ~no_answer)
        packed = sorted_unique(pack_ordered(labels[la], labels[lb]))
        pairs = np.stack([packed >> np.uint64(32), packed & MASK32], axis=1).astype(np.int64)
        pairs = pairs[~comp_has_answer[pairs[:, 0]]]
        null_comp, counts = np.unique(pairs[:, 0], return_counts=True)
        single = null_comp[counts == 1]
        target = pairs[sorted_isin(pairs[:, 0], single)]
        remap = np.arange(n, dtype=np.int64)
        remap[target[:, 0]] = target[:, 1]
        labels = remap[labels]
        attached, ambiguous = len(single), int((counts > 1).sum())

    has_ref = reference_mask(df, reference_columns)
    rep = representatives(labels, has_ref)
    extra = {"jaccard_estimate": _agreement(sig, np.arange(n), rep)}
    if verify == "exact":  # the verified similarity to the representative, as a column
        norm_list = norm.to_list()
        exact = np.full(n, np.nan, dtype=np.float32)
        for i in np.flatnonzero(rep != np.arange(n)):
            a = shingles_of_normalized(norm_list[i], ngram, shingle)
            b = shingles_of_normalized(norm_list[rep[i]], ngram, shingle)
            exact[i] = jaccard(a, b)
        extra["jaccard_exact"] = exact
    kept, dropped, _ = split_clusters(
        df,
        labels,
        has_ref,
        id_column=id_column,
        reason="near_duplicate",
        prefix="near:",
        extra=extra,
    )
    stats = {
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
    return counted(n, kept, dropped, stats)
