"""Packing tokenized samples into fixed-capacity rows with per-sample position ids.

Several samples share one row; position ids restart at 0 at each sample start. With no 2-D
attention mask and no KV cache, transformers reads those restarts as sequence boundaries: the
SDPA/eager paths build a block-diagonal causal mask and flash-attention-2 runs varlen kernels,
so no sample attends to another (tests check the losses match unpacked ones). Labels are
shifted per sample before packing, so no sample predicts its neighbour's first token.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from schemas.chat_template import IGNORE_INDEX, TokenizedChat

PACK_WINDOW = 4096  # samples packed together; bigger = tighter rows, slower packing


def pack_best_fit(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Best-fit decreasing: indices of `lengths` grouped into rows of at most `capacity`.

    >>> pack_best_fit([5, 3, 4, 2], 7)
    [[0, 3], [2, 1]]
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    rows: list[list[int]] = []
    free: list[tuple[int, int]] = []  # (remaining capacity, row index), kept sorted
    for i in order:
        need = lengths[i]
        if need > capacity:
            raise ValueError(f"sample {i} has {need} tokens, more than the row capacity {capacity}")
        slot = bisect.bisect_left(free, (need, -1))
        if slot < len(free):
            room, row = free.pop(slot)
            rows[row].append(i)
            bisect.insort(free, (room - need, row))
        else:
            rows.append([i])
            bisect.insort(free, (capacity - need, len(rows) - 1))
    return rows


def epoch_rows(
    lengths: Sequence[int], capacity: int, seed: int, epoch: int, packing: bool
) -> list[list[int]]:
    """The rows of one epoch, deterministic in (seed, epoch): shuffle, pack by window, shuffle.

    Without packing every sample is its own row.
    """
    rng = random.Random(seed * 1_000_003 + epoch)
    order = list(range(len(lengths)))
    rng.shuffle(order)
    if not packing:
        return [[i] for i in order]
    rows: list[list[int]] = []
    for start in range(0, len(order), PACK_WINDOW):
        window = order[start : start + PACK_WINDOW]
        packed = pack_best_fit([lengths[i] for i in window], capacity)
        rows.extend([window[j] for j in row] for row in packed)
    rng.shuffle(rows)
    return rows


@dataclass
class Batch:
    """Model inputs of one micro batch; `labels` are already shifted (no shift in the loss)."""

    input_ids: torch.Tensor
    labels: torch.Tensor
    position_ids: torch.Tensor
    real_tokens: int  # tokens that are not padding

    @property
    def target_tokens(self) -> int:
        return int((self.labels != IGNORE_INDEX).sum())

    def to(self, device: torch.device | str) -> Batch:
        return Batch(
            self.input_ids.to(device),
            self.labels.to(device),
            self.position_ids.to(device),
            self.real_tokens,
        )


def collate(
    rows: Sequence[Sequence[int]],
    samples: Sequence[TokenizedChat],
    pad_id: int,
    pad_to: int | None = None,
) -> Batch:
    """Concatenate each row's samples; pad rows to the longest (or `pad_to`) tokens.

    Padding gets labels IGNORE_INDEX and its own restarting positions, so it forms a separate
    "sequence" that real tokens never attend to.
    """
    ids_rows, label_rows, pos_rows = [], [], []
    for row in rows:
        ids: list[int] = []
        labels: list[int] = []
        pos: list[int] = []
        for i in row:
            sample = samples[i]
            ids.extend(sample.input_ids)
            labels.extend(sample.next_token_labels())
            pos.extend(range(len(sample.input_ids)))
        ids_rows.append(ids)
        label_rows.append(labels)
        pos_rows.append(pos)
    real = sum(len(r) for r in ids_rows)
    width = pad_to or max(len(r) for r in ids_rows)
    for ids, labels, pos in zip(ids_rows, label_rows, pos_rows, strict=True):
        pad = width - len(ids)
        if pad < 0:
            raise ValueError(f"row of {len(ids)} tokens does not fit pad_to={width}")
        ids.extend([pad_id] * pad)
        labels.extend([IGNORE_INDEX] * pad)
        pos.extend(range(pad))
    return Batch(
        torch.tensor(ids_rows, dtype=torch.long),
        torch.tensor(label_rows, dtype=torch.long),
        torch.tensor(pos_rows, dtype=torch.long),
        real,
    )
