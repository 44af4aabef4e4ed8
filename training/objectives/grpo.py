"""GRPO's objective (recipe 7.1): group z-score advantages over the stage's reward, then
-A log pi per token (plus the k3 KL to the stage-start policy and an entropy bonus, if asked).

The reward is the stage's kind (`curation.verify.rewards`) or a TRL-style override, scored by
worker threads while decoding goes on; held-out prompts are always scored with the stage's
own reward when it can run (a control's override does not judge itself).
"""

from __future__ import annotations

import torch

from curation.environments import environment_named
from curation.environments.runner import EpisodeRunner
from curation.verify.reward_model_score import RewardModel
from curation.verify.rewards import RewardFn, reward_named
from schemas.environment import EpisodeLimits
from schemas.training_manifest import EpisodeSpec, GRPOStage
from training.episode import Episode, group_advantages
from training.objectives.objective import MicroBatch, frozen
from training.packed_episodes import packed_logits
from training.policy_loss import grpo_loss_sum, token_entropy, token_weights
from training.reward_clients import load_reward_model
from training.rewards import RewardPool, StageRewards
from training.rl_data import EpochFilter, Prompt
from training.rollout import sampling_logprobs
from training.stage import StageContext, StageSetup, stage_model
from training.stopping import SignalWatch


class GRPOObjective:
    """Strict on-policy GRPO: one update per batch, so the importance ratio is 1."""

    progress = "reward_mean"
    sum_names = ("kl", "entropy")

    def __init__(
        self,
        stage: GRPOStage,
        reward_fn: RewardFn | None = None,
        *,
        pool: RewardPool | None = None,
        reference: torch.nn.Module | None = None,
    ) -> None:
        self.stage = stage
        self.reward_fn = reward_fn
        self.level = stage.loss_level
        self.reward_columns = reward_named(stage.reward).columns if reward_fn is None else ()
        batch_filter = stage.dynamic_filtering == "batch"
        self.resample_rounds = stage.max_resample_rounds if batch_filter else None
        self.evaluation = stage.evaluation
        self.watch = signal_watch(stage, reward_fn)
        self.pool = pool
        self.judge = pool
        self.reference = reference
        self.episodes = episode_runner(stage)

    def epoch_filter(self) -> EpochFilter | None:
        stage = self.stage
        if stage.dynamic_filtering != "epoch":
            return None
        return EpochFilter(stage.seed, stage.readmit_hard, stage.readmit_easy)

    def load(self, ctx: StageContext, setup: StageSetup, tokenizer: object) -> None:
        """The KL reference (a frozen copy of the starting model) and the reward's clients."""
        stage = self.stage
        if stage.kl_coef > 0:
            model = stage_model(ctx, len(tokenizer), setup.attn)  # type: ignore[arg-type]
            self.reference = frozen(model, setup.device, setup.frozen_dtype)
        reward_model = reward_model_for(ctx, stage)
        rewards = StageRewards(stage, self.reward_fn, reward_model)
        self.pool = RewardPool(rewards, stage.reward_workers)
        self.judge = self.pool
        rm_free = "reward_model" not in reward_named(stage.reward).clients
        if self.reward_fn is not None and (rm_free or reward_model):
            judge = StageRewards(stage, None, reward_model)
            self.judge = RewardPool(judge, stage.reward_workers)

    def domain(self, prompt: Prompt) -> str | None:
        return None

    def trains_on(self, episode: Episode) -> bool:
        """Decided rewards only; under overlong filtering, not responses cut at the cap."""
        capped = episode.truncated and self.stage.overlong_filtering
        return episode.reward is not None and not capped

    def prepare(self, groups: list[list[Episode]]) -> None:
        """Each trained episode's advantage: its group's z-scored reward (untrained ones: 0)."""
        for group in groups:
            rewards = [e.reward if e.trained else None for e in group]
            shaped = group_advantages(rewards, self.stage.reward_shaping)
            for episode, advantage in zip(group, shaped, strict=True):
                episode.advantage = advantage

    def loss(self, batch: MicroBatch) -> tuple[torch.Tensor, dict[str, float]]:
        stage, sel, sums = self.stage, batch.trained, {}
        ref_logp = entropy = None
        if self.reference is not None:
            with torch.no_grad():
                ref_logits = packed_logits(self.reference, batch.packed)
            ref_logp = sampling_logprobs(ref_logits, batch.labels, batch.temperature)[sel]
            r = ref_logp - batch.logp.detach()
            sums["kl"] = float((torch.exp(r) - r - 1).sum())
        if stage.entropy_coef:
            entropy = token_entropy(batch.logits[sel], batch.temperature)
            sums["entropy"] = float(entropy.detach().sum())
        loss = grpo_loss_sum(
            batch.logp,
            batch.packed.advantage[sel],
            token_weights(batch.packed.length[sel], self.level),
            kl_coef=stage.kl_coef,
            ref_logp=ref_logp,
            entropy_coef=stage.entropy_coef,
            entropy=entropy,
        )
        return loss, sums

    def stats(self, sums: dict[str, float], trained_tokens: int) -> dict[str, float]:
        out = {}
        if self.reference is not None:
            out["kl"] = sums["kl"] / trained_tokens
        if self.stage.entropy_coef:
            out["entropy"] = sums["entropy"] / trained_tokens
        return out

    def close(self) -> None:
        for pool in {id(p): p for p in (self.pool, self.judge) if p is not None}.values():
            pool.close()


def episode_runner(stage: GRPOStage) -> EpisodeRunner | None:
    """The runner of an environment stage's episodes under its limits (None: one turn).
    The stage's reward scores each episode's final answer (`StageRewards`)."""
    if stage.environment is None:
        return None
    spec = stage.episode or EpisodeSpec()
    limits = EpisodeLimits(
        max_turns=spec.max_turns,
        max_total_tokens=spec.max_total_tokens,
        tool_timeout_s=spec.tool_timeout_s,
        max_tool_output_chars=spec.max_tool_output_chars,
    )
    return EpisodeRunner(environment_named(stage.environment), limits)


def signal_watch(stage: GRPOStage, reward_fn: RewardFn | None) -> SignalWatch:
    """The no-learning-signal check of a GRPO stage, naming its reward in failures."""
    custom = reward_fn is not None
    return SignalWatch(
        stage_name=stage.name,
        reward="a custom reward function" if custom else stage.reward,
        patience=stage.no_signal_patience,
        columns=() if custom else reward_named(stage.reward).columns,
        max_response_len=stage.max_response_len,
    )


def reward_model_for(ctx: StageContext, stage: GRPOStage) -> RewardModel | None:
    """The stage's reward model (`reward_model`: a hook name, `stage:<name>`, a URL of
    `cascade serve-reward`, or a model dir / hub id; see
    `training.reward_clients.load_reward_model`)."""
    if "reward_model" not in reward_named(stage.reward).clients or stage.reward_model is None:
        return None
    return load_reward_model(
        stage.reward_model,
        stage_finals=ctx.stage_finals,
        base_dir=ctx.manifest_path.parent,
        batch_size=stage.reward_model_batch_size,
    )
