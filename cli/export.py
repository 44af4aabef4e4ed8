"""`cascade export` (Hugging Face layout, Parquet or JSON lines) and `cascade push` (the Hub)."""

from __future__ import annotations

from pathlib import Path

import typer

from cli.app import app
from cli.console import CascadeError, console, open_lake, plain
from cli.lazy_options import lazy_options


def _export_options() -> dict[str, dict[str, object]]:
    from builders.publish.export import FORMATS, ROWS_PER_SHARD

    return {"format_": {"help": "|".join(FORMATS)}, "rows_per_shard": {"default": ROWS_PER_SHARD}}


@app.command("export", cls=lazy_options(_export_options))
def export_command(
    ref: str = typer.Argument(..., help="Dataset version: name (latest) or name@N."),
    directory: Path = typer.Argument(..., help="New or empty directory to write."),
    format_: str = typer.Option("hf", "--format"),  # help: _export_options
    license_: str = typer.Option("unknown", "--license", help="License id for the card."),
    language: list[str] = typer.Option(None, "--language", help="Language code(s) for the card."),
    rows_per_shard: int = typer.Option(None, "--rows-per-shard"),  # default: _export_options
    manifests: list[Path] = typer.Option(
        None, "--manifests", help="Directories to look for the version's manifest in."
    ),
) -> None:
    """Write a version as data/<split>-NNNNN-of-NNNNN shards (+ a dataset card for hf)."""
    from builders.publish import ExportError, ManifestMismatchError, export_dataset
    from lake import LakeError

    try:
        export = export_dataset(
            open_lake(),
            ref,
            directory,
            format_,
            search=manifests or (),
            license=license_,
            language=language or (),
            rows_per_shard=rows_per_shard,
        )
    except (LakeError, ExportError, ManifestMismatchError) as exc:
        raise CascadeError(str(exc)) from None
    for split, files in export.files.items():
        console.print(plain(f"  {split}: {export.rows[split]:,} rows in {len(files)} files"))
    if export.manifest is None:
        console.print(plain(f"no dataset manifest found for {export.info.ref}", "yellow"))
    console.print(plain(f"exported {export.info.ref} to {export.directory}", "green"))


@app.command("push")
def push_command(
    ref: str = typer.Argument(..., help="Dataset version: name (latest) or name@N."),
    repo: str = typer.Option(..., "--repo", help="Hub dataset repo, ORG/NAME."),
    private: bool = typer.Option(False, "--private", help="Create the repo private."),
    license_: str = typer.Option("unknown", "--license", help="License id for the card."),
    language: list[str] = typer.Option(None, "--language", help="Language code(s) for the card."),
    manifests: list[Path] = typer.Option(
        None, "--manifests", help="Directories to look for the version's manifest in."
    ),
) -> None:
    """Upload a version with its card and manifest to the Hugging Face Hub (token: HF_TOKEN)."""
    from builders.publish import ExportError, ManifestMismatchError, PushError, push_dataset
    from lake import LakeError

    try:
        pushed = push_dataset(
            open_lake(),
            ref,
            repo,
            private=private,
            search=manifests or (),
            license=license_,
            language=language or (),
        )
    except (LakeError, ExportError, ManifestMismatchError, PushError) as exc:
        raise CascadeError(str(exc)) from None
    console.print(
        plain(f"pushed {pushed.ref} to {pushed.repo_id} ({pushed.tag}): {pushed.url}", "green")
    )
