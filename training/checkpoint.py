"""Step checkpoints that resume exactly, and the provenance record written next to them.

A checkpoint is a DeepSpeed tag directory `checkpoints/step_NNNNNNN` (model, optimizer and
scheduler state) whose client state carries the global step, the data position and every RNG
state. It counts only once `COMPLETE` exists: a run killed mid-save leaves a directory without
it, which resume ignores and removes. `trained_on.json` (manifest, dataset hashes, code
version) sits in every checkpoint and in the stage's final model directory.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import torch

COMPLETE = "COMPLETE"
TRAINED_ON = "trained_on.json"
TAG_PREFIX = "step_"


def tag_for(step: int) -> str:
    return f"{TAG_PREFIX}{step:07d}"


def complete_tags(checkpoint_dir: Path) -> list[tuple[int, str]]:
    """(step, tag) of every complete checkpoint, oldest first."""
    if not checkpoint_dir.is_dir():
        return []
    found = []
    for sub in checkpoint_dir.iterdir():
        if sub.name.startswith(TAG_PREFIX) and (sub / COMPLETE).is_file():
            found.append((int(sub.name.removeprefix(TAG_PREFIX)), sub.name))
    return sorted(found)


def remove_incomplete(checkpoint_dir: Path) -> list[str]:
    """Delete tag directories a killed run left half-written; return their names."""
    removed = []
    if checkpoint_dir.is_dir():
        for sub in checkpoint_dir.iterdir():
            if sub.is_dir() and sub.name.startswith(TAG_PREFIX) and not (sub / COMPLETE).exists():
                shutil.rmtree(sub)
                removed.append(sub.name)
    return removed


def mark_complete(tag_dir: Path, provenance: dict) -> None:
    """Write provenance, then the marker that makes the checkpoint count."""
    (tag_dir / TRAINED_ON).write_text(json.dumps(provenance, indent=2, default=str))
    (tag_dir / COMPLETE).write_text("ok\n")


def rotate(checkpoint_dir: Path, keep: int) -> None:
    """Keep only the newest `keep` complete checkpoints."""
    for _, tag in complete_tags(checkpoint_dir)[:-keep]:
        shutil.rmtree(checkpoint_dir / tag)


def rng_state() -> dict:
    """Every RNG a training step can touch."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
