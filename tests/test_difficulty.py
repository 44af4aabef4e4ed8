"""Difficulty steps against a scripted OpenAI-compatible server whose pass rates are known:
exact rows kept and dropped, measurements reused, and the SQL a user asks."""

from __future__ import annotations

import json

import polars as pl
import pytest

from curation.difficulty import (
    difficulty_filter,
    disjoint_from,
    easy_by_length,
    majority_answer_check,
    measure_pass_rates,
    response_filters,
)
from curation.generate.samples import Sampler, sample_responses
from lake.catalog import Lake
from lake.steps import Step, StepError, run_steps
from tests.scripted_openai import ScriptedServer

# Prompt i asks for 10 + i. The weak model gets WEAK[i] of 4 samples right, the strong one
# STRONG[i] of 4 (sample index < count answers right, the others answer one more).
WEAK = [4, 3, 2, 0, 4, 1, 0, 3]
STRONG = [4, 4, 4, 0, 4, 3, 2, 4]
K = 4


def problem(i: int) -> str:
    return f"Compute the value of ten plus {i}, and give the integer."


def by_text(counts: list[int]):
    def reply(user: str, index: int) -> str:
        i = int(user.split("ten plus ")[1].split(",")[0])
        right = index < counts[i]
        return f"<think>adding</think> The answer is \\boxed{{{10 + i if right else 11 + i}}}."

    return reply


def prompts(n: int = len(WEAK)) -> pl.DataFrame:
    from curation.prompt_ids import prompt_ids

    texts = [problem(i) for i in range(n)]
    return pl.DataFrame(
        {
            "uid": [f"src:{i + 1}" for i in range(n)],
            "id": prompt_ids(pl.Series(texts)),
            "source": ["src"] * n,
            "source_id": [str(i) for i in range(n)],
            "domain": ["math"] * n,
            "problem": texts,
            "answer": [str(10 + i) for i in range(n)],
            "metadata": ["{}"] * n,
        }
    )


@pytest.fixture
def server():
    with ScriptedServer({"weak": by_text(WEAK), "strong": by_text(STRONG)}) as s:
        yield s


def sampler(server: ScriptedServer, model: str, k: int = K) -> Sampler:
    return Sampler(
        model,
        backend="openai",
        backend_options={"base_url": server.base_url, "api_key_env": None, "concurrency": 4},
        k=k,
        max_new_tokens=64,
        temperature=1.0,
    )


def difficulty_steps(lake: Lake, server: ScriptedServer) -> list[Step]:
    return [
        Step(
            "weak_pass_rate",
            measure_pass_rates,
            {"lake": lake, "label": "weak", "sampler": sampler(server, "weak")},
        ),
        Step(
            "strong_pass_rate",
            measure_pass_rates,
            {"lake": lake, "label": "strong", "sampler": sampler(server, "strong")},
        ),
        Step(
            "difficulty",
            difficulty_filter,
            {
                "easy_label": "weak",
                "easy_at_least": 0.75,
                "hard_label": "strong",
                "hard_at_most": 0.0,
            },
        ),
    ]


def test_pass_rates_and_difficulty_filter_keep_exactly_the_right_rows(
    lake: Lake, server: ScriptedServer
) -> None:
    lake.commit("rl_prompts", prompts(), kind="prompts")
    run = run_steps(lake, "rl_prompts", difficulty_steps(lake, server), out="rl", producer="test")
    kept = pl.from_arrow(lake.read("rl"))
    assert kept["uid"].to_list() == ["src:3", "src:6", "src:7"]
    assert kept["weak_pass_rate"].to_list() == [0.5, 0.25, 0.0]
    assert kept["strong_pass_rate"].to_list() == [1.0, 0.75, 0.5]
    drops = lake.sql(
        "SELECT uid, reason, detail FROM drops WHERE output_table = 'rl' ORDER BY uid"
    ).fetchall()
    # Prompt 3: weak 0/4 but strong 0/4 too -> too_hard; prompts 0, 1, 4, 7(no: 3/4) ...
    expected = {
        "src:1": ("too_easy", "weak solved 4/4"),
        "src:2": ("too_easy", "weak solved 3/4"),
        "src:4": ("too_hard", "strong solved 0/4"),
        "src:5": ("too_easy", "weak solved 4/4"),
        "src:8": ("too_easy", "weak solved 3/4"),
    }
    assert {u: (r, json.loads(d)["difficulty_evidence"]) for u, r, d in drops} == expected
    # The direct count agrees with the filter.
    direct = {
        f"src:{i + 1}" for i in range(len(WEAK)) if WEAK[i] / K >= 0.75 or STRONG[i] / K <= 0.0
    }
    assert set(expected) == direct
    assert run.funnel[-1].dropped == {"too_easy": 4, "too_hard": 1}


def test_a_measurement_is_never_paid_for_twice(lake: Lake, server: ScriptedServer) -> None:
    lake.commit("rl_prompts", prompts(), kind="prompts")
    run_steps(lake, "rl_prompts", difficulty_steps(lake, server), out="rl", producer="test")
    asked = len(server.requests)
    assert asked == 2 * K * len(WEAK)
    run_steps(lake, "rl_prompts", difficulty_steps(lake, server), out="rl", producer="test")
    assert len(server.requests) == asked  # reused from the difficulty table
    assert lake.resolve("rl@1").content_hash == lake.resolve("rl@2").content_hash
    # A new prompt costs only its own samples.
    extra = prompts(1).with_columns(
        uid=pl.lit("src:99"),
        id=pl.lit("new"),
        problem=pl.lit("Compute the value of ten plus 0, and give the integer. Now."),
    )
    lake.commit("more", extra, kind="prompts")
    run_steps(lake, "more", difficulty_steps(lake, server)[:1], out="more_rl", producer="test")
    assert len(server.requests) == asked + K
    histogram = lake.sql(
        "SELECT model, round(pass_rate, 2) AS rate, count(*) AS n FROM difficulty "
        "GROUP BY ALL ORDER BY model, rate"
    ).fetchall()
    assert ("weak", 1.0, 3) in histogram and ("strong", 0.0, 1) in histogram


def test_majority_answer_check_keeps_matching_references(lake: Lake) -> None:
    # The teacher's majority says 10 + i, except for prompt 2 (majority 13) and prompt 3 (tie).
    def teacher(user: str, index: int) -> str:
        i = int(user.split("ten plus ")[1].split(",")[0])
        if i == 2:
            return "\\boxed{13}" if index < 3 else "\\boxed{12}"
        if i == 3:
            return "\\boxed{13}" if index % 2 == 0 else "\\boxed{99}"
        return f"\\boxed{{{10 + i if index != 1 else 77}}}"

    frame = prompts(5)
    with ScriptedServer({"teacher": teacher}) as s:
        result = majority_answer_check(frame, lake=lake, sampler=sampler(s, "teacher"))
    assert result.kept["uid"].to_list() == ["src:1", "src:2", "src:5"]
    dropped = {r["uid"]: r for r in result.dropped.iter_rows(named=True)}
    assert dropped["src:3"]["reason"] == "majority_mismatch"
    assert dropped["src:3"]["majority_answer"] == "13" and dropped["src:3"]["votes"] == 3
    assert dropped["src:4"]["reason"] == "no_majority"


def test_sampling_fans_out_and_response_filters_choose_sft_rows(
    lake: Lake, server: ScriptedServer
) -> None:
    frame = prompts(3).with_columns(
        answer=pl.Series([None, "11", "12"], dtype=pl.String)  # prompt 1 has no reference
    )
    lake.commit("sft_prompts", frame, kind="prompts")
    steps = [
        Step(
            "responses",
            sample_responses,
            {"lake": lake, "sampler": sampler(server, "strong")},
            fan_out=True,
        ),
        Step(
            "response_filters",
            response_filters,
            {"max_tokens": 50, "longest_without_reference": 2},
        ),
    ]
    run = run_steps(lake, "sft_prompts", steps, out="sft", kind="generic", producer="test")
    rows = pl.from_arrow(lake.read("sft"))
    assert run.funnel[0].rows_in == 3 and run.funnel[0].rows_out == 3 * K
    assert rows["prompt_uid"].value_counts().sort("prompt_uid")["count"].to_list() == [2, 4, 4]
    assert rows["uid"].n_unique() == rows.height
    assert rows.filter(pl.col("prompt_uid") == "src:1")["uid"].to_list() == [
        "src:1/think/0",
        "src:1/think/1",
    ]
    per_prompt = lake.sql(
        "SELECT prompt_uid, count(*) AS responses FROM sft GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert per_prompt == [("src:1", 2), ("src:2", 4), ("src:3", 4)]
    # A wrong reference: every response of that prompt fails verification.
    wrong = frame.with_columns(answer=pl.Series([None, "999", "12"], dtype=pl.String))
    lake.commit("sft_prompts", wrong, kind="prompts")
    asked = len(server.requests)
    run_steps(lake, "sft_prompts", steps, out="sft", kind="generic", producer="test")
    assert len(server.requests) == asked  # the same samples, from the generations cache
    reasons = lake.sql(
        "SELECT reason, count(*) FROM drops WHERE output_table = 'sft' AND output_version = 2 "
        "GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert reasons == [("shorter_trace", 2), ("verify_failed", K)]


def test_a_fan_out_step_must_account_for_every_prompt(lake: Lake) -> None:
    lake.commit("p", prompts(2), kind="prompts")

    def loses_a_prompt(df: pl.DataFrame):
        from lake.steps import StepResult

        first = df.head(1).rename({"uid": "prompt_uid"}).with_columns(uid=pl.lit("x/0"))
        return StepResult(kept=first, dropped=df.clear().with_columns(reason=pl.lit("")))

    with pytest.raises(StepError, match="every input row must have output rows or be dropped"):
        run_steps(lake, "p", [Step("bad", loses_a_prompt, fan_out=True)], out="q", producer="t")
    assert not lake.has("q")


def test_easy_by_length_and_disjoint_from(lake: Lake) -> None:
    frame = prompts(4).with_columns(teacher_mean_tokens=pl.Series([100.0, 3000.0, 1999.0, 2000.0]))
    result = easy_by_length(frame, label="teacher", min_tokens=2000)
    assert result.kept["uid"].to_list() == ["src:2", "src:4"]
    assert set(result.dropped["reason"]) == {"easy_by_length"}

    sft = prompts(3).with_columns(
        uid=pl.Series(["a:1", "a:2", "a:3"]),
        problem=pl.Series(
            [
                problem(0),  # exact copy of RL prompt 0
                "Compute the value of ten plus 1 and give the integer!",  # near copy of 1
                "Something else entirely about triangles and their angles.",
            ]
        ),
    )
    lake.commit("math_sft", sft, kind="prompts")
    result = disjoint_from(prompts(4), lake=lake, datasets=["math_sft@1"])
    assert result.kept["uid"].to_list() == ["src:3", "src:4"]
    dropped = {r["uid"]: r for r in result.dropped.iter_rows(named=True)}
    assert dropped["src:1"]["sft_row"] == "math_sft@1:a:1"
    assert dropped["src:1"]["sft_match"] == "exact"
    assert (
        dropped["src:2"]["sft_match"] == "near" and dropped["src:2"]["sft_dataset"] == "math_sft@1"
    )


def test_difficulty_drops_carry_the_deciding_counts(lake: Lake, server: ScriptedServer) -> None:
    lake.commit("rl_prompts", prompts(), kind="prompts")
    run_steps(lake, "rl_prompts", difficulty_steps(lake, server), out="rl", producer="test")
    details = {
        uid: json.loads(detail)
        for uid, detail in lake.sql(
            "SELECT uid, detail FROM drops WHERE output_table = 'rl'"
        ).fetchall()
    }
    assert details["src:2"]["decided_correct"] == 3 and details["src:2"]["decided_k"] == K
    assert details["src:4"]["decided_pass_rate"] == 0.0  # too hard: the strong model's 0/4


def test_a_cached_sample_reused_by_another_base_seed_takes_the_asking_index(
    lake: Lake, server: ScriptedServer
) -> None:
    """Sample i is seeded `seed + i`, so a sampler with seed 1 asks for seed 0's samples 1
    and 2 as its samples 0 and 1: they come from the cache, numbered as asked (they kept the
    old numbers, which gave two rows the same uid)."""
    lake.commit("p", prompts(2), kind="prompts")

    def responses(seed: int, k: int) -> pl.DataFrame:
        s = Sampler(**{**sampler(server, "strong", k=k).__dict__, "seed": seed})
        step = Step("responses", sample_responses, {"lake": lake, "sampler": s}, fan_out=True)
        run_steps(lake, "p", [step], out=f"r{seed}", kind="generic", producer="test")
        return pl.from_arrow(lake.read(f"r{seed}")).sort("uid")

    first = responses(0, 3)
    asked = len(server.requests)
    second = responses(1, 3)
    assert len(server.requests) == asked + 2  # only seed 3, for each of the two prompts
    assert second["uid"].n_unique() == second.height == 6
    assert second["sample_index"].to_list() == [0, 1, 2, 0, 1, 2]
    reused = first.filter(pl.col("sample_index") > 0)["response"].to_list()
    assert second.filter(pl.col("sample_index") < 2)["response"].to_list() == reused
