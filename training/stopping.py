"""Why an RL stage stops before `max_steps`, or fails: the length curriculum and a stage that
learns nothing.

`LengthCurriculum` ends a phase of the math length curriculum (recipe 7.4: 100-200 steps per
phase, until the clip ratio reaches ~10%) once it has run `min_steps` and the truncated share,
smoothed by an exponential moving average, is at or below the target. `SignalWatch` watches
for `patience` steps in a row whose groups all had identical rewards (zero advantage
everywhere, so no gradient): a stage that never had a signal fails, with one sentence naming
the reward and the likely cause; a stage that learned until its prompts are solved always or
never ends there (no signal left), with that sentence as its stop reason. Both
keep their state in a small dict that goes into every checkpoint, so a resumed run decides
exactly as the killed one would have.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from schemas.training_manifest import LengthCurriculumSpec
from training.episode import Episode, has_signal


class NoLearningSignal(RuntimeError):
    """A GRPO stage's rewards carried no gradient for `no_signal_patience` steps in a row."""


@dataclass
class LengthCurriculum:
    """The smoothed truncated share of a length-curriculum phase and when the phase ends."""

    spec: LengthCurriculumSpec
    smoothed: float | None = None

    @property
    def alpha(self) -> float:
        return 2.0 / (self.spec.smoothing_steps + 1)

    def observe(self, truncated_share: float) -> float:
        """Fold one step's truncated share into the moving average; return the average."""
        if self.smoothed is None:
            self.smoothed = truncated_share
        else:
            self.smoothed = self.alpha * truncated_share + (1 - self.alpha) * self.smoothed
        return self.smoothed

    def describe(self) -> str:
        return f"truncated share (EMA over {self.spec.smoothing_steps} steps) {self.smoothed:.3f}"

    def stop_reason(self, step: int) -> str | None:
        """Why the phase ends after `step` steps, or None while it goes on.

        >>> c = LengthCurriculum(LengthCurriculumSpec(truncated_share=0.1, min_steps=2))
        >>> c.observe(0.05), c.stop_reason(1)
        (0.05, None)
        >>> round(c.observe(0.05), 3), c.stop_reason(2)
        (0.05, 'truncated share (EMA over 10 steps) 0.050 <= 0.1 after 2 steps (min 2)')
        """
        if self.smoothed is None or step < self.spec.min_steps:
            return None
        if self.smoothed > self.spec.truncated_share:
            return None
        return (
            f"{self.describe()} <= {self.spec.truncated_share} after {step} steps "
            f"(min {self.spec.min_steps})"
        )

    def state_dict(self) -> dict:
        return {"smoothed": self.smoothed}

    def load_state_dict(self, state: dict) -> None:
        self.smoothed = state["smoothed"]


def max_steps_reason(max_steps: int, curriculum: LengthCurriculum | None) -> str:
    """The stop reason of a stage that ran all its steps."""
    if curriculum is None or curriculum.smoothed is None:
        return f"max_steps reached ({max_steps})"
    return (
        f"max_steps reached ({max_steps}); {curriculum.describe()} still above "
        f"{curriculum.spec.truncated_share}"
    )


@dataclass
class SignalWatch:
    """Counts the steps in a row without a learning signal and says why when it gives up.

    A step has a signal when at least one group's trained rewards differ (`has_signal`, the
    log's `signal_groups`). Over the current run of signal-less steps it remembers what the
    rewards were, so the failure can say whether they were all undecided, all one value, one
    value per group, or whether overlong filtering left nothing to train on.
    """

    stage_name: str
    reward: str  # the stage's reward, in words
    patience: int  # 0: never fail
    columns: Sequence[str] = ()  # the row columns the reward reads
    max_response_len: int = 0
    run: int = 0
    steps: int = 0
    steps_with_signal: int = 0
    values: list[float] = field(default_factory=list)  # distinct decided rewards this run
    episodes: int = 0
    undecided: int = 0
    capped_untrained: int = 0
    exhausted: str | None = None  # why a stage that had a signal ends: none is left

    def observe(self, groups: Sequence[Sequence[Episode]]) -> str | None:
        """Record one step; the failure sentence once `patience` steps in a row had no
        signal and no step before them had one (None otherwise, and always None with
        patience 0). When earlier steps had a signal, `exhausted` says why the stage ends."""
        self.steps += 1
        if any(has_signal([e.reward for e in g if e.trained]) for g in groups):
            self.steps_with_signal += 1
            self.run, self.values = 0, []
            self.episodes = self.undecided = self.capped_untrained = 0
            return None
        self.run += 1
        episodes = [e for g in groups for e in g]
        self.episodes += len(episodes)
        self.undecided += sum(e.reward is None for e in episodes)
        self.capped_untrained += sum(e.truncated and not e.trained for e in episodes)
        seen = set(self.values) | {e.reward for e in episodes if e.reward is not None}
        self.values = sorted(seen)  # type: ignore[arg-type]
        if self.patience and self.run >= self.patience:
            if self.steps_with_signal:
                self.exhausted = self.exhaustion()
                return None
            return self.failure()
        return None

    def cause(self) -> str:
        """What the rewards of the current signal-less run were, and what that likely means."""
        if self.episodes and self.capped_untrained == self.episodes:
            return (
                f"every response hit max_response_len {self.max_response_len} and overlong "
                "filtering gives those no gradient: raise max_response_len or turn "
                "overlong_filtering off"
            )
        if self.episodes and self.undecided == self.episodes:
            columns = ", ".join(f"`{c}`" for c in self.columns) or "its inputs"
            return (
                f"all None: the reward could not decide any reply (check the reward's "
                f"columns: {columns})"
            )
        if len(self.values) == 1:
            value = self.values[0]
            if value > 0:
                return f"all {value}: the policy solves every prompt (too easy to learn from)"
            return (
                f"all {value}: the policy solves nothing (the prompts are too hard for it, or "
                "its replies lack the answer form the reward reads)"
            )
        shown = ", ".join(str(v) for v in self.values[:6])
        return (
            f"one value per group ({shown}): each prompt is solved always or never "
            "(dynamic_filtering batch draws fresh prompts until a batch has mixed groups)"
        )

    def failure(self) -> str:
        return (
            f"stage {self.stage_name}: every group's reward ({self.reward}) was identical for "
            f"{self.run} steps in a row ({self.cause()}), so the stage learns nothing; set "
            "no_signal_patience 0 only for a plumbing check that expects no signal"
        )

    def exhaustion(self) -> str:
        return (
            f"no learning signal left: every group's reward ({self.reward}) was identical for "
            f"{self.run} steps in a row ({self.cause()}) after {self.steps_with_signal} steps "
            "with a signal"
        )

    def summary(self) -> str:
        """One line for the end of the stage: how many steps carried a signal."""
        line = f"{self.steps_with_signal} of {self.steps} steps had a group with a learning signal"
        if self.steps and not self.steps_with_signal and not self.patience:
            line += f" ({self.cause()}); no_signal_patience is 0: a plumbing check, not training"
        return line

    def state_dict(self) -> dict:
        keys = ("run", "steps", "steps_with_signal", "values", "episodes", "undecided")
        return {k: getattr(self, k) for k in (*keys, "capped_untrained")}

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, list(value) if key == "values" else value)
