"""Find the dataset manifest a build wrote for a table version, and pin it by its sha256."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from lake import Lake, VersionInfo
from schemas.dataset_manifest import DatasetManifest


class ManifestMismatchError(ValueError):
    """A manifest given explicitly describes another table version than the one asked for."""


@dataclass(frozen=True)
class ManifestFile:
    """A dataset manifest, where it was read from (None: given as an object) and its sha256."""

    manifest: DatasetManifest
    path: Path | None
    sha256: str


def manifest_path(directory: str | os.PathLike[str], name: str, version: int) -> Path:
    """Where `cascade build dataset` writes the manifest of `name@version` under `directory`."""
    return Path(directory) / "datasets" / name / f"v{version}.json"


def default_search(lake: Lake) -> list[Path]:
    """Manifest directories looked in when none is given: the lake's own, then ./manifests."""
    return [lake.path / "manifests", Path("manifests")]


def find_manifest(
    lake: Lake,
    info: VersionInfo,
    manifest: DatasetManifest | str | os.PathLike[str] | None = None,
    search: Sequence[str | os.PathLike[str]] = (),
) -> ManifestFile | None:
    """The manifest of `info`: the one given, or the first found in `search` and the default
    places whose output pin matches the version's ref and content hash (None if none does).

    A manifest given explicitly that describes another version raises ManifestMismatchError.
    """
    if manifest is not None:
        found = _load(manifest)
        if not _describes(found.manifest, info):
            raise ManifestMismatchError(
                f"manifest {found.path or '(given)'} describes {found.manifest.output.ref} "
                f"(content_hash {found.manifest.output.content_hash[:12]}), not {info.ref} "
                f"(content_hash {info.content_hash[:12]})"
            )
        return found
    for directory in [*search, *default_search(lake)]:
        path = manifest_path(directory, info.name, info.version)
        if not path.is_file():
            continue
        try:
            found = _load(path)
        except ValueError:
            continue
        if _describes(found.manifest, info):
            return found
    return None


def _describes(manifest: DatasetManifest, info: VersionInfo) -> bool:
    return manifest.output.ref == info.ref and manifest.output.content_hash == info.content_hash


def _load(manifest: DatasetManifest | str | os.PathLike[str]) -> ManifestFile:
    if isinstance(manifest, DatasetManifest):
        text = manifest.model_dump_json(indent=2) + "\n"  # the bytes the build runner writes
        return ManifestFile(manifest, None, hashlib.sha256(text.encode()).hexdigest())
    path = Path(manifest)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read manifest {path}: {exc.strerror}") from None
    try:
        parsed = DatasetManifest.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ValueError(f"{path}: not a dataset manifest ({where}: {first['msg']})") from None
    return ManifestFile(parsed, path, hashlib.sha256(raw).hexdigest())
