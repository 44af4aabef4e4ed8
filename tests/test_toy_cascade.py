"""The toy cascade end to end, short: every dataset of manifests/toy_cascade.json built by its
recipe into a fresh lake, the manifest pinned to that lake, then every stage trained for a few
steps in the manifest's order, and the shuffled-reward control of one RL stage.

The full run (`make toy-cascade`, `bench/toy_cascade.py`) is what shows learning; this one
shows the plumbing holds for every (stage type, reward) pair the 8B manifest has: the data of
each stage is what its recipe published, under a hash the run checked, and each stage starts
from the one before it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from builders.worlds.toy_cascade import TOY_BUILDS, build_toy_lake
from builders.worlds.toy_judge import serve_toy_judge
from lake.catalog import Lake
from training.pinning import pin_manifest
from training.runner import load_manifest, run_cascade
from training.step_log import read_log

pytestmark = pytest.mark.slow
torch.set_num_threads(1)  # two shared cores: more threads only spin
ROOT = Path(__file__).resolve().parents[1]


def pairs(manifest: dict) -> set[tuple[str, str | None]]:
    return {(s["type"], s.get("reward")) for s in manifest["stages"]}


def short(pinned: Path, out: Path) -> Path:
    """The pinned manifest with every stage cut to a few steps (and small batches)."""
    spec = json.loads(pinned.read_text())
    for stage in spec["stages"]:
        if stage["type"] == "sft":
            stage["max_steps"] = 6
        elif stage["type"] == "reward_model":
            stage.pop("epochs", None)
            stage["max_steps"] = 3
        else:
            stage["max_steps"] = 2
            stage["batch"] = {
                "prompts_per_step": 2,
                "rollouts_per_prompt": 4,
                "micro_batch_size": 8,
            }
            stage["evaluation"]["every_steps"] = 2
            if "length_curriculum" in stage:  # a phase's minimum must fit in the short run
                stage["length_curriculum"].update(min_steps=1, smoothing_steps=1)
        stage["checkpoint_every_steps"] = stage["max_steps"]
    spec["output_dir"] = str(out / "run")
    path = out / "toy_cascade_short.json"
    path.write_text(json.dumps(spec, indent=2))
    return path


def test_every_stage_of_the_toy_cascade_runs_on_data_its_recipe_built(tmp_path: Path) -> None:
    committed = json.loads((ROOT / "manifests" / "toy_cascade.json").read_text())
    eight_b = json.loads((ROOT / "manifests" / "cascade_8b.json").read_text())
    assert pairs(eight_b) <= pairs(committed)  # every (stage type, reward) of the 8B cascade

    lake_path = tmp_path / "toy-lake"
    reports = build_toy_lake(lake_path, teacher_steps=0.25, say=lambda _: None)
    assert set(reports) == {b.table for b in TOY_BUILDS}
    pinned = tmp_path / "pinned.json"
    hashes = pin_manifest(ROOT / "manifests" / "toy_cascade.json", Lake(lake_path), pinned)
    assert set(hashes.values()) <= {r.manifest.output.content_hash for r in reports.values()}

    manifest = short(pinned, tmp_path)
    with serve_toy_judge():  # swe_rl_2's swe_patch_judge reward asks it
        finals = run_cascade(manifest, lake_path=lake_path, say=lambda _: None)
    names = [s.name for s in load_manifest(manifest).stages]
    assert [f.parent.name for f in finals] == names
    for stage in load_manifest(manifest).stages:
        log = read_log(tmp_path / "run" / stage.name)
        assert log and log[-1]["step"] == stage.max_steps, stage.name
        trained_on = json.loads(
            (tmp_path / "run" / stage.name / "final" / "trained_on.json").read_text()
        )
        assert {d["content_hash"] for d in trained_on["datasets"]} <= set(hashes.values())
        if stage.type == "grpo":
            assert "eval_reward_mean" in log[0] and "signal_groups" in log[-1]

    # the committed evaluation suite reads the held-out tables these recipes built
    from curation.evaluate.run import evaluate

    suite = committed["evaluation"]
    report = evaluate(
        Lake(lake_path),
        str(finals[-1]),
        suite["benchmarks"],
        overrides={**suite["settings"], "k": 1, "max_new_tokens": 8},
        limit=3,
    )
    assert [(r.score.items, r.score.k) for r in report.results] == [(3, 1)] * 3
    # held-out splits are kept apart by prompt id, not by benchmark decontamination: said so
    risk = "CONTAMINATION RISK: not decontaminated in swe_rl@1, swe_rl_short@1, code_rl@1 and "
    assert [r.decontamination[: len(risk)] for r in report.results] == [risk] * 3

    (control,) = run_cascade(
        manifest,
        stage="math_rl_1",
        control="shuffled-rewards",
        lake_path=lake_path,
        say=lambda _: None,
    )
    assert control.parent.name == "math_rl_1.shuffled-rewards"
    assert read_log(control.parent)[0] == read_log(tmp_path / "run" / "math_rl_1")[0]
