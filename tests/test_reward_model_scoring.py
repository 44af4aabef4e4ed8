"""The reward model as a reward: the scorer renders exactly as the trainer did, batching does
not move a score, thinking replies are scored on the text after `</think>` (the whole output
when it is missing), `cascade serve-reward` on 127.0.0.1 answers what the local model answers,
the IF-RL mix and the RLHF code-switch floor run on a real (served) reward model, and a GRPO
stage scored by `stage:rm` logs the same rewards as the same stage scored over HTTP.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import torch
from test_reward_model import manifest, rm_stage, toy_pairs_file

from builders.worlds.toy_world import sft_rows, toy_problems, write_jsonl
from schemas.chat_template import Message
from schemas.training_manifest import GRPOStage
from training.episode import Episode
from training.pair_data import is_heldout
from training.reward_clients import (
    RemoteRewardModel,
    SequenceClassifierRM,
    load_reward_model,
    reward_model_reward,
)
from training.reward_model import read_eval
from training.reward_server import RewardServer
from training.rewards import StageRewards
from training.rl_data import Prompt
from training.runner import run_cascade
from training.step_log import read_log

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
GROUP_ENV = {"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE"}
CHINESE = "答案是"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny reward model trained by a reward_model stage: (final dir, its pairs file)."""
    tmp = tmp_path_factory.mktemp("rm")
    data = toy_pairs_file(tmp, problems=60)
    stage = rm_stage([data], max_steps=12)
    run_cascade(manifest(tmp, [stage]), say=lambda _: None)
    return tmp / "run" / "rm" / "final", tmp / data["ref"]


@pytest.fixture(scope="module")
def scorer(trained) -> SequenceClassifierRM:
    return SequenceClassifierRM(str(trained[0]), device="cpu", batch_size=4)


def test_the_scorer_reproduces_the_trainers_held_out_evaluation(trained, scorer) -> None:
    final, pairs_file = trained
    rows = [json.loads(line) for line in pairs_file.read_text().splitlines()]
    held = [r for r in rows if is_heldout(r["prompt_id"], 0, 0.25)]
    prompts = [json.loads(r["messages"]) for r in held]
    chosen = scorer.score(prompts, [r["chosen"] for r in held])
    rejected = scorer.score(prompts, [r["rejected"] for r in held])
    result = read_eval(final)
    assert result["pairs"] == len(held)
    margins = [c - r for c, r in zip(chosen, rejected, strict=True)]
    # float noise of another batching may flip only a near-tie
    near_ties = sum(abs(m) < 1e-4 for m in margins)
    right = sum(m > 0 for m in margins)
    assert abs(right / len(held) - result["accuracy"]) <= near_ties / len(held) + 1e-4
    assert near_ties <= len(held) // 10
    assert sum(margins) / len(held) == pytest.approx(result["margin_mean"], abs=1e-3)


def test_batching_and_order_do_not_move_a_score(trained) -> None:
    chat = [{"role": "user", "content": "What is 12 + 30?"}]
    answers = [
        "\\boxed{42}",
        "<think>\n2+0=2\n1+3=4\n</think>\n\\boxed{42}",
        "x",
        "\\boxed{43}",
        "",
    ]
    one = SequenceClassifierRM(str(trained[0]), device="cpu", batch_size=1)
    many = SequenceClassifierRM(str(trained[0]), device="cpu", batch_size=5)
    alone = one.score([chat] * 5, answers)
    together = many.score([chat] * 5, answers)
    assert together == pytest.approx(alone, abs=1e-5)
    assert len(set(round(x, 5) for x in alone)) == 5  # five different texts, five scores


def test_plain_reward_function_scores_the_answer_after_think(scorer) -> None:
    reward = reward_model_reward(scorer)
    done = reward(["What is 2 + 3?"], ["<think>\n2+3=5\n</think>\n\\boxed{5}"])
    plain = scorer.score([[{"role": "user", "content": "What is 2 + 3?"}]], ["\\boxed{5}"])
    assert done == pytest.approx(plain)
    unfinished = "<think>\n2+3=5 and then"
    cut = reward([[{"role": "user", "content": "What is 2 + 3?"}]], [unfinished])
    whole = scorer.score([[{"role": "user", "content": "What is 2 + 3?"}]], [unfinished])
    assert cut == pytest.approx(whole)


def test_served_reward_model_answers_what_the_local_one_does(trained, scorer) -> None:
    chats = [[{"role": "user", "content": f"What is {i} + 1?"}] for i in range(5)]
    answers = [f"\\boxed{{{i + 1}}}" for i in range(5)]
    with RewardServer(scorer, "toy-rm").start() as server:
        remote = RemoteRewardModel(server.base_url, max_batch=2)
        assert remote.score(chats, answers) == pytest.approx(scorer.score(chats, answers))
        assert (server.requests, server.scored) == (3, 5)  # 2 + 2 + 1
        with urllib.request.urlopen(server.base_url + "/v1/models") as response:
            assert json.loads(response.read())["data"][0]["id"] == "toy-rm"
        # a malformed request is a 400 naming the field, raised by the client
        with pytest.raises(RuntimeError, match=r"HTTP 400: .*prompts\[0\]\[0\] needs a role"):
            remote.score([[{"content": "no role"}]], ["x"])
        # load_reward_model picks the HTTP client for a URL
        assert isinstance(load_reward_model(server.base_url), RemoteRewardModel)
        url = server.base_url
    with pytest.raises(RuntimeError, match="is unreachable"):
        RemoteRewardModel(url, timeout=5).score(chats[:1], answers[:1])


def test_cascade_serve_reward_command(trained, scorer) -> None:
    env = {k: v for k, v in os.environ.items() if k not in GROUP_ENV} | {"OMP_NUM_THREADS": "1"}
    code = "import sys, cli.reward; from cli.main import main; sys.argv[0] = 'cascade'; main()"
    args = [sys.executable, "-c", code, "serve-reward", "--device", "cpu"]
    bad = subprocess.run(
        [*args, "--model", str(trained[0].parent / "nowhere")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 1 and "is not a model directory" in bad.stderr + bad.stdout
    proc = subprocess.Popen(
        [*args, "--model", str(trained[0]), "--port", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith(f"serving reward model {trained[0]} at http://127.0.0.1:"), line
        url = line.split(" at ")[1].strip().removesuffix("/v1/rewards")
        chats = [[{"role": "user", "content": "What is 4 + 4?"}]] * 2
        got = RemoteRewardModel(url).score(chats, ["\\boxed{8}", "\\boxed{9}"])
        assert got == pytest.approx(scorer.score(chats, ["\\boxed{8}", "\\boxed{9}"]))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def grpo_stage(reward: str, url: str, **extra: object) -> GRPOStage:
    return GRPOStage.model_validate(
        {
            "name": "r",
            "type": "grpo",
            "datasets": [{"ref": "p.jsonl", "content_hash": "0" * 64}],
            "optimizer": {"learning_rate": 1e-6},
            "batch": {"prompts_per_step": 1, "rollouts_per_prompt": 3},
            "reward": reward,
            "reward_model": url,
            "max_steps": 1,
            "temperature": 1.0,
            "max_response_len": 16,
            "overlong_filtering": False,
            **extra,
        }
    )


def episodes(*texts: str) -> list[Episode]:
    return [
        Episode(0, i, "0:0", "think", [1], [2], [0.0], "stop", response_text=t)
        for i, t in enumerate(texts)
    ]


def test_if_rl_mix_and_code_switch_floor_with_a_served_reward_model(scorer) -> None:
    columns = {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
    prompt = Prompt("0:0", (Message("user", "Answer without commas."),), columns, "row 0")
    texts = ("<think>\na, b\n</think>\nNo commas here", "Also none", "One, two")
    answers = ["No commas here", "Also none", "One, two"]
    chat = [[{"role": "user", "content": "Answer without commas."}]] * 3
    with RewardServer(scorer, "toy-rm").start() as server:
        mix = grpo_stage("if_verifier+reward_model", server.base_url)
        rewards = StageRewards(mix, reward_model=load_reward_model(server.base_url))
        eps = episodes(*texts)
        rewards.score_group(prompt, eps)
        rm = scorer.score(chat, answers)
        mean = sum(rm) / 3
        std = math.sqrt(sum((x - mean) ** 2 for x in rm) / 3)
        z = [(x - mean) / (std + 1e-6) for x in rm]
        expected = [1 + 1 / (1 + math.exp(-z[0])), 1 + 1 / (1 + math.exp(-z[1])), 0.0]
        assert [e.reward for e in eps] == pytest.approx(expected, abs=1e-5)

        rlhf = grpo_stage("reward_model", server.base_url, code_switch_reward="batch_min_minus_10")
        rewards = StageRewards(rlhf, reward_model=load_reward_model(server.base_url))
        hello = Prompt("0:0", (Message("user", "Say hello."),), {}, "row 0")
        eps = episodes("Hello!", f"Hello {CHINESE}", "<think>\nunfinished")
        rewards.score_group(hello, eps)
        rewards.finish_batch(eps)
        scores = scorer.score(
            [[{"role": "user", "content": "Say hello."}]] * 3,
            ["Hello!", f"Hello {CHINESE}", "<think>\nunfinished"],
        )
        floor = min(scores) - 10  # the lowest reward of the batch, minus 10
        assert [e.reward for e in eps] == pytest.approx([scores[0], floor, scores[2]], abs=1e-5)


def rlhf_manifest(tmp_path: Path, out: str, reward_model: str) -> Path:
    """SFT (a few steps) -> reward model -> RLHF-shaped GRPO scored by the reward model."""
    data = tmp_path / "data"
    if not data.exists():
        data.mkdir()
        write_jsonl(data / "sft.jsonl", sft_rows(toy_problems(32, seed=0, digits=(1, 1))))
        write_jsonl(data / "rl.jsonl", toy_problems(8, seed=1, digits=(1, 1)))
    pairs = toy_pairs_file(data, problems=30)
    digest = {
        p.stem: __import__("hashlib").sha256(p.read_bytes()).hexdigest() for p in data.iterdir()
    }
    sft = {
        "name": "sft",
        "type": "sft",
        "datasets": [{"ref": "data/sft.jsonl", "content_hash": digest["sft"]}],
        "max_seq_len": 96,
        "max_steps": 3,
        "optimizer": {"learning_rate": 3e-3},
        "batch": {"global_batch_size": 4, "micro_batch_size": 4},
        "deepspeed": {"zero_stage": 0, "bf16": False},
        "gradient_checkpointing": False,
        "seed": 1,
    }
    rm = rm_stage([{**pairs, "ref": "data/pairs.jsonl"}], max_steps=2)
    rlhf = {
        "name": "rlhf",
        "type": "grpo",
        "datasets": [
            {"ref": "data/rl.jsonl", "content_hash": digest["rl"], "prompt_column": "problem"}
        ],
        "reward": "reward_model",
        "reward_model": reward_model,
        "code_switch_reward": "batch_min_minus_10",
        "thinking_fraction": 0.5,
        "max_steps": 2,
        "temperature": 1.0,
        "max_response_len": 12,
        "overlong_filtering": False,
        "batch": {"prompts_per_step": 2, "rollouts_per_prompt": 2, "micro_batch_size": 4},
        "optimizer": {"learning_rate": 1e-4, "schedule": "constant"},
        "deepspeed": {"zero_stage": 0, "bf16": False},
        "gradient_checkpointing": False,
        "rollout": {"engine": "hf", "batch_size": 4},
        "seed": 2,
    }
    spec = json.loads(manifest(tmp_path, [sft, rm, rlhf], out=out).read_text())
    spec["model_overrides"] = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1}
    path = tmp_path / f"{out}.json"
    path.write_text(json.dumps(spec))
    return path


def test_grpo_scored_by_the_reward_model_stage_or_over_http_logs_the_same_rewards(
    tmp_path: Path,
) -> None:
    local = rlhf_manifest(tmp_path, "local", "stage:rm")
    finals = run_cascade(local, say=lambda _: None)
    assert [f.parent.name for f in finals] == ["sft", "rm", "rlhf"]
    rm_dir = tmp_path / "local" / "rm" / "final"
    with RewardServer(SequenceClassifierRM(str(rm_dir), device="cpu"), "rm").start() as server:
        remote = rlhf_manifest(tmp_path, "remote", server.base_url)
        shutil.copytree(tmp_path / "local" / "sft" / "final", tmp_path / "remote" / "sft" / "final")
        run_cascade(remote, stage="rlhf", say=lambda _: None)
        assert server.scored == 2 * 2 * 2  # steps x prompts x rollouts
    a, b = read_log(tmp_path / "local" / "rlhf"), read_log(tmp_path / "remote" / "rlhf")
    assert [r["step"] for r in a] == [r["step"] for r in b] == [1, 2]
    for ra, rb in zip(a, b, strict=True):
        assert ra["reward_mean"] is not None and math.isfinite(ra["reward_mean"])
        assert ra["reward_mean"] == pytest.approx(rb["reward_mean"], abs=1e-5)
        assert ra["loss"] == pytest.approx(rb["loss"], abs=1e-6)
        assert ra["think_share"] == 0.5
