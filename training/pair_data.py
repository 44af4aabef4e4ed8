"""Preference pairs for a reward-model stage: rows -> pairs -> held-out split -> tokens.

Rows follow the `preference_pairs` contract (schemas/preferences.py): `messages` (the context,
a list of {role, content} or that list as JSON, ending with the user's turn) or a single user
turn from `prompt_column`, then `chosen` and `rejected` (final answers), `prompt_id`, `source`
and `category`. A pair is rendered twice with the reward model's own chat template, as
(context + chosen) and (context + rejected); `render_exchange` is the one rendering the trainer
and every scorer share, so a reward model is scored exactly as it was trained.

The held-out split is by `prompt_id` (all pairs of one context fall on one side), decided by a
hash of (seed, prompt_id): it does not depend on row order, on the other rows or on the
dataset's size, so a grown dataset keeps its old held-out prompts held out.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from schemas.chat_template import ChatFormatError, Message, parse_prompt
from schemas.training_manifest import RewardModelStage
from training.datasets import LoadedDataset
from training.sft_data import upsample


@dataclass(frozen=True)
class PreferencePair:
    """One preference: the context, the preferred and the dispreferred reply, and provenance."""

    messages: tuple[Message, ...]
    chosen: str
    rejected: str
    prompt_id: str
    source: str
    category: str | None
    origin: str


def load_pairs(dataset: LoadedDataset) -> list[PreferencePair]:
    """Every row of a verified dataset as a pair, naming the row of a malformed one.

    `source` defaults to the table's name (or file's stem), `prompt_id` to `context_id`.
    """
    ref = dataset.ref
    default_source = ref.ref.split("@")[0] if ref.is_lake else Path(ref.ref).stem
    pairs = []
    for i, row in enumerate(dataset.rows):
        origin = f"{dataset.location} row {i}"
        raw = _context(row, ref.prompt_column, ref.messages_column, origin)
        messages = parse_prompt(raw, origin)
        texts = {}
        for column in ("chosen", "rejected"):
            value = row.get(column)
            if not isinstance(value, str) or not value.strip():
                raise ChatFormatError(f"{origin}: {column!r} is missing or empty")
            texts[column] = value
        if texts["chosen"] == texts["rejected"]:
            raise ChatFormatError(f"{origin}: chosen and rejected are the same text")
        prompt_id = row.get("prompt_id") or context_id(messages)
        pairs.append(
            PreferencePair(
                messages=tuple(messages),
                chosen=texts["chosen"],
                rejected=texts["rejected"],
                prompt_id=str(prompt_id),
                source=str(row.get("source") or default_source),
                category=row.get("category"),
                origin=origin,
            )
        )
    return pairs


def _context(row: dict, prompt_column: str | None, messages_column: str, origin: str) -> object:
    if prompt_column is not None:
        if prompt_column not in row:
            raise ChatFormatError(f"{origin}: no {prompt_column!r} column (columns: {sorted(row)})")
        return [{"role": "user", "content": row[prompt_column]}]
    raw = row.get(messages_column)
    if raw is None:
        raise ChatFormatError(
            f"{origin}: no {messages_column!r} column (columns: {sorted(row)}); set "
            "messages_column or prompt_column in the manifest"
        )
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ChatFormatError(f"{origin}: {messages_column} is not JSON ({exc.msg})") from None
    return raw


def context_id(messages: Sequence[Message]) -> str:
    """A context's id when the row has no `prompt_id`: sha256 of its turns as JSON."""
    turns = [{"role": m.role, "content": m.content} for m in messages]
    return hashlib.sha256(json.dumps(turns, sort_keys=True).encode()).hexdigest()


def is_heldout(prompt_id: str, seed: int, fraction: float) -> bool:
    """Whether a context is held out: a uniform number from (seed, prompt_id) below `fraction`.

    >>> is_heldout("p1", 0, 0.0), is_heldout("p1", 0, 0.999999)
    (False, True)
    """
    digest = hashlib.sha256(f"{seed}:{prompt_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def render_exchange(tokenizer: object, messages: Sequence[Message | dict], response: str) -> str:
    """(context, response) as the reward model reads it: the tokenizer's own chat template
    applied to the context followed by the response as the assistant turn."""
    turns = [m if isinstance(m, dict) else {"role": m.role, "content": m.content} for m in messages]
    return tokenizer.apply_chat_template(  # type: ignore[attr-defined]
        [*turns, {"role": "assistant", "content": response}], tokenize=False
    )


def exchange_ids(tokenizer: object, messages: Sequence[Message | dict], response: str) -> list[int]:
    """Token ids of `render_exchange` (the template already holds its special tokens)."""
    text = render_exchange(tokenizer, messages, response)
    return tokenizer(text, add_special_tokens=False)["input_ids"]  # type: ignore[operator]


@dataclass(frozen=True)
class TokenizedPair:
    """A pair's two token sequences (chosen, rejected) and the pair they came from."""

    chosen_ids: list[int]
    rejected_ids: list[int]
    pair: PreferencePair

    @property
    def length(self) -> int:
        return max(len(self.chosen_ids), len(self.rejected_ids))


def tokenize_pairs(
    pairs: Sequence[PreferencePair], tokenizer: object, max_seq_len: int
) -> tuple[list[TokenizedPair], int]:
    """Tokenize every pair; drop (and count) those where either side exceeds `max_seq_len`.

    Truncating would cut the very reply being judged, so over-long pairs are dropped, as SFT
    drops over-long samples.
    """
    pad = tokenizer.pad_token_id  # type: ignore[attr-defined]
    kept, too_long = [], 0
    for pair in pairs:
        chosen = exchange_ids(tokenizer, pair.messages, pair.chosen)
        rejected = exchange_ids(tokenizer, pair.messages, pair.rejected)
        if max(len(chosen), len(rejected)) > max_seq_len:
            too_long += 1
            continue
        if chosen[-1] == pad or rejected[-1] == pad:
            raise ChatFormatError(
                f"{pair.origin}: the rendered text ends with the pad token, so the reward "
                "model could not find its last token"
            )
        kept.append(TokenizedPair(chosen, rejected, pair))
    return kept, too_long


@dataclass
class StagePairs:
    """A reward-model stage's data: training pairs (upsampled), held-out pairs, and counts."""

    train: list[TokenizedPair]
    heldout: list[TokenizedPair]
    too_long: int
    rows: int


def stage_pairs(
    stage: RewardModelStage, datasets: Sequence[LoadedDataset], tokenizer: object
) -> StagePairs:
    """Load, split by prompt_id, tokenize (dropping over-long pairs) and upsample the training
    side of every dataset. Held-out pairs are never upsampled."""
    rng = random.Random(stage.seed)
    train: list[TokenizedPair] = []
    heldout: list[TokenizedPair] = []
    too_long = rows = 0
    for dataset in datasets:
        pairs = load_pairs(dataset)
        rows += len(pairs)
        fit, dropped = tokenize_pairs(pairs, tokenizer, stage.max_seq_len)
        too_long += dropped
        mine = [tp for tp in fit if not is_heldout(tp.pair.prompt_id, *_split(stage))]
        heldout += [tp for tp in fit if is_heldout(tp.pair.prompt_id, *_split(stage))]
        train += upsample(mine, dataset.ref.upsample, rng)
    return StagePairs(train, heldout, too_long, rows)


def _split(stage: RewardModelStage) -> tuple[int, float]:
    return stage.heldout_seed, stage.heldout_fraction


class PairStream:
    """Global batches of pair indices in an order fixed by (seed, epoch): resumable by step.

    Each epoch is a seeded permutation cut into full global batches (the remainder, fewer than
    one batch, waits for the next epoch's shuffle).
    """

    def __init__(self, n_pairs: int, stage: RewardModelStage) -> None:
        self.n = n_pairs
        self.stage = stage
        self.per_epoch = n_pairs // stage.batch.global_batch_size
        if self.per_epoch == 0:
            raise ValueError(
                f"stage {stage.name!r}: {n_pairs} training pairs are fewer than one global "
                f"batch of {stage.batch.global_batch_size}"
            )
        self._epoch: tuple[int, list[int]] | None = None

    def total_steps(self) -> int:
        if self.stage.max_steps is not None:
            return self.stage.max_steps
        return max(1, math.ceil((self.stage.epochs or 1.0) * self.per_epoch))

    def global_batch(self, step: int) -> list[int]:
        epoch, index = divmod(step, self.per_epoch)
        if self._epoch is None or self._epoch[0] != epoch:
            order = list(range(self.n))
            random.Random(f"{self.stage.seed}:pairs:{epoch}").shuffle(order)
            self._epoch = (epoch, order)
        size = self.stage.batch.global_batch_size
        return self._epoch[1][index * size : (index + 1) * size]
