"""MOPD's objective (Cascade 2, multi-domain on-policy distillation): each response token's
advantage is its reverse KL to the prompt's domain teacher, log pi_teacher - log pi_train,
weighted by the train/rollout ratio inside [ratio_low, ratio_high]. No reward is scored: every
episode is trained on, and the progress bar shows the reverse KL.
"""

from __future__ import annotations

from pathlib import Path

import torch

from schemas.training_manifest import MOPDStage
from training.episode import Episode
from training.models import build_model, load_tokenizer
from training.objectives.objective import MicroBatch, frozen
from training.packed_episodes import PackedEpisodes, packed_logits
from training.policy_loss import mopd_loss_sum
from training.rl_data import EpochFilter, Prompt
from training.rollout import sampling_logprobs
from training.stage import StageContext, StageSetup


class MOPDObjective:
    """Token-level reverse-KL advantages from one frozen teacher per prompt domain."""

    progress = "reverse_kl"
    level = "token"
    reward_columns = ()
    resample_rounds = None
    sum_names = ("reverse_kl",)
    pool = None
    judge = None
    evaluation = None
    watch = None
    episodes = None

    def __init__(self, stage: MOPDStage, teachers: dict[str, torch.nn.Module] | None = None):
        self.stage = stage
        self.teachers = teachers or {}

    def epoch_filter(self) -> EpochFilter | None:
        return None

    def load(self, ctx: StageContext, setup: StageSetup, tokenizer: object) -> None:
        vocab = tokenizer.get_vocab()  # type: ignore[attr-defined]
        self.teachers = load_teachers(
            ctx, self.stage, setup.attn, setup.device, setup.frozen_dtype, vocab
        )

    def domain(self, prompt: Prompt) -> str:
        """The prompt's teacher domain (the only one when there is no domain column)."""
        stage = self.stage
        if stage.domain_column is None:
            return next(iter(stage.teachers))
        domain = prompt.columns.get(stage.domain_column)
        if domain not in stage.teachers:
            raise ValueError(
                f"{prompt.origin}: domain {domain!r} has no teacher "
                f"(teachers: {sorted(stage.teachers)})"
            )
        return domain

    def trains_on(self, episode: Episode) -> bool:
        return True

    def prepare(self, groups: list[list[Episode]]) -> None:
        """Nothing: the advantages are per token, from the teachers, in `loss`."""

    def loss(self, batch: MicroBatch) -> tuple[torch.Tensor, dict[str, float]]:
        sel = batch.trained
        teacher_logp = teacher_logprobs(
            self.teachers, batch.episodes, batch.packed, batch.labels, batch.temperature
        )[sel]
        loss, _ = mopd_loss_sum(
            batch.logp,
            teacher_logp,
            batch.packed.rollout_logp[sel],
            self.stage.ratio_low,
            self.stage.ratio_high,
        )
        return loss, {"reverse_kl": float((batch.logp.detach() - teacher_logp).sum())}

    def stats(self, sums: dict[str, float], trained_tokens: int) -> dict[str, float]:
        return {"reverse_kl": sums["reverse_kl"] / trained_tokens}

    def close(self) -> None:
        pass


def teacher_logprobs(
    teachers: dict[str, torch.nn.Module],
    chunk: list[Episode],
    batch: PackedEpisodes,
    labels: torch.Tensor,
    temperature: float,
) -> torch.Tensor:
    """Each position's log-prob under its episode's domain teacher ([1, T])."""
    out = torch.zeros_like(batch.advantage)
    with torch.no_grad():
        for domain in sorted({e.domain for e in chunk if e.domain is not None}):
            logits = packed_logits(teachers[domain], batch)
            mine = torch.tensor(
                [i for i, e in enumerate(chunk) if e.domain == domain], device=out.device
            )
            where = torch.isin(batch.episode, mine)
            out[where] = sampling_logprobs(logits, labels, temperature)[where]
    return out


def load_teachers(
    ctx: StageContext,
    stage: MOPDStage,
    attn: str,
    device: torch.device,
    dtype: torch.dtype,
    vocab: dict[str, int],
) -> dict[str, torch.nn.Module]:
    """Teachers by domain: `stage:<name>`, `init`, or a model directory / hub id.

    They must share the policy's tokenizer (the recipe's teachers come from the same SFT
    run); a different vocabulary is refused.
    """
    loaded: dict[str, torch.nn.Module] = {}
    by_source: dict[str, torch.nn.Module] = {}
    for domain, spec in stage.teachers.items():
        if spec == "init":
            source = str(ctx.init_from) if ctx.init_from else ctx.manifest.base_model
        elif spec.startswith("stage:"):
            source = str(ctx.stage_finals[spec[len("stage:") :]])
        else:  # a path relative to the manifest, an absolute path, or a hub id
            beside = ctx.manifest_path.parent / spec
            source = str(beside.resolve()) if beside.exists() else spec
        if source not in by_source:
            if source.startswith("tiny-random:"):
                raise ValueError(f"MOPD teacher {domain!r} must be a trained model, not {source}")
            if not Path(source).exists() and source.startswith(("/", ".")):
                raise FileNotFoundError(f"MOPD teacher {domain!r}: {source} does not exist")
            if load_tokenizer(source).get_vocab() != vocab:
                raise ValueError(f"MOPD teacher {domain!r} ({source}) has another tokenizer")
            teacher = build_model(source, None, 0, attn, stage.seed)
            by_source[source] = frozen(teacher, device, dtype)
        loaded[domain] = by_source[source]
    return loaded
