"""Exact and near-duplicate removal (see `curation.dedup.signatures` for the whole design)."""

from curation.dedup.signatures import (
    KEEP_APART_CHOICES,
    exact_dedup,
    jaccard,
    minhash_signatures,
    near_dedup,
    normalize_answer,
    normalize_text,
    number_hashes,
    optimal_bands,
    shingle_hash32,
    shingle_set,
)

__all__ = [
    "KEEP_APART_CHOICES",
    "exact_dedup",
    "jaccard",
    "minhash_signatures",
    "near_dedup",
    "normalize_answer",
    "normalize_text",
    "number_hashes",
    "optimal_bands",
    "shingle_hash32",
    "shingle_set",
]
