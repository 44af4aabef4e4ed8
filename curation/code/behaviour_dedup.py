"""Dedup code problems by behaviour: the same tests make the same task, whatever the story.

A problem's behaviour is its set of normalized I/O cases (`io_cases.io_cases`). Two
problems become a candidate pair when they share a case that is not a stock case (one held
by `stock_min_df` or more distinct test sets, such as `candidate(1) == 1`: evidence of
nothing; identical test sets count once, so copies of one problem stay linked). Each
candidate pair is measured:

- `io_shared`: cases both hold; `io_jaccard`: shared / union; `io_containment`: shared /
  the smaller set; `io_specific_chars`: characters of the shared cases that are not stock;
- `text_similarity`: Jaccard of the statements' word n-grams, boilerplate n-grams (held by
  `text_stock_fraction` of the rows or more, e.g. "please solve the programming task
  below") left out.

and joined into one decision (`BehaviourRule`):

- same tests: `io_jaccard >= min_io_jaccard` and `io_specific_chars >= min_specific_chars`
  (two stories with one test set are one task);
- or same story with overlapping tests: `io_containment >= min_io_containment` and
  `text_similarity >= min_text_similarity` (one task from two sources that kept different
  examples).

Problems that share no non-stock case are never merged, however alike their statements: the
same story with different tests is two tasks (LeetCode's "House Robber" and "House Robber
II"). Problems without tests are left to text dedup (`curation.dedup.near_dedup`).

Defaults were set by reading the candidate pairs of leetcode_train and the code benchmarks:
a single shared short case (`candidate(2, 1) == 2`) or a shared example of a series' "II"
(Last Stone Weight I/II share `[2,7,4,1,8,1] -> 1`, text similarity 0.76; Minimum Number of
Pushes I/II share one case of four, text similarity 0.97) must not merge; the two statements
of LeetCode 316 / 1081 (two shared cases, 58 specific characters, text similarity 0.02) and
Codeforces' Div. 1 / Div. 2 mirrors (one statement, one sample) must.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from curation.code.fields import field_values
from curation.code.io_cases import case_hash, io_cases
from lake.operators import count_by, counted
from lake.steps import StepResult

PAIR_COLUMNS = {
    "io_shared": pl.Int64,
    "io_jaccard": pl.Float64,
    "io_containment": pl.Float64,
    "io_specific_chars": pl.Int64,
    "text_similarity": pl.Float64,
}


@dataclass(frozen=True)
class BehaviourRule:
    """When a measured pair is the same task (see the module docstring)."""

    min_io_jaccard: float = 0.75
    min_specific_chars: int = 40
    min_io_containment: float = 0.75
    min_text_similarity: float = 0.8
    stock_min_df: int = 5
    text_ngram: int = 3
    text_stock_fraction: float = 0.05

    def __post_init__(self) -> None:
        for name in ("min_io_jaccard", "min_io_containment", "min_text_similarity"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {value}")
        if self.stock_min_df < 2:
            raise ValueError(f"stock_min_df must be >= 2, got {self.stock_min_df}")
        if self.text_ngram < 1:
            raise ValueError(f"text_ngram must be >= 1, got {self.text_ngram}")

    def same_task(self) -> pl.Expr:
        """The decision as a Polars expression over the pair measurement columns."""
        same_tests = (pl.col("io_jaccard") >= self.min_io_jaccard) & (
            pl.col("io_specific_chars") >= self.min_specific_chars
        )
        same_story = (pl.col("io_containment") >= self.min_io_containment) & (
            pl.col("text_similarity") >= self.min_text_similarity
        )
        return same_tests | same_story


def case_frame(tests: list[Any]) -> tuple[pl.DataFrame, list[str | None]]:
    """Per row its cases as a long frame (`row`, `case`, `h`, `chars`), and per row the
    reason its tests could not be read (None when they could or when there are none)."""
    rows, cases, errors = [], [], []
    for n, value in enumerate(tests):
        try:
            found = io_cases(value)
            errors.append(None)
        except ValueError as exc:
            found = []
            errors.append(str(exc))
        rows.extend([n] * len(found))
        cases.extend(found)
    frame = pl.DataFrame(
        {"row": rows, "case": cases}, schema={"row": pl.Int64, "case": pl.String}
    ).with_columns(
        h=pl.Series([case_hash(c) for c in cases], dtype=pl.Int64),
        chars=pl.col("case").str.len_chars().cast(pl.Int64),
    )
    return frame, errors


def text_grams(texts: pl.Series, ngram: int) -> pl.DataFrame:
    """Distinct (`row`, `g`) word n-gram hashes of lower-cased texts (a text shorter than
    `ngram` words is one gram)."""
    words = pl.col("t").str.to_lowercase().str.extract_all(r"\w+")
    shifted = [pl.element().shift(-k) for k in range(ngram)]
    grams = (
        pl.DataFrame({"t": texts.cast(pl.String).fill_null("")})
        .with_row_index("row")
        .select(
            pl.col("row").cast(pl.Int64),
            pl.when(words.list.len() >= ngram)
            .then(words.list.eval(pl.concat_str(shifted, separator=" ").drop_nulls()))
            .otherwise(pl.concat_list(words.list.join(" ")))
            .alias("g"),
        )
        .explode("g")
        .drop_nulls("g")
        .filter(pl.col("g") != "")
    )
    return grams.select("row", pl.col("g").hash().alias("g")).unique()


def measure_pairs(
    cases: pl.DataFrame,
    texts: pl.Series,
    rule: BehaviourRule,
    *,
    side: np.ndarray | None = None,
) -> pl.DataFrame:
    """Candidate pairs (`a` < `b`, row positions) with PAIR_COLUMNS and `same_task`.

    `side` (one int per row) restricts pairs to rows on different sides (training rows
    against benchmark items); None pairs every row with every other.
    """
    # document frequency over distinct test sets: copies of one problem count once, so a
    # problem repeated five times does not turn its own cases into stock cases
    test_sets = cases.group_by("row").agg(pl.col("h").sort().hash().alias("set"))
    df = cases.join(test_sets, on="row").group_by("h").agg(pl.col("set").n_unique().alias("df"))
    cases = cases.join(df, on="h").with_columns(stock=pl.col("df") >= rule.stock_min_df)
    anchors = cases.filter(~pl.col("stock")).select("row", "h")
    pairs = (
        anchors.join(anchors, on="h", suffix="_b")
        .filter(pl.col("row") < pl.col("row_b"))
        .select(pl.col("row").alias("a"), pl.col("row_b").alias("b"))
        .unique()
    )
    if side is not None:
        sides = pl.Series(side)
        pairs = pairs.filter(sides.gather(pairs["a"]) != sides.gather(pairs["b"]))
    if pairs.height == 0:
        return pl.DataFrame(
            schema={"a": pl.Int64, "b": pl.Int64, **PAIR_COLUMNS, "same_task": pl.Boolean}
        )
    sizes = cases.group_by("row").agg(pl.len().cast(pl.Int64).alias("n"))
    shared = (
        pairs.join(cases.select(pl.col("row").alias("a"), "h", "chars", "stock"), on="a")
        .join(cases.select(pl.col("row").alias("b"), "h"), on=["b", "h"], how="semi")
        .group_by("a", "b")
        .agg(
            io_shared=pl.len().cast(pl.Int64),
            io_specific_chars=pl.col("chars").filter(~pl.col("stock")).sum().cast(pl.Int64),
        )
    )
    measured = (
        shared.join(sizes.rename({"row": "a", "n": "n_a"}), on="a")
        .join(sizes.rename({"row": "b", "n": "n_b"}), on="b")
        .with_columns(
            io_jaccard=pl.col("io_shared") / (pl.col("n_a") + pl.col("n_b") - pl.col("io_shared")),
            io_containment=pl.col("io_shared") / pl.min_horizontal("n_a", "n_b"),
        )
    )
    similarity = _text_similarity(pairs, texts, rule)
    measured = measured.join(similarity, on=["a", "b"], how="left").with_columns(
        pl.col("text_similarity").fill_null(0.0)
    )
    return measured.select("a", "b", *PAIR_COLUMNS).with_columns(same_task=rule.same_task())


def _text_similarity(pairs: pl.DataFrame, texts: pl.Series, rule: BehaviourRule) -> pl.DataFrame:
    grams = text_grams(texts, rule.text_ngram)
    limit = max(3.0, rule.text_stock_fraction * len(texts))
    common = grams.group_by("g").agg(pl.len().alias("df")).filter(pl.col("df") >= limit)
    grams = grams.join(common, on="g", how="anti")
    sizes = grams.group_by("row").agg(pl.len().cast(pl.Int64).alias("n"))
    inter = (
        pairs.join(grams.rename({"row": "a"}), on="a")
        .join(grams.rename({"row": "b"}), on=["b", "g"], how="semi")
        .group_by("a", "b")
        .agg(pl.len().cast(pl.Int64).alias("inter"))
    )
    return (
        pairs.join(inter, on=["a", "b"], how="left")
        .join(sizes.rename({"row": "a", "n": "n_a"}), on="a", how="left")
        .join(sizes.rename({"row": "b", "n": "n_b"}), on="b", how="left")
        .select(
            "a",
            "b",
            text_similarity=(
                pl.col("inter").fill_null(0)
                / (pl.col("n_a").fill_null(0) + pl.col("n_b").fill_null(0) - pl.col("inter"))
            ).fill_nan(0.0),
        )
    )


def _best_pair_per_row(pairs: pl.DataFrame, n: int) -> pl.DataFrame:
    """Per row, its strongest candidate pair: an accepted one first, then by io_jaccard,
    then text similarity (the row's `behaviour_match` and its measurements)."""
    forward = pairs.rename({"a": "row", "b": "other"})
    both = pl.concat([forward, pairs.rename({"b": "row", "a": "other"}).select(forward.columns)])
    best = both.sort(
        ["row", "same_task", "io_jaccard", "text_similarity", "other"],
        descending=[False, True, True, True, False],
    ).unique("row", keep="first")
    grid = pl.DataFrame({"row": np.arange(n, dtype=np.int64)})
    return grid.join(best, on="row", how="left").sort("row")


def _row_measurements(
    df: pl.DataFrame,
    best: pl.DataFrame,
    partner_ids: pl.Series,
    cases: pl.DataFrame,
    errors: list[str | None],
) -> pl.DataFrame:
    counts = cases.group_by("row").agg(pl.len().cast(pl.Int64).alias("io_cases"))
    io_counts = (
        pl.DataFrame({"row": np.arange(df.height, dtype=np.int64)})
        .join(counts, on="row", how="left")
        .sort("row")
        .get_column("io_cases")
        .fill_null(0)
    )
    return df.with_columns(
        pl.Series("io_cases", io_counts, dtype=pl.Int64),
        pl.Series("io_error", errors, dtype=pl.String),
        partner_ids.alias("behaviour_match"),
        *[best.get_column(c).cast(t) for c, t in PAIR_COLUMNS.items()],
    )


def dedup_by_behaviour(
    df: pl.DataFrame,
    *,
    text_column: str = "problem",
    tests_field: str = "tests",
    id_column: str = "id",
    rule: BehaviourRule | None = None,
    **thresholds: Any,
) -> StepResult:
    """Merge problems with the same behaviour; keep the first row of each cluster.

    `tests_field` is a column or a key of `metadata`. Every row gets `io_cases` (its number
    of distinct cases), `io_error` (why its tests could not be read), and its strongest
    candidate pair: `behaviour_match` (the other row's id) with PAIR_COLUMNS, so thresholds
    can be re-tuned in SQL. Dropped rows carry reason `behaviour_duplicate`, `duplicate_of`
    (the kept row's id), `cluster_id` and `cluster_size`. `thresholds` override fields of
    the default `BehaviourRule`.
    """
    rule = rule or BehaviourRule(**thresholds)
    _check(df, text_column, id_column)
    cases, errors = case_frame(field_values(df, tests_field, required=False))
    texts = df.get_column(text_column)
    pairs = measure_pairs(cases, texts, rule)
    accepted = pairs.filter("same_task")
    n = df.height
    labels = _components(n, accepted["a"].to_numpy(), accepted["b"].to_numpy())
    first = np.full(labels.max() + 1 if n else 0, n, dtype=np.int64)
    np.minimum.at(first, labels, np.arange(n))
    rep = first[labels]
    ids = df.get_column(id_column).cast(pl.String)
    best = _best_pair_per_row(pairs, n)
    partner = best.get_column("other")
    partner_ids = ids.gather(partner.fill_null(0)).set(partner.is_null(), None)
    measured = _row_measurements(df, best, partner_ids, cases, errors)
    is_rep = rep == np.arange(n)
    sizes = np.bincount(labels)[labels] if n else np.zeros(0, dtype=np.int64)
    drop_idx = np.flatnonzero(~is_rep)
    rep_ids = ids.gather(rep[drop_idx])
    dropped = measured[drop_idx].with_columns(
        pl.lit("behaviour_duplicate").alias("reason"),
        rep_ids.alias("duplicate_of"),
        ("behaviour:" + rep_ids).alias("cluster_id"),
        pl.Series("cluster_size", sizes[drop_idx], dtype=pl.Int64),
    )
    stats = {
        "rows_with_tests": int(cases["row"].n_unique()) if cases.height else 0,
        "unreadable_tests": sum(e is not None for e in errors),
        "candidate_pairs": pairs.height,
        "same_task_pairs": accepted.height,
        "clusters_with_duplicates": int((np.bincount(labels) > 1).sum()) if n else 0,
        "rule": asdict(rule),
    }
    return counted(n, measured.filter(pl.Series(is_rep)), dropped, stats)


def decontaminate_by_behaviour(
    df: pl.DataFrame,
    benchmarks: pl.DataFrame,
    *,
    text_column: str = "problem",
    tests_field: str = "tests",
    id_column: str = "id",
    rule: BehaviourRule | None = None,
    **thresholds: Any,
) -> StepResult:
    """Drop training problems whose behaviour matches a benchmark item's.

    `benchmarks` has `benchmark`, `benchmark_id`, `problem` and `tests` (see
    `benchmark_tests.load_code_benchmarks`). Pairs are measured only between a training row
    and a benchmark item, with stock cases and boilerplate counted over both. Every row gets
    its strongest benchmark pair (`benchmark`, `benchmark_id` and PAIR_COLUMNS); dropped rows
    carry reason `behaviour_contaminated`.
    """
    rule = rule or BehaviourRule(**thresholds)
    _check(df, text_column, id_column)
    for name in ("benchmark", "benchmark_id", "problem", "tests"):
        if name not in benchmarks.columns:
            raise ValueError(
                f"benchmarks frame has no column {name!r}; it has {benchmarks.columns}"
            )
    n = df.height
    tests = field_values(df, tests_field, required=False) + benchmarks["tests"].to_list()
    texts = pl.concat([df.get_column(text_column).cast(pl.String), benchmarks["problem"]])
    cases, errors = case_frame(tests)
    side = np.r_[np.zeros(n, dtype=np.int64), np.ones(benchmarks.height, dtype=np.int64)]
    pairs = measure_pairs(cases, texts, rule, side=side)
    best = _best_pair_per_row(pairs, n + benchmarks.height).head(n)
    item = (best.get_column("other") - n).cast(pl.Int64)
    measured = _row_measurements(
        df,
        best,
        pl.Series("behaviour_match", [None] * n, dtype=pl.String),
        cases.filter(pl.col("row") < n),
        errors[:n],
    ).drop("behaviour_match")
    items = benchmarks.select(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("__item"),
        "benchmark",
        pl.col("benchmark_id").cast(pl.String),
    )
    measured = (
        measured.with_columns(item.alias("__item"))
        .join(items, on="__item", how="left", maintain_order="left")
        .drop("__item")
    )
    hit = best.get_column("same_task").fill_null(False)
    dropped = measured.filter(hit).with_columns(pl.lit("behaviour_contaminated").alias("reason"))
    stats = {
        "benchmark_items": benchmarks.height,
        "candidate_pairs": pairs.height,
        "dropped_by_benchmark": count_by(dropped, "benchmark"),
        "rule": asdict(rule),
    }
    return counted(n, measured.filter(~hit), dropped, stats)


def _components(n: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    graph = coo_matrix((np.ones(len(a)), (a, b)), shape=(n, n))
    _, labels = connected_components(graph, directed=False)
    return labels.astype(np.int64)


def _check(df: pl.DataFrame, text_column: str, id_column: str) -> None:
    for name in (text_column, id_column):
        if name not in df.columns:
            raise ValueError(f"behaviour dedup input has no column {name!r}; it has {df.columns}")
    nulls = df.get_column(id_column).is_null()
    if nulls.any():
        raise ValueError(
            f"behaviour dedup input column {id_column!r} is null at row {nulls.arg_max()}"
        )
