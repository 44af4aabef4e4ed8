"""Code decontamination by problem URL / contest id, and the release-date cutoff rule."""

from __future__ import annotations

import json

import polars as pl
import pytest

from curation.code.problem_ids import (
    benchmark_key_frame,
    decontaminate_by_problem_id,
    problem_key,
)
from curation.code.release_cutoff import drop_after_cutoff


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (
            "https://codeforces.com/problemset/problem/1950/A",
            "codeforces.com/contest/1950/problem/a",
        ),
        (
            "https://codeforces.com/gym/102001/problem/B",
            "http://www.codeforces.com/gym/102001/B?x=1",
        ),
        (
            "https://atcoder.jp/contests/abc300/tasks/abc300_b",
            "atcoder.jp/contests/ABC300/tasks/ABC300_B/",
        ),
        (
            "https://leetcode.com/problems/two-sum/",
            "https://leetcode.cn/problems/two-sum/description",
        ),
        ("https://www.codechef.com/START1/problems/ABC", "https://codechef.com/problems/abc"),
        (
            "https://judge.u-aizu.ac.jp/onlinejudge/description.jsp?id=ALDS1_1_A",
            "https://onlinejudge.u-aizu.ac.jp/problems/ALDS1_1_A",
        ),
        ("https://example.org/Task/7/?ref=x#top", "example.org/task/7"),
    ],
)
def test_forms_of_one_problem_get_one_key(a: str, b: str) -> None:
    assert problem_key(a) == problem_key(b)


def test_different_problems_get_different_keys() -> None:
    keys = {
        problem_key(u)
        for u in (
            "https://codeforces.com/contest/1950/problem/A",
            "https://codeforces.com/contest/1950/problem/B",
            "https://codeforces.com/contest/195/problem/A",
            "https://atcoder.jp/contests/abc300/tasks/abc300_a",
            "https://leetcode.com/problems/two-sum-ii/",
        )
    }
    assert len(keys) == 5


def test_rows_matching_a_benchmark_url_or_contest_id_are_dropped() -> None:
    df = pl.DataFrame(
        {
            "id": ["a", "b", "c", "d", "e"],
            "problem": ["p"] * 5,
            "metadata": [
                json.dumps({"url": "https://codeforces.com/problemset/problem/2000/C"}),
                json.dumps({"contest_id": 2000, "problem_index": "d"}),
                json.dumps({"url": "https://codeforces.com/problemset/problem/1999/C"}),
                json.dumps({}),
                json.dumps({"url": "https://leetcode.com/problems/two-sum"}),
            ],
        }
    )
    bench = pl.concat(
        [
            benchmark_key_frame(
                "codeforces_2024",
                [
                    "https://codeforces.com/contest/2000/problem/C",
                    "https://codeforces.com/contest/2000/problem/D",
                ],
            ),
            benchmark_key_frame("lcb", ["https://leetcode.com/problems/two-sum/description/"]),
        ]
    )
    result = decontaminate_by_problem_id(df, bench)
    assert result.kept["id"].to_list() == ["c", "d"]
    assert result.kept["problem_key"].to_list() == ["codeforces:1999C", None]
    dropped = {r["id"]: r for r in result.dropped.iter_rows(named=True)}
    assert set(dropped) == {"a", "b", "e"}
    assert dropped["a"]["reason"] == "same_problem_id"
    assert dropped["b"]["benchmark_id"] == "https://codeforces.com/contest/2000/problem/D"
    assert dropped["e"]["benchmark"] == "lcb"
    assert result.stats["rows_with_key"] == 4


def test_cutoff_keeps_up_to_the_date_and_marks_undated_rows() -> None:
    df = pl.DataFrame(
        {
            "id": ["old", "edge", "late", "after", "undated"],
            "release_date": [
                "2023-05-01",
                "2024-08-01T23:00:00",
                "2024-08-02",
                "2025-01-10T08:00:00Z",
                None,
            ],
        }
    )
    result = drop_after_cutoff(df, cutoff="2024-08-01")
    assert result.kept["id"].to_list() == ["old", "edge", "undated"]
    assert result.dropped["id"].to_list() == ["late", "after"]
    assert set(result.dropped["reason"]) == {"released_after_cutoff"}
    assert result.kept["released_at"].null_count() == 1
    strict = drop_after_cutoff(df, cutoff="2024-08-01", undated="drop")
    assert strict.dropped.filter(pl.col("id") == "undated")["reason"].to_list() == [
        "release_date_unknown"
    ]
    earlier = drop_after_cutoff(df, cutoff="2024-01-01")
    assert earlier.kept["id"].to_list() == ["old", "undated"]


def test_cutoff_reads_metadata_and_names_a_bad_date() -> None:
    df = pl.DataFrame(
        {"id": ["a", "b"], "metadata": [json.dumps({"contest_date": 1735689600}), "{}"]}
    )
    result = drop_after_cutoff(df, date_field="contest_date")  # 2025-01-01 in Unix seconds
    assert result.dropped["id"].to_list() == ["a"]
    bad = pl.DataFrame({"id": ["a", "b"], "release_date": ["2024-01-01", "last spring"]})
    with pytest.raises(ValueError, match=r"row 1: release_date 'last spring' is not an ISO date"):
        drop_after_cutoff(bad)
