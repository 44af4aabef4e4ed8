"""`cascade train`: run a training manifest's stages (SFT now; GRPO stages stop the run)."""

from __future__ import annotations

import typer

from cli import app
from cli.console import CascadeError, console, state


@app.command()
def train(
    manifest: str = typer.Option(..., "--manifest", help="Training manifest (JSON)."),
    stage: str = typer.Option(None, "--stage", help="Run only this stage."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the last checkpoint."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Train the stages of MANIFEST in order, each from the previous stage's final model."""
    from training.runner import ManifestError, StageNotImplementedError, run_cascade
    from training.sft_data import DataHashError

    try:
        finals = run_cascade(
            manifest,
            stage=stage,
            resume=resume,
            lake_path=state.lake_path,
            show_progress=progress,
            say=lambda line: console.print(line, highlight=False),
        )
    except (ManifestError, DataHashError, StageNotImplementedError) as exc:
        raise CascadeError(str(exc)) from None
    for path in finals:
        console.print(f"[green]done:[/green] {path}", highlight=False)
