"""`cascade train`: run a training manifest's stages (SFT, GRPO, MOPD) in order."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from cli.app import app
from cli.console import CascadeError, console, open_lake, plain, print_records, state


@app.command()
def train(
    manifest: str = typer.Option(..., "--manifest", help="Training manifest (JSON)."),
    stage: str = typer.Option(None, "--stage", help="Run only this stage."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the last checkpoint."),
    progress: bool = typer.Option(
        True,
        "--progress/--no-progress",
        help="Show progress (a line every few seconds when not in a terminal).",
    ),
    control: str = typer.Option(
        None,
        "--control",
        help="Run a control of each GRPO stage (or of --stage) instead: shuffled-rewards "
        "permutes each batch's rewards across the batch before the advantages; written to "
        "<stage>.<control>/ from the stage's own starting model.",
    ),
) -> None:
    """Train the stages of MANIFEST in order, each from the previous stage's final model.

    Multi-process (one per GPU, or gloo ranks on CPU): `torchrun --nproc_per_node N
    $(which cascade) train --manifest M`.
    """
    from builders.recipes import build_command
    from cli.progress import show_progress
    from training.datasets import DataHashError
    from training.runner import ManifestError, run_cascade
    from training.stopping import NoLearningSignal

    try:
        after_stage, evaluated = stage_evaluation(manifest, control)
        with show_progress(progress):
            finals = run_cascade(
                manifest,
                stage=stage,
                resume=resume,
                lake_path=state.lake_path,
                say=lambda line: console.print(line, highlight=False, markup=False),
                control=control,
                recipe_command=build_command,
                after_stage=after_stage,
            )
    except (ManifestError, DataHashError, NoLearningSignal) as exc:
        raise CascadeError(str(exc)) from None
    for path in finals:
        console.print(f"done: {path}", highlight=False, markup=False)
    if evaluated is not None and evaluated.is_file():
        from curation.evaluate.stages import stage_table

        rows = json.loads(evaluated.read_text())["rows"]
        console.print(plain(f"evaluation after each stage ({evaluated}):"))
        print_records(stage_table(rows), "table")


def stage_evaluation(manifest: str, control: str | None):
    """The `after_stage` that scores the manifest's `evaluation` suite after every stage, and
    where it writes; (None, None) without a suite, and for control runs (not the cascade)."""
    from training.runner import load_manifest

    path = Path(manifest).resolve()
    spec = load_manifest(path)
    if spec.evaluation is None or control is not None:
        return None, None
    from curation.evaluate.stages import EVALUATION_FILE, stage_evaluator
    from schemas.training_manifest import RewardModelStage

    out = Path(spec.output_dir)
    out = out if out.is_absolute() else (path.parent / out).resolve()
    stages = [s.name for s in spec.stages if not isinstance(s, RewardModelStage)]
    say = lambda line: console.print(line, highlight=False, markup=False)  # noqa: E731
    try:
        evaluator = stage_evaluator(
            open_lake(write=True), spec.evaluation, path.parent, out, stages, say
        )
    except (FileNotFoundError, ValueError) as exc:
        raise CascadeError(f"{manifest}: evaluation: {exc}") from None
    return evaluator, out / EVALUATION_FILE
