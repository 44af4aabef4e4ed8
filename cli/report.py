"""`cascade report NAME[@N]`: the build report of a dataset version as one offline HTML file."""

from __future__ import annotations

from pathlib import Path

import typer

from cli.app import app
from cli.console import CascadeError, console, open_lake, plain


@app.command("report")
def report_command(
    ref: str = typer.Argument(..., help="Dataset version: name (latest) or name@N."),
    out: Path = typer.Option(
        None, "--out", help="HTML file to write (default: next to the version's manifest)."
    ),
    manifest: Path = typer.Option(
        None, "--manifest", help="The version's dataset manifest, if not in a default place."
    ),
    manifests: list[Path] = typer.Option(
        None, "--manifests", help="Directories to look for manifests in (besides the defaults)."
    ),
) -> None:
    """Write a self-contained HTML report: funnel, drops and their evidence, provenance."""
    from builders.publish import ManifestMismatchError, write_report
    from lake import LakeError

    try:
        path = write_report(open_lake(), ref, out, manifest, search=manifests or ())
    except (LakeError, ManifestMismatchError) as exc:
        raise CascadeError(str(exc)) from None
    except ValueError as exc:  # an unreadable manifest file
        raise CascadeError(str(exc)) from None
    console.print(plain(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)", "green"))
