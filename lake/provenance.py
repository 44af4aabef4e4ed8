"""What produced a lake version: the code version (package version plus git commit) that every
version, build manifest and checkpoint records."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path


@functools.cache
def code_version() -> str:
    """The package version plus the git commit of the source tree when there is one.

    Computed once per process: a commit should not pay two `git` calls each time.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        pkg = version("cascade-curation")
    except PackageNotFoundError:
        pkg = "0+unknown"
    root = Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        if out.returncode == 0:
            dirty = subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
                timeout=5,
            ).stdout.strip()
            return f"{pkg}+g{out.stdout.strip()}{'.dirty' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        pass
    return pkg
