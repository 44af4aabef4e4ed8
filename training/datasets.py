"""A stage's dataset references: check each content hash once, then read the rows.

Inputs are lake table versions (`name@version`, checked with the lake's content hash over
every file the version reads) or plain `.jsonl` / `.parquet` files (checked with the sha256 of
the file's bytes). The runner checks every stage's references before any training starts, so a
wrong hash in stage 9 stops the run now, not after days of stages 1-8; the stage then reads
what was checked without hashing it again. A lake version is immutable; a file is re-read only
if its size and modification time are still those seen at the check.

A lake table that is missing or holds other bytes is refused with the manifest field, the
reason and the `cascade build dataset ...` command that produces it (the reference's `build`,
else the command of the recipe of that name, which the caller looks up: `recipe_command`),
or the fact that no recipe builds it yet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from lake import Lake, LakeError, file_sha256, json_lines
from schemas.training_manifest import DatasetRef


class DataHashError(ValueError):
    """A dataset's bytes do not match the hash pinned in the manifest."""


RecipeCommand = Callable[[str], str | None]
"""Table name -> the `cascade build dataset ...` command of the recipe that builds it, or None."""


@dataclass(frozen=True)
class VerifiedRef:
    """A dataset reference whose content hash matched: where to read it and what was seen."""

    ref: DatasetRef
    where: str  # the manifest field, for error messages
    location: str  # `lake:name@N` or the file's absolute path
    lake_path: str | None = None
    file_stat: tuple[int, int] | None = None  # (size, mtime_ns) of a file when it was hashed

    @property
    def content_hash(self) -> str:
        return self.ref.content_hash


def verify(
    ref: DatasetRef,
    where: str,
    manifest_dir: Path,
    lake_path: str | Path | None,
    recipe_command: RecipeCommand | None = None,
) -> VerifiedRef:
    """Recompute a reference's hash; `where` names the manifest field in errors."""
    if ref.is_lake:
        if lake_path is None or not Path(lake_path).exists():
            raise FileNotFoundError(
                f"{where}: {ref.ref} is a lake reference but lake {lake_path!s} does not exist "
                f"(use --lake); {build_hint(ref, recipe_command)}"
            )
        try:
            info = Lake(lake_path).verify_hash(ref.ref, expected=ref.content_hash)
        except LakeError as exc:
            raise DataHashError(
                f"{where}: {exc}; refusing to train on it; {build_hint(ref, recipe_command)}"
            ) from None
        return VerifiedRef(ref, where, f"lake:{info.ref}", lake_path=str(lake_path))
    path = Path(ref.ref)
    path = path if path.is_absolute() else (manifest_dir / path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"{where}: dataset file {path} does not exist")
    before = path.stat()
    actual = file_sha256([path])
    if actual != ref.content_hash:
        raise DataHashError(
            f"{where}: {path} has sha256 {actual}, but the manifest pins {ref.content_hash}; "
            "refusing to train on data that differs from the manifest"
        )
    return VerifiedRef(ref, where, str(path), file_stat=(before.st_size, before.st_mtime_ns))


PLACEHOLDER_HASH = "0" * 64


def build_hint(ref: DatasetRef, recipe_command: RecipeCommand | None = None) -> str:
    """What to do about a missing or mismatched lake table: the command that builds it (the
    reference's `build`, else the recipe of the table's name; then pin the hash it prints),
    or that no recipe builds it yet.

    >>> build_hint(DatasetRef(ref="t@1", content_hash="0" * 64, build="cascade build dataset t"))
    '`cascade build dataset t` produces it; pin the content_hash it prints in place of the placeholder'
    """
    known = None
    if ref.build is None and recipe_command is not None and ref.table is not None:
        known = recipe_command(ref.table)
    if ref.build is None and known is None:
        return f"{ref.how_to_build()} (the manifest names no `build` command for it)"
    pin = "in place of the placeholder" if ref.content_hash == PLACEHOLDER_HASH else "here"
    return f"{ref.how_to_build(known)}; pin the content_hash it prints {pin}"


@dataclass(frozen=True)
class LoadedDataset:
    """A verified reference and its rows."""

    verified: VerifiedRef
    rows: list[dict]

    @property
    def ref(self) -> DatasetRef:
        return self.verified.ref

    @property
    def location(self) -> str:
        return self.verified.location

    def describe(self) -> dict:
        """What provenance records about a dataset a stage trained on."""
        return {
            "ref": self.ref.ref,
            "location": self.location,
            "content_hash": self.ref.content_hash,
            "rows": len(self.rows),
            "upsample": self.ref.upsample,
            "limit": self.ref.limit,
        }


def load(verified: VerifiedRef) -> LoadedDataset:
    """Read a verified reference's rows (no second hash)."""
    return LoadedDataset(verified, read_rows(verified))


def read_rows(verified: VerifiedRef) -> list[dict]:
    """The rows of a verified reference (its `limit` applied)."""
    limit = verified.ref.limit
    if verified.lake_path is not None:
        table = Lake(verified.lake_path).read(verified.ref.ref)
        return (table.slice(0, limit) if limit is not None else table).to_pylist()
    path = Path(verified.location)
    now = path.stat()
    if (now.st_size, now.st_mtime_ns) != verified.file_stat:
        raise DataHashError(
            f"{verified.where}: {path} changed after its hash was checked; refusing to train on it"
        )
    if path.suffix == ".parquet":
        table = pq.read_table(path)
        return (table.slice(0, limit) if limit is not None else table).to_pylist()
    rows: list[dict] = []
    for _, row in json_lines(path):
        if limit is not None and len(rows) >= limit:
            break
        rows.append(row)
    return rows
