"""code_rl: the checkable-by-tests filter, and the recipe end to end on real LeetCode problems
against a scripted server whose programs are really run in the sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from builders import code_rl
from builders.runner import build_dataset, parse_overrides
from curation.code.checkable import filter_checkable_by_tests
from lake.catalog import Lake
from tests.scripted_openai import ScriptedServer

STDIO = json.dumps([{"input": "1 2\n", "output": "3\n"}])


def test_checkable_by_tests_drops_what_a_test_run_cannot_judge() -> None:
    df = pl.DataFrame(
        {
            "uid": ["ok", "inter", "judge", "float", "none", "bad"],
            "problem": [
                "Read two integers and print their sum.",
                "This is an interactive problem. Guess the number; flush the output.",
                "Print a permutation. If there are multiple answers, print any of them.",
                "Print the area. Your answer is accepted if its absolute or relative error is "
                "at most 1e-6.",
                "Read two integers and print their product.",
                "Read two integers and print their difference.",
            ],
            "tests": [STDIO, STDIO, STDIO, STDIO, None, "not a test at all {"],
        }
    )
    result = filter_checkable_by_tests(df)
    assert result.kept["uid"].to_list() == ["ok"]
    reasons = dict(zip(result.dropped["uid"], result.dropped["reason"], strict=True))
    assert reasons == {
        "inter": "interactive",
        "judge": "special_judge",
        "float": "special_judge",
        "none": "no_tests",
        "bad": "no_tests",
    }
    evidence = dict(zip(result.dropped["uid"], result.dropped["checkable_evidence"], strict=True))
    assert evidence["judge"] == "If there are multiple answers"


# Six real problems; the weak model solves WEAK[i] of 4 samples, the strong one STRONG[i].
WEAK = [4, 2, 0, 1, 4, 0]
STRONG = [4, 4, 0, 3, 4, 2]


def test_code_rl_keeps_problems_neither_trivial_nor_hopeless(
    tmp_path: Path, shared_data: Path, lake: Lake
) -> None:
    rows = [
        json.loads(line)
        for _, line in zip(
            range(6), (shared_data / "sources" / "leetcode_train.jsonl").open(), strict=False
        )
    ]
    source = tmp_path / "leetcode.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def model(counts: list[int]):
        def reply(user: str, sample: int) -> str:
            i = next(n for n, r in enumerate(rows) if r["problem"] in user)
            program = rows[i]["solutions"] if sample < counts[i] else "class Solution:\n    pass\n"
            return f"<think>plan</think>\n```python\nfrom typing import *\n{program}\n```"

        return reply

    with ScriptedServer({"weak": model(WEAK), "strong": model(STRONG)}) as server:
        options = json.dumps({"base_url": server.base_url, "api_key_env": None, "concurrency": 4})
        pairs = [f"benchmark_dir={shared_data / 'benchmarks'}"]
        for label in ("weak", "strong"):
            pairs += [
                f"{label}.model={label}",
                f"{label}.backend=openai",
                f"{label}.backend_options={options}",
                f"{label}.k=4",
            ]
        params = parse_overrides(pairs, code_rl.DEFAULTS)
        report = build_dataset(
            lake, code_rl, sources=[str(source)], overrides=params, manifests_dir=tmp_path
        )
    kept = pl.from_arrow(lake.read("code_rl"))
    # too easy: weak 4/4 (problems 0, 4); too hard: strong 0/4 (problem 2).
    assert kept["uid"].to_list() == ["leetcode:2", "leetcode:4", "leetcode:6"]
    assert kept["weak_pass_rate"].to_list() == [0.5, 0.25, 0.0]
    assert kept["strong_pass_rate"].to_list() == [1.0, 0.75, 0.5]
    why = dict(lake.sql("SELECT uid, reason FROM drops WHERE output_table = 'code_rl'").fetchall())
    assert why == {"leetcode:1": "too_easy", "leetcode:5": "too_easy", "leetcode:3": "too_hard"}
    assert report.manifest.funnel[-1].dropped == {"too_easy": 2, "too_hard": 1}
