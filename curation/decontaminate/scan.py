"""The operator: scan rows in parallel chunks, measure, decide, and split kept from dropped."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from functools import partial
from typing import Literal

import numpy as np
import polars as pl

from curation.decontaminate.benchmarks import Benchmark
from curation.decontaminate.index import (
    DEFAULT_N,
    BenchmarkIndex,
    StockNgrams,
    find_overlaps,
)
from curation.decontaminate.rules import (
    MEASURE_COLUMNS,
    ContaminationRule,
    document_grams,
    measure_rows,
    rule_named,
    stock_grams,
)
from curation.decontaminate.tokens import Tokens, tokenize
from lake import StepResult
from lake.operators import counted


def decontamination_scope(rule: str | ContaminationRule) -> Literal["rows", "table"]:
    """The step scope `decontaminate` needs with `rule`: `table` when the rule counts stock
    n-grams over every input row (boilerplate-aware: a chunk of rows would see other
    document frequencies), `rows` for a rule that decides each row alone (literal)."""
    chosen = rule_named(rule) if isinstance(rule, str) else rule
    return "table" if chosen.ignore_stock else "rows"


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
            tokens = tokenize(chunk)  # needs no index: runs while the index is built
            return scan_chunk(chunk, built.result(), rule, offset=lo, tokens=tokens)

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


def scan_chunk(
    texts: pl.Series,
    index: BenchmarkIndex,
    rule: ContaminationRule,
    *,
    offset: int = 0,
    tokens: Tokens | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """One chunk of rows, numbered from `offset`: with a rule that decides each row alone,
    its measurements (`measure_rows`) and None; with stock n-grams, its overlaps and its
    (n-gram, text key) pairs (`document_grams`), whose union over every chunk gives the
    document frequencies that `stock_grams` needs before the overlaps can be measured."""
    found = find_overlaps(texts, index, tokens if tokens is not None else tokenize(texts))
    if not rule.ignore_stock:
        return measure_rows(found.with_columns(pl.col("row") + offset), index, rule), None
    rows = found["row"].unique().to_numpy()
    row_keys = np.zeros(texts.len(), dtype=np.uint64)
    row_keys[rows] = texts.gather(rows).fill_null("").hash().to_numpy()
    documents = document_grams(found, index, rule, row_keys)
    return found.with_columns(pl.col("row") + offset), documents


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
    measurement columns `decontam_hits`, `decontam_informative_hits`, `decontam_coverage`,
    `decontam_item_tokens`, `decontam_end_quote` (0 / null / false when nothing overlaps) so
    thresholds can be re-tuned later (`decide`, or SQL); dropped rows
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
    return decontamination_result(df, measured, rule, index, stock)


def decontamination_result(
    df: pl.DataFrame,
    measured: pl.DataFrame,
    rule: ContaminationRule,
    index: BenchmarkIndex,
    stock: StockNgrams | None = None,
) -> StepResult:
    """`decontaminate`'s result from the measurements of `df`'s rows (`scan_and_measure`'s
    frame: one row per overlapping input row, ascending `row`): every row with the measure
    columns, the contaminated ones dropped with their benchmark item and n-gram. A cluster
    executor that measures blocks elsewhere assembles its result here too."""
    # scatter the per-row measurements back (cheaper than a join that copies every column)
    rows = measured["row"].to_numpy()
    hits = np.zeros(df.height, dtype=np.int64)
    informative = np.zeros(df.height, dtype=np.int64)
    coverage = np.full(df.height, np.nan)
    item_tokens = np.zeros(df.height, dtype=np.int64)
    end_quote = np.zeros(df.height, dtype=np.bool_)
    drop_mask = np.zeros(df.height, dtype=np.bool_)
    hits[rows] = measured["decontam_hits"].to_numpy()
    informative[rows] = measured["decontam_informative_hits"].to_numpy()
    coverage[rows] = measured["decontam_coverage"].to_numpy()
    item_tokens[rows] = measured["decontam_item_tokens"].to_numpy()
    end_quote[rows] = measured["decontam_end_quote"].to_numpy()
    drop_mask[rows] = measured["contaminated"].to_numpy()
    # a second pass (e.g. against more benchmarks) replaces the previous pass's measurements
    columns = [c for c in df.columns if c not in MEASURE_COLUMNS]
    measures = {
        "decontam_hits": pl.Series(hits),
        "decontam_informative_hits": pl.Series(informative),
        "decontam_coverage": pl.Series(coverage).fill_nan(None),
        "decontam_item_tokens": pl.Series(item_tokens),
        "decontam_end_quote": pl.Series(end_quote),
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
        "overlapping_rows": measured.height,
        "dropped_by_benchmark": dict(
            dropped.group_by("benchmark").len().sort("benchmark").iter_rows()
        ),
        "n": index.n,
        "rule": asdict(rule),
        "benchmarks": [b.manifest_entry() for b in index.benchmarks],
        "stock_ngrams": len(stock) if stock is not None else 0,
    }
    return counted(df.height, kept, dropped, stats)
