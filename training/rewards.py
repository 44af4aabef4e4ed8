"""Each GRPO stage's reward (recipe 7.3), from `curation.verify`, scored while generation runs.

| stage reward               | per response                                                   |
|----------------------------|----------------------------------------------------------------|
| `math_verifier`            | 1 if the last `\\boxed{}` after `</think>` matches, else 0       |
| `code_tests`               | 1 only if every test passes, else 0                            |
| `if_verifier`              | 1 if every instruction is followed, else 0                     |
| `if_verifier+reward_model` | 1 + sigmoid(z) when the verifier passes (z: the reward model's |
|                            | score z-normalized over the group), else 0                     |
| `swe_patch_similarity`     | 1 same changes, 0 no-op, -1 unparsable, else similarity        |
| `reward_model`             | the reward model's score of the text after `</think>` (the    |
|                            | whole output when `</think>` is missing)                      |

Code-switching (an English prompt answered with another script) then sets the reward to the
stage's `code_switch_reward` (math -1, code 0) or, for `batch_min_minus_10` (RLHF), to the
lowest reward of the batch minus 10 once the batch is complete. With overlong filtering off a
response cut at the length cap keeps a low reward: 0 from verifiers, the model's score from a
reward model. A verifier that cannot decide (timeout) gives None and the response is skipped.

`RewardPool` scores each group in a worker thread as soon as its last rollout is done, so
verification overlaps the decoding of the other groups (the recipe's async verification cut a
step from 1172 s to 416 s). Any TRL-style function `(prompts, completions, **columns) ->
list[float | None]` can replace the stage's reward.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from curation.verify import (
    code_reward,
    final_answer_part,
    ifeval_reward,
    math_reward,
    swe_reward,
    verify_no_code_switching,
)
from schemas.training_manifest import GRPOStage
from training.episode import Episode, z_scores
from training.rl_data import Prompt

RewardFn = Callable[..., list[float | None]]

VERIFIERS: dict[str, RewardFn] = {
    "math_verifier": math_reward,
    "code_tests": code_reward,
    "if_verifier": ifeval_reward,
    "if_verifier+reward_model": ifeval_reward,
    "swe_patch_similarity": swe_reward,
}


class RewardModel(Protocol):
    """Scores (prompt conversation, answer text) pairs; higher is better."""

    def score(self, prompts: Sequence[Sequence[dict]], answers: Sequence[str]) -> list[float]: ...


def rm_answer(response: str) -> str:
    """What a reward model sees: the text after `</think>`, the whole output without one.

    >>> rm_answer("<think>\\nhmm\\n</think>\\nHello"), rm_answer("<think>\\nstill thinking")
    ('\\nHello', '<think>\\nstill thinking')
    """
    return final_answer_part(response)


REWARD_MODEL_HOOKS: dict[str, Callable[[], RewardModel]] = {}
"""Named reward models a manifest's `reward_model` may name instead of a model directory:
`REWARD_MODEL_HOOKS["my-rm"] = lambda: MyScorer()` before `run_cascade` (tests, remote RMs)."""


class SequenceClassifierRM:
    """A transformers sequence-classification model with one label as a reward model.

    Each (prompt, answer) is rendered with the model's own chat template (the RM's format, as
    the recipe does) and scored by its single logit.
    """

    def __init__(self, path: str, device: str | None = None, batch_size: int = 8) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"reward model {path!r}: its tokenizer has no chat template")
        self.model = AutoModelForSequenceClassification.from_pretrained(path).to(self.device)
        self.model.eval()
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.batch_size = batch_size

    def score(self, prompts: Sequence[Sequence[dict]], answers: Sequence[str]) -> list[float]:
        import torch

        texts = [
            self.tokenizer.apply_chat_template(
                [*prompt, {"role": "assistant", "content": answer}], tokenize=False
            )
            for prompt, answer in zip(prompts, answers, strict=True)
        ]
        scores: list[float] = []
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(
                    texts[start : start + self.batch_size],
                    return_tensors="pt",
                    padding=True,
                    add_special_tokens=False,
                ).to(self.device)
                scores.extend(self.model(**batch).logits[:, 0].float().tolist())
        return scores


class StageRewards:
    """Scores one group at a time for a GRPO stage (see the module docstring)."""

    def __init__(
        self,
        stage: GRPOStage,
        override: RewardFn | None = None,
        reward_model: RewardModel | None = None,
    ) -> None:
        if "reward_model" in stage.reward and override is None and reward_model is None:
            raise ValueError(f"stage {stage.name!r}: reward {stage.reward!r} needs a reward model")
        self.stage = stage
        self.override = override
        self.reward_model = reward_model

    def score_group(self, prompt: Prompt, episodes: Sequence[Episode]) -> None:
        """Fill `reward` and `code_switched` of a group's episodes (thread-safe)."""
        chat = [{"role": m.role, "content": m.content} for m in prompt.messages]
        prompts = [chat] * len(episodes)
        completions = [e.response_text for e in episodes]
        columns = {k: [v] * len(episodes) for k, v in prompt.columns.items()}
        kind = self.stage.reward
        if self.override is not None:
            rewards = list(self.override(prompts, completions, **columns))
        elif kind == "reward_model":
            rewards = list(self.reward_model.score(prompts, [rm_answer(c) for c in completions]))  # type: ignore[union-attr]
        elif kind == "if_verifier+reward_model":
            passed = ifeval_reward(prompts, completions, **columns)
            scores = self.reward_model.score(prompts, [rm_answer(c) for c in completions])  # type: ignore[union-attr]
            rewards = [
                None if p is None else (1.0 + _sigmoid(z) if p >= 1.0 else 0.0)
                for p, z in zip(passed, z_scores(scores), strict=True)
            ]
        else:
            rewards = VERIFIERS[kind](prompts, completions, **columns)
        if len(rewards) != len(episodes):
            raise ValueError(f"reward returned {len(rewards)} values for {len(episodes)} responses")
        for episode, reward in zip(episodes, rewards, strict=True):
            capped = episode.truncated and not self.stage.overlong_filtering
            if capped and reward is not None and kind != "reward_model":
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


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))
