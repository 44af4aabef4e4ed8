"""Repositories at a commit, the files a gold patch changes, and patches applied with git.

Repositories are local git clones under a `repos_dir`, named `owner__name` (SWE-bench's
convention) or `owner/name`. Files are read from the commit's tree with git itself (no
checkout, so one clone serves every instance of a repository); patches are applied with
`git apply`, which also works outside a repository.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from functools import cached_property
from pathlib import Path

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError


class RepositoryError(RuntimeError):
    """A repository, commit or file cannot be read, or a patch does not apply."""


def repo_dir(repos_dir: str | Path, repo: str) -> Path | None:
    """The local clone of `repo` (owner/name) under `repos_dir`, or None when there is none."""
    root = Path(repos_dir)
    owner, _, name = repo.partition("/")
    for candidate in (root / f"{owner}__{name}", root / owner / name, root / name):
        if (candidate / ".git").exists() or (candidate / "HEAD").is_file():
            return candidate
    return None


def _git(path: Path, *args: str, text: bool = True) -> str | bytes:
    done = subprocess.run(
        ["git", "-C", str(path), *args], capture_output=True, text=text, timeout=120
    )
    if done.returncode != 0:
        error = done.stderr if text else done.stderr.decode(errors="replace")
        raise RepositoryError(f"git {' '.join(args[:2])} in {path}: {str(error).strip()}")
    return done.stdout


class Snapshot:
    """The files of one repository at one commit, read lazily and cached."""

    def __init__(self, path: str | Path, commit: str) -> None:
        self.path = Path(path)
        self.commit = commit
        self._files: dict[str, str | None] = {}

    @cached_property
    def paths(self) -> list[str]:
        """Every file path in the commit's tree (the repository tree a localizer sees)."""
        out = _git(self.path, "ls-tree", "-r", "--name-only", "-z", self.commit)
        return [p for p in str(out).split("\0") if p]

    @cached_property
    def _path_set(self) -> frozenset[str]:
        return frozenset(self.paths)

    def read(self, path: str) -> str | None:
        """The text of `path` at the commit; None when the file does not exist there."""
        if path not in self._files:
            if path not in self._path_set:
                self._files[path] = None
            else:
                raw = _git(self.path, "show", f"{self.commit}:{path}", text=False)
                self._files[path] = bytes(raw).decode("utf-8", errors="replace")
        return self._files[path]

    def read_many(self, paths: Iterable[str]) -> dict[str, str]:
        """{path: text} of the given paths that exist at the commit."""
        found = {p: self.read(p) for p in paths}
        return {p: t for p, t in found.items() if t is not None}


def patch_files(patch: str) -> list[str]:
    """Paths a unified diff changes (the target path; the source path for a deletion), in
    order; [] for text that is not a diff."""
    try:
        patch_set = PatchSet(patch)
    except (UnidiffParseError, ValueError):
        return []
    paths = []
    for patched in patch_set:
        name = patched.target_file if patched.target_file != "/dev/null" else patched.source_file
        paths.append(name[2:] if name.startswith(("a/", "b/")) else name)
    return list(dict.fromkeys(paths))


def apply_patch(files: Mapping[str, str], patch: str) -> dict[str, str]:
    """The files after `git apply` of `patch` (files it deletes are left out).

    `files` must hold every file the patch changes (new files excepted); RepositoryError says
    why the patch does not apply.
    """
    with tempfile.TemporaryDirectory(prefix="cascade-apply-") as tmp:
        root = Path(tmp)
        for path, text in files.items():
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        patch_path = root.parent / f"{root.name}.patch"
        patch_path.write_text(patch if patch.endswith("\n") else patch + "\n", encoding="utf-8")
        try:
            done = subprocess.run(
                ["git", "apply", "--whitespace=nowarn", str(patch_path)],
                cwd=root,
                capture_output=True,
                text=True,
                timeout=60,
            )
        finally:
            patch_path.unlink(missing_ok=True)
        if done.returncode != 0:
            raise RepositoryError(f"patch does not apply: {done.stderr.strip()}")
        return {
            str(p.relative_to(root)): p.read_text(encoding="utf-8")
            for p in root.rglob("*")
            if p.is_file()
        }
