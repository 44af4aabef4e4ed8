"""Measure, then decide: per-row overlap measurements and the contamination rules.

Every row gets, for the benchmark item it overlaps most, the measurement columns in
MEASURE_COLUMNS; a `ContaminationRule` turns them into a decision, so thresholds can be
re-applied with `decide` (or SQL) without rescanning.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from curation.decontaminate.index import DEFAULT_N, BenchmarkIndex, StockNgrams
from curation.sorted_sets import sorted_isin

RULES = ("literal", "boilerplate-aware")


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

    `quote_share` (None: off) lowers the hit threshold for quotes of short items: a row that
    holds the first or last n-gram of an item of at least 2n tokens (it quotes from one end of
    the item) is contaminated once its hits reach what a quote of `quote_share` of the item's
    tokens holds, `floor(quote_share * tokens) - n + 1` (at least 1), when that is below
    `min_hits`. The second half of a 20-token item holds 2 of its 9-grams, never the 5 that
    `min_hits` asks of longer quotes; a phrase shared from the middle of an item still needs
    `min_hits`. With
    `ignore_stock`, n-grams made only of numbers (`1 2 3 4 5 6 7 8 9`) are not informative
    either: a list of numbers recurs across unrelated problems.
    """

    name: str
    min_hits: int
    min_coverage: float | None
    ignore_stock: bool
    min_df: int = 3
    copy_coverage: float = 0.4
    copy_hits: int | None = None
    quote_share: float | None = None

    def __post_init__(self) -> None:
        if self.min_hits < 1:
            raise ValueError(f"min_hits must be >= 1, got {self.min_hits}")
        if self.min_coverage is not None and not 0 < self.min_coverage <= 1:
            raise ValueError(f"min_coverage must be in (0, 1], got {self.min_coverage}")
        if self.min_df < 2:
            raise ValueError(f"min_df must be >= 2, got {self.min_df}")
        if not 0 < self.copy_coverage <= 1:
            raise ValueError(f"copy_coverage must be in (0, 1], got {self.copy_coverage}")
        if self.quote_share is not None and not 0 < self.quote_share <= 1:
            raise ValueError(f"quote_share must be in (0, 1], got {self.quote_share}")

    def hits_needed(self, item_tokens: np.ndarray, end_quote: np.ndarray, n: int) -> np.ndarray:
        """Per (row, item): the (informative) hits that make the row contaminated, given the
        item's token count and whether the row holds the item's first or last n-gram."""
        needed = np.full(item_tokens.shape, self.min_hits, dtype=np.int64)
        if self.quote_share is None:
            return needed
        quote = np.floor(self.quote_share * item_tokens).astype(np.int64) - n + 1
        lower = end_quote & (item_tokens >= 2 * n)  # shorter items: no half holds an n-gram
        needed[lower] = np.clip(quote[lower], 1, self.min_hits)
        return needed


def rule_named(name: str, **overrides: object) -> ContaminationRule:
    """The `literal` rule (the paper's: any shared n-gram drops) or `boilerplate-aware`.

    Boilerplate-aware defaults, chosen on AIME 1983-2023 and MATH train against AIME 24/25,
    AMC and MATH-500 (bench/README.md, Decontamination): an n-gram is stock when >= 3 distinct texts
    hold it; 5 informative n-grams (13 consecutive item-specific words: a half-quote of a
    26-word item) or 90% of an item's n-grams (a copy with a few words changed) mark a copy,
    and so does a quote of 40% of an item from one of its ends (`quote_share=0.4`: half of
    a short item's words, cut in its raw text, hold 35-50% of its tokens when one half is
    mostly LaTeX). With 3 informative n-grams for every item, AIME flags grow 12 -> 19 and
    MATH train 69 -> 117, nearly all shared answer-format sentences; with 8, real half-quotes
    of shorter items slip through. A threshold of 9% of the item's n-grams without the end
    condition catches short half-quotes too, but flags 4 more AIME problems that share only a
    phrase from the middle of a short item ("to the right of the decimal point in the");
    `quote_share=0.5` misses 15% of the word halves of 18-30 token items.
    """
    presets = {
        "literal": {"min_hits": 1, "min_coverage": None, "ignore_stock": False},
        "boilerplate-aware": {
            "min_hits": 5,
            "min_coverage": 0.9,
            "ignore_stock": True,
            "quote_share": 0.4,
        },
    }
    if name not in presets:
        raise ValueError(f"unknown decontamination rule {name!r}; choose one of {', '.join(RULES)}")
    params = {**presets[name], **{k: v for k, v in overrides.items() if v is not None}}
    return ContaminationRule(name=name, **params)  # type: ignore[arg-type]


MEASURE_COLUMNS = {
    "decontam_hits": pl.Int64,
    "decontam_informative_hits": pl.Int64,
    "decontam_coverage": pl.Float64,
    "decontam_item_tokens": pl.Int64,
    "decontam_end_quote": pl.Boolean,
    "benchmark": pl.String,
    "benchmark_id": pl.String,
    "ngram": pl.String,
    "contaminated": pl.Boolean,
}


@dataclass
class ItemOverlaps:
    """Overlaps summed per (row, item), sorted by row then item: `hits` (distinct shared
    n-grams), `informative` (those not stock), `gram` (the first informative one by
    position, else the first), `coverage` (hits / the item's n-grams), `end_quote` (the row
    holds the item's first or last n-gram), `item_tokens` (the item's length), `n`."""

    row: np.ndarray
    item: np.ndarray
    hits: np.ndarray
    informative: np.ndarray
    gram: np.ndarray
    coverage: np.ndarray
    end_quote: np.ndarray
    item_tokens: np.ndarray
    n: int

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
        at_end = (gram == index.items["first_gram"].to_numpy()[item]) | (
            gram == index.items["last_gram"].to_numpy()[item]
        )
        end_quote = np.bincount(np.searchsorted(keys, key), weights=at_end, minlength=keys.size)
        item_tokens = index.items["item_tokens"].to_numpy()[items]
        return cls(
            rows,
            items,
            hits,
            informative,
            gram[first[leads]],
            coverage,
            end_quote > 0,
            item_tokens,
            index.n,
        )

    def contaminated(self, rule: ContaminationRule) -> np.ndarray:
        """`decide` on these arrays."""
        needed = rule.hits_needed(self.item_tokens, self.end_quote, self.n)
        verdict = (self.informative if rule.ignore_stock else self.hits) >= needed
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
    if rule.ignore_stock:  # stock phrases, and lists of numbers
        is_stock = index.gram_table["numeric"].to_numpy().copy()
        if stock is not None:
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
            "decontam_item_tokens": m.item_tokens[best],
            "decontam_end_quote": m.end_quote[best],
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


def decide(measured: pl.DataFrame, rule: ContaminationRule, n: int = DEFAULT_N) -> pl.DataFrame:
    """Add `contaminated` from the measurement columns (re-runnable with other thresholds;
    `n` is the n-gram size the measurements were taken with)."""
    hits = "decontam_informative_hits" if rule.ignore_stock else "decontam_hits"
    needed = rule.hits_needed(
        measured["decontam_item_tokens"].fill_null(0).to_numpy(),
        measured["decontam_end_quote"].fill_null(False).to_numpy(),
        n,
    )
    verdict = pl.col(hits) >= pl.Series(needed)
    if rule.min_coverage is not None:
        verdict = verdict | (pl.col("decontam_coverage") >= rule.min_coverage)
    return measured.with_columns(contaminated=verdict.fill_null(False))
