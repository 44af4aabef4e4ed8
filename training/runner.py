"""The cascade runner: stages in manifest order, each policy stage from the previous policy
stage's final model; a reward-model stage starts from its own backbone and leaves the chain
alone (a later GRPO stage reads it as `reward_model: stage:<name>`).

Layout under the manifest's `output_dir` (relative paths resolve against the manifest file):
`<stage>/checkpoints/step_N/` (resumable), `<stage>/final/` (transformers model + tokenizer
with its chat template + `trained_on.json`; a reward model adds `eval.json`),
`<stage>/log.jsonl`. Every stage's data hashes are checked once, before the first stage trains.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from lake import phase
from schemas.training_manifest import (
    AnyStage,
    GRPOStage,
    RewardModelStage,
    SFTStage,
    TrainingManifest,
)
from training.datasets import RecipeCommand, VerifiedRef, verify

if TYPE_CHECKING:  # the stage machinery imports torch: only when a stage runs
    from training.stage import StageContext, StageResult


class ManifestError(ValueError):
    """A training manifest cannot be read or does not validate; the message names the field."""


def load_manifest(path: str | Path) -> TrainingManifest:
    """Parse and validate a manifest file, turning errors into `file: field: problem` lines."""
    path = Path(path)
    if not path.is_file():
        raise ManifestError(f"{path}: manifest file not found")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ManifestError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    try:
        return TrainingManifest.model_validate(raw)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            where = _field_path(raw, err["loc"])
            lines.append(f"{path}: {where or '(top level)'}: {err['msg']}")
        raise ManifestError("invalid training manifest:\n" + "\n".join(lines)) from None


def _field_path(raw: object, loc: tuple) -> str:
    """`stages[1](sft_stage2).batch.micro_batch_size` from a pydantic location tuple."""
    parts: list[str] = []
    node = raw
    for key in loc:
        if isinstance(key, int):
            parts[-1:] = [f"{parts[-1] if parts else ''}[{key}]"]
            node = node[key] if isinstance(node, list) and key < len(node) else None
            if isinstance(node, dict) and "name" in node:
                parts[-1] += f"({node['name']})"
            continue
        tags = ("sft", "grpo", "mopd", "reward_model")
        if key in tags and isinstance(node, dict) and node.get("type") == key:
            continue  # the discriminated-union tag pydantic inserts
        parts.append(str(key))
        node = node.get(key) if isinstance(node, dict) else None
    return ".".join(parts)


@dataclass
class StagePlan:
    """One stage to run, where it starts from and where it writes."""

    stage: AnyStage
    stage_dir: Path
    init_from: Path | None  # None: the manifest's base model (a reward model: its backbone)


def plan(manifest: TrainingManifest, manifest_path: Path, only: str | None) -> list[StagePlan]:
    """The stages to run (all, or just `only`), each policy stage chained to the previous
    policy stage's final dir."""
    out = Path(manifest.output_dir)
    out = out if out.is_absolute() else (manifest_path.parent / out).resolve()
    plans = []
    previous: Path | None = None
    for stage in manifest.stages:
        if isinstance(stage, RewardModelStage):
            source = stage.backbone.removeprefix("stage:")
            init = out / source / "final" if stage.backbone.startswith("stage:") else None
            plans.append(StagePlan(stage, out / stage.name, init))
            continue
        plans.append(StagePlan(stage, out / stage.name, previous))
        previous = out / stage.name / "final"
    if only is None:
        return plans
    manifest.stage(only)  # raises naming the known stages
    chosen = [p for p in plans if p.stage.name == only]
    first = chosen[0]
    if first.init_from is not None and not (first.init_from / "config.json").is_file():
        raise FileNotFoundError(
            f"stage {only!r} starts from {first.init_from}, which does not exist yet; "
            "run the earlier stages first"
        )
    rm = getattr(first.stage, "reward_model", None) or ""
    if rm.startswith("stage:") and not (out / rm[6:] / "final" / "config.json").is_file():
        raise FileNotFoundError(
            f"stage {only!r} is scored by reward model {rm!r}, whose final model "
            f"{out / rm[6:] / 'final'} does not exist yet; run that stage first"
        )
    return chosen


def control_plans(plans: list[StagePlan], control: str) -> list[StagePlan]:
    """The control runs of the GRPO stages among `plans`: each starts from the very model its
    stage starts from and writes to `<stage>.<control>/` beside it, so the stage and its
    control differ only in the control (same prompts, seeds and sampling)."""
    from training.episode import CONTROLS

    if control not in CONTROLS:
        raise ValueError(f"unknown control {control!r}; controls: {', '.join(CONTROLS)}")
    chosen = [p for p in plans if isinstance(p.stage, GRPOStage)]
    if not chosen:
        names = ", ".join(f"{p.stage.name} ({p.stage.type})" for p in plans)
        raise ValueError(f"--control {control} applies to GRPO stages; none among: {names}")
    for p in chosen:
        if p.init_from is not None and not (p.init_from / "config.json").is_file():
            raise FileNotFoundError(
                f"the {control} control of stage {p.stage.name!r} starts from {p.init_from}, "
                "which does not exist yet; run the cascade first"
            )
    return [
        StagePlan(p.stage, p.stage_dir.with_name(f"{p.stage.name}.{control}"), p.init_from)
        for p in chosen
    ]


def check_endpoints(plans: list[StagePlan], manifest_path: Path) -> None:
    """Every planned stage's `env:NAME` server URL is set, before anything trains (the shipped
    recipe names its SWE patch judge that way until a server is up)."""
    for p in plans:
        judge = getattr(p.stage, "patch_judge", None)
        if judge is None:
            continue
        try:
            judge.resolved_base_url()
        except ValueError as exc:
            raise ManifestError(
                f"{manifest_path}: stages[{p.stage.name}].patch_judge.base_url: {exc}"
            ) from None


@dataclass
class VerifiedStage:
    """A stage's references after their hash check (done once, here)."""

    datasets: list[VerifiedRef]
    eval_dataset: VerifiedRef | None


def verify_data(
    plans: list[StagePlan],
    manifest_path: Path,
    lake_path: str | Path | None,
    recipe_command: RecipeCommand | None = None,
) -> dict[str, VerifiedStage]:
    """Check every stage's data hashes before training anything.

    A wrong hash in a late stage should stop the run now, not after days of earlier stages;
    the error names the command that builds a missing table (`recipe_command` looks one up
    for references without `build`).
    """
    checked = {}
    for p in plans:
        where = f"{manifest_path}: stages[{p.stage.name}]"
        refs = [
            verify(ref, f"{where}.datasets[{i}]", manifest_path.parent, lake_path, recipe_command)
            for i, ref in enumerate(p.stage.datasets)
        ]
        evaluation = getattr(p.stage, "evaluation", None)
        eval_ref = (
            verify(
                evaluation.dataset,
                f"{where}.evaluation.dataset",
                manifest_path.parent,
                lake_path,
                recipe_command,
            )
            if evaluation is not None
            else None
        )
        checked[p.stage.name] = VerifiedStage(refs, eval_ref)
    return checked


def run_cascade(
    manifest_path: str | Path,
    stage: str | None = None,
    resume: bool = False,
    lake_path: str | Path | None = None,
    say: Callable[[str], None] = print,
    reward_fn: Callable | None = None,
    control: str | None = None,
    recipe_command: RecipeCommand | None = None,
    after_stage: Callable[[str, Path], None] | None = None,
) -> list[Path]:
    """Run the manifest's stages (or one) in order; return the final model dirs produced.

    `reward_fn` (TRL-style `(prompts, completions, **columns) -> list[float | None]`) replaces
    the reward of every GRPO stage run, for experiments and controls. `control` (one of
    `training.episode.CONTROLS`) runs the control of every GRPO stage (or of `stage`)
    instead: see `control_plans`. `recipe_command` names the command that builds a missing
    lake table whose reference has no `build` (the CLI passes the recipe registry's
    `builders.recipes.build_command`). `after_stage(name, final_dir)` runs after each policy
    stage, finished now or earlier (the CLI scores the manifest's `evaluation` suite there).
    """
    manifest_path = Path(manifest_path).resolve()
    manifest = load_manifest(manifest_path)
    plans = plan(manifest, manifest_path, stage)
    if control is not None:
        plans = control_plans(plans, control)
    checked = verify_data(plans, manifest_path, lake_path, recipe_command)
    check_endpoints(plans, manifest_path)
    all_plans = plan(manifest, manifest_path, None)
    finals_by_name = {p.stage.name: p.stage_dir / "final" for p in all_plans}
    finals: list[Path] = []
    for p in plans:
        if resume and (p.stage_dir / "final" / "trained_on.json").is_file():
            say(f"stage {p.stage.name}: already finished ({p.stage_dir / 'final'}), skipping")
            finals.append(p.stage_dir / "final")
            if after_stage is not None and not isinstance(p.stage, RewardModelStage):
                after_stage(p.stage.name, p.stage_dir / "final")
            continue
        from training.stage import StageContext  # heavy: only when training

        start = p.init_from or getattr(p.stage, "backbone", None) or manifest.base_model
        say(f"stage {p.stage.name}: {p.stage.type}, from {start} -> {p.stage_dir}")
        ctx = StageContext(
            manifest=manifest,
            manifest_path=manifest_path,
            stage=p.stage,
            stage_dir=p.stage_dir,
            init_from=p.init_from,
            datasets=checked[p.stage.name].datasets,
            eval_dataset=checked[p.stage.name].eval_dataset,
            lake_path=lake_path,
            resume=resume,
            reward_fn=reward_fn,
            stage_finals=finals_by_name,
            control=control,
        )
        with phase(f"stage {p.stage.name} ({p.stage.type})", unit="stages"):
            result = _run_stage(ctx)
        loss = result.last_loss if result.last_loss is None else round(result.last_loss, 4)
        say(
            f"stage {p.stage.name}: {result.steps} steps, last loss {loss}, "
            f"model in {result.final_dir}"
        )
        if result.summary:
            say(f"stage {p.stage.name}: {result.summary}")
        finals.append(result.final_dir)
        if after_stage is not None and not isinstance(p.stage, RewardModelStage):
            after_stage(p.stage.name, result.final_dir)
    return finals


def _run_stage(ctx: StageContext) -> StageResult:
    if isinstance(ctx.stage, SFTStage):
        from training.sft import run_sft_stage

        return run_sft_stage(ctx)
    if isinstance(ctx.stage, RewardModelStage):
        from training.reward_model import run_reward_model_stage

        return run_reward_model_stage(ctx)
    from training.grpo import run_rl_stage

    return run_rl_stage(ctx)
