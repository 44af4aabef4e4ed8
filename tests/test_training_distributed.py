"""More than one process: `torchrun --nproc_per_node 2` on CPU (gloo) runs an SFT stage and a
GRPO stage and matches a single-process run with the same global batch (losses, rewards,
prompts, final weights). This is the path multi-GPU and multi-node runs take.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_grpo_resume import GROUP_ENV, TIMING, toy_rl_manifest
from test_training_sft import gsm8k_chats, tiny_manifest, write_jsonl

from training.step_log import read_log

ROOT = Path(__file__).resolve().parents[1]
MAIN = "import sys; from cli.main import main; sys.argv[0] = 'cascade'; main()"


def train(manifest: Path, *args: str, ranks: int = 1) -> None:
    launcher = (
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            str(ranks),
            "--no-python",
        ]
        if ranks > 1
        else []
    )
    env = {k: v for k, v in os.environ.items() if k not in GROUP_ENV} | {"OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [
            *launcher,
            sys.executable,
            "-c",
            MAIN,
            "train",
            "--no-progress",
            "--manifest",
            str(manifest),
            *args,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys()
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], rtol=1e-4, atol=1e-5, msg=key)


@pytest.mark.slow
def test_sft_on_two_ranks_matches_one(tmp_path: Path) -> None:
    data = tmp_path / "chat.jsonl"
    sha = write_jsonl(data, gsm8k_chats(16, offset=200))
    stage = {"max_steps": 4, "batch": {"global_batch_size": 4, "micro_batch_size": 2}}
    one = tiny_manifest(tmp_path, data, sha, "one", **stage)
    two = tiny_manifest(tmp_path, data, sha, "two", **stage)
    train(one)
    train(two, ranks=2)
    a, b = read_log(tmp_path / "one" / "sft1"), read_log(tmp_path / "two" / "sft1")
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for ra, rb in zip(a, b, strict=True):
        assert rb["target_tokens"] == ra["target_tokens"]
        assert rb["loss"] == pytest.approx(ra["loss"], rel=1e-5)
        assert rb["grad_norm"] == pytest.approx(ra["grad_norm"], rel=1e-4)
    assert_same_weights(tmp_path / "one" / "sft1" / "final", tmp_path / "two" / "sft1" / "final")
    provenance = (tmp_path / "two" / "sft1" / "final" / "trained_on.json").read_text()
    assert '"world_size": 2' in provenance


@pytest.mark.slow
def test_grpo_on_two_ranks_matches_one(tmp_path: Path) -> None:
    """Each rank rolls out every other prompt; gathered, the batch and the update are the
    single process's."""
    grpo = {"max_steps": 3, "checkpoint_every_steps": 3, "dynamic_filtering": "batch"}
    one = toy_rl_manifest(tmp_path, "one", **grpo)
    two = toy_rl_manifest(tmp_path, "two", **grpo)
    train(one, "--stage", "sft")
    shutil.copytree(tmp_path / "one" / "sft", tmp_path / "two" / "sft")
    train(one, "--stage", "grpo")
    train(two, "--stage", "grpo", ranks=2)
    a, b = read_log(tmp_path / "one" / "grpo"), read_log(tmp_path / "two" / "grpo")
    assert [r["step"] for r in b] == [0, 1, 2, 3]
    exact = ("reward_mean", "pass_rate", "signal_groups", "response_len_mean", "prompts_drawn")
    for ra, rb in zip(a[1:], b[1:], strict=True):
        assert {k: rb[k] for k in exact} == {k: ra[k] for k in exact}
        assert rb["loss"] == pytest.approx(ra["loss"], rel=1e-4, abs=1e-7)
        assert set(ra) - TIMING == set(rb) - TIMING
    assert a[0]["eval_pass_rate"] == b[0]["eval_pass_rate"]
    assert any(r["signal_groups"] for r in a[1:])  # there was a gradient to compare
    assert_same_weights(tmp_path / "one" / "grpo" / "final", tmp_path / "two" / "grpo" / "final")
