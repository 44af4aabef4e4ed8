"""rm_offtopic_pairs end to end against a scripted OpenAI-compatible server on 127.0.0.1:
exactly which pairs are kept, why each other prompt was dropped, and every judge verdict in
the lake."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest

from builders import rm_offtopic_pairs
from builders.runner import BuildError, build_dataset, parse_overrides
from lake.catalog import Lake
from tests.scripted_openai import ScriptedServer

# prompt -> the rewriter's reply; the judge says YES for the first, rambles for the second.
REWRITES = {
    "Write a short poem about the sea.": "Write a short poem about the desert.",
    "List three benefits of regular exercise.": "List three risks of regular exercise.",
    "Explain how vaccines train the immune system.": "Describe how vaccines train the immune system.",
    "Give me a recipe for fluffy pancakes.": "Give me a recipe for crispy waffles.",
    "Summarize the plot of Hamlet in two sentences.": "Summarize the plot of Hamlet in two sentences.",
    "Translate 'good morning' into French.": "   ",
    "Name three famous painters of the Renaissance.": "Name three famous sculptors of the Baroque.",
}
SAME = {"Describe how vaccines train the immune system."}
RAMBLING = {"Give me a recipe for crispy waffles."}
NO_ANSWER = {"Name three famous painters of the Renaissance."}
# both models give this one reply to the exercise prompt and to its rewrite
ONE_REPLY = {"List three benefits of regular exercise.", "List three risks of regular exercise."}


def rewriter(user: str, sample: int) -> str:
    return REWRITES[user.split("Instruction:\n", 1)[1]]


def judge(user: str, sample: int) -> str:
    rewrite = re.search(r"Instruction B:\n(.*)\Z", user, re.DOTALL).group(1)  # type: ignore[union-attr]
    if rewrite in SAME:
        return "YES"
    if rewrite in RAMBLING:
        return "Both are about breakfast, so it depends."
    return "**NO**"


def strong(user: str, sample: int) -> str:
    return "Walk, swim, cycle." if user in ONE_REPLY else f"STRONG answer to: {user}"


def weak(user: str, sample: int) -> str:
    if user in ONE_REPLY:
        return "Walk, swim, cycle."
    return "" if user in NO_ANSWER else f"weak answer to: {user}"


def write_prompts(path: Path, ifeval_prompt: str) -> Path:
    prompts = list(REWRITES)
    rows = [
        {"problem": prompts[0], "category": "creative_writing"},  # 1
        *({"problem": p} for p in prompts[1:]),  # 2..7
        {"problem": ifeval_prompt},  # 8: an IFEval item
        {"problem": prompts[0]},  # 9: duplicate of 1
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def overrides(server: ScriptedServer, shared_data: Path) -> dict:
    options = json.dumps({"base_url": server.base_url, "api_key_env": None, "concurrency": 4})
    pairs = [f"benchmark_dir={shared_data / 'benchmarks'}"]
    for name in ("rewriter", "judge", "strong", "weak"):
        pairs += [
            f"{name}.model={name}",
            f"{name}.backend=openai",
            f"{name}.backend_options={options}",
        ]
    return parse_overrides(pairs, rm_offtopic_pairs.DEFAULTS)


def test_offtopic_pairs_keep_exactly_the_rewrites_judged_different(
    tmp_path: Path, shared_data: Path, lake: Lake
) -> None:
    ifeval = json.loads((shared_data / "benchmarks" / "ifeval.jsonl").read_text().splitlines()[3])
    source = write_prompts(tmp_path / "prompts.jsonl", ifeval["prompt"])
    with ScriptedServer(
        {"rewriter": rewriter, "judge": judge, "strong": strong, "weak": weak}
    ) as s:
        report = build_dataset(
            lake,
            rm_offtopic_pairs,
            sources=[str(source)],
            overrides=overrides(s, shared_data),
            manifests_dir=tmp_path,
            write_html_report=False,
        )
        asked = {m: s.requests_for(m) for m in ("rewriter", "judge", "strong", "weak")}
    assert asked == {"rewriter": 7, "judge": 5, "strong": 3, "weak": 3}

    pairs = pl.from_arrow(lake.read("rm_offtopic_pairs"))
    assert lake.resolve("rm_offtopic_pairs").kind == "preference_pairs"
    assert sorted(pairs["uid"]) == ["prompts:1"]
    sea = pairs.filter(pl.col("uid") == "prompts:1").to_dicts()[0]
    assert sea["chosen"] == "weak answer to: Write a short poem about the sea."
    assert sea["rejected"] == "STRONG answer to: Write a short poem about the desert."
    assert sea["rewrite"] == "Write a short poem about the desert."
    assert (sea["judge_verdict"], sea["method"], sea["category"]) == (
        "NO",
        "off_topic_rewrite",
        "creative_writing",
    )
    assert (sea["chosen_model"], sea["rejected_model"]) == ("weak", "strong")
    assert json.loads(sea["messages"]) == [{"role": "user", "content": sea["prompt"]}]
    assert sea["margin"] is None and sea["source_rows"] == ["prompts:1"]

    drops = lake.sql(
        "SELECT uid, step, reason, detail FROM drops WHERE output_table = 'rm_offtopic_pairs'"
    ).fetchall()
    assert {uid: (step, reason) for uid, step, reason, _ in drops} == {
        "prompts:2": ("answer_pairs", "identical_responses"),
        "prompts:3": ("judge_rewrite", "judged_same"),
        "prompts:4": ("judge_rewrite", "unparseable_verdict"),
        "prompts:5": ("rewrite", "rewrite_unchanged"),
        "prompts:6": ("rewrite", "empty_rewrite"),
        "prompts:7": ("answer_pairs", "empty_response"),
        "prompts:8": ("decontaminate", "contaminated"),
        "prompts:9": ("exact_dedup", "exact_duplicate"),
    }
    detail = {uid: json.loads(d) for uid, _, _, d in drops}
    assert (detail["prompts:3"]["judge_verdict"], detail["prompts:3"]["judge_reply"]) == (
        "YES",
        "YES",
    )
    assert detail["prompts:4"]["judge_verdict"] is None
    assert detail["prompts:4"]["judge_reply"] == "Both are about breakfast, so it depends."
    assert detail["prompts:7"]["model"] == "weak"
    assert detail["prompts:8"]["benchmark"] == "ifeval"

    # Every judge reply is a row of the generations table, and each kept pair names its own.
    verdicts = dict(
        lake.sql(
            "SELECT id, final_answer FROM rm_offtopic_generations WHERE model = 'judge'"
        ).fetchall()
    )
    assert sorted(verdicts.values()) == [
        "**NO**",
        "**NO**",
        "**NO**",
        "Both are about breakfast, so it depends.",
        "YES",
    ]
    assert verdicts[sea["judge_generation_id"]] == "**NO**"
    assert [(f.step, f.rows_in, f.rows_out) for f in report.manifest.funnel] == [
        ("decontaminate", 9, 8),
        ("exact_dedup", 8, 7),
        ("near_dedup", 7, 7),
        ("rewrite", 7, 5),
        ("judge_rewrite", 5, 3),
        ("answer_pairs", 3, 1),
        ("pair_columns", 1, 1),
    ]


def test_a_model_sampled_more_than_once_is_refused(tmp_path: Path, lake: Lake) -> None:
    source = tmp_path / "p.jsonl"
    source.write_text('{"problem": "Say hi."}\n')
    with pytest.raises(BuildError, match="judge.k=1"):
        build_dataset(
            lake,
            rm_offtopic_pairs,
            sources=[str(source)],
            overrides={"judge": {**rm_offtopic_pairs.DEFAULTS["judge"], "k": 3}},
            manifests_dir=tmp_path,
        )
