"""Decontaminate code problems by their original problem URL or contest id.

Code RL removes training problems that are evaluation problems by matching the URLs they were
scraped from, on top of 9-gram overlap: a re-worded or translated statement shares no
9-gram with the benchmark item but still links to the same judge page. A URL is reduced to
a judge-specific problem key so that the forms a judge uses for one problem agree:

    >>> problem_key("https://codeforces.com/problemset/problem/1950/A")
    'codeforces:1950A'
    >>> problem_key("http://www.codeforces.com/contest/1950/problem/a?locale=en")
    'codeforces:1950A'
    >>> problem_key("https://atcoder.jp/contests/abc300/tasks/abc300_b")
    'atcoder:abc300_b'
    >>> problem_key("https://leetcode.com/problems/two-sum/description/")
    'leetcode:two-sum'

Other URLs keep host and path, lower-cased, without scheme, `www.`, query and trailing slash.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import polars as pl

from curation.code.fields import field_values
from curation.decontaminate.benchmarks import Benchmark
from lake.operators import decide
from lake.steps import StepResult

_CODEFORCES = re.compile(
    r"^/(?:problemset/problem|contest|gym)/(\d+)/(?:problem/)?([A-Za-z]\d*)", re.IGNORECASE
)
_ATCODER = re.compile(r"^/contests/[^/]+/tasks/([^/]+)")
_LEETCODE = re.compile(r"^/problems/([^/]+)")
_CODECHEF = re.compile(r"^/(?:[A-Za-z0-9_]+/)?problems/([A-Za-z0-9_]+)")


def problem_key(url: str) -> str | None:
    """The judge-specific key of a problem URL (see the module docstring); None if empty."""
    text = url.strip()
    if not text:
        return None
    if "://" not in text:
        text = "//" + text
    parts = urlsplit(text)
    host = parts.netloc.lower().removeprefix("www.").split(":")[0]
    path = parts.path or "/"
    if host.endswith("codeforces.com") and (m := _CODEFORCES.match(path)):
        return f"codeforces:{m.group(1)}{m.group(2).upper()}"
    if host.endswith("atcoder.jp") and (m := _ATCODER.match(path)):
        return f"atcoder:{m.group(1).lower()}"
    if host.startswith("leetcode.") and (m := _LEETCODE.match(path)):
        return f"leetcode:{m.group(1).lower()}"
    if host.endswith("codechef.com") and (m := _CODECHEF.match(path)):
        return f"codechef:{m.group(1).upper()}"
    if "u-aizu.ac.jp" in host:
        ids = parse_qs(parts.query).get("id")
        tail = ids[0] if ids else path.rstrip("/").rsplit("/", 1)[-1]
        return f"aizu:{tail.upper()}"
    return f"{host}{path.rstrip('/').lower()}"


def contest_problem_key(platform: str, contest_id: object, index: object) -> str:
    """A key from a judge's contest id and problem index, as `problem_key` writes it.

    >>> contest_problem_key("codeforces", 1950, "a")
    'codeforces:1950A'
    """
    platform = platform.lower()
    if platform == "codeforces":
        return f"codeforces:{contest_id}{str(index).upper()}"
    if platform == "atcoder":
        return f"atcoder:{str(contest_id).lower()}_{str(index).lower()}"
    return f"{platform}:{contest_id}/{index}"


def problem_keys(
    df: pl.DataFrame,
    *,
    url_field: str = "url",
    contest_field: str = "contest_id",
    index_field: str = "problem_index",
    platform: str = "codeforces",
) -> list[str | None]:
    """Per row its problem key: from the URL when there is one, else from the contest id and
    problem index (each a column or a `metadata` key); None when the row has neither."""
    urls = field_values(df, url_field, required=False)
    contests = field_values(df, contest_field, required=False)
    indexes = field_values(df, index_field, required=False)
    keys: list[str | None] = []
    for url, contest, index in zip(urls, contests, indexes, strict=True):
        if isinstance(url, str) and url.strip():
            keys.append(problem_key(url))
        elif contest is not None and index is not None:
            keys.append(contest_problem_key(platform, contest, index))
        else:
            keys.append(None)
    return keys


def decontaminate_by_problem_id(
    df: pl.DataFrame,
    benchmarks: pl.DataFrame,
    *,
    url_field: str = "url",
    contest_field: str = "contest_id",
    index_field: str = "problem_index",
    platform: str = "codeforces",
) -> StepResult:
    """Drop training rows whose problem key is a benchmark item's.

    `benchmarks` has `benchmark`, `benchmark_id` and the same URL / contest fields (or a
    ready `problem_key` column). Every row gets `problem_key` (null when it records no URL or
    contest id: such rows are kept, 9-gram decontamination still sees them); dropped rows
    carry reason `same_problem_id` and the matching `benchmark`, `benchmark_id`.
    """
    for name in ("benchmark", "benchmark_id"):
        if name not in benchmarks.columns:
            raise ValueError(
                f"benchmarks frame has no column {name!r}; it has {benchmarks.columns}"
            )
    fields = {
        "url_field": url_field,
        "contest_field": contest_field,
        "index_field": index_field,
        "platform": platform,
    }
    bench_keys = (
        benchmarks.get_column("problem_key").to_list()
        if "problem_key" in benchmarks.columns
        else problem_keys(benchmarks, **fields)
    )
    index = (
        benchmarks.select("benchmark", pl.col("benchmark_id").cast(pl.String))
        .with_columns(pl.Series("problem_key", bench_keys, dtype=pl.String))
        .drop_nulls("problem_key")
        .unique("problem_key", keep="first", maintain_order=True)
    )
    measured = df.with_columns(
        pl.Series("problem_key", problem_keys(df, **fields), dtype=pl.String)
    ).with_row_index("__row")
    matched = measured.join(index, on="problem_key", how="left").sort("__row").drop("__row")
    return decide(
        matched,
        pl.when(pl.col("benchmark").is_not_null()).then(pl.lit("same_problem_id")),
        drop_only=("benchmark", "benchmark_id"),
        stats={
            "rows_with_key": int(matched.get_column("problem_key").is_not_null().sum()),
            "benchmark_keys": index.height,
        },
    )


def benchmark_key_frame(name: str, urls: Sequence[str]) -> pl.DataFrame:
    """A `benchmarks` frame for `decontaminate_by_problem_id` from a list of problem URLs
    (e.g. an evaluation set's URL list), item ids being the URLs themselves."""
    return pl.DataFrame(
        {
            "benchmark": [name] * len(urls),
            "benchmark_id": list(urls),
            "problem_key": [problem_key(u) for u in urls],
        },
        schema={"benchmark": pl.String, "benchmark_id": pl.String, "problem_key": pl.String},
    )


def load_url_list(path: str | Path) -> Benchmark:
    """Evaluation problem URLs, one per line (blank lines and `#` comments skipped), as a
    `Benchmark` named after the file whose ids and texts are the URLs. OSError if unreadable."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    urls = [u.strip() for u in lines if u.strip() and not u.startswith("#")]
    return Benchmark(Path(path).stem, urls, urls, origin=str(path), domain="code")
