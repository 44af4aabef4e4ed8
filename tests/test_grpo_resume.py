"""Exact resume of a GRPO stage after a real kill: a SIGKILLed `cascade train --stage grpo`
resumed with --resume logs the same steps (rewards, losses, learning rates, grad norms, the
prompts drawn) and ends with bit-identical weights, as an uninterrupted run. Epoch-level
filtering is on and a pass ends between the checkpoint and the kill, so the prompt order and
the filter's state must come back too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from builders.worlds.toy_world import sft_rows, toy_problems, write_jsonl
from training.step_log import read_log

ROOT = Path(__file__).resolve().parents[1]
CLI = [
    sys.executable,
    "-c",
    "import sys; from cli.main import main; sys.argv[0] = 'cascade'; main()",
]
GROUP_ENV = {"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE"}
TIMING = {"rollout_s", "reward_wait_s", "update_s", "sync_s"}


def toy_rl_manifest(tmp_path: Path, out: str, **grpo: object) -> Path:
    """SFT (tiny, short) -> GRPO on toy arithmetic, data written next to the manifest."""
    data = tmp_path / "data"
    if not data.exists():
        held_out = toy_problems(16, seed=2, digits=(1, 1))
        sft = toy_problems(64, seed=0, digits=(1, 1), exclude=held_out)
        write_jsonl(data / "sft.jsonl", sft_rows(sft, wrong_answer_share=0.4))
        write_jsonl(data / "rl.jsonl", toy_problems(12, seed=1, digits=(1, 1), exclude=held_out))
        write_jsonl(data / "eval.jsonl", held_out)
    digest = {
        p.stem: __import__("hashlib").sha256(p.read_bytes()).hexdigest() for p in data.iterdir()
    }
    spec = {
        "name": "toy_rl",
        "base_model": "tiny-random:qwen2",
        "model_overrides": {
            "hidden_size": 48,
            "intermediate_size": 96,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "max_position_embeddings": 256,
        },
        "tokenizer": "in-process-bpe:300",
        "attn_implementation": "sdpa",
        "output_dir": out,
        "stages": [
            {
                "name": "sft",
                "type": "sft",
                "datasets": [{"ref": "data/sft.jsonl", "content_hash": digest["sft"]}],
                "max_seq_len": 128,
                "max_steps": 150,
                "optimizer": {"learning_rate": 3e-3, "warmup_steps": 5},
                "batch": {"global_batch_size": 8, "micro_batch_size": 4},
                "deepspeed": {"zero_stage": 2, "bf16": False},
                "gradient_checkpointing": False,
                "checkpoint_every_steps": 100,
                "seed": 1,
            },
            {
                "name": "grpo",
                "type": "grpo",
                "datasets": [
                    {
                        "ref": "data/rl.jsonl",
                        "content_hash": digest["rl"],
                        "prompt_column": "problem",
                    }
                ],
                "reward": "math_verifier",
                "code_switch_reward": -1.0,
                "max_steps": 7,
                "temperature": 1.0,
                "max_response_len": 32,
                "overlong_filtering": True,
                "dynamic_filtering": "epoch",
                "batch": {"prompts_per_step": 4, "rollouts_per_prompt": 4, "micro_batch_size": 4},
                "optimizer": {"learning_rate": 3e-4, "schedule": "cosine", "warmup_steps": 2},
                "deepspeed": {"zero_stage": 2, "bf16": False},
                "gradient_checkpointing": True,
                "rollout": {"engine": "hf", "batch_size": 8},
                "checkpoint_every_steps": 3,
                "seed": 2,
                "evaluation": {
                    "dataset": {
                        "ref": "data/eval.jsonl",
                        "content_hash": digest["eval"],
                        "prompt_column": "problem",
                    },
                    "every_steps": 3,
                },
                **grpo,
            },
        ],
    }
    path = tmp_path / f"{out}.json"
    path.write_text(json.dumps(spec))
    return path


def cascade(*args: str, env: dict | None = None) -> subprocess.Popen:
    base = {k: v for k, v in os.environ.items() if k not in GROUP_ENV} | {"OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [*CLI, "train", "--no-progress", *args],
        cwd=ROOT,
        env=base | (env or {}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 600) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    return out


def comparable(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in TIMING}


@pytest.mark.slow
def test_grpo_resume_after_kill_is_exact(tmp_path: Path) -> None:
    straight = toy_rl_manifest(tmp_path, "straight")
    killed = toy_rl_manifest(tmp_path, "killed")
    finish(cascade("--manifest", str(straight), "--stage", "sft"))
    shutil.copytree(tmp_path / "straight" / "sft", tmp_path / "killed" / "sft")

    proc = cascade("--manifest", str(straight), "--stage", "grpo")
    victim = cascade(
        "--manifest", str(killed), "--stage", "grpo", env={"CASCADE_TRAIN_STEP_DELAY_S": "1.0"}
    )
    marker = tmp_path / "killed" / "grpo" / "checkpoints" / "step_0000003" / "COMPLETE"
    deadline = time.monotonic() + 300
    while not marker.exists():
        assert victim.poll() is None, victim.stdout.read()
        assert time.monotonic() < deadline, "no checkpoint after 300 s"
        time.sleep(0.05)
    time.sleep(0.3)  # let it get into step 4 (it sleeps 1 s after each step)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    assert not (tmp_path / "killed" / "grpo" / "final").exists()
    finish(proc)
    finish(cascade("--manifest", str(killed), "--stage", "grpo", "--resume"))

    a, b = read_log(tmp_path / "straight" / "grpo"), read_log(tmp_path / "killed" / "grpo")
    assert [r["step"] for r in b] == list(range(8))  # step 0 is the first evaluation
    assert [comparable(r) for r in a] == [comparable(r) for r in b]
    assert a[-1]["prompts_drawn"] == 4 and sum(r.get("prompts_drawn", 0) for r in a) == 28
    wa = load_file(tmp_path / "straight" / "grpo" / "final" / "model.safetensors")
    wb = load_file(tmp_path / "killed" / "grpo" / "final" / "model.safetensors")
    assert wa.keys() == wb.keys()
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key
    sft = load_file(tmp_path / "straight" / "sft" / "final" / "model.safetensors")
    assert any(not torch.equal(sft[k], wa[k]) for k in wa)  # GRPO did move the weights


@pytest.mark.slow
def test_length_curriculum_ends_the_stage_early(tmp_path: Path) -> None:
    """With a truncated-share target every step meets and a minimum of 2 steps, the stage ends
    after its second step and says why in its log and provenance; the next stage would start
    from that model."""
    curriculum = {"truncated_share": 0.99, "min_steps": 2, "smoothing_steps": 1}
    manifest = toy_rl_manifest(
        tmp_path, "stop", length_curriculum=curriculum, checkpoint_every_steps=100
    )
    out = finish(cascade("--manifest", str(manifest)))
    log = read_log(tmp_path / "stop" / "grpo")
    assert [r["step"] for r in log] == [0, 1, 2] and "eval_pass_rate" in log[2]
    assert log[2]["stop_reason"].endswith("<= 0.99 after 2 steps (min 2)")
    trained_on = json.loads((tmp_path / "stop" / "grpo" / "final" / "trained_on.json").read_text())
    assert (trained_on["step"], trained_on["stopped_early"]) == (2, True)
    assert trained_on["stop_reason"] == log[2]["stop_reason"]
    assert f"stage grpo: ended: {log[2]['stop_reason']}" in " ".join(out.split())
    assert (tmp_path / "stop" / "grpo" / "checkpoints" / "step_0000002" / "COMPLETE").is_file()
