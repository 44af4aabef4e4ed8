"""Reward-model clients: the reward model a GRPO stage scores with, in this process or behind
`cascade serve-reward` (training/reward_server.py), picked by `load_reward_model` from what the
manifest's `reward_model` names. Training one is `training.reward_model`; what a reward model
sees of a response and the reward kinds built on it are `curation.verify.reward_model_score`.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from curation.verify.reward_model_score import RewardModel
from curation.verify.rewards import REWARDS, RewardFn
from training.pair_data import exchange_ids


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
    return REWARDS["reward_model"].bind(reward_model=scorer)


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
