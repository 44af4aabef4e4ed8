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
n-grams found in the row), `decontam_item_tokens` (the item's length) and
`decontam_end_quote` (the row holds the item's first or last n-gram), plus `benchmark`,
`benchmark_id`, `ngram`. Two rules decide:

- `literal`: the paper's rule; any shared n-gram drops the row.
- `boilerplate-aware` (default): ignore stock n-grams (frequent across the input rows, the
  benchmarks, or a reference corpus of problems, see `build_stock_ngrams`) and n-grams made
  only of numbers, then drop a row when its informative hits against one item reach
  `min_hits`, or the item coverage reaches `min_coverage`, or it quotes 40% of a short item
  from one of its ends (`quote_share`). A verbatim, re-spaced, prefixed, embedded or
  half-quoted copy shares many item-specific n-grams and is still caught; a clean problem
  that only shares "where m and n are relatively prime positive integers find m n" with an
  AIME item is not.

Benchmark items shorter than `n` tokens are matched as whole normalized strings contained in
the row text (at token boundaries).

Modules: `benchmarks` (the registry of test sets and their loaders), `tokens` (the
tokenizer), `index` (benchmark n-gram index, window scan, stock n-grams of a reference
corpus), `rules` (measurements and rules), `scan` (the operator).
"""

from curation.decontaminate.index import (
    DEFAULT_N,
    BenchmarkIndex,
    StockNgrams,
    build_stock_ngrams,
    find_overlaps,
)
from curation.decontaminate.rules import (
    MEASURE_COLUMNS,
    RULES,
    ContaminationRule,
    decide,
    measure,
    rule_named,
)
from curation.decontaminate.scan import decontaminate, decontamination_scope, scan_and_measure
from curation.decontaminate.tokens import LAYOUT_COMMANDS, Tokens, ngram_text, tokenize

__all__ = [
    "DEFAULT_N",
    "decontamination_scope",
    "LAYOUT_COMMANDS",
    "MEASURE_COLUMNS",
    "RULES",
    "BenchmarkIndex",
    "ContaminationRule",
    "StockNgrams",
    "Tokens",
    "build_stock_ngrams",
    "decide",
    "decontaminate",
    "find_overlaps",
    "measure",
    "ngram_text",
    "rule_named",
    "scan_and_measure",
    "tokenize",
]
