"""Benchmark decontamination: drop training rows that share word n-grams with test items.

Texts are normalized (case, whitespace, punctuation, LaTeX spacing and formatting commands
such as `$ x $` vs `$x$`, `\\dfrac` vs `\\frac`, `\\left(`) into word tokens, and every run of
`n` tokens (default 9, as in the Nemotron-Cascade recipe) is hashed to 64 bits. Rows are
scanned in bulk: tokenization runs in Polars, n-gram hashes are rolled over token-hash arrays
in NumPy, membership is a bitmap probe plus a sorted search against the benchmark n-gram
hashes, and every candidate hit is verified by exact string comparison, so a hash collision
can never drop a row.

Measurement and decision are separate (Data-Juicer style). Every row gets, for the benchmark
item it overlaps most: `decontam_hits` (distinct shared n-grams), `decontam_informative_hits`
(shared n-grams that are not stock phrases), `decontam_coverage` (fraction of the item's
n-grams found in the row), plus `benchmark`, `benchmark_id`, `ngram`. Two rules decide:

- `literal`: the paper's rule; any shared n-gram drops the row.
- `boilerplate-aware` (default): ignore stock n-grams (frequent across a reference corpus of
  problems, see `build_stock_ngrams`), then drop a row when its informative hits against
  one item reach `min_hits`, or the item coverage reaches `min_coverage`. A verbatim,
  re-spaced, prefixed, embedded or half-quoted copy shares many item-specific n-grams and
  is still caught; a clean problem that only shares "where m and n are relatively prime
  positive integers find m n" with an AIME item is not.

Benchmark items shorter than `n` tokens are matched as whole normalized strings contained in
the row text (at token boundaries).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import numpy as np
import polars as pl

from curation.benchmarks import Benchmark
from curation.steps import StepResult

RULES = ("literal", "boilerplate-aware")
DEFAULT_N = 9

# One rewrite pass before tokenizing: drop Asymptote figure code ([asy]...[/asy]: drawing
# commands such as "label a a n label b b" are boilerplate, not problem text), LaTeX layout
# and font commands (\left( reads as "(") and \!, fold \dfrac and \tfrac into \frac (same
# for binom), and join thousands groups (24,\!000 and 24,000 both read as 24000). The
# replacement keeps the captured pieces and drops the rest; ASCII-only \b keeps it fast.
REWRITE_PATTERN = (
    r"(?s:\[asy\].*?\[/asy\])"
    r"|\\(?:left|right|[Bb]igg?[lr]?|displaystyle|textstyle|mathrm|mathbf|mathit|textbf|textit"
    r"|text|mbox|operatorname|quad|qquad)(?-u:\b)|\\!|(\\)[dt](frac|binom)(?-u:\b)"
    r"|([0-9]),(?:\\!)?([0-9]{3})(?-u:\b)"
)
REWRITE_REPLACEMENT = "${1}${2}${3}${4}"
TOKEN_PATTERN = r"[\p{L}\p{N}]+"

_HASH_SEED = 0x5EED_CA5C
_ROLL_BASE = np.uint64(0x9E3779B97F4A7C15)  # odd, so the rolling hash mixes every token
_BITMAP_BITS = 24


def normalize_expr(column: str | pl.Expr) -> pl.Expr:
    """Polars expression: text -> list of normalized word tokens.

    Rewrites LaTeX layout (see REWRITE_PATTERN), lower-cases, then keeps runs of letters and
    digits: punctuation, `$`, braces and spacing never change the tokens, so `$ x + y $` and
    `$x+y$` tokenize alike (operators are dropped, which n-grams of 9 words can afford).
    """
    expr = pl.col(column) if isinstance(column, str) else column
    return (
        expr.str.replace_all(REWRITE_PATTERN, REWRITE_REPLACEMENT)
        .str.to_lowercase()
        .str.extract_all(TOKEN_PATTERN)
    )


def normalize_text(text: str) -> str:
    """The normalized token string of one text (same rules as `normalize_expr`)."""
    frame = pl.DataFrame({"t": [text]}, schema={"t": pl.String})
    tokens = frame.select(normalize_expr("t")).to_series()[0]
    return " ".join(tokens.to_list())


def _tokenize(texts: pl.Series) -> tuple[np.ndarray, np.ndarray, pl.Series]:
    """Flat token hashes (uint64), per-text token offsets (len + 1) and the flat tokens."""
    lists = texts.fill_null("").to_frame("t").select(normalize_expr("t")).to_series()
    lengths = lists.list.len().to_numpy().astype(np.int64)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = lists.explode().drop_nulls()
    if tokens.len() != offsets[-1]:
        raise RuntimeError("tokenizer produced null tokens")
    hashes = tokens.hash(seed=_HASH_SEED).to_numpy()
    return hashes, offsets, tokens


class HashSet:
    """A sorted uint64 set with a bitmap prefilter: bulk membership in ~1 gather per probe."""

    def __init__(self, values: np.ndarray) -> None:
        self.sorted = np.unique(values.astype(np.uint64))
        self.bitmap = np.zeros(1 << _BITMAP_BITS, dtype=np.bool_)
        self.bitmap[self.sorted >> np.uint64(64 - _BITMAP_BITS)] = True

    def __len__(self) -> int:
        return int(self.sorted.size)

    def positions(self, values: np.ndarray) -> np.ndarray:
        """Indices of `values` that are in the set."""
        maybe = np.flatnonzero(self.bitmap[values >> np.uint64(64 - _BITMAP_BITS)])
        if maybe.size == 0:
            return maybe
        found = values[maybe]
        pos = np.searchsorted(self.sorted, found)
        pos[pos == self.sorted.size] = 0
        return maybe[self.sorted[pos] == found]


def _text_ends(offsets: np.ndarray, total: int) -> np.ndarray:
    """For each token, the end offset of the text holding it."""
    return np.repeat(offsets[1:], np.diff(offsets))[:total]


def rolling_windows(
    hashes: np.ndarray, offsets: np.ndarray, probes: dict[int, HashSet | None]
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Hash every window of each probed length and keep those that fall in its set.

    The window hash is a polynomial over token hashes (mod 2**64), built one token at a time,
    so the hash of every length 1..max comes out of the same pass. Returns, per length,
    `(starts, window_hashes)` of windows inside one text whose hash is in the set (all windows
    when the set is None). Candidates only: callers verify them against the strings.
    """
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    total = hashes.shape[0]
    if not probes or total == 0:
        return {length: (np.empty(0, np.int64), np.empty(0, np.uint64)) for length in probes}
    ends = _text_ends(offsets, total)
    acc = hashes.copy()
    with np.errstate(over="ignore"):
        for length in range(1, max(probes) + 1):
            if length > 1:
                if acc.size <= 1:
                    acc = acc[:0]
                else:
                    acc = acc[:-1]
                    acc *= _ROLL_BASE
                    acc += hashes[length - 1 :]
            if length not in probes:
                continue
            target = probes[length]
            idx = np.arange(acc.size, dtype=np.int64) if target is None else target.positions(acc)
            idx = idx[idx + length <= ends[idx]]
            out[length] = (idx, acc[idx])
    return out


def _window_strings(tokens: pl.Series, starts: np.ndarray, length: int) -> pl.Series:
    """The space-joined tokens of each `length`-token window starting at `starts`."""
    if starts.size == 0:
        return pl.Series("ngram", [], dtype=pl.String)
    frame = pl.DataFrame({f"t{k}": tokens.gather(starts + k) for k in range(length)})
    return frame.select(pl.concat_str(pl.all(), separator=" ").alias("ngram")).to_series()


@dataclass
class BenchmarkIndex:
    """The n-grams of a set of benchmarks, ready for bulk membership tests.

    `grams` has one row per distinct (n-gram, item): `gram_hash`, `ngram`, `length` (n, or the
    item length for items shorter than n, whose whole text is their only "n-gram"), `item`.
    `items` has one row per item: `item`, `benchmark`, `benchmark_id`, `item_ngrams` (distinct
    n-grams of the item, 1 for a short item) and `short` (item shorter than n).
    """

    n: int
    grams: pl.DataFrame
    items: pl.DataFrame
    probes: dict[int, HashSet]
    benchmarks: list[Benchmark]

    @classmethod
    def build(cls, benchmarks: Sequence[Benchmark], n: int = DEFAULT_N) -> BenchmarkIndex:
        """Tokenize every benchmark item and hash its n-grams (or its whole text if short)."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if not benchmarks:
            raise ValueError("no benchmarks to decontaminate against")
        texts = pl.Series("text", [t for b in benchmarks for t in b.texts], dtype=pl.String)
        hashes, offsets, tokens = _tokenize(texts)
        lengths = np.diff(offsets)
        item_of_token = np.repeat(np.arange(len(texts), dtype=np.int64), lengths)
        short_lengths = sorted({int(x) for x in lengths if 0 < x < n})
        windows = rolling_windows(hashes, offsets, {k: None for k in [*short_lengths, n]})
        parts = []
        for length, (starts, gram_hashes) in windows.items():
            items = item_of_token[starts]
            if length < n:  # a short item contributes its whole text, nothing shorter
                whole = (starts == offsets[items]) & (lengths[items] == length)
                starts, gram_hashes, items = starts[whole], gram_hashes[whole], items[whole]
            parts.append(
                pl.DataFrame(
                    {
                        "gram_hash": gram_hashes,
                        "ngram": _window_strings(tokens, starts, length),
                        "length": np.full(starts.size, length, dtype=np.int64),
                        "item": items,
                    }
                )
            )
        grams = pl.concat(parts).unique(maintain_order=True)
        per_item = grams.group_by("item").agg(item_ngrams=pl.len().cast(pl.Int64))
        items_frame = (
            pl.DataFrame(
                {
                    "item": np.arange(len(texts), dtype=np.int64),
                    "benchmark": [b.name for b in benchmarks for _ in b.texts],
                    "benchmark_id": [i for b in benchmarks for i in b.ids],
                    "short": (lengths > 0) & (lengths < n),
                }
            )
            .join(per_item, on="item", how="left")
            .with_columns(pl.col("item_ngrams").fill_null(0))
        )
        probes = {
            int(length): HashSet(part["gram_hash"].to_numpy())
            for (length,), part in grams.group_by("length")
        }
        return cls(n, grams, items_frame, probes, list(benchmarks))


def find_overlaps(texts: pl.Series, index: BenchmarkIndex) -> pl.DataFrame:
    """Every verified (row, benchmark n-gram) occurrence: the measurement step's raw data.

    Columns: `row` (position in `texts`), `start` (token offset in the row), `item`, `ngram`.
    Candidates come from 64-bit hashes; each is checked by comparing the row's window string
    with the benchmark n-gram, so a hash collision never produces a match.
    """
    hashes, offsets, tokens = _tokenize(texts)
    windows = rolling_windows(hashes, offsets, dict(index.probes))
    row_of_token = np.repeat(np.arange(len(texts), dtype=np.int64), np.diff(offsets))
    frames = []
    for length, (starts, gram_hashes) in windows.items():
        if starts.size == 0:
            continue
        candidates = pl.DataFrame(
            {
                "row": row_of_token[starts],
                "start": starts - offsets[row_of_token[starts]],
                "gram_hash": gram_hashes,
                "window": _window_strings(tokens, starts, length),
            }
        )
        frames.append(
            candidates.join(
                index.grams.filter(pl.col("length") == length), on="gram_hash", how="inner"
            )
            .filter(pl.col("window") == pl.col("ngram"))
            .select("row", "start", "item", "ngram")
        )
    schema = {"row": pl.Int64, "start": pl.Int64, "item": pl.Int64, "ngram": pl.String}
    if not frames:
        return pl.DataFrame(schema=schema)
    return pl.concat([f.cast(schema) for f in frames])


def build_stock_ngrams(
    texts: Iterable[str] | pl.Series, n: int = DEFAULT_N, min_df: int = 3
) -> StockNgrams:
    """N-grams that occur in at least `min_df` distinct texts of a reference corpus.

    The corpus should hold many problems of the kind being cleaned (training sources, all
    benchmarks): a phrase that recurs in `min_df` unrelated problems ("find the remainder when
    n is divided by 1000") is no evidence that a row copies one benchmark item. Identical texts
    count once, so a problem repeated in the corpus does not make its own n-grams stock.
    """
    series = texts if isinstance(texts, pl.Series) else pl.Series("t", list(texts), dtype=pl.String)
    series = series.drop_nulls().unique()
    hashes, offsets, tokens = _tokenize(series)
    starts, gram_hashes = rolling_windows(hashes, offsets, {n: None})[n]
    row_of_token = np.repeat(np.arange(len(series), dtype=np.int64), np.diff(offsets))
    frame = (
        pl.DataFrame({"row": row_of_token[starts], "start": starts, "h": gram_hashes})
        .unique(subset=["row", "h"])
        .group_by("h")
        .agg(df=pl.len(), start=pl.col("start").first())
        .filter(pl.col("df") >= min_df)
    )
    grams = _window_strings(tokens, frame["start"].to_numpy(), n)
    return StockNgrams(
        n=n, ngrams=frozenset(grams.to_list()), min_df=min_df, corpus_rows=len(series)
    )


@dataclass(frozen=True)
class StockNgrams:
    """Stock-phrase n-grams (normalized strings) found frequent in a reference corpus."""

    n: int
    ngrams: frozenset[str]
    min_df: int
    corpus_rows: int

    def __len__(self) -> int:
        return len(self.ngrams)


@dataclass(frozen=True)
class ContaminationRule:
    """When overlap measurements make a row contaminated.

    A row is dropped when, against one benchmark item, its hits reach `min_hits` or the item
    coverage reaches `min_coverage` (None: coverage never decides alone). With `ignore_stock`,
    hits count only informative n-grams: not in `stock` and seen in fewer than `min_df`
    distinct texts among the input rows (rows already judged copies by coverage excluded) and
    the benchmark items. Coverage always counts every shared n-gram, so a full copy of a
    stock-heavy item is still a copy.
    """

    name: str
    min_hits: int
    min_coverage: float | None
    ignore_stock: bool
    min_df: int = 3

    def __post_init__(self) -> None:
        if self.min_hits < 1:
            raise ValueError(f"min_hits must be >= 1, got {self.min_hits}")
        if self.min_coverage is not None and not 0 < self.min_coverage <= 1:
            raise ValueError(f"min_coverage must be in (0, 1], got {self.min_coverage}")
        if self.min_df < 2:
            raise ValueError(f"min_df must be >= 2, got {self.min_df}")


def rule_named(name: str, **overrides: object) -> ContaminationRule:
    """The `literal` rule (the paper's: any shared n-gram drops) or `boilerplate-aware`.

    Boilerplate-aware defaults, measured on AIME 1983-2023 and MATH train against AIME 24/25,
    AMC and MATH-500 (bench/README_decontam.md): stock phrases recur in >= 3 distinct texts;
    3 informative n-grams (11 consecutive item-specific words) or half of an item's n-grams
    mark a copy.
    """
    presets = {
        "literal": {"min_hits": 1, "min_coverage": None, "ignore_stock": False},
        "boilerplate-aware": {"min_hits": 5, "min_coverage": 0.9, "ignore_stock": True},
    }
    if name not in presets:
        raise ValueError(f"unknown decontamination rule {name!r}; choose one of {', '.join(RULES)}")
    params = {**presets[name], **{k: v for k, v in overrides.items() if v is not None}}
    return ContaminationRule(name=name, **params)  # type: ignore[arg-type]


MEASURE_COLUMNS = {
    "decontam_hits": pl.Int64,
    "decontam_informative_hits": pl.Int64,
    "decontam_coverage": pl.Float64,
    "benchmark": pl.String,
    "benchmark_id": pl.String,
    "ngram": pl.String,
    "contaminated": pl.Boolean,
}


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
    frequencies.
    """
    if overlaps.height == 0:
        return pl.DataFrame(schema={"row": pl.Int64, **MEASURE_COLUMNS})
    items = index.items.select("item", "benchmark", "benchmark_id", "item_ngrams")
    pairs = overlaps.join(items, on="item").with_columns(
        coverage=(pl.col("ngram").n_unique() / pl.col("item_ngrams")).over("row", "item")
    )
    if rule.ignore_stock:
        # Document frequency of each shared n-gram: distinct input texts (rows that are clear
        # copies excluded, so copies never make their own item look like boilerplate) plus
        # benchmark items holding it.
        keyed = pairs.with_columns(key=pl.Series(row_keys[pairs["row"].to_numpy()]))
        if rule.min_coverage is not None:
            copy_rows = keyed.filter(pl.col("coverage") >= rule.min_coverage)["row"].unique()
            keyed = keyed.filter(~pl.col("row").is_in(copy_rows.implode()))
        input_df = keyed.group_by("ngram").agg(input_df=pl.col("key").n_unique())
        bench_df = index.grams.group_by("ngram").agg(bench_df=pl.col("item").n_unique())
        stock_set = pl.Series(sorted(stock.ngrams) if stock is not None else [], dtype=pl.String)
        doc_freq = (
            pairs.select("ngram")
            .unique()
            .join(input_df, on="ngram", how="left")
            .join(bench_df, on="ngram", how="left")
            .select(
                "ngram",
                stock=(
                    pl.col("input_df").fill_null(0) + pl.col("bench_df").fill_null(0) >= rule.min_df
                )
                | pl.col("ngram").is_in(stock_set.implode()),
            )
        )
        pairs = pairs.join(doc_freq, on="ngram", how="left")
    else:
        pairs = pairs.with_columns(stock=pl.lit(False))
    per_item = (
        pairs.sort("stock", "start")
        .group_by("row", "item")
        .agg(
            pl.col("benchmark", "benchmark_id", "coverage").first(),
            decontam_hits=pl.col("ngram").n_unique().cast(pl.Int64),
            decontam_informative_hits=pl.col("ngram")
            .filter(~pl.col("stock"))
            .n_unique()
            .cast(pl.Int64),
            ngram=pl.col("ngram").first(),
        )
        .rename({"coverage": "decontam_coverage"})
    )
    return (
        decide(per_item, rule)
        .sort(
            "row",
            "contaminated",
            "decontam_informative_hits",
            "decontam_coverage",
            "decontam_hits",
            "item",
            descending=[False, True, True, True, True, False],
        )
        .group_by("row", maintain_order=True)
        .first()
        .select("row", *MEASURE_COLUMNS)
    )


def decide(measured: pl.DataFrame, rule: ContaminationRule) -> pl.DataFrame:
    """Add `contaminated` from the measurement columns (re-runnable with other thresholds)."""
    hits = "decontam_informative_hits" if rule.ignore_stock else "decontam_hits"
    verdict = pl.col(hits) >= rule.min_hits
    if rule.min_coverage is not None:
        verdict = verdict | (pl.col("decontam_coverage") >= rule.min_coverage)
    return measured.with_columns(contaminated=verdict.fill_null(False))


def _chunks(length: int, size: int) -> list[tuple[int, int]]:
    return [(lo, min(lo + size, length)) for lo in range(0, length, size)] or [(0, 0)]


def scan(
    texts: pl.Series, index: BenchmarkIndex, workers: int = 1, chunk_rows: int = 50_000
) -> pl.DataFrame:
    """`find_overlaps` over chunks of rows on `workers` threads (Polars and NumPy release the
    GIL in their kernels, so threads scale without copying the index to processes)."""
    bounds = _chunks(len(texts), chunk_rows)

    def run(bound: tuple[int, int]) -> pl.DataFrame:
        lo, hi = bound
        found = find_overlaps(texts.slice(lo, hi - lo), index)
        return found.with_columns(pl.col("row") + lo)

    if workers <= 1 or len(bounds) == 1:
        parts = [run(b) for b in bounds]
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            parts = list(pool.map(run, bounds))
    return pl.concat(parts)


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
    chunk_rows: int = 50_000,
) -> StepResult:
    """Drop rows of `df` that overlap a benchmark item, recording which item and n-gram.

    `rule` is `"literal"`, `"boilerplate-aware"` (default) or a ContaminationRule; `min_hits`,
    `min_coverage` and `min_df` override the named rule's thresholds. `stock` adds stock
    phrases from a reference corpus (see `build_stock_ngrams`). Kept rows carry the
    measurement columns `decontam_hits`, `decontam_informative_hits`, `decontam_coverage`
    (0 / null when nothing overlaps) so thresholds can be re-tuned in SQL later; dropped rows
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
    if isinstance(benchmarks, BenchmarkIndex):
        if benchmarks.n != n:
            raise ValueError(f"benchmark index was built for n={benchmarks.n}, asked for n={n}")
        index = benchmarks
    else:
        index = BenchmarkIndex.build(benchmarks, n)
    if stock is not None and stock.n != n:
        raise ValueError(f"stock n-grams were built for n={stock.n}, asked for n={n}")
    workers = workers or min(os.cpu_count() or 1, 4)
    texts = df.get_column(text_column)
    overlaps = scan(texts, index, workers=workers, chunk_rows=chunk_rows)
    row_keys = texts.fill_null("").hash(seed=_HASH_SEED).to_numpy()
    measured = measure(overlaps, index, rule, row_keys, stock)
    work = df.with_row_index("__row").with_columns(pl.col("__row").cast(pl.Int64))
    joined = work.join(measured, left_on="__row", right_on="row", how="left").with_columns(
        pl.col("decontam_hits", "decontam_informative_hits").fill_null(0),
        pl.col("contaminated").fill_null(False),
    )
    drop_mask = joined["contaminated"]
    measure_cols = ["decontam_hits", "decontam_informative_hits", "decontam_coverage"]
    kept = joined.filter(~drop_mask).select(*df.columns, *measure_cols)
    dropped = joined.filter(drop_mask).select(
        *df.columns,
        reason=pl.lit("contaminated"),
        benchmark=pl.col("benchmark"),
        benchmark_id=pl.col("benchmark_id"),
        ngram=pl.col("ngram"),
        **{c: pl.col(c) for c in measure_cols},
        rule=pl.lit(rule.name),
    )
    stats: dict[str, object] = {
        "rows_in": df.height,
        "rows_out": kept.height,
        "dropped": dropped.height,
        "overlapping_rows": measured.height,
        "dropped_by_benchmark": dict(
            dropped.group_by("benchmark").len().sort("benchmark").iter_rows()
        ),
        "n": n,
        "rule": asdict(rule),
        "benchmarks": [b.manifest_entry() for b in index.benchmarks],
        "stock_ngrams": len(stock) if stock is not None else 0,
    }
    return StepResult(kept=kept, dropped=dropped, stats=stats)
