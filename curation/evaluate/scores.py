"""Benchmark scores from scored samples: avg@k with its standard error, and unbiased pass@k.

avg@k is the mean over items of each item's share of passing samples (pass@1 estimated with
k samples). Its standard error is the sample standard deviation of those per-item shares over
the square root of the number of items: the uncertainty a reader needs to tell a real change
between two stages from noise. pass@k is the unbiased estimator of Chen et al. (2021),
1 - C(n-c, k) / C(n, k) per item, averaged. An undecided sample (a verifier timeout) counts
as failed and is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import polars as pl


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn from n (c of them correct) passes."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


@dataclass(frozen=True)
class BenchmarkScore:
    """One benchmark's score for one model and settings."""

    benchmark: str
    items: int
    k: int
    avg: float  # avg@k, in [0, 1]
    stderr: float  # of avg@k over items
    pass_at_k: float  # unbiased pass@k with k = samples per item
    undecided: int  # samples the verifier could not decide (counted as failed)

    def as_dict(self) -> dict[str, object]:
        return {
            "benchmark": self.benchmark,
            "items": self.items,
            "k": self.k,
            "avg_at_k": round(self.avg, 6),
            "stderr": round(self.stderr, 6),
            "pass_at_k": round(self.pass_at_k, 6),
            "undecided": self.undecided,
        }


def score_benchmark(benchmark: str, samples: pl.DataFrame) -> BenchmarkScore:
    """Score `samples` (rows with `item_id` and `passed`, one per sample) of one benchmark."""
    if samples.is_empty():
        raise ValueError(f"benchmark {benchmark!r}: no scored samples")
    per_item = samples.group_by("item_id").agg(
        pl.len().alias("n"),
        pl.col("passed").fill_null(False).sum().alias("c"),
        pl.col("passed").null_count().alias("undecided"),
    )
    counts = per_item.get_column("n").unique().to_list()
    if len(counts) != 1:
        raise ValueError(
            f"benchmark {benchmark!r}: items have different sample counts {sorted(counts)}"
        )
    k = counts[0]
    shares = (per_item.get_column("c") / k).to_list()
    items = len(shares)
    mean = sum(shares) / items
    variance = sum((s - mean) ** 2 for s in shares) / (items - 1) if items > 1 else 0.0
    at_k = [pass_at_k(k, c, k) for c in per_item.get_column("c").to_list()]
    return BenchmarkScore(
        benchmark=benchmark,
        items=items,
        k=k,
        avg=mean,
        stderr=math.sqrt(variance / items),
        pass_at_k=sum(at_k) / items,
        undecided=int(per_item.get_column("undecided").sum()),
    )
