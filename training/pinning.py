"""Pin a training manifest to a lake: a copy whose lake references carry that lake's hashes.

A manifest pins each lake table version by content hash, so a run cannot train on other bytes.
When a dataset is rebuilt on another machine the hash can differ (a teacher model trained on
another CPU generates other text), and the committed hashes are then those of the machine
that wrote the manifest. `pin_manifest` writes a copy of the manifest in which every
`name@N` reference (stage datasets and evaluation sets) carries the content hash the lake
recorded when it committed that version, and every relative path (output_dir, data files,
model directories) is rewritten to point where it pointed from the original's directory.

Training the copy still recomputes each hash from the lake's files (`training.datasets`):
the copy says which bytes were published, and a version changed after that is still refused.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from lake import Lake, LakeError
from schemas.training_manifest import LAKE_REF, TrainingManifest
from training.runner import load_manifest

MODEL_FIELDS = ("reward_model", "backbone")
"""Stage fields that may name a model directory relative to the manifest."""


class PinError(ValueError):
    """A reference cannot be pinned; the message names the manifest field and why."""


def pin_manifest(manifest_path: str | Path, lake: Lake, out: str | Path) -> dict[str, str]:
    """Write the pinned copy of `manifest_path` to `out`; return {field: hash} of what was
    pinned (one entry per lake reference)."""
    source, target = Path(manifest_path).resolve(), Path(out).resolve()
    load_manifest(source)  # a manifest that does not validate is not pinned (ManifestError)
    raw = json.loads(source.read_text())
    moved = _Rebase(source.parent, target.parent)
    raw["output_dir"] = moved(raw["output_dir"], always=True)
    pinned: dict[str, str] = {}
    for i, stage in enumerate(raw["stages"]):
        where = f"{source}: stages[{i}]({stage.get('name')})"
        refs = [(f"{where}.datasets[{j}]", d) for j, d in enumerate(stage.get("datasets", []))]
        evaluation = stage.get("evaluation")
        if evaluation:
            refs.append((f"{where}.evaluation.dataset", evaluation["dataset"]))
        for field, ref in refs:
            if LAKE_REF.match(ref["ref"]):
                ref["content_hash"] = _recorded_hash(lake, ref, field)
                pinned[field] = ref["content_hash"]
            else:
                ref["ref"] = moved(ref["ref"], always=True)
        for name in MODEL_FIELDS:
            if isinstance(stage.get(name), str):
                stage[name] = moved(stage[name])
        if isinstance(stage.get("teachers"), dict):
            stage["teachers"] = {k: moved(v) for k, v in stage["teachers"].items()}
    TrainingManifest.model_validate(raw)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(json.dumps(raw, indent=2) + "\n")
    os.replace(tmp, target)
    return pinned


def _recorded_hash(lake: Lake, ref: dict[str, Any], field: str) -> str:
    try:
        return lake.resolve(ref["ref"]).content_hash
    except LakeError as exc:
        hint = f"`{ref['build']}` produces it" if ref.get("build") else "no build is recorded"
        raise PinError(f"{field}: {ref['ref']}: {exc}; {hint}") from None


class _Rebase:
    """A path relative to the original manifest, made relative to the copy's directory.

    `always` for fields that are always paths (output_dir, data files). A model field is moved
    only when it names something beside the original manifest or starts with `./` / `../`;
    absolute paths, hub ids, `stage:<name>` and `init` stay as written (as the runner reads
    them: a relative model path resolves against the manifest when it exists there).
    """

    def __init__(self, old_dir: Path, new_dir: Path) -> None:
        self.old_dir, self.new_dir = old_dir, new_dir

    def __call__(self, value: str, always: bool = False) -> str:
        if os.path.isabs(value) or value.startswith(("stage:", "tiny-random:")) or value == "init":
            return value
        beside = self.old_dir / value
        if not (always or value.startswith(("./", "../")) or beside.exists()):
            return value  # a hub id such as Qwen/Qwen3-8B, or a reward-model hook name
        return os.path.relpath(beside.resolve(), self.new_dir)
