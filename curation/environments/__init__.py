"""Environments for agentic episodes, by name, beside the reward kinds they build on.

| environment | tools                          | reward                                         |
|-------------|--------------------------------|------------------------------------------------|
| any reward kind of `curation.verify.rewards.REWARDS` | none (one turn) | that kind        |
| `python`    | `python` (code in the sandbox) | the stage's reward kind on the final answer    |
|             |                                | (math_verifier unless told another)            |
| `workplace` | people, calendar and mail      | workplace_state: the episode's calls, replayed, |
|             | (find_user, create_event, ...) | reach the goal's state                          |
| `swe`       | list/view/search/edit files,   | swe_tests: the replayed edits pass the issue's  |
|             | run_tests (in the sandbox)     | FAIL_TO_PASS and PASS_TO_PASS tests             |

The contract is `schemas.environment`; `curation.environments.runner` drives episodes through
any generator (a rollout engine or a teacher backend).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from curation.environments.answer import RewardEnvironment
from curation.environments.python import PythonEnvironment
from curation.environments.swe import SweEnvironment
from curation.environments.workplace import WorkplaceEnvironment
from curation.verify.rewards import REWARDS, Reward
from schemas.environment import Environment

ENVIRONMENTS: dict[str, Callable[..., Environment]] = {
    "python": PythonEnvironment,
    "workplace": WorkplaceEnvironment,
    "swe": SweEnvironment,
}
"""Environments with tools, by name: a factory taking the reward kind that scores the final
answer (`reward=`, None for the environment's default) and that kind's clients."""


def environment_names() -> tuple[str, ...]:
    """Every name `environment_named` takes: environments with tools, then the reward kinds.

    >>> environment_names()[:2]
    ('python', 'math_verifier')
    """
    return (*ENVIRONMENTS, *REWARDS)


def environment_named(name: str, reward: Reward | None = None, **clients: Any) -> Environment:
    """The environment `name` (a reward kind's name gives its one-step environment), or a
    ValueError listing the names."""
    if name in ENVIRONMENTS:
        return ENVIRONMENTS[name](reward, **clients)
    if name in REWARDS:
        return RewardEnvironment(REWARDS[name], **clients)
    raise ValueError(
        f"unknown environment {name!r}; choose one of {', '.join(environment_names())}"
    )
