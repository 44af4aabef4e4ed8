"""The n-gram index of benchmark items and the bulk window scan that probes it.

Every run of `n` tokens (default 9, as in the Nemotron-Cascade recipe) is hashed to 64 bits
with a rolling polynomial hash; membership is a bitmap probe plus a sorted search, and every
candidate is verified token by token on the bytes, so a hash collision never makes a match.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from curation.decontaminate.benchmarks import Benchmark
from curation.decontaminate.tokens import Tokens, expand_ranges, tokenize
from curation.sorted_sets import sorted_unique

DEFAULT_N = 9
_ROLL_BASE = np.uint64(0xD6E8FEB86659FD93)  # odd, so the rolling hash mixes every token
_MAX_BITMAP_BITS = 24


class HashSet:
    """A sorted uint64 set with a bitmap prefilter: bulk membership in ~1 gather per probe."""

    def __init__(self, values: np.ndarray) -> None:
        self.sorted = sorted_unique(values.astype(np.uint64))
        bits = int(min(_MAX_BITMAP_BITS, max(10, np.ceil(np.log2(self.sorted.size * 64 + 1)))))
        self.shift = np.uint64(64 - bits)
        self.bitmap = np.zeros(1 << bits, dtype=np.bool_)
        self.bitmap[(self.sorted >> self.shift).astype(np.int64)] = True

    def __len__(self) -> int:
        return int(self.sorted.size)

    def positions(self, values: np.ndarray) -> np.ndarray:
        """Indices of `values` that are in the set."""
        if self.sorted.size == 0:
            return np.empty(0, dtype=np.int64)
        if self.sorted.size <= 4:
            hit = values == self.sorted[0]
            for value in self.sorted[1:]:
                hit |= values == value
            return np.flatnonzero(hit)
        maybe = np.flatnonzero(np.take(self.bitmap, (values >> self.shift).view(np.int64)))
        if maybe.size == 0:
            return maybe
        found = values[maybe]
        pos = np.searchsorted(self.sorted, found)
        pos[pos == self.sorted.size] = 0
        return maybe[self.sorted[pos] == found]


def rolling_windows(
    tokens: Tokens, probes: dict[int, HashSet | None]
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Hash every window of each probed length and keep those that fall in its set.

    The window hash is a polynomial over token values (mod 2**64), built one token at a
    time, so windows of every length 1..max come out of the same pass. Returns, per length,
    `(first_token, window_hash)` of windows inside one text whose hash is in the set (all
    windows when the set is None). Candidates only: callers verify them exactly.
    """
    values, offsets = tokens.values, tokens.offsets
    total = values.shape[0]
    empty = (np.empty(0, np.int64), np.empty(0, np.uint64))
    if not probes or total == 0:
        return dict.fromkeys(probes, empty)
    acc = values.copy()
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    with np.errstate(over="ignore"):
        for length in range(1, max(probes) + 1):
            if length > 1:
                if acc.size <= 1:
                    out.update(dict.fromkeys([k for k in probes if k >= length], empty))
                    break
                acc = acc[:-1]
                acc *= _ROLL_BASE
                acc += values[length - 1 :]
            if length not in probes:
                continue
            target = probes[length]
            idx = np.arange(acc.size, dtype=np.int64) if target is None else target.positions(acc)
            ends = offsets[np.searchsorted(offsets, idx, side="right")]  # end of idx's text
            idx = idx[idx + length <= ends]
            out[length] = (idx, acc[idx])
    return out


def anchored_windows(
    tokens: Tokens, probes: dict[int, HashSet], anchors: HashSet
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Like `rolling_windows`, but only for windows starting at an anchor token.

    Used for the few benchmark items shorter than n: they can only start at one of their
    first tokens, so one membership pass finds every possible start, and their short window
    hashes are built there alone instead of over every token of every row.
    """
    values, offsets = tokens.values, tokens.offsets
    starts = anchors.positions(values)
    ends = offsets[np.searchsorted(offsets, starts, side="right")]
    acc = values[starts]
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    with np.errstate(over="ignore"):
        for length in range(1, max(probes, default=0) + 1):
            if length > 1:
                fits = starts + length <= ends
                starts, ends, acc = starts[fits], ends[fits], acc[fits]
                acc = acc * _ROLL_BASE + values[starts + length - 1]
            if length in probes:
                hit = probes[length].positions(acc)
                out[length] = (starts[hit], acc[hit])
    return out


def _window_strings(strings: pl.Series, firsts: np.ndarray, length: int) -> pl.Series:
    """The space-joined tokens of each `length`-token window starting at `firsts`."""
    if firsts.size == 0:
        return pl.Series("ngram", [], dtype=pl.String)
    frame = pl.DataFrame({f"t{k}": strings.gather(firsts + k) for k in range(length)})
    return frame.select(pl.concat_str(pl.all(), separator=" ").alias("ngram")).to_series()


@dataclass
class BenchmarkIndex:
    """The n-grams of a set of benchmarks, ready for bulk membership tests.

    `grams` has one row per distinct (n-gram, item): `gram_hash`, `ngram`, `length` (n, or the
    item length for items shorter than n, whose whole text is their only "n-gram"), `item`,
    `first` (token index of one occurrence in `tokens`), `gram` (id of the n-gram string).
    `gram_table` has one row per distinct n-gram: `gram`, `ngram`, `gram_hash`, `length`,
    `first`, `bench_df` (benchmarks holding it: items of one benchmark often share a context,
    which is content, not boilerplate), `numeric` (its tokens are all numbers). `items` has one
    row per item: `item`, `benchmark`, `benchmark_id`, `item_ngrams` (distinct n-grams of the
    item, 1 for a short item), `short`, `item_tokens`, and `first_gram` / `last_gram` (ids of
    the n-grams at the item's start and end).
    """

    n: int
    grams: pl.DataFrame
    gram_table: pl.DataFrame
    items: pl.DataFrame
    tokens: Tokens
    probes: dict[int, HashSet]
    anchors: HashSet  # first tokens of the items shorter than n
    benchmarks: list[Benchmark]
    # per length: the distinct n-grams sorted by hash (hash, gram id, one occurrence's first
    # token); per gram id: its items (CSR: items[item_offsets[g] : item_offsets[g + 1]])
    lookup: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]
    item_offsets: np.ndarray
    item_ids: np.ndarray

    @classmethod
    def build(cls, benchmarks: Sequence[Benchmark], n: int = DEFAULT_N) -> BenchmarkIndex:
        """Tokenize every benchmark item and hash its n-grams (or its whole text if short)."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if not benchmarks:
            raise ValueError("no benchmarks to decontaminate against")
        texts = pl.Series("text", [t for b in benchmarks for t in b.texts], dtype=pl.String)
        tokens = tokenize(texts)
        strings = tokens.strings()
        lengths = np.diff(tokens.offsets)
        item_of_token = np.repeat(np.arange(len(texts), dtype=np.int64), lengths)
        short_lengths = sorted({int(x) for x in lengths if 0 < x < n})
        windows = rolling_windows(tokens, dict.fromkeys([*short_lengths, n]))
        parts = []
        for length, (firsts, gram_hashes) in windows.items():
            items = item_of_token[firsts]
            if length < n:  # a short item contributes its whole text, nothing shorter
                whole = (firsts == tokens.offsets[items]) & (lengths[items] == length)
                firsts, gram_hashes, items = firsts[whole], gram_hashes[whole], items[whole]
            parts.append(
                pl.DataFrame(
                    {
                        "gram_hash": gram_hashes,
                        "ngram": _window_strings(strings, firsts, length),
                        "length": np.full(firsts.size, length, dtype=np.int64),
                        "item": items,
                        "first": firsts,
                    }
                )
            )
        windows_found = pl.concat(parts).with_columns(
            gram=(pl.col("ngram").rank("dense") - 1).cast(pl.Int64)
        )
        grams = windows_found.unique(
            subset=["gram_hash", "ngram", "length", "item"], keep="first", maintain_order=True
        )
        # the n-grams at each item's two ends: a quote of one half of an item holds one of them
        found_item, found_first = (
            windows_found["item"].to_numpy(),
            windows_found["first"].to_numpy(),
        )
        at_start = found_first == tokens.offsets[found_item]
        at_end = found_first + windows_found["length"].to_numpy() == tokens.offsets[found_item + 1]
        first_gram = windows_found.filter(pl.Series(at_start))
        last_gram = windows_found.filter(pl.Series(at_end))
        benchmark_of_item = pl.Series([b.name for b in benchmarks for _ in b.texts])
        gram_table = (
            grams.with_columns(benchmark=benchmark_of_item.gather(grams["item"]))
            .group_by("gram")
            .agg(
                pl.col("ngram", "gram_hash", "length", "first").first(),
                bench_df=pl.col("benchmark").n_unique().cast(pl.Int64),
            )
            .sort("gram")  # ids are dense, so row k holds gram k
            .with_columns(numeric=pl.col("ngram").str.contains(r"^[0-9 ]+$"))
        )
        per_item = grams.group_by("item").agg(item_ngrams=pl.len().cast(pl.Int64))
        items_frame = (
            pl.DataFrame(
                {
                    "item": np.arange(len(texts), dtype=np.int64),
                    "benchmark": [b.name for b in benchmarks for _ in b.texts],
                    "benchmark_id": [i for b in benchmarks for i in b.ids],
                    "short": (lengths > 0) & (lengths < n),
                    "item_tokens": lengths.astype(np.int64),
                }
            )
            .join(per_item, on="item", how="left")
            .join(first_gram.select("item", first_gram="gram"), on="item", how="left")
            .join(last_gram.select("item", last_gram="gram"), on="item", how="left")
            .with_columns(
                pl.col("item_ngrams").fill_null(0), pl.col("first_gram", "last_gram").fill_null(-1)
            )
            .sort("item")  # row k holds item k
        )
        probes = {
            int(length): HashSet(part["gram_hash"].to_numpy())
            for (length,), part in grams.group_by("length")
        }
        short_firsts = grams.filter(pl.col("length") < n)["first"].to_numpy()
        anchors = HashSet(tokens.values[short_firsts])
        lookup = {
            int(length): (
                part["gram_hash"].to_numpy(),
                part["gram"].to_numpy(),
                part["first"].to_numpy(),
            )
            for (length,), part in gram_table.sort("gram_hash").group_by("length")
        }
        pairs = grams.select("gram", "item").unique().sort("gram", "item")
        item_offsets = np.searchsorted(
            pairs["gram"].to_numpy(), np.arange(gram_table.height + 1, dtype=np.int64)
        )
        return cls(
            n,
            grams,
            gram_table,
            items_frame,
            tokens,
            probes,
            anchors,
            list(benchmarks),
            lookup,
            item_offsets,
            pairs["item"].to_numpy(),
        )


def find_overlaps(
    texts: pl.Series, index: BenchmarkIndex, tokens: Tokens | None = None
) -> pl.DataFrame:
    """Every verified (row, benchmark n-gram) occurrence: the measurement step's raw data.

    Columns: `row` (position in `texts`), `start` (token offset in the row), `item`, `gram`
    (id of the n-gram string in `index.gram_table`).
    Candidates come from 64-bit window hashes; each is then checked token by token against
    the benchmark n-gram (packed bytes for tokens up to 8 bytes, the strings for longer ones),
    so a hash collision never produces a match. `tokens`: `tokenize(texts)`, if already done.
    """
    if tokens is None:
        tokens = tokenize(texts)
    n = index.n
    windows = rolling_windows(tokens, {n: index.probes[n]} if n in index.probes else {})
    short = {length: probe for length, probe in index.probes.items() if length < n}
    if short:
        windows.update(anchored_windows(tokens, short, index.anchors))
    found_firsts, found_grams = [], []
    for length, (firsts, gram_hashes) in windows.items():
        if firsts.size == 0:
            continue
        # each window against the distinct n-gram(s) with its hash, verified token by token
        table_hash, table_gram, table_first = index.lookup[length]
        lo = np.searchsorted(table_hash, gram_hashes, side="left")
        count = np.searchsorted(table_hash, gram_hashes, side="right") - lo
        mine, at = np.repeat(firsts, count), expand_ranges(lo, count)
        theirs = table_first[at]
        same = np.ones(mine.size, dtype=np.bool_)
        for k in range(length):
            same &= tokens.equal(mine + k, index.tokens, theirs + k)
        found_firsts.append(mine[same])
        found_grams.append(table_gram[at[same]])
    mine = np.concatenate([np.empty(0, np.int64), *found_firsts])
    gram = np.concatenate([np.empty(0, np.int64), *found_grams])
    rows = np.searchsorted(tokens.offsets, mine, side="right") - 1
    # then every item holding that n-gram
    first_item = index.item_offsets[gram]
    count = index.item_offsets[gram + 1] - first_item
    return pl.DataFrame(
        {
            "row": np.repeat(rows, count),
            "start": np.repeat(mine - tokens.offsets[rows], count),
            "item": index.item_ids[expand_ranges(first_item, count)],
            "gram": np.repeat(gram, count),
        },
        schema={"row": pl.Int64, "start": pl.Int64, "item": pl.Int64, "gram": pl.Int64},
    )


def build_stock_ngrams(
    texts: Iterable[str] | pl.Series, n: int = DEFAULT_N, min_df: int = 3
) -> StockNgrams:
    """N-grams that occur in at least `min_df` distinct texts of a reference corpus.

    The corpus should hold many problems of the kind being cleaned (training sources, all
    benchmarks): a phrase that recurs in `min_df` unrelated problems ("find the remainder when
    n is divided by 1000") is no evidence that a row copies one benchmark item. Identical texts
    count once, so a problem repeated in the corpus does not make its own n-grams stock.
    """
    series = texts if isinstance(texts, pl.Series) else pl.Series("t", list(texts), pl.String)
    series = series.drop_nulls().unique()
    tokens = tokenize(series)
    firsts, gram_hashes = rolling_windows(tokens, {n: None})[n]
    rows = np.searchsorted(tokens.offsets, firsts, side="right") - 1
    frequent = (
        pl.DataFrame({"row": rows, "first": firsts, "h": gram_hashes})
        .unique(subset=["row", "h"])
        .group_by("h")
        .agg(df=pl.len(), first=pl.col("first").first())
        .filter(pl.col("df") >= min_df)
    )
    grams = frozenset(tokens.window_text(int(f), n) for f in frequent["first"])
    return StockNgrams(n=n, ngrams=grams, min_df=min_df, corpus_rows=len(series))


@dataclass(frozen=True)
class StockNgrams:
    """Stock-phrase n-grams (normalized strings) found frequent in a reference corpus."""

    n: int
    ngrams: frozenset[str]
    min_df: int
    corpus_rows: int

    def __len__(self) -> int:
        return len(self.ngrams)
