"""Each GRPO stage's reward, scored while generation runs: the stage's reward kind (recipe 7.3;
the table of kinds, their columns and values is `curation.verify.rewards.REWARDS`), then the
stage's post-processing of the scores.

Post-processing, apart from scoring: with overlong filtering off a response cut at the length
cap keeps a low reward, 0 (a reward model's own score for kinds that `keeps_capped`); a
code-switched reply (an English prompt answered with another script) gets the stage's
`code_switch_reward` (math -1, code 0) or, for `batch_min_minus_10` (RLHF), the lowest reward
of the batch minus 10 once the batch is complete. A reward that cannot decide (timeout) gives
None and the response is skipped.

`RewardPool` scores each group in a worker thread as soon as its last rollout is done, so
verification overlaps the decoding of the other groups (the recipe's async verification cut a
step from 1172 s to 416 s). Any TRL-style function `(prompts, completions, **columns) ->
list[float | None]` can replace the stage's reward. The reward-model clients are in
`training.reward_clients`.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from curation.verify import PatchJudge, verify_no_code_switching
from curation.verify.reward_model_score import RewardModel
from curation.verify.rewards import RewardFn, reward_named
from schemas.training_manifest import GRPOStage
from training.episode import Episode
from training.rl_data import Prompt


def patch_judge_for(stage: GRPOStage) -> PatchJudge:
    """The stage's `patch_judge` as a client (its `env:NAME` URL read now)."""
    spec = stage.patch_judge
    if spec is None:
        raise ValueError(f"stage {stage.name!r}: reward {stage.reward!r} needs patch_judge")
    return PatchJudge(
        spec.resolved_base_url(),
        spec.model,
        api_key_env=spec.api_key_env,
        max_tokens=spec.max_tokens,
        top_logprobs=spec.top_logprobs,
        concurrency=spec.concurrency,
        timeout=spec.timeout_s,
    )


class StageRewards:
    """Scores one group at a time for a GRPO stage (see the module docstring).

    `swe_patch_judge` stages build their judge client from the stage's `patch_judge` unless
    one is given.
    """

    def __init__(
        self,
        stage: GRPOStage,
        override: RewardFn | None = None,
        reward_model: RewardModel | None = None,
        patch_judge: PatchJudge | None = None,
    ) -> None:
        kind = reward_named(stage.reward)
        if "reward_model" in kind.clients and override is None and reward_model is None:
            raise ValueError(f"stage {stage.name!r}: reward {stage.reward!r} needs a reward model")
        if "patch_judge" in kind.clients and override is None and patch_judge is None:
            patch_judge = patch_judge_for(stage)
        self.stage = stage
        self.kind = kind
        self.function = (
            override
            if override is not None
            else kind.bind(reward_model=reward_model, patch_judge=patch_judge)
        )

    def score_group(self, prompt: Prompt, episodes: Sequence[Episode]) -> None:
        """Fill `reward` and `code_switched` of a group's episodes (thread-safe)."""
        chat = [{"role": m.role, "content": m.content} for m in prompt.messages]
        prompts = [chat] * len(episodes)
        completions = [e.completion for e in episodes]
        columns = {k: [v] * len(episodes) for k, v in prompt.columns.items()}
        rewards = list(self.function(prompts, completions, **columns))
        if len(rewards) != len(episodes):
            raise ValueError(f"reward returned {len(rewards)} values for {len(episodes)} responses")
        for episode, reward in zip(episodes, rewards, strict=True):
            capped = episode.truncated and not self.stage.overlong_filtering
            if capped and reward is not None and not self.kind.keeps_capped:
                reward = 0.0  # an unfinished answer is a wrong one; a reward model scores it
            verdict = verify_no_code_switching(prompt.user_text, episode.response_text)
            episode.code_switched = verdict.passed is False
            penalty = self.stage.code_switch_reward
            if episode.code_switched and isinstance(penalty, int | float):
                reward = float(penalty)
            episode.reward = None if reward is None else float(reward)

    def finish_batch(self, episodes: Sequence[Episode]) -> None:
        """`batch_min_minus_10`: code-switched replies get the batch's lowest reward - 10."""
        if self.stage.code_switch_reward != "batch_min_minus_10":
            return
        decided = [e.reward for e in episodes if e.reward is not None]
        if not decided:
            return
        floor = min(decided) - 10.0
        for episode in episodes:
            if episode.code_switched:
                episode.reward = floor


class RewardPool:
    """Worker threads that score groups while the engine keeps decoding."""

    def __init__(self, rewards: StageRewards, workers: int) -> None:
        self.rewards = rewards
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reward")

    def submit(self, prompt: Prompt, episodes: Sequence[Episode]) -> Future:
        return self.executor.submit(self.rewards.score_group, prompt, episodes)

    def close(self) -> None:
        self.executor.shutdown(wait=True)
