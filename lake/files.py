"""File utilities every floor uses: jsonl lines with their numbers, file hashes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path


def file_sha256(paths: Iterable[Path]) -> str:
    """sha256 over the bytes of the given files, in order: a version's content hash."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


def json_lines(path: str | Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line of a jsonl file.

    For files read whole (CLI inputs, SFT sets); `ingest` streams big
    sources in blocks instead. A bad line raises ValueError naming `path:line`.
    """
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{line_no}: invalid JSON ({exc.msg})") from None
            if not isinstance(record, dict):
                raise ValueError(
                    f"{path}:{line_no}: expected a JSON object, got {type(record).__name__}"
                )
            yield line_no, record
