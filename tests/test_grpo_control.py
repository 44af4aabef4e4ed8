"""`cascade train --control shuffled-rewards`: the control of a GRPO stage runs from the very
model the stage started from, into `<stage>.shuffled-rewards/` beside it, with each batch's
rewards permuted across the batch before the advantages.

With the same start, prompts and seeds, the first batch of the control is the real run's
batch (same responses, same rewards, so the same mean reward); only the permutation can make
its first update, and so its weights, differ from the real run's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.test_grpo_resume import cascade, finish, toy_rl_manifest
from training.step_log import read_log

pytestmark = pytest.mark.slow


def test_shuffled_reward_control_starts_from_the_stage_start_and_permutes_rewards(
    tmp_path: Path,
) -> None:
    manifest = toy_rl_manifest(
        tmp_path, "run", max_steps=2, dynamic_filtering="none", overlong_filtering=False
    )
    finish(cascade("--manifest", str(manifest)))
    out = finish(cascade("--manifest", str(manifest), "--control", "shuffled-rewards"))
    assert "stage grpo: 2 steps" in out and "stage sft" not in out  # only GRPO stages

    run = tmp_path / "run"
    control = run / "grpo.shuffled-rewards"
    trained_on = json.loads((control / "final" / "trained_on.json").read_text())
    assert trained_on["control"] == "shuffled-rewards"
    assert trained_on["init_from"] == str(run / "sft" / "final")
    assert json.loads((run / "grpo" / "final" / "trained_on.json").read_text())["control"] is None

    real, shuffled = read_log(run / "grpo"), read_log(control)
    assert real[0]["step"] == shuffled[0]["step"] == 0
    assert real[0]["eval_pass_rate"] == shuffled[0]["eval_pass_rate"]  # the same start
    assert real[1]["reward_mean"] == shuffled[1]["reward_mean"]  # the same first batch
    assert real[1]["response_len_mean"] == shuffled[1]["response_len_mean"]
    assert shuffled[1]["grad_norm"] > 0
    before = load_file(run / "sft" / "final" / "model.safetensors")
    after_real = load_file(run / "grpo" / "final" / "model.safetensors")
    after_control = load_file(control / "final" / "model.safetensors")
    assert any(not torch.equal(after_control[k], before[k]) for k in before)
    assert any(not torch.equal(after_control[k], after_real[k]) for k in before)


def test_control_of_a_stage_that_is_not_grpo_is_refused(tmp_path: Path) -> None:
    manifest = toy_rl_manifest(tmp_path, "run", max_steps=1)
    proc = cascade("--manifest", str(manifest), "--stage", "sft", "--control", "shuffled-rewards")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "--control shuffled-rewards applies to GRPO stages; none among: sft (sft)" in out
    proc = cascade("--manifest", str(manifest), "--control", "shuffled-rewards")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "run the cascade first" in out
    proc = cascade("--manifest", str(manifest), "--control", "other")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "unknown control 'other'; controls: shuffled-rewards" in out
