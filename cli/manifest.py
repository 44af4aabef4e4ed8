"""`cascade manifest pin`: a copy of a training manifest pinned to the lake's recorded hashes."""

from __future__ import annotations

import typer

from cli.app import app
from cli.console import CascadeError, console, open_lake

manifest_app = typer.Typer(help="Training manifests: pin them to a lake.", no_args_is_help=True)
app.add_typer(manifest_app, name="manifest")


@manifest_app.command("pin")
def pin(
    manifest: str = typer.Argument(..., help="Training manifest (JSON)."),
    out: str = typer.Option(..., "--out", help="Where to write the pinned copy."),
) -> None:
    """Write a copy of MANIFEST whose lake references carry the hashes this lake recorded
    for them, and whose relative paths still point where the original's did.

    For datasets rebuilt on another machine (other hashes): train the copy with `cascade
    train --manifest OUT`, which still recomputes every hash and refuses a mismatch.
    """
    from training.pinning import PinError, pin_manifest
    from training.runner import ManifestError

    try:
        pinned = pin_manifest(manifest, open_lake(), out)
    except (ManifestError, PinError) as exc:
        raise CascadeError(str(exc)) from None
    for field, digest in pinned.items():
        console.print(
            f"{field.split(': ', 1)[1]}: {digest}", highlight=False, markup=False, soft_wrap=True
        )
    console.print(
        f"pinned {len(pinned)} lake references into {out}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
