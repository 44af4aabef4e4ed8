"""Behaviour dedup of code problems: I/O cases joined with text similarity."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from curation.code.behaviour_dedup import (
    BehaviourRule,
    decontaminate_by_behaviour,
    dedup_by_behaviour,
)
from curation.code.benchmark_tests import load_code_benchmark, load_code_benchmarks
from curation.code.io_cases import io_cases
from lake.files import json_lines

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
BENCHMARKS = ("leetcode_test", "codeforces_test", "code_contests_test", "humaneval")


def functional(*asserts: str, entry: str = "Solution().f") -> str:
    body = "".join(f"    assert {a}\n" for a in asserts)
    return json.dumps({"functional": f"def check(candidate):\n{body}\n\ncheck({entry})"})


def frame(rows: list[tuple[str, str, str | None]]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "id": [r[0] for r in rows],
            "problem": [r[1] for r in rows],
            "tests": [r[2] for r in rows],
        },
        schema={"id": pl.String, "problem": pl.String, "tests": pl.String},
    )


STORY_A = (
    "Given a list of integers, return the largest sum of a contiguous subarray. The array holds "
    "at least one element and the values may be negative."
)
STORY_B = (
    "A hiker records daily altitude changes. Report the best total gain she can collect over any "
    "run of consecutive days; she must walk at least one day."
)
TESTS_1 = (
    "candidate(nums = [-2, 1, -3, 4, -1, 2, 1, -5, 4]) == 6",
    "candidate(nums = [5, 4, -1, 7, 8]) == 23",
    "candidate(nums = [-3, -7, -1]) == -1",
)
TESTS_2 = (
    "candidate(nums = [3, 1, 4, 1, 5, 9, 2, 6]) == 31",
    "candidate(nums = [2, 7, 1, 8, 2, 8, 1, 8]) == 37",
)


def test_cases_normalize_shapes_names_and_spacing() -> None:
    by_name = io_cases(functional("candidate(nums = [1,2],  k=3) == [ 1 ]"))
    positional = io_cases(
        {
            "test": "def check(candidate):\n    assert candidate([1, 2], 3) == [1]\n",
            "entry_point": "f",
        }
    )
    assert by_name == positional == ["candidate([1, 2], 3) == [1]"]
    assert io_cases([{"input": "2\n1   2\n", "output": "3\n"}]) == io_cases(
        "{'inputs': ['2 1 2'], 'outputs': ['3']}"
    )
    assert io_cases(None) == []
    with pytest.raises(ValueError, match="neither JSON nor a Python literal"):
        io_cases("def check(")


def test_same_tests_different_story_is_one_cluster() -> None:
    df = frame([("a", STORY_A, functional(*TESTS_1)), ("b", STORY_B, functional(*TESTS_1))])
    result = dedup_by_behaviour(df)
    assert result.kept["id"].to_list() == ["a"]
    row = result.dropped.row(0, named=True)
    assert row["reason"] == "behaviour_duplicate"
    assert row["duplicate_of"] == "a" and row["cluster_size"] == 2
    assert row["io_jaccard"] == 1.0 and row["io_shared"] == 3
    assert row["text_similarity"] < 0.2  # the stories share nearly nothing


def test_same_story_different_tests_is_two_clusters() -> None:
    df = frame([("a", STORY_A, functional(*TESTS_1)), ("b", STORY_A, functional(*TESTS_2))])
    result = dedup_by_behaviour(df)
    assert result.kept["id"].to_list() == ["a", "b"]
    assert result.stats["candidate_pairs"] == 0


def test_same_story_mostly_shared_tests_merges() -> None:
    # one task from two sources that kept different examples: 3 of 4 cases shared
    more = (*TESTS_1, "candidate(nums = [1, 2, 3]) == 6")
    df = frame(
        [
            ("a", STORY_A, functional(*more)),
            ("b", STORY_A + " Use O(n) time.", functional(*TESTS_1, TESTS_2[0])),
        ]
    )
    result = dedup_by_behaviour(df)
    row = result.dropped.row(0, named=True)
    assert row["id"] == "b" and row["duplicate_of"] == "a"
    assert row["io_containment"] == 0.75 and row["io_jaccard"] == 0.6
    assert row["text_similarity"] >= 0.8


def test_one_shared_case_is_not_the_same_task_whatever_the_story() -> None:
    one = (TESTS_1[0], "candidate(nums = [1, 2, 3]) == 6")
    for story in (STORY_A, STORY_B):  # the same story, then another one
        result = dedup_by_behaviour(
            frame([("a", STORY_A, functional(*TESTS_1)), ("c", story, functional(*one))])
        )
        assert result.kept["id"].to_list() == ["a", "c"]
        assert result.kept["behaviour_match"].to_list() == ["c", "a"]  # measured, not merged
        assert result.kept["io_shared"].to_list() == [1, 1]
        assert result.kept["io_containment"].to_list() == [0.5, 0.5]


def test_stock_cases_never_link_problems() -> None:
    trivial = "candidate(1) == 1"
    rows = [
        (
            f"p{i}",
            f"Problem number {i}: {word} the value.",
            functional(trivial, f"candidate({i + 10}) == {i}"),
        )
        for i, word in enumerate(["double", "halve", "negate", "square", "cube", "invert"])
    ]
    result = dedup_by_behaviour(frame(rows))
    assert result.dropped.height == 0
    assert result.stats["candidate_pairs"] == 0  # the shared case is held by 6 >= 5 problems


def test_many_copies_of_one_problem_stay_one_cluster() -> None:
    stories = [STORY_A, STORY_B, "Sum the best run.", "Max subarray.", "Kadane, please.", "Go."]
    df = frame([(f"c{i}", story, functional(*TESTS_1)) for i, story in enumerate(stories)])
    result = dedup_by_behaviour(df)  # six copies: identical test sets count once for stock
    assert result.kept["id"].to_list() == ["c0"]
    assert set(result.dropped["cluster_size"]) == {6}


def test_thresholds_are_parameters_and_measurements_stay() -> None:
    df = frame([("a", STORY_A, functional(*TESTS_1)), ("b", STORY_B, functional(*TESTS_1))])
    loose = dedup_by_behaviour(df, min_specific_chars=10_000)
    assert loose.dropped.height == 0  # the same-tests path now needs more evidence
    assert loose.kept["io_jaccard"].to_list() == [1.0, 1.0]
    with pytest.raises(ValueError, match="min_io_jaccard"):
        BehaviourRule(min_io_jaccard=0.0)


def test_unreadable_and_missing_tests_are_kept_and_said() -> None:
    df = frame([("a", STORY_A, "not a test"), ("b", STORY_B, None)])
    result = dedup_by_behaviour(df)
    assert result.kept["id"].to_list() == ["a", "b"]
    assert result.kept["io_cases"].to_list() == [0, 0]
    assert "neither JSON nor a Python literal" in result.kept["io_error"][0]
    assert result.kept["io_error"][1] is None
    assert result.stats["unreadable_tests"] == 1


def test_tests_are_read_from_metadata() -> None:
    df = pl.DataFrame(
        {
            "id": ["a", "b"],
            "problem": [STORY_A, STORY_B],
            "metadata": [json.dumps({"tests": json.loads(functional(*TESTS_1))})] * 2,
        }
    )
    assert dedup_by_behaviour(df).dropped["id"].to_list() == ["b"]


# --------------------------------------------------------------------------- real data


def entry_points(df: pl.DataFrame) -> list[str]:
    calls = [re.search(r"check\((.*)\)\s*$", json.loads(t)["functional"]) for t in df["tests"]]
    return [c.group(1) if c else "" for c in calls]


@pytest.fixture(scope="module")
def leetcode_train() -> pl.DataFrame:
    rows = [r for _, r in json_lines(DATA / "sources" / "leetcode_train.jsonl")]
    return pl.DataFrame(
        {
            "id": [f"lc{i}" for i in range(len(rows))],
            "problem": [r["problem"] for r in rows],
            "tests": [r["tests"]["functional"] for r in rows],
        }
    ).with_columns(pl.col("tests").map_elements(lambda t: json.dumps({"functional": t}), pl.String))


def test_leetcode_train_merges_exactly_leetcodes_own_same_as_pairs(leetcode_train) -> None:
    result = dedup_by_behaviour(leetcode_train)
    method = dict(zip(leetcode_train["id"], entry_points(leetcode_train), strict=True))
    merged = {
        (method[r["id"]], method[r["duplicate_of"]]) for r in result.dropped.iter_rows(named=True)
    }
    # LeetCode marks each of these "the same as" the other (1081 = 316, 783 = 530, 1123 = 865)
    assert merged == {
        ("Solution().smallestSubsequence", "Solution().removeDuplicateLetters"),
        ("Solution().minDiffInBST", "Solution().getMinimumDifference"),
        ("Solution().lcaDeepestLeaves", "Solution().subtreeWithAllDeepest"),
    }
    # series siblings share examples but are other tasks: measured, never merged
    kept = result.kept.with_columns(pl.Series("method", entry_points(result.kept)))
    for name in ("Solution().lastStoneWeightII", "Solution().smallestRangeII"):
        row = kept.filter(pl.col("method") == name).row(0, named=True)
        assert row["io_shared"] >= 1 and row["behaviour_match"] is not None


def test_leetcode_train_against_code_benchmarks(leetcode_train) -> None:
    benchmarks = load_code_benchmarks([DATA / "benchmarks" / f"{b}.jsonl" for b in BENCHMARKS])
    assert benchmarks.height == 200 + 408 + 165 + 164
    result = decontaminate_by_behaviour(leetcode_train, benchmarks)
    assert result.dropped.height == 0
    assert result.stats["candidate_pairs"] > 0  # pairs were measured (shared examples exist)
    matched = result.kept.filter(pl.col("benchmark").is_not_null())
    assert matched.height > 0 and matched["io_jaccard"].max() < 0.75


def _without_tags(statement: str) -> str:
    return re.sub(r"Tags:\n\[.*?\]", "", statement, flags=re.S)


def test_codeforces_mirrors_and_easy_hard_versions_merge() -> None:
    codeforces = load_code_benchmark(DATA / "benchmarks" / "codeforces_test.jsonl")
    df = codeforces.with_columns(id=pl.col("benchmark_id"))
    result = dedup_by_behaviour(df)
    statement = dict(zip(df["id"], df["problem"], strict=True))
    mirrors = versions = 0
    for row in result.dropped.iter_rows(named=True):
        mine, kept = statement[row["id"]], statement[row["duplicate_of"]]
        if _without_tags(mine) == _without_tags(kept):
            mirrors += 1  # Div. 1 / Div. 2 copies of one problem: only the tags differ
        else:
            assert "version" in mine.lower()  # easy / hard versions: only the limits differ
            versions += 1
    assert (mirrors, versions) == (11, 11)
    pairs = set(zip(result.dropped["id"], result.dropped["duplicate_of"], strict=True))
    assert {("112", "111"), ("295", "294"), ("296", "294"), ("262", "253")} <= pairs


def test_leetcode_test_holds_its_statements_twice() -> None:
    df = load_code_benchmark(DATA / "benchmarks" / "leetcode_test.jsonl").with_columns(
        id=pl.col("benchmark_id")
    )
    result = dedup_by_behaviour(df)
    statement = dict(zip(df["id"], df["problem"], strict=True))
    identical = sum(
        statement[r["id"]] == statement[r["duplicate_of"]]
        for r in result.dropped.iter_rows(named=True)
    )
    assert (result.dropped.height, identical) == (17, 14)


def test_no_benchmark_items_drops_nothing(leetcode_train) -> None:
    empty = load_code_benchmarks([DATA / "benchmarks" / "humaneval.jsonl"]).clear()
    result = decontaminate_by_behaviour(leetcode_train.head(20), empty)
    assert result.kept.height == 20 and result.kept["benchmark"].null_count() == 20


def test_benchmark_loader_names_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "bench.jsonl"
    path.write_text(
        json.dumps({"problem": "x", "tests": []}) + "\n" + json.dumps({"problem": "y"}) + "\n"
    )
    with pytest.raises(ValueError, match=r"bench.jsonl:2: no tests"):
        load_code_benchmark(path)
