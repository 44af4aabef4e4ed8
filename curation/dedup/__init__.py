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

Modules: `normalize` (shingle text, answer keys, number hashes), `signatures` (MinHash and
LSH parameters), `clusters` (representatives, kept/dropped bookkeeping), `exact`, `near`.
"""

from curation.dedup.exact import exact_dedup
from curation.dedup.near import KEEP_APART_CHOICES, near_dedup, reference_keys
from curation.dedup.normalize import (
    answer_key,
    number_hashes,
    problem_number_hashes,
    shingle_text,
    without_source_tags,
)
from curation.dedup.signatures import (
    jaccard,
    minhash_signatures,
    optimal_bands,
    shingle_hash32,
    shingle_set,
)

__all__ = [
    "KEEP_APART_CHOICES",
    "answer_key",
    "exact_dedup",
    "jaccard",
    "minhash_signatures",
    "near_dedup",
    "number_hashes",
    "optimal_bands",
    "problem_number_hashes",
    "reference_keys",
    "shingle_hash32",
    "shingle_set",
    "shingle_text",
    "without_source_tags",
]
