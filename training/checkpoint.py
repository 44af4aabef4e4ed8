"""Step checkpoints that resume exactly, and the provenance record written next to them.

A checkpoint is a DeepSpeed tag directory `checkpoints/step_NNNNNNN` (model, optimizer and
scheduler state) whose client state carries the global step, the data position and every RNG
state (RL stages add their prompt order and epoch-filter state). It counts only once `COMPLETE`
exists: a run killed mid-save leaves a directory without it, which resume ignores and removes.
`trained_on.json` (manifest, dataset hashes, code version) sits in every checkpoint and in the
stage's final model directory, next to the weights and the tokenizer with its chat template.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from lake import code_version

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


def provenance(ctx: object, datasets: list[dict], **facts: object) -> dict:
    """The `trained_on.json` record of a stage: manifest, data, starting point, code version.

    `ctx` is the stage's StageContext; `datasets` the `LoadedDataset.describe()` records;
    `facts` anything the stage adds (sample counts, world size, attention backend, ...).
    """
    manifest = ctx.manifest  # type: ignore[attr-defined]
    return {
        "manifest_path": str(ctx.manifest_path),  # type: ignore[attr-defined]
        "manifest": manifest.model_dump(mode="json"),
        "stage": ctx.stage.name,  # type: ignore[attr-defined]
        "datasets": datasets,
        "init_from": str(ctx.init_from) if ctx.init_from else manifest.base_model,  # type: ignore[attr-defined]
        "code_version": code_version(),
        **facts,
        **ctx.extra_provenance,  # type: ignore[attr-defined]
    }


def refuse_to_overwrite(checkpoint_dir: Path, stage_name: str, resume: bool) -> None:
    """A fresh run must not silently mix with an earlier run's checkpoints."""
    if not resume and complete_tags(checkpoint_dir):
        raise ValueError(
            f"stage {stage_name!r} already has checkpoints in {checkpoint_dir}; pass --resume "
            "to continue or remove the directory to start over"
        )


def load_latest(engine: object, checkpoint_dir: Path, rank: int) -> dict | None:
    """Load the newest complete checkpoint into `engine`; its client state, or None."""
    if rank == 0:
        remove_incomplete(checkpoint_dir)
    torch.distributed.barrier()
    tags = complete_tags(checkpoint_dir)
    if not tags:
        return None
    _, client = engine.load_checkpoint(str(checkpoint_dir), tag=tags[-1][1])  # type: ignore[attr-defined]
    return client


def resume(engine: object, ctx: object, data_identity: dict, rank: int) -> dict | None:
    """With `--resume`: load the newest complete checkpoint, check it was trained on the same
    data (`data_identity`), restore every RNG; its client state (None: start from step 0)."""
    if not ctx.resume:  # type: ignore[attr-defined]
        return None
    client = load_latest(engine, ctx.checkpoint_dir, rank)  # type: ignore[attr-defined]
    if client is None:
        return None
    if client["data"] != data_identity:
        raise ValueError(
            f"stage {ctx.stage.name!r}: the checkpoint was trained on different data "  # type: ignore[attr-defined]
            f"({client['data']}) than now ({data_identity}); cannot resume"
        )
    restore_rng_state(client["rng"])
    return client


def save_step(
    engine: object,
    checkpoint_dir: Path,
    step: int,
    client: dict,
    record: dict,
    rank: int,
    keep: int,
) -> None:
    """Save a resumable checkpoint (client state + every RNG) with its provenance record,
    mark it complete, keep the newest `keep`."""
    tag = tag_for(step)
    state = {**client, "step": step, "rng": rng_state()}
    engine.save_checkpoint(str(checkpoint_dir), tag=tag, client_state=state)  # type: ignore[attr-defined]
    torch.distributed.barrier()
    if rank == 0:
        mark_complete(checkpoint_dir / tag, {**record, "step": step})
        rotate(checkpoint_dir, keep)
    torch.distributed.barrier()


def save_final(
    engine: object,
    tokenizer: object,
    final_dir: Path,
    record: dict,
    rank: int,
    zero_stage: int,
    extra_files: dict[str, str] | None = None,
) -> None:
    """Save a plain transformers model + tokenizer (with its chat template) + provenance, and
    any `extra_files` (name -> text, e.g. a reward model's `eval.json`).

    Written to `final.tmp` and renamed, so a `final/` directory is always complete.
    """
    import deepspeed

    module = engine.module  # type: ignore[attr-defined]
    tmp = final_dir.with_name(final_dir.name + ".tmp")
    if rank == 0 and tmp.exists():
        shutil.rmtree(tmp)
    if zero_stage == 3:
        with deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None):
            if rank == 0:
                state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
                module.save_pretrained(tmp, state_dict=state)
    elif rank == 0:
        module.save_pretrained(tmp)
    if rank == 0:
        tokenizer.save_pretrained(tmp)  # type: ignore[attr-defined]
        (tmp / TRAINED_ON).write_text(json.dumps(record, indent=2, default=str))
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text)
        if final_dir.exists():
            shutil.rmtree(final_dir)
        tmp.rename(final_dir)
    torch.distributed.barrier()
