"""Each GRPO stage's reward (recipe 7.3), from `curation.verify`, scored while generation runs.

| stage reward               | per response                                                   |
|----------------------------|----------------------------------------------------------------|
| `math_verifier`            | 1 if the last `\\boxed{}` after `</think>` matches, else 0       |
| `code_tests`               | 1 only if every test passes, else 0                            |
| `if_verifier`              | 1 if every instruction is followed, else 0                     |
| `if_verifier+reward_model` | 1 + sigmoid(z) when the verifier passes (z: the reward model's |
|                            | score z-normalized over the group), else 0                     |
| `swe_patch_similarity`     | the SEARCH/REPLACE edits (else a ```diff block) applied to the |
|                            | prompt's files: 1 same changes as the gold patch, 0 no-op, -1  |
|                            | unparsable or unappliable, else the changed-line similarity    |
| `swe_patch_judge`          | as above for 1, 0 and -1; otherwise P("YES") of the stage's    |
|                            | `patch_judge` (an LLM asked if the patch equals the gold one)  |
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

import json
import math
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from curation.verify import (
    PatchJudge,
    code_reward,
    final_answer_part,
    ifeval_reward,
    math_reward,
    swe_reward,
    verify_no_code_switching,
)
from schemas.training_manifest import GRPOStage
from training.episode import Episode, z_scores
from training.pair_data import exchange_ids
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
    """Scores (prompt conversation, answer text) pairs; higher is better.

    Implementations here: `SequenceClassifierRM` (a local transformers model) and
    `RemoteRewardModel` (a `cascade serve-reward` endpoint); `load_reward_model` picks one.
    """

    def score(self, prompts: Sequence[Sequence[dict]], answers: Sequence[str]) -> list[float]: ...


def rm_answer(response: str) -> str:
    """What a reward model sees: the text after `</think>` (leading whitespace dropped, as the
    RM was trained on bare answers), the whole output when `</think>` is missing (an
    unfinished thought, which the RM tends to rate low, so it is penalized).

    >>> rm_answer("<think>\\nhmm\\n</think>\\nHello"), rm_answer("<think>\\nstill thinking")
    ('Hello', '<think>\\nstill thinking')
    """
    return final_answer_part(response).lstrip() if "</think>" in response else response


def rm_scores(
    model: RewardModel, prompts: Sequence[object], completions: Sequence[str]
) -> list[float]:
    """The reward model's score of each (prompt, completion): the one place that decides what
    an RM sees (`rm_answer` of the completion; a prompt given as text is one user turn)."""
    chats = [
        [{"role": "user", "content": p}] if isinstance(p, str) else [dict(m) for m in p]  # type: ignore[union-attr]
        for p in prompts
    ]
    scores = model.score(chats, [rm_answer(c) for c in completions])
    if len(scores) != len(completions):
        raise ValueError(f"reward model returned {len(scores)} scores for {len(completions)}")
    return [float(x) for x in scores]


def reward_model_reward(model: RewardModel | str, **options: object) -> RewardFn:
    """A TRL-style reward function `(prompts, completions, **columns) -> list[float]` from a
    reward model, or from anything `load_reward_model` accepts (a model dir, a URL).

    >>> class Length:
    ...     def score(self, prompts, answers):
    ...         return [float(len(a)) for a in answers]
    >>> reward_model_reward(Length())(["Hi?"], ["<think>\\nhm\\n</think>\\nHello"])
    [5.0]
    """
    scorer = load_reward_model(model, **options) if isinstance(model, str) else model  # type: ignore[arg-type]

    def reward(prompts: Sequence[object], completions: Sequence[str], **columns: object):
        return rm_scores(scorer, prompts, completions)

    return reward


REWARD_MODEL_HOOKS: dict[str, Callable[[], RewardModel]] = {}
"""Named reward models a manifest's `reward_model` may name instead of a model directory:
`REWARD_MODEL_HOOKS["my-rm"] = lambda: MyScorer()` before `run_cascade` (tests, custom RMs)."""


def load_reward_model(
    spec: str,
    stage_finals: dict[str, Path] | None = None,
    base_dir: Path | None = None,
    batch_size: int = 8,
    device: str | None = None,
) -> RewardModel:
    """The reward model a manifest names: a `REWARD_MODEL_HOOKS` name, `stage:<name>` (that
    reward-model stage's final dir), an http(s):// URL of `cascade serve-reward`, or a model
    directory (relative to `base_dir` when it exists there) or hub id."""
    if spec in REWARD_MODEL_HOOKS:
        return REWARD_MODEL_HOOKS[spec]()
    if spec.startswith(("http://", "https://")):
        return RemoteRewardModel(spec)
    if spec.startswith("stage:"):
        finals = stage_finals or {}
        if spec[6:] not in finals:
            raise ValueError(f"reward model {spec!r} names no stage of this manifest")
        path = finals[spec[6:]]
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"reward model {spec!r}: {path} does not exist yet; run that stage first"
            )
        return SequenceClassifierRM(str(path), device=device, batch_size=batch_size)
    beside = base_dir / spec if base_dir is not None else None
    path = str(beside.resolve()) if beside is not None and beside.exists() else spec
    return SequenceClassifierRM(path, device=device, batch_size=batch_size)


class SequenceClassifierRM:
    """A transformers sequence-classification model with one label as a reward model (what a
    `reward_model` stage writes, or any such model on the hub).

    Each (prompt, answer) is rendered with the model's own chat template (the RM's format, as
    the recipe does, via the trainer's `render_exchange`) and scored by its single logit.
    Requests are sorted by length and batched `batch_size` at a time; a lock serializes
    callers (the reward pool's threads, a server's requests) on the one model.
    """

    def __init__(self, path: str, device: str | None = None, batch_size: int = 8) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.path = path
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"reward model {path!r}: its tokenizer has no chat template")
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        dtype = torch.bfloat16 if self.device.startswith("cuda") else torch.float32
        self.model = AutoModelForSequenceClassification.from_pretrained(path, dtype=dtype)
        self.model.to(self.device).eval()
        if self.model.config.num_labels != 1:
            raise ValueError(
                f"reward model {path!r} has {self.model.config.num_labels} labels; a reward "
                "model has one"
            )
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.batch_size = batch_size
        self._lock = threading.Lock()

    def score(self, prompts: Sequence[Sequence[dict]], answers: Sequence[str]) -> list[float]:
        import torch

        ids = [
            exchange_ids(self.tokenizer, prompt, answer)
            for prompt, answer in zip(prompts, answers, strict=True)
        ]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        pad = self.tokenizer.pad_token_id
        scores = [0.0] * len(ids)
        with self._lock, torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                width = max(len(ids[i]) for i in chunk)
                batch = torch.full((len(chunk), width), pad, dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for row, i in enumerate(chunk):
                    batch[row, : len(ids[i])] = torch.tensor(ids[i])
                    mask[row, : len(ids[i])] = 1
                out = self.model(
                    input_ids=batch.to(self.device), attention_mask=mask.to(self.device)
                )
                for i, value in zip(chunk, out.logits[:, 0].float().tolist(), strict=True):
                    scores[i] = value
        return scores


class RemoteRewardModel:
    """A reward model behind `cascade serve-reward` (training/reward_server.py), so a big RM
    on its own GPUs scores rollouts from a trainer elsewhere.

    `POST {url}/v1/rewards` with `{"prompts": [[turns]], "responses": [text]}`; the answer is
    `{"data": [{"index": i, "score": x}]}`. Requests go `max_batch` pairs at a time; an HTTP
    or connection error raises (a reward that silently became 0 would train the policy on
    nothing).
    """

    def __init__(self, url: str, timeout: float = 600.0, max_batch: int = 256) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.max_batch = max_batch

    def score(self, prompts: Sequence[Sequence[dict]], answers: Sequence[str]) -> list[float]:
        scores: list[float] = []
        for start in range(0, len(answers), self.max_batch):
            body = {
                "prompts": [list(p) for p in prompts[start : start + self.max_batch]],
                "responses": list(answers[start : start + self.max_batch]),
            }
            reply = self._post("/v1/rewards", body)
            data = sorted(reply["data"], key=lambda d: d["index"])
            if [d["index"] for d in data] != list(range(len(body["responses"]))):
                raise RuntimeError(f"reward server {self.url} answered for other indices")
            scores += [float(d["score"]) for d in data]
        return scores

    def _post(self, path: str, body: dict) -> dict:
        request = urllib.request.Request(
            self.url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise RuntimeError(
                f"reward server {self.url}{path} answered HTTP {exc.code}: {detail}"
            ) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise RuntimeError(f"reward server {self.url} is unreachable ({reason})") from None


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
        if "reward_model" in stage.reward and override is None and reward_model is None:
            raise ValueError(f"stage {stage.name!r}: reward {stage.reward!r} needs a reward model")
        if stage.reward == "swe_patch_judge" and override is None and patch_judge is None:
            patch_judge = patch_judge_for(stage)
        self.stage = stage
        self.override = override
        self.reward_model = reward_model
        self.patch_judge = patch_judge

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
            rewards = rm_scores(self.reward_model, prompts, completions)  # type: ignore[arg-type]
        elif kind == "swe_patch_judge":
            rewards = self.patch_judge.reward(prompts, completions, **columns)  # type: ignore[union-attr]
        elif kind == "if_verifier+reward_model":
            passed = ifeval_reward(prompts, completions, **columns)
            scores = rm_scores(self.reward_model, prompts, completions)  # type: ignore[arg-type]
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
