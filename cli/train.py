"""`cascade train`: run a training manifest's stages (SFT, GRPO, MOPD) in order."""

from __future__ import annotations

import typer

from cli.app import app
from cli.console import CascadeError, console, state


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
        with show_progress(progress):
            finals = run_cascade(
                manifest,
                stage=stage,
                resume=resume,
                lake_path=state.lake_path,
                say=lambda line: console.print(line, highlight=False, markup=False),
                control=control,
                recipe_command=build_command,
            )
    except (ManifestError, DataHashError, NoLearningSignal) as exc:
        raise CascadeError(str(exc)) from None
    for path in finals:
        console.print(f"done: {path}", highlight=False, markup=False)
