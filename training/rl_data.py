"""RL prompts: rows of the stage's verified datasets, drawn in a seeded, resumable order.

A prompt is a conversation without its reply plus the row's other columns, which go to the
reward function (`answer`, `tests`, `instruction_id_list` / `kwargs`, `patch` with the files the
prompt showed (`context_files` / `context_contents`, which SEARCH/REPLACE answers are applied
to), a domain...; each reward kind's columns are in `curation.verify.rewards.REWARDS`).
`PromptStream` hands out prompts epoch after epoch in an order fixed by (seed, epoch); with
epoch-level dynamic filtering (Math RL, recipe 7.4) each new epoch's pool leaves out the
prompts the last pass solved every time or never, re-admitting each with a small probability
(hard 10%, easy 1%) so they are not forgotten. The whole state is a small dict that goes into
every checkpoint, so a resumed run draws exactly the prompts the killed one would have.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from schemas.chat_template import ChatFormatError, Message, parse_prompt
from training.datasets import LoadedDataset


@dataclass(frozen=True)
class Prompt:
    """One RL prompt: its conversation, the row's other columns, and where it came from."""

    uid: str
    messages: tuple[Message, ...]
    columns: dict
    origin: str

    @property
    def user_text(self) -> str:
        """The last user turn (what code-switching is judged against)."""
        users = [m.content for m in self.messages if m.role == "user"]
        return users[-1] if users else ""


def load_prompts(datasets: Sequence[LoadedDataset], required: Sequence[str] = ()) -> list[Prompt]:
    """Every row as a Prompt, naming the row of a malformed one or a missing reward column.

    The uid is the row's `uid` column when it has one (lake prompt tables do), else its
    position; either way prefixed by the dataset's index so two datasets cannot collide.
    """
    prompts: list[Prompt] = []
    for d, dataset in enumerate(datasets):
        ref = dataset.ref
        for i, row in enumerate(dataset.rows):
            origin = f"{dataset.location} row {i}"
            missing = [c for c in required if c not in row]
            if missing:
                raise ChatFormatError(
                    f"{origin}: the stage's reward needs column(s) {missing} "
                    f"(columns: {sorted(row)})"
                )
            if ref.prompt_column is not None:
                if ref.prompt_column not in row:
                    raise ChatFormatError(f"{origin}: no {ref.prompt_column!r} column")
                raw: object = [{"role": "user", "content": row[ref.prompt_column]}]
                used = ref.prompt_column
            else:
                raw, used = row.get(ref.messages_column), ref.messages_column
                if raw is None:
                    raise ChatFormatError(
                        f"{origin}: no {used!r} column (columns: {sorted(row)}); set "
                        "prompt_column or messages_column in the manifest"
                    )
                if isinstance(raw, str):
                    try:
                        raw = json.loads(raw)
                    except json.JSONDecodeError as exc:
                        raise ChatFormatError(f"{origin}: {used} is not JSON ({exc.msg})") from None
            messages = parse_prompt(raw, origin)
            uid = f"{d}:{row['uid']}" if "uid" in row else f"{d}:{i}"
            columns = {k: v for k, v in row.items() if k != used}
            prompts.append(Prompt(uid, tuple(messages), columns, origin))
    uids = [p.uid for p in prompts]
    if len(set(uids)) != len(uids):
        raise ChatFormatError("prompt uids repeat within a dataset; uid must be unique per row")
    return prompts


def thinking_mode(draw: int, fraction: float) -> str:
    """Mode of the `draw`-th prompt so that any run of draws holds `fraction` think prompts
    (as evenly spread as integers allow).

    >>> [thinking_mode(i, 0.5) for i in range(4)]
    ['think', 'no_think', 'think', 'no_think']
    >>> {thinking_mode(i, 1.0) for i in range(5)}, {thinking_mode(i, 0.0) for i in range(5)}
    ({'think'}, {'no_think'})
    """
    return "think" if math.ceil((draw + 1) * fraction) > math.ceil(draw * fraction) else "no_think"


def rollout_seed(stage_seed: int, draw: int, sample: int) -> int:
    """The seed of one rollout: a function of the stage seed and its place, nothing else."""
    return (stage_seed * 1_000_003 + draw * 1_009 + sample) % (2**63)


@dataclass
class EpochFilter:
    """Epoch-level dynamic filtering: drop prompts solved always or never, re-admit some.

    `observe` records each scored group; `next_pool` closes the pass: prompts whose every
    rollout in the pass was solved become `easy`, never solved `hard`, others active again.
    Each dropped prompt is re-admitted into a pass independently, with `readmit_easy` /
    `readmit_hard` probability, drawn from a generator seeded by (seed, epoch).
    """

    seed: int
    readmit_hard: float = 0.10
    readmit_easy: float = 0.01
    dropped: dict[str, str] = field(default_factory=dict)  # uid -> "easy" | "hard"
    seen: dict[str, list[int]] = field(default_factory=dict)  # uid -> [solved, total] this pass

    def observe(self, uid: str, solved: int, total: int) -> None:
        counts = self.seen.setdefault(uid, [0, 0])
        counts[0] += solved
        counts[1] += total

    def next_pool(self, uids: Sequence[str], epoch: int) -> list[str]:
        """Close the pass just finished and return the prompts of pass `epoch`."""
        for uid, (solved, total) in self.seen.items():
            if total and solved == total:
                self.dropped[uid] = "easy"
            elif total and solved == 0:
                self.dropped[uid] = "hard"
            else:
                self.dropped.pop(uid, None)
        self.seen = {}
        rng = random.Random(f"{self.seed}:readmit:{epoch}")
        pool = []
        for uid in uids:
            status = self.dropped.get(uid)
            p = {"easy": self.readmit_easy, "hard": self.readmit_hard}.get(status, 1.0)
            if status is None or rng.random() < p:
                pool.append(uid)
        return pool

    def state_dict(self) -> dict:
        return {"dropped": dict(self.dropped), "seen": {k: list(v) for k, v in self.seen.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.dropped = dict(state["dropped"])
        self.seen = {k: list(v) for k, v in state["seen"].items()}


class PromptStream:
    """Prompts in a seeded order, pass after pass; `take(n)` draws the next n.

    Each draw gets a global index (`draw`), which fixes its rollouts' seeds and its mode.
    """

    def __init__(
        self, prompts: Sequence[Prompt], seed: int, epoch_filter: EpochFilter | None = None
    ) -> None:
        if not prompts:
            raise ValueError("no prompts to train on")
        self.prompts = {p.uid: p for p in prompts}
        self.uids = [p.uid for p in prompts]
        self.seed = seed
        self.filter = epoch_filter
        self.epoch = 0
        self.cursor = 0
        self.draws = 0
        self.order = self._order(self.uids, 0)

    def _order(self, pool: list[str], epoch: int) -> list[str]:
        order = list(pool)
        random.Random(f"{self.seed}:order:{epoch}").shuffle(order)
        return order

    def take(self, n: int) -> list[tuple[int, Prompt]]:
        """The next `n` prompts with their draw indices, starting new passes as needed."""
        out = []
        while len(out) < n:
            if self.cursor >= len(self.order):
                self.epoch += 1
                self.cursor = 0
                pool = self.filter.next_pool(self.uids, self.epoch) if self.filter else self.uids
                if not pool:  # everything filtered out: fall back to all prompts this pass
                    pool = self.uids
                self.order = self._order(pool, self.epoch)
            out.append((self.draws, self.prompts[self.order[self.cursor]]))
            self.cursor += 1
            self.draws += 1
        return out

    def observe(self, uid: str, solved: int, total: int) -> None:
        if self.filter is not None:
            self.filter.observe(uid, solved, total)

    def state_dict(self) -> dict:
        return {
            "epoch": self.epoch,
            "cursor": self.cursor,
            "draws": self.draws,
            "order": list(self.order),
            "filter": self.filter.state_dict() if self.filter else None,
        }

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.cursor, self.draws = state["epoch"], state["cursor"], state["draws"]
        self.order = list(state["order"])
        if self.filter is not None and state["filter"] is not None:
            self.filter.load_state_dict(state["filter"])
