"""The toy world: problems with checkable answers, SFT chats the math verifier accepts, and tiny
weak and strong models trained by our SFT trainer. The trained models are then used as users
will: loaded by `cascade generate`'s `HfBackend` (their tokenizer carries the chat template
they were trained with), and as teacher and student of a MOPD stage.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from builders.worlds.toy_world import (
    STRONG,
    WEAK,
    column_steps,
    sft_rows,
    toy_problems,
    train_toy_models,
    write_jsonl,
)
from curation.generate.hf import HfBackend
from curation.verify import math_reward
from schemas.chat_template import Message, render_text
from schemas.generation import GenerationRequest, SamplingParams
from training.step_log import read_log

torch.set_num_threads(1)


def test_problems_are_deterministic_distinct_and_right() -> None:
    rows = toy_problems(300, seed=4, digits=(1, 3), ops=("+", "-"))
    assert rows == toy_problems(300, seed=4, digits=(1, 3), ops=("+", "-"))
    assert rows != toy_problems(300, seed=5, digits=(1, 3), ops=("+", "-"))
    assert len({r["problem"] for r in rows}) == 300
    assert {"uid", "problem", "answer", "difficulty", "source"} <= set(rows[0])
    for row in rows:
        a, op, b = row["problem"].removeprefix("What is ").removesuffix("?").split()
        value = int(a) + int(b) if op == "+" else int(a) - int(b)
        assert row["answer"] == str(value) and value >= 0
        steps, events = column_steps(int(a), int(b), op)
        assert row["difficulty"] == len(steps) + events
    assert {r["difficulty"] for r in rows} >= {1, 2, 3, 4}
    held_out = rows[:50]
    fresh = toy_problems(200, seed=4, digits=(1, 3), ops=("+", "-"), exclude=held_out)
    assert not {r["problem"] for r in fresh} & {r["problem"] for r in held_out}


def test_sft_replies_are_what_the_math_verifier_accepts() -> None:
    problems = toy_problems(200, seed=1, digits=(1, 2))
    for share, slips in ((0.0, 0), (0.4, 80)):
        chats = sft_rows(problems, wrong_answer_share=share)
        replies = [
            render_text([Message(**m) for m in c["messages"]], "think").split("assistant\n")[1]
            for c in chats
        ]
        assert replies[0].startswith("<think>\n") and "</think>\n\\boxed{" in replies[0]
        rewards = math_reward(
            [None] * len(replies),
            [r.removesuffix("<|im_end|>\n") for r in replies],
            answer=[p["answer"] for p in problems],
        )
        assert rewards.count(0.0) == pytest.approx(slips, abs=20)
        assert rewards.count(1.0) + rewards.count(0.0) == len(problems)


@pytest.fixture(scope="module")
def toy_models(tmp_path_factory) -> dict[str, Path]:
    return train_toy_models(tmp_path_factory.mktemp("toy_models"), seed=0)


def pass_rate(model_dir: Path, problems: list[dict]) -> float:
    """Greedy pass rate through `cascade generate`'s transformers backend."""
    backend = HfBackend(str(model_dir), batch_size=32, device="cpu")
    sampling = SamplingParams(max_new_tokens=48, temperature=0.0, top_p=1.0)
    requests = [
        GenerationRequest(
            key=str(i),
            model=str(model_dir),
            messages=({"role": "user", "content": p["problem"]},),
            sampling=sampling,
            seed=0,
            template_kwargs={"mode": "think"},
        )
        for i, p in enumerate(problems)
    ]
    done = {c.key: c.text for c in backend.generate(requests)}
    texts = [done[str(i)] for i in range(len(problems))]
    rewards = math_reward([None] * len(texts), texts, answer=[p["answer"] for p in problems])
    return sum(r == 1.0 for r in rewards) / len(problems)


@pytest.mark.slow
def test_weak_and_strong_models_load_in_hf_backend_and_differ(toy_models) -> None:
    assert WEAK.steps < STRONG.steps and WEAK.hidden_size <= STRONG.hidden_size
    held_out = toy_problems(60, seed=99, digits=(1, 2), exclude=toy_problems(800, seed=0))
    weak, strong = (
        pass_rate(toy_models["weak"], held_out),
        pass_rate(toy_models["strong"], held_out),
    )
    print(f"\ntoy pass rates (greedy, 60 held-out): weak {weak:.2f}, strong {strong:.2f}")
    assert strong >= weak + 0.2
    trained_on = json.loads((toy_models["strong"] / "trained_on.json").read_text())
    assert trained_on["step"] == STRONG.steps


def mopd_manifest(tmp_path: Path, student: Path, teachers: dict[str, str], out: str) -> Path:
    prompts = toy_problems(32, seed=7, digits=(1, 2))
    for i, row in enumerate(prompts):
        row["domain"] = sorted(teachers)[i % len(teachers)]
    digest = write_jsonl(tmp_path / "prompts.jsonl", prompts)
    spec = {
        "name": "mopd",
        "base_model": str(student),
        "tokenizer": str(student),
        "attn_implementation": "sdpa",
        "output_dir": out,
        "stages": [
            {
                "name": "mopd",
                "type": "mopd",
                "teachers": teachers,
                "domain_column": "domain",
                "datasets": [
                    {"ref": "prompts.jsonl", "content_hash": digest, "prompt_column": "problem"}
                ],
                "max_steps": 3,
                "temperature": 1.0,
                "max_response_len": 40,
                "batch": {"prompts_per_step": 8, "rollouts_per_prompt": 2, "micro_batch_size": 8},
                "optimizer": {"learning_rate": 1e-4, "schedule": "constant"},
                "deepspeed": {"zero_stage": 0, "bf16": False},
                "gradient_checkpointing": False,
                "checkpoint_every_steps": 3,
                "seed": 3,
            }
        ],
    }
    path = tmp_path / f"{out}.json"
    path.write_text(json.dumps(spec))
    return path


@pytest.mark.slow
def test_mopd_stage_scores_each_domain_with_its_teacher(toy_models, tmp_path: Path) -> None:
    """MOPD with the student itself as teacher is an exact no-op (advantage 0 on every token);
    with the strong model as a second domain's teacher the reverse KL is positive, the update
    moves the weights, and the rollout log-probs equal the training forward's (ratio 1)."""
    from safetensors.torch import load_file

    from training.runner import run_cascade

    weak, strong = toy_models["weak"], toy_models["strong"]
    start = load_file(weak / "model.safetensors")

    (same,) = run_cascade(
        mopd_manifest(tmp_path, weak, {"self": "init"}, "same"),
        say=lambda _: None,
    )
    assert [r["reverse_kl"] for r in read_log(tmp_path / "same" / "mopd")] == [0.0, 0.0, 0.0]
    after = load_file(same / "model.safetensors")
    assert all(torch.equal(start[k], after[k]) for k in start)

    (mixed,) = run_cascade(
        mopd_manifest(tmp_path, weak, {"self": "init", "strong": str(strong)}, "mixed"),
        say=lambda _: None,
    )
    log = read_log(tmp_path / "mixed" / "mopd")
    print(
        f"\nMOPD reverse KL per step (half the prompts to the strong teacher): "
        f"{[round(r['reverse_kl'], 3) for r in log]}"
    )
    assert all(r["reverse_kl"] > 0.05 for r in log)
    assert all(r["logprob_gap"] < 1e-4 for r in log)
    after = load_file(mixed / "model.safetensors")
    assert any(not torch.equal(start[k], after[k]) for k in start)
