"""A GRPO stage with an environment, end to end through `cascade train`'s Python function: a
tiny model taught by SFT to call the python tool runs multi-turn episodes in the sandbox, the
stage logs its episodes (turns, calls, errors, end reasons, tool time), its update stays on
policy over every model token, and held-out evaluation runs episodes too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from builders.worlds.toy_agentic import toy_agentic_manifest
from training.runner import run_cascade
from training.step_log import read_log


def test_a_grpo_stage_runs_python_tool_episodes(tmp_path: Path) -> None:
    manifest = toy_agentic_manifest(
        tmp_path, sft_steps=120, grpo_steps=2, prompts_per_step=4, rollouts_per_prompt=4,
        held_out=4, sft_rows=400,
    )  # fmt: skip
    spec = json.loads(manifest.read_text())
    spec["stages"][1]["no_signal_patience"] = 0  # a plumbing check: the tiny model solves little
    manifest.write_text(json.dumps(spec))
    finals = run_cascade(manifest, say=lambda _: None)
    assert [p.name for p in finals] == ["final", "final"]
    log = read_log(tmp_path / "run" / "grpo_python")
    steps = [r for r in log if r["step"] > 0]
    assert len(steps) == 2
    for record in steps:
        assert record["logprob_gap"] < 1e-4  # engine log-probs = training forward, all turns
        assert record["turns_mean"] >= 1 and sum(record["end_reasons"].values()) == 16
        assert set(record["end_reasons"]) <= {"answered", "max_turns", "max_tokens", "length"}
        assert {"tool_wait_s", "tool_call_s", "rollout_s", "update_s"} <= set(record)
    assert sum(r["tool_calls_mean"] for r in steps) > 0  # the SFT model does call its tool
    assert any(r["turns_mean"] > 1 for r in steps)
    evaluations = [r for r in log if "eval_pass_rate" in r]
    assert evaluations and all("eval_end_reasons" in r for r in evaluations)


@pytest.mark.parametrize("environment", ["workplace", "swe"])
def test_the_stateful_environments_run_in_a_grpo_stage(tmp_path: Path, environment: str) -> None:
    """One GRPO step of a tiny random model in the workplace and swe environments: episodes
    run, the state-checking rewards score them, the stage logs its episodes and finishes."""
    from builders.worlds.toy_agentic import (
        product_tasks,
        swe_tasks,
        tool_trajectory,
        workplace_tasks,
    )
    from builders.worlds.toy_world import write_jsonl

    rows = workplace_tasks(4, seed=1) if environment == "workplace" else swe_tasks(4, seed=1)
    digest = write_jsonl(tmp_path / "rl.jsonl", rows)
    chats = [tool_trajectory(r) for r in product_tasks(16, seed=0)]  # the tokenizer's texts
    sft_digest = write_jsonl(tmp_path / "sft.jsonl", chats)
    prompt = "prompt" if environment == "workplace" else "problem_statement"
    spec = {
        "name": f"toy_{environment}",
        "base_model": "tiny-random:qwen2",
        "model_overrides": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                            "num_attention_heads": 2, "num_key_value_heads": 1,
                            "max_position_embeddings": 2048},
        "tokenizer": "in-process-bpe:300",
        "attn_implementation": "sdpa",
        "output_dir": str(tmp_path / "run"),
        "stages": [{
            "name": "sft", "type": "sft",
            "datasets": [{"ref": str(tmp_path / "sft.jsonl"), "content_hash": sft_digest}],
            "max_seq_len": 1024, "max_steps": 2,
            "optimizer": {"learning_rate": 1e-3},
            "batch": {"global_batch_size": 4, "micro_batch_size": 4},
            "deepspeed": {"zero_stage": 0, "bf16": False},
            "gradient_checkpointing": False,
        }, {
            "name": "rl", "type": "grpo",
            "datasets": [{"ref": str(tmp_path / "rl.jsonl"), "content_hash": digest, "prompt_column": prompt}],
            "environment": environment,
            "episode": {"max_turns": 3, "max_total_tokens": 2000},
            "reward": "workplace_state" if environment == "workplace" else "swe_tests",
            "no_signal_patience": 0,
            "thinking_fraction": 0.0,
            "max_steps": 1, "temperature": 1.0, "max_response_len": 24, "overlong_filtering": False,
            "batch": {"prompts_per_step": 2, "rollouts_per_prompt": 2, "micro_batch_size": 4},
            "optimizer": {"learning_rate": 1e-4},
            "deepspeed": {"zero_stage": 0, "bf16": False},
            "gradient_checkpointing": False,
            "rollout": {"engine": "hf", "batch_size": 4},
        }],
    }  # fmt: skip
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps(spec))
    finals = run_cascade(manifest, say=lambda _: None)
    assert finals[-1] == tmp_path / "run" / "rl" / "final"
    (step,) = [r for r in read_log(tmp_path / "run" / "rl") if r["step"] == 1]
    assert sum(step["end_reasons"].values()) == 4 and step["reward_mean"] == 0.0
    assert step["logprob_gap"] < 1e-4
