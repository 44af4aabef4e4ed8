"""Correctness filtering of code SFT traces: run in the sandbox, or keep the longer traces."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from curation.code.correctness import filter_by_correctness
from curation.verify.sandbox import Sandbox
from lake.files import json_lines

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=2) as sandbox:
        yield sandbox


def fenced(code: str) -> str:
    return f"<think>work</think>\n```python\n{code}\n```"


def test_traces_with_tests_are_run_and_without_tests_ranked_by_length(box) -> None:
    rows = [r for _, r in json_lines(DATA / "sources" / "leetcode_train.jsonl")][:2]
    two_sum, add_two = rows
    stdio = json.dumps([{"input": "2 3\n", "output": "5"}, {"input": "10 -4\n", "output": "6"}])
    df = pl.DataFrame(
        {
            "id": [f"r{i}" for i in range(9)],
            "prompt_id": [
                "two_sum",
                "two_sum",
                "add",
                "add",
                "sum",
                "free",
                "free",
                "free",
                "free",
            ],
            "response": [
                fenced(two_sum["solutions"]),  # the reference solution: passes
                fenced(
                    "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]"
                ),
                fenced(add_two["solutions"]),
                "I would rather not write code.",
                fenced("a, b = map(int, input().split())\nprint(a + b)"),
                "short",
                "a somewhat longer trace",
                "the longest trace of them all, very thorough",
                "medium length trace",
            ],
            "tests": [
                json.dumps(two_sum["tests"]),
                json.dumps(two_sum["tests"]),
                json.dumps(add_two["tests"]),
                json.dumps(add_two["tests"]),
                stdio,
                None,
                None,
                None,
                None,
            ],
        }
    )
    result = filter_by_correctness(df, sandbox=box)
    assert result.kept["id"].to_list() == ["r0", "r2", "r4", "r6", "r7"]
    reasons = dict(zip(result.dropped["id"], result.dropped["reason"], strict=True))
    assert reasons == {
        "r1": "tests_failed",
        "r3": "tests_failed",
        "r5": "shorter_trace",
        "r8": "shorter_trace",
    }
    why = dict(zip(result.dropped["id"], result.dropped["verify_detail"], strict=True))
    assert why["r1"].startswith("test 1/1 failed") and why["r3"] == "no code block in the response"
    ranks = dict(zip(result.kept["id"], result.kept["length_rank"], strict=True))
    assert ranks["r7"] == 1 and ranks["r6"] == 2
    assert result.stats["passed"] == 3
    one = filter_by_correctness(
        df.filter(pl.col("prompt_id") == "free"), sandbox=box, untested_keep=1
    )
    assert one.kept["id"].to_list() == ["r7"]


def test_unusable_tests_are_undecided_not_failed(box) -> None:
    df = pl.DataFrame(
        {
            "id": ["a"],
            "prompt_id": ["p"],
            "response": [fenced("print(1)")],
            "tests": ["{'weird': 1}"],
        }
    )
    result = filter_by_correctness(df, sandbox=box)
    assert result.dropped["reason"].to_list() == ["verify_undecided"]
    assert "unknown tests dict" in result.dropped["verify_detail"][0]


def test_trace_length_prefers_token_counts() -> None:
    df = pl.DataFrame(
        {
            "id": ["a", "b"],
            "prompt_id": ["p", "p"],
            "response": ["long long long long", "short"],
            "completion_tokens": [3, 900],
            "tests": [None, None],
        }
    )
    result = filter_by_correctness(df, untested_keep=1)
    assert result.kept["id"].to_list() == ["b"]
    with pytest.raises(ValueError, match="untested_keep"):
        filter_by_correctness(df, untested_keep=0)
