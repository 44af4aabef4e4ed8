"""The if_rl recipe end to end on a small input: exact rows kept and dropped at every step,
with the optional pass-rate step against a scripted OpenAI-compatible server."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from builders import if_rl
from builders.runner import Build, recipe_steps
from curation.instructions import attach_instructions, compliant_response, conflicting_pairs
from curation.prompt_ids import prompt_ids
from curation.verify.ifeval import ifeval_reward, verify_ifeval
from curation.verify.rewards import REWARDS
from lake.catalog import Lake
from lake.steps import run_steps
from schemas.training_manifest import DatasetRef
from tests.scripted_openai import ScriptedServer
from tests.test_instructions import violation
from training.datasets import LoadedDataset, VerifiedRef
from training.rl_data import load_prompts

K = 4
IFEVAL_1001 = (
    "I am planning a trip to Japan, and I would like thee to write an itinerary for my journey "
    "in a Shakespearean style. You are not allowed to use any commas in your response."
)
PROMPTS = [
    ("src:1", "Write a short story about a robot who learns to paint."),
    ("src:2", "Explain the difference between weather and climate to a child."),
    ("src:3", "Give me three tips for keeping houseplants alive in winter."),
    ("src:4", "Describe the smell of rain after a long drought."),
    ("src:5", IFEVAL_1001),  # an IFEval item
    ("src:6", "write a short story about a ROBOT who learns to paint. "),  # copy of src:1
    ("src:7", "Give me three tips for keeping houseplants alive during winter."),  # near src:3
    ("src:8", "What are good habits for a healthy morning routine?"),  # an SFT prompt
    ("src:9", ""),
    ("src:10", "Summarize " + "the plot of a long novel " * 7),  # 43 words
]
SOLVED = {"src:1": 4, "src:2": 0, "src:3": 2, "src:4": 1}  # of K policy samples
SEED = 11
PER_PROMPT = (1, 3)


def prompts_frame(rows: list[tuple[str, str]]) -> pl.DataFrame:
    texts = [t for _, t in rows]
    return pl.DataFrame(
        {
            "uid": [u for u, _ in rows],
            "id": prompt_ids(pl.Series(texts)),
            "source": ["chat"] * len(rows),
            "source_id": [u.split(":")[1] for u, _ in rows],
            "domain": ["if"] * len(rows),
            "problem": texts,
            "answer": [None] * len(rows),
            "metadata": ["{}"] * len(rows),
        },
        schema_overrides={"answer": pl.String},
    )


def policy_replies():
    """The policy follows every instruction in the first SOLVED[uid] samples, else not."""
    attached = attach_instructions(
        prompts_frame([p for p in PROMPTS if p[0] in SOLVED]), per_prompt=PER_PROMPT, seed=SEED
    ).kept
    plan = {}
    for row in attached.to_dicts():
        ids, kwargs = row["instruction_id_list"], json.loads(row["kwargs"])
        plan[row["problem"]] = (ids, kwargs, SOLVED[row["uid"]])

    def reply(user: str, index: int) -> str:
        ids, kwargs, solved = plan[user]
        if index < solved:
            return compliant_response(ids, kwargs) or ""
        return violation(ids[0], kwargs[0])

    return reply


@pytest.fixture
def server():
    with ScriptedServer({"policy": policy_replies()}) as s:
        yield s


def params(shared_data: Path, server: ScriptedServer | None) -> dict:
    policy = None
    if server is not None:
        policy = {
            "model": "policy",
            "backend": "openai",
            "backend_options": {"base_url": server.base_url, "api_key_env": None},
            "mode": "no_think",
            "k": K,
            "temperature": 0.6,
            "top_k": 20,
            "max_new_tokens": 512,
        }
    return {
        **if_rl.DEFAULTS,
        "benchmark_dir": str(shared_data / "benchmarks"),
        "instructions_per_prompt": [str(n) for n in PER_PROMPT],  # as `--set` parses them
        "seed": SEED,
        "max_prompt_words": 30,
        "policy": policy,
    }


def test_if_rl_end_to_end(lake: Lake, shared_data: Path, server, tmp_path: Path) -> None:
    lake.commit(
        "sft_general",
        pl.DataFrame({"uid": ["s:1/think/0"], "prompt_uid": ["s:1"], "problem": [PROMPTS[7][1]]}),
        kind="generic",
    )
    lake.commit("if_rl_sources", prompts_frame(PROMPTS), kind="prompts")
    build = Build(lake=lake, profile="default", workdir=tmp_path)
    steps = if_rl.steps(params(shared_data, server), build)
    run = run_steps(lake, "if_rl_sources", steps, out="if_rl", kind="prompts", producer="test")

    kept = pl.from_arrow(lake.read("if_rl"))
    assert kept["uid"].to_list() == ["src:3", "src:4"]
    assert kept["policy_pass_rate"].to_list() == [0.5, 0.25]
    drops = lake.sql(
        "SELECT uid, step, reason, detail FROM drops WHERE output_table = 'if_rl' ORDER BY uid"
    ).fetchall()
    assert {u: (s, r) for u, s, r, _ in drops} == {
        "src:1": ("difficulty", "too_easy"),
        "src:2": ("difficulty", "too_hard"),
        "src:5": ("decontaminate", "contaminated"),
        "src:6": ("exact_dedup", "exact_duplicate"),
        "src:7": ("near_dedup", "near_duplicate"),
        "src:8": ("disjoint_from_sft", "in_sft_set"),
        "src:9": ("attach_instructions", "empty_prompt"),
        "src:10": ("attach_instructions", "too_long"),
    }
    detail = {u: json.loads(d) for u, _, _, d in drops}
    assert detail["src:5"]["benchmark"] == "ifeval" and detail["src:5"]["benchmark_id"] == "1001"
    assert detail["src:6"]["duplicate_of"] == "src:1"
    assert detail["src:7"]["duplicate_of"] == "src:3"
    assert detail["src:8"]["sft_dataset"] == "sft_general@1"
    assert detail["src:10"]["prompt_words"] == 43
    assert detail["src:1"]["difficulty_evidence"] == "policy solved 4/4"
    assert [(f.step, f.rows_in, f.rows_out) for f in run.funnel] == [
        ("decontaminate", 10, 9),
        ("exact_dedup", 9, 8),
        ("near_dedup", 8, 7),
        ("disjoint_from_sft", 7, 6),
        ("attach_instructions", 6, 4),
        ("policy_pass_rate", 4, 4),
        ("difficulty", 4, 2),
    ]
    # Every kept prompt is an RL prompt the IF verifier can score.
    for row in kept.to_dicts():
        ids, kwargs = row["instruction_id_list"], json.loads(row["kwargs"])
        assert conflicting_pairs(ids) == [] and 1 <= len(ids) <= 3
        assert verify_ifeval(compliant_response(ids, kwargs) or "", ids, kwargs).passed
        assert json.loads(row["messages"])[0]["content"] == row["problem"]
    assert server.requests_for("policy") == 4 * K
    assert all(r["top_k"] == 20 for r in server.requests)

    # The GRPO stage reads the rows as they are and rewards with the IF verifier.
    ref = DatasetRef(ref="if_rl@1", content_hash="0" * 64, mode="no_think")
    dataset = LoadedDataset(VerifiedRef(ref, "test", "lake:if_rl@1"), kept.to_dicts())
    prompts = load_prompts([dataset], required=REWARDS["if_verifier"].columns)
    for prompt in prompts:
        ids, kwargs = prompt.columns["instruction_id_list"], prompt.columns["kwargs"]
        good = compliant_response(ids, json.loads(kwargs))
        bad = violation(ids[0], json.loads(kwargs)[0])
        rewards = ifeval_reward(
            [prompt.messages] * 2, [good, bad], instruction_id_list=[ids] * 2, kwargs=[kwargs] * 2
        )
        assert rewards == [1.0, 0.0]

    # A second build measures nothing again and publishes the same rows.
    steps = if_rl.steps(params(shared_data, server), build)
    run_steps(lake, "if_rl_sources", steps, out="if_rl", kind="prompts", producer="test")
    assert server.requests_for("policy") == 4 * K
    assert lake.resolve("if_rl@2").content_hash == lake.resolve("if_rl@1").content_hash


def test_if_rl_without_a_policy_keeps_every_attached_prompt(
    lake: Lake, shared_data: Path, tmp_path: Path
) -> None:
    lake.commit("if_rl_sources", prompts_frame(PROMPTS), kind="prompts")
    settings = {**params(shared_data, None), "sft_datasets": []}
    steps = if_rl.steps(settings, Build(lake=lake, profile="default", workdir=tmp_path))
    assert [(s.name, s.skipped) for s in steps][-3:] == [
        ("attach_instructions", None),
        ("policy_pass_rate", "policy is none"),
        ("difficulty", "policy is none"),
    ]
    run_steps(lake, "if_rl_sources", steps, out="if_rl", kind="prompts", producer="test")
    assert pl.from_arrow(lake.read("if_rl"))["uid"].to_list() == [
        "src:1",
        "src:2",
        "src:3",
        "src:4",
        "src:8",
    ]


def test_if_rl_step_list_without_loading_anything() -> None:
    names = [s.name for s in recipe_steps(if_rl)]
    assert names == [
        "decontaminate",
        "exact_dedup",
        "near_dedup",
        "disjoint_from_sft",
        "attach_instructions",
        "policy_pass_rate",
        "difficulty",
    ]
    assert [s.skipped for s in recipe_steps(if_rl)][-2:] == ["policy is none"] * 2
    with_policy = recipe_steps(if_rl, {"policy": {"model": "Qwen/Qwen3-8B", "backend": "vllm"}})
    assert [s.name for s in with_policy][-2:] == ["policy_pass_rate", "difficulty"]
