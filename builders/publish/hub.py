"""Push a dataset version to the Hugging Face Hub: export it with its card, upload, tag.

The token comes from where huggingface_hub always looks (HF_TOKEN, or `hf auth login`'s
cache) unless one is given. One commit uploads the data shards, the card and the dataset
manifest and deletes shards an earlier push left under data/, so the repo holds exactly this
version; the commit is tagged `v<N>`, which links the Hub revision to the lake version.
The export checks the version's content hash first, so a tampered version never reaches the
Hub (nothing is created or uploaded).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from huggingface_hub import HfApi
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from builders.publish.export import export_dataset
from lake import Lake
from schemas.dataset_manifest import DatasetManifest


class PushError(RuntimeError):
    """The upload failed or was refused; the message says why in one sentence."""


@dataclass(frozen=True)
class Pushed:
    """Where a version landed: the repo, the commit and its tag."""

    repo_id: str
    ref: str
    commit: str
    url: str
    tag: str


def push_dataset(
    lake: Lake,
    ref: str,
    repo_id: str,
    *,
    private: bool = False,
    token: str | None = None,
    manifest: DatasetManifest | str | os.PathLike[str] | None = None,
    search: Sequence[str | os.PathLike[str]] = (),
    license: str = "unknown",
    language: Sequence[str] = (),
    api: HfApi | None = None,
) -> Pushed:
    """Upload `ref` to the dataset repo `repo_id` (ORG/NAME), creating it if needed."""
    if repo_id.count("/") != 1:
        raise PushError(f"repo {repo_id!r} must be ORG/NAME (an owner and a dataset name)")
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise PushError(f"repo {repo_id!r} is not a valid Hub repo id: {exc}") from None
    api = api or HfApi(token=token)
    with tempfile.TemporaryDirectory(prefix="cascade-push-") as folder:
        export = export_dataset(
            lake,
            ref,
            folder,
            "hf",
            manifest=manifest,
            search=search,
            license=license,
            language=language,
        )
        info = export.info
        tag = f"v{info.version}"
        try:
            api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
            commit = api.upload_folder(
                repo_id=repo_id,
                repo_type="dataset",
                folder_path=folder,
                commit_message=f"{info.ref} ({info.rows:,} rows)",
                commit_description=(
                    f"cascade dataset version {info.ref}, content_hash {info.content_hash}"
                    + (f", manifest sha256 {export.manifest.sha256}" if export.manifest else "")
                ),
                delete_patterns=["data/*"],
            )
            api.create_tag(
                repo_id,
                tag=tag,
                tag_message=f"{info.ref} content_hash {info.content_hash}",
                revision=commit.oid,
                repo_type="dataset",
                exist_ok=True,
            )
        except Exception as exc:  # the network boundary: HTTP, auth, connection errors
            message = " ".join(str(exc).split())
            raise PushError(
                f"pushing {info.ref} to {repo_id} failed ({type(exc).__name__}: {message})"
            ) from exc
    return Pushed(repo_id, info.ref, commit.oid, commit.commit_url, tag)
