"""Reward kinds: one table, name -> how a response is scored, read by GRPO stages, `cascade
verify` and difficulty measurement alike.

A `Reward` has a function with TRL's reward-function signature `(prompts, completions,
**columns) -> list[float | None]` (None: undecided, the trainer skips that response), the
row columns it reads, and what it returns. A kind that needs a client (a reward model, a
patch judge) takes it as a keyword argument named in `clients`; `Reward.bind` fixes those,
after which the function is a plain TRL reward. A kind that also decides pass/fail over a
table has a `verifier`: the short name `cascade verify --kind` and
`measure_pass_rates(verifier=...)` use, with its `table` function (see `TableVerdicts`).

| reward                     | columns            | per response                                    |
|----------------------------|--------------------|-------------------------------------------------|
| `math_verifier` (math)     | answer             | 1 if the last `\\boxed{}` after `</think>`      |
|                            |                    | matches, else 0                                 |
| `code_tests` (code)        | tests              | 1 only if every test passes, else 0             |
| `multiple_choice` (choice) | correct_choice     | 1 if the chosen letter after `</think>` is it   |
| `if_verifier` (if)         | instruction_id_list, kwargs | 1 if every instruction is followed, else 0 |
| `if_verifier+reward_model` | as if_verifier     | 1 + sigmoid(z) when the verifier passes (z: the |
|                            |                    | RM's score z-normalized over the group), else 0 |
| `swe_patch_similarity`     | patch, context_files, context_contents | the edits applied to the    |
| (swe)                      |                    | prompt's files: 1 same changes as the gold      |
|                            |                    | patch, 0 no-op, -1 unparsable or unappliable,   |
|                            |                    | else the changed-line similarity                |
| `swe_patch_judge`          | as above, plus problem_statement | as above for 1, 0 and -1; otherwise |
|                            |                    | P("YES") of the stage's `patch_judge`           |
| `swe_tests`                | repo_files, test_files, FAIL_TO_PASS, PASS_TO_PASS | 1 if the |
|                            |                    | episode's edits pass every issue test, else 0   |
| `workplace_state`          | workplace          | 1 if the episode's calls, replayed, leave the   |
|                            |                    | workplace in its goal's state, else 0           |
| `reward_model`             | (none)             | the RM's score of the text after `</think>`     |

Scoring is all this table does. What the trainer does with a score afterwards (a response cut
at the length cap gets 0 unless `keeps_capped`; the code-switch penalty) is post-processing,
in `training.rewards.StageRewards`.

Adding a kind: one module with its function (TRL signature; clients as keyword-only
arguments) and, to verify tables with it, a `TableVerdicts` function; then a `Reward` entry
for it, here in `REWARDS` for a built-in kind (and its name in `GRPOStage.reward`,
schemas/training_manifest.py, which cannot import this floor: tests/test_reward_registry.py
fails until the two lists agree) or through `register` for a plug-in one.
tests/test_reward_example.py registers a toy kind and runs it through `cascade verify`'s
Python function and a GRPO stage's scoring.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl

from curation.verify.choice import choice_reward
from curation.verify.code import code_reward
from curation.verify.columns import column_values, instruction_inputs
from curation.verify.ifeval import ifeval_reward
from curation.verify.math import math_reward
from curation.verify.patch_judge import patch_judge_reward
from curation.verify.result import Verdict
from curation.verify.reward_model_score import if_verifier_with_reward_model, reward_model_score
from curation.verify.swe import swe_reward
from curation.verify.swe_tests import SWE_COLUMNS, swe_tests_reward
from curation.verify.workplace import workplace_reward

RewardFn = Callable[..., list[float | None]]
"""TRL's reward-function signature: `(prompts, completions, **columns) -> list[float | None]`."""

TableVerdicts = Callable[[pl.DataFrame, list[str], dict[str, str]], list[Verdict]]
"""A table verifier: `(df, responses, fields) -> one Verdict per row`. `fields` names the
inputs by `Verdict.bad_input` ("reference", "kwargs", ...): the reference and kwargs fields
the caller chose; the function sets an entry where it reads an input under another name, so
that an input no row can use is reported by its name."""


@dataclass(frozen=True)
class Reward:
    """One reward kind (see the module docstring).

    `columns`: the row columns `function` reads (a GRPO stage's datasets must have them); the
    first is the reference a table verifier reads unless told another field. `keeps_capped`:
    a response cut at the length cap keeps its score (a reward model rates an unfinished
    answer itself) instead of getting 0.
    """

    name: str
    function: RewardFn
    columns: tuple[str, ...]
    returns: str
    clients: tuple[str, ...] = ()
    verifier: str | None = None
    table: TableVerdicts | None = None
    keeps_capped: bool = False

    def __post_init__(self) -> None:
        if (self.verifier is None) != (self.table is None):
            raise ValueError(f"reward {self.name!r}: a verifier name needs a table function")

    def bind(self, **clients: Any) -> RewardFn:
        """The function with its clients fixed (extra ones ignored): a plain TRL reward.

        >>> REWARDS["reward_model"].bind(patch_judge=object())
        Traceback (most recent call last):
        ...
        ValueError: reward 'reward_model' needs reward_model
        """
        missing = [c for c in self.clients if clients.get(c) is None]
        if missing:
            raise ValueError(f"reward {self.name!r} needs {' and '.join(missing)}")
        if not self.clients:
            return self.function
        return functools.partial(self.function, **{c: clients[c] for c in self.clients})


def _math_table(df: pl.DataFrame, responses: list[str], fields: dict[str, str]) -> list[Verdict]:
    from curation.verify.math import default_math_verifier

    references = column_values(df, fields["reference"])
    return default_math_verifier().verify_many(
        responses, [None if r is None else str(r) for r in references]
    )


def _choice_table(df: pl.DataFrame, responses: list[str], fields: dict[str, str]) -> list[Verdict]:
    from curation.verify.choice import verify_choice

    references = column_values(df, fields["reference"])
    return [verify_choice(r, ref) for r, ref in zip(responses, references, strict=True)]


def _code_table(df: pl.DataFrame, responses: list[str], fields: dict[str, str]) -> list[Verdict]:
    from curation.verify.code import verify_code_batch

    return verify_code_batch(responses, column_values(df, fields["reference"]))


def _if_table(df: pl.DataFrame, responses: list[str], fields: dict[str, str]) -> list[Verdict]:
    from curation.verify.ifeval import verify_ifeval

    ids, kwargs, fields["kwargs"] = instruction_inputs(df, fields["reference"], fields["kwargs"])
    return [verify_ifeval(r, i, kw) for r, i, kw in zip(responses, ids, kwargs, strict=True)]


def _swe_table(df: pl.DataFrame, responses: list[str], fields: dict[str, str]) -> list[Verdict]:
    from curation.verify.swe import shown_files, verify_patch

    paths, texts = (
        df.get_column(c).to_list() if c in df.columns else None
        for c in ("context_files", "context_contents")
    )
    files = shown_files(len(responses), paths, texts)
    fields["files"] = "context_contents"
    return [
        verify_patch(r, ref, files=f)
        if ref
        else Verdict(None, 0.0, "no reference patch", "reference")
        for r, ref, f in zip(responses, column_values(df, fields["reference"]), files, strict=True)
    ]


_IF_COLUMNS = ("instruction_id_list", "kwargs")
_SWE_COLUMNS = ("patch", "context_files", "context_contents")

REWARDS: dict[str, Reward] = {
    r.name: r
    for r in (
        Reward(
            "math_verifier",
            math_reward,
            ("answer",),
            "binary: 1 if the last boxed answer after </think> matches `answer`, else 0",
            verifier="math",
            table=_math_table,
        ),
        Reward(
            "code_tests",
            code_reward,
            ("tests",),
            "binary: 1 only if the last code block passes every test, else 0",
            verifier="code",
            table=_code_table,
        ),
        Reward(
            "multiple_choice",
            choice_reward,
            ("correct_choice",),
            "binary: 1 if the letter chosen after </think> is `correct_choice`, else 0",
            verifier="choice",
            table=_choice_table,
        ),
        Reward(
            "if_verifier",
            ifeval_reward,
            _IF_COLUMNS,
            "binary: 1 if every instruction is followed (strict), else 0",
            verifier="if",
            table=_if_table,
        ),
        Reward(
            "if_verifier+reward_model",
            if_verifier_with_reward_model,
            _IF_COLUMNS,
            "0, or in (1, 2): 1 + sigmoid of the group z-scored RM score when if_verifier is 1",
            clients=("reward_model",),
        ),
        Reward(
            "swe_patch_similarity",
            swe_reward,
            _SWE_COLUMNS,
            "in [-1, 1]: 1 same changes as the gold patch, 0 no-op, -1 unusable, else the "
            "changed-line similarity in [0, 1)",
            verifier="swe",
            table=_swe_table,
        ),
        Reward(
            "swe_patch_judge",
            patch_judge_reward,
            ("patch", "problem_statement", "context_files", "context_contents"),
            "in [-1, 1]: as swe_patch_similarity for 1, 0 and -1, else the judge's P(YES)",
            clients=("patch_judge",),
        ),
        Reward(
            "swe_tests",
            swe_tests_reward,
            ("repo_files", *SWE_COLUMNS[1:]),
            "binary: 1 if the episode's edits, replayed on the base commit, pass every "
            "FAIL_TO_PASS and PASS_TO_PASS test in the sandbox, else 0",
        ),
        Reward(
            "workplace_state",
            workplace_reward,
            ("workplace",),
            "binary: 1 if the episode's tool calls, replayed, leave the workplace in its goal's "
            "state (and a question's answer holds the value), else 0",
        ),
        Reward(
            "reward_model",
            reward_model_score,
            (),
            "unbounded: the reward model's score of the answer after </think>",
            clients=("reward_model",),
            keeps_capped=True,
        ),
    )
}


def register(reward: Reward) -> Reward:
    """Add a plug-in reward kind (a name or verifier name already taken is a ValueError)."""
    if reward.name in REWARDS:
        raise ValueError(f"reward {reward.name!r} is already registered")
    if reward.verifier is not None and reward.verifier in verifier_kinds():
        raise ValueError(f"verifier {reward.verifier!r} is already registered")
    REWARDS[reward.name] = reward
    return reward


def reward_named(name: str) -> Reward:
    """The reward kind `name`, or a ValueError listing the known ones."""
    if name not in REWARDS:
        raise ValueError(f"unknown reward {name!r}; choose one of {', '.join(REWARDS)}")
    return REWARDS[name]


def verifier_kinds() -> tuple[str, ...]:
    """The verifier names of the kinds that verify tables (`cascade verify --kind`).

    >>> verifier_kinds()
    ('math', 'code', 'choice', 'if', 'swe')
    """
    return tuple(r.verifier for r in REWARDS.values() if r.verifier is not None)


def verifier_named(kind: str) -> Reward:
    """The reward kind whose verifier is `kind`, or a ValueError listing the verifiers."""
    for reward in REWARDS.values():
        if reward.verifier == kind:
            return reward
    raise ValueError(f"unknown verifier kind {kind!r}; choose one of {', '.join(verifier_kinds())}")
