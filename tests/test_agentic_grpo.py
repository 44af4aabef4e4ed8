"""A GRPO stage with an environment, end to end through `cascade train`'s Python function: a
tiny model taught by SFT to call the python tool runs multi-turn episodes in the sandbox, the
stage logs its episodes (turns, calls, errors, end reasons, tool time), its update stays on
policy over every model token, and held-out evaluation runs episodes too."""

from __future__ import annotations

import json
from pathlib import Path

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
    finals = run_cascade(manifest, show_progress=False, say=lambda _: None)
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
