"""rlhf_prompts from preference_pairs tables: math and competitive-programming prompts
excluded with their evidence, benchmark copies, duplicates and SFT prompts removed, a seeded
subsample; and the classifier's rules on prompts that must and must not be excluded."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from builders import rlhf_prompts
from builders.runner import build_dataset, parse_overrides
from curation.preferences import (
    CODE_RULES,
    MATH_RULES,
    PairRow,
    exclude_math_and_code,
    pair_frame,
    select_pair_columns,
    subsample,
    topic_evidence,
)
from lake.catalog import Lake

BAKERY = "Suggest five names for a small family bakery that sells sourdough bread in Lisbon."


def pairs_table(source: str, prompts: list[tuple[str, list[str], str | None]]) -> pl.DataFrame:
    """A preference_pairs table: one pair per (uid, user/assistant turns, category)."""
    rows = [
        PairRow(
            uid=uid,
            prompt_uid=uid,
            source=source,
            source_id=uid,
            source_rows=[uid],
            method="signed_preference",
            turns=[{"role": ("user", "assistant")[i % 2], "content": t} for i, t in enumerate(ts)],
            chosen="a good answer",
            rejected="a worse answer",
            margin=1.0,
            category=category,
        )
        for uid, ts, category in prompts
    ]
    return select_pair_columns(pair_frame(rows)).kept


def test_rlhf_prompts_exclude_math_and_code_with_evidence(
    tmp_path: Path, shared_data: Path, lake: Lake
) -> None:
    ifeval = json.loads((shared_data / "benchmarks" / "ifeval.jsonl").read_text().splitlines()[5])
    human = [
        ("hs3:1", ["Write a haiku about rain on a tin roof."], "general"),
        ("hs3:2", ["How do I reverse a list in Python?"], "code"),
        ("hs3:3", ["Find the value of $x$ if $2x+3=7$."], "stem"),
        ("hs3:4", ["Hi", "Hello! How can I help?", "Tell me a joke about cats."], "general"),
        ("hs3:5", ["Write a haiku about rain on a tin roof."], "general"),
        ("hs3:6", [ifeval["prompt"]], "general"),
        ("hs3:7", ["What is 17 * 23? Explain each step."], "general"),
        ("hs3:8", ["Why do cats purr when they are happy?"], "stem"),
        ("hs3:9", ["Plan a three-day trip to Rome for a family with two kids."], "general"),
    ]
    rated = [
        ("hs2:1", ["Input format: the first line contains n. Print the sum of n numbers."], None),
        ("hs2:2", ["Codeforces 4A. Given the weight w (1 <= w <= 100), answer YES or NO."], None),
        ("hs2:3", [BAKERY], None),
        ("hs2:4", [BAKERY.replace("Lisbon", "Porto")], None),
        ("hs2:5", ["Explain photosynthesis to a curious ten-year-old."], None),
        ("hs2:6", ["Write a thank-you note to my neighbour for watering the plants."], None),
        ("hs2:7", ["```python\nprint(sorted(x))\n```\nWhy does this fail on None?"], None),
    ]
    lake.commit("hs3_pairs", pairs_table("hs3", human), kind="preference_pairs")
    lake.commit("hs2_pairs", pairs_table("hs2", rated), kind="preference_pairs")
    sft = pl.DataFrame(
        {"uid": ["sft:1"], "problem": ["Plan a three-day trip to Rome for a family with two kids."]}
    )
    lake.commit("sft_general", sft, kind="generic")

    params = parse_overrides(
        [f"benchmark_dir={shared_data / 'benchmarks'}", "size=4", "seed=7"], rlhf_prompts.DEFAULTS
    )
    report = build_dataset(
        lake,
        rlhf_prompts,
        sources=["hs3_pairs", "hs2_pairs"],
        overrides=params,
        manifests_dir=tmp_path,
        write_html_report=False,
    )
    # Survivors of every filter: hs3:1, hs3:4, hs3:8, hs2:3, hs2:5, hs2:6; a seeded 4 of them.
    kept = pl.from_arrow(lake.read("rlhf_prompts"))
    assert kept.height == 4
    assert set(kept["source_id"]) < {"hs3:1", "hs3:4", "hs3:8", "hs2:3", "hs2:5", "hs2:6"}
    assert set(kept["pair_source"]) <= {"hs3", "hs2"}
    assert kept["math_evidence"].to_list() == ["[]"] * 4
    assert "chosen" not in json.loads(kept["metadata"][0])

    drops = lake.sql(
        "SELECT d.step, d.reason, s.source_id, d.detail FROM drops d "
        "JOIN rlhf_prompts_sources s USING (uid) WHERE d.output_table = 'rlhf_prompts'"
    ).fetchall()
    why = {source_id: (step, reason) for step, reason, source_id, _ in drops}
    subsampled = {s for s, (_, reason) in why.items() if reason == "subsampled"}
    assert len(subsampled) == 2 and subsampled.isdisjoint(set(kept["source_id"]))
    assert {s: r for s, r in why.items() if s not in subsampled} == {
        "hs3:2": ("exclude_math_and_code", "code_prompt"),
        "hs3:3": ("exclude_math_and_code", "math_prompt"),
        "hs3:5": ("same_prompt", "exact_duplicate"),
        "hs3:6": ("decontaminate", "contaminated"),
        "hs3:7": ("exclude_math_and_code", "math_prompt"),
        "hs3:9": ("disjoint_from_sft", "in_sft_set"),
        "hs2:1": ("exclude_math_and_code", "code_prompt"),
        "hs2:2": ("exclude_math_and_code", "code_prompt"),
        "hs2:4": ("near_dedup", "near_duplicate"),
        "hs2:7": ("exclude_math_and_code", "code_prompt"),
    }
    evidence = {s: json.loads(d) for _, _, s, d in drops}
    assert evidence["hs3:2"]["excluded_by"] == "category"
    assert evidence["hs3:3"]["excluded_by"] == "content"
    rules = {s: [e["rule"] for e in json.loads(evidence[s]["math_evidence"])] for s in ("hs3:3",)}
    assert rules["hs3:3"][0] == "latex_math"
    assert json.loads(evidence["hs3:7"]["math_evidence"]) == [
        {"rule": "arithmetic", "match": "What is 17 * 23"}
    ]
    assert json.loads(evidence["hs2:1"]["code_evidence"])[0]["rule"] == "io_format"
    assert json.loads(evidence["hs2:2"]["code_evidence"])[0]["rule"] == "online_judge"
    assert json.loads(evidence["hs2:7"]["code_evidence"])[0]["rule"] == "code_block"

    steps = [(f.step, f.rows_in, f.rows_out) for f in report.manifest.funnel]
    assert steps == [
        ("prompts_from_pairs", 16, 16),
        ("same_prompt", 16, 15),
        ("exclude_math_and_code", 15, 9),
        ("decontaminate", 9, 8),
        ("near_dedup", 8, 7),
        ("disjoint_from_sft", 7, 6),
        ("subsample", 6, 4),
    ]


def test_multi_turn_prompts_keep_their_context(lake: Lake, tmp_path: Path) -> None:
    turns = ["Hi", "Hello! How can I help?", "Tell me a joke about cats."]
    lake.commit("p", pairs_table("hs3", [("hs3:4", turns, "general")]), kind="preference_pairs")
    bench = tmp_path / "bench.jsonl"
    bench.write_text('{"problem": "An unrelated benchmark question about the history of tea."}\n')
    build_dataset(
        lake,
        rlhf_prompts,
        sources=["p"],
        overrides={"benchmarks": [str(bench)], "sft_datasets": []},
        manifests_dir=tmp_path,
        write_html_report=False,
    )
    row = pl.from_arrow(lake.read("rlhf_prompts")).to_dicts()[0]
    assert row["problem"] == "Tell me a joke about cats."
    assert [t["content"] for t in json.loads(row["messages"])] == turns
    assert row["category"] == "general" and row["source_id"] == "hs3:4"


MATH = [
    "Find the value of $x$ if $2x+3=7$.",
    "Compute the integral \\int_0^1 x^2 dx.",
    "What is 17 * 23?",
    "How many positive integers less than 100 are prime?",
    "Solve for x: 3x + 5 = 20",
    "Calculate 15% of 80.",
    "What is the probability of rolling two sixes with two dice?",
    "Let f be a function. Find the derivative of f at 0.",
]
CODE = [
    "```python\nprint(1)\n```\nWhy does this fail?",
    "Input format: the first line contains an integer n.",
    "Codeforces Round 900, problem A. Time limit per test: 2 seconds.",
    "Given an array a of length n (1 ≤ n ≤ 10^5), print the maximum.",
    "Read the numbers from standard input and print their sum.",
]
GENERAL = [
    "What is the value of friendship?",
    "Write a haiku about autumn leaves.",
    "How many ways can I improve my resume?",
    "Find the solution to my wifi problem.",
    "I paid $5 and then $10 for lunch, is that a lot?",
    "Explain the difference between TCP and UDP.",
    "Find the value of a used car in Ohio.",
    "What is the sum of human knowledge?",
    "Can you prove that you are not a robot?",
    "Summarize the history of the Roman empire in 3 paragraphs.",
]


@pytest.mark.parametrize("text", MATH)
def test_math_prompts_have_math_evidence(text: str) -> None:
    assert topic_evidence(text, MATH_RULES) and not topic_evidence(text, CODE_RULES)


@pytest.mark.parametrize("text", CODE)
def test_code_prompts_have_code_evidence(text: str) -> None:
    assert topic_evidence(text, CODE_RULES)


@pytest.mark.parametrize("text", GENERAL)
def test_general_prompts_have_no_evidence(text: str) -> None:
    assert topic_evidence(text, MATH_RULES) == [] and topic_evidence(text, CODE_RULES) == []


def test_category_decides_before_content_and_only_named_rules_run() -> None:
    frame = pl.DataFrame(
        {
            "uid": ["1", "2", "3"],
            "problem": ["Tell me about Paris.", "What is 17 * 23?", "What is 17 * 23?"],
            "category": ["math", "general", None],
        }
    )
    result = exclude_math_and_code(frame)
    assert result.dropped.select("uid", "reason", "excluded_by").rows() == [
        ("1", "math_prompt", "category"),
        ("2", "math_prompt", "content"),
        ("3", "math_prompt", "content"),
    ]
    only_latex = exclude_math_and_code(frame, math_rules=["latex_math"])
    assert only_latex.kept["uid"].to_list() == ["2", "3"]
    with pytest.raises(ValueError, match="unknown rules"):
        exclude_math_and_code(frame, math_rules=["latex"])


def test_subsample_is_seeded_and_independent_of_row_order() -> None:
    frame = pl.DataFrame({"uid": [f"p:{i}" for i in range(50)]})
    first = subsample(frame, size=10, seed=3)
    again = subsample(frame.reverse(), size=10, seed=3)
    other = subsample(frame, size=10, seed=4)
    assert first.kept.height == 10 and first.dropped.height == 40
    assert set(first.kept["uid"]) == set(again.kept["uid"])
    assert set(first.kept["uid"]) != set(other.kept["uid"])
    assert set(first.dropped["reason"]) == {"subsampled"}
    assert subsample(frame, size=0).kept.height == 50
