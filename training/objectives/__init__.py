"""The objectives of the RL stages, apart from their shared loop (training/grpo.py): GRPO's
group advantages over a reward (grpo.py) and MOPD's reverse KL to domain teachers (mopd.py),
each behind the small interface in objective.py."""

from __future__ import annotations

from schemas.training_manifest import GRPOStage, MOPDStage
from training.objectives.grpo import GRPOObjective
from training.objectives.mopd import MOPDObjective, teacher_logprobs
from training.objectives.objective import MicroBatch, Objective
from training.stage import StageContext

__all__ = [
    "GRPOObjective",
    "MOPDObjective",
    "MicroBatch",
    "Objective",
    "objective_for",
    "teacher_logprobs",
]


def objective_for(ctx: StageContext) -> Objective:
    """The stage's objective, before its models load (`Objective.load`)."""
    if isinstance(ctx.stage, GRPOStage):
        return GRPOObjective(ctx.stage, ctx.reward_fn)  # type: ignore[arg-type]
    if isinstance(ctx.stage, MOPDStage):
        return MOPDObjective(ctx.stage)
    raise TypeError(f"stage {ctx.stage.name!r} is a {ctx.stage.type} stage, not an RL stage")
