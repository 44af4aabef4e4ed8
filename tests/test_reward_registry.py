"""The reward registry (`curation.verify.rewards.REWARDS`) and the GRPO stage schema agree:
the same names, and the schema asks for a reward model or a patch judge exactly where the
kind takes that client. The schema floor cannot import the registry, so this test ties them.
"""

from __future__ import annotations

import doctest
import typing

import polars as pl
import pytest
from pydantic import ValidationError

import curation.verify.rewards as rewards_module
from curation.verify.rewards import REWARDS, Reward, register, reward_named, verifier_kinds
from curation.verify.table import verify_frame
from schemas.training_manifest import GRPOStage

JUDGE = {"base_url": "http://judge:8000/v1", "model": "judge"}


def grpo(reward: str, **extra: object) -> dict:
    return {
        "name": "r",
        "type": "grpo",
        "datasets": [{"ref": "p.jsonl", "content_hash": "0" * 64, "prompt_column": "problem"}],
        "optimizer": {"learning_rate": 1e-6},
        "batch": {"prompts_per_step": 1, "rollouts_per_prompt": 2},
        "reward": reward,
        "max_steps": 1,
        "temperature": 1.0,
        "max_response_len": 16,
        "overlong_filtering": False,
        **extra,
    }


def test_schema_names_the_registry_kinds_exactly() -> None:
    schema = typing.get_args(GRPOStage.model_fields["reward"].annotation)
    assert sorted(schema) == sorted(REWARDS)
    assert len(schema) == len(set(schema))


@pytest.mark.parametrize("name", sorted(REWARDS))
def test_schema_asks_for_the_clients_the_kind_takes(name: str) -> None:
    kind = REWARDS[name]
    clients = {"reward_model": "some/rm", "patch_judge": JUDGE}
    needed = {c: clients[c] for c in kind.clients}
    stage = GRPOStage.model_validate(grpo(name, **needed))
    assert stage.reward == name
    for client, value in clients.items():
        if client in kind.clients:  # the stage without it is rejected
            with pytest.raises(ValidationError, match=f"needs {client}"):
                GRPOStage.model_validate(grpo(name, **{**needed, client: None}))
        else:  # the stage with it is rejected: nothing would read it
            with pytest.raises(ValidationError, match=f"{client} is read only by"):
                GRPOStage.model_validate(grpo(name, **needed, **{client: value}))


def test_kinds_that_verify_tables_and_their_references() -> None:
    assert verifier_kinds() == ("math", "code", "choice", "if", "swe")
    references = {r.verifier: r.columns[0] for r in REWARDS.values() if r.verifier}
    assert references == {
        "math": "answer",
        "code": "tests",
        "choice": "correct_choice",
        "if": "instruction_id_list",
        "swe": "patch",
    }
    with pytest.raises(ValueError, match="unknown verifier kind 'toy'; choose one of math, code"):
        verify_frame(pl.DataFrame({"response": ["x"]}), "toy")
    with pytest.raises(ValueError, match="unknown reward 'toy'; choose one of math_verifier"):
        reward_named("toy")


def test_only_the_reward_model_keeps_a_capped_score() -> None:
    assert [n for n, r in REWARDS.items() if r.keeps_capped] == ["reward_model"]


def test_register_refuses_a_taken_name_or_verifier() -> None:
    math = REWARDS["math_verifier"]
    with pytest.raises(ValueError, match="'math_verifier' is already registered"):
        register(math)
    twin = Reward(
        "math_twin", math.function, ("answer",), "binary", verifier="math", table=math.table
    )
    with pytest.raises(ValueError, match="verifier 'math' is already registered"):
        register(twin)
    assert "math_twin" not in REWARDS
    with pytest.raises(ValueError, match="a verifier name needs a table function"):
        Reward("half", math.function, (), "binary", verifier="half")


def test_docstring_examples() -> None:
    result = doctest.testmod(rewards_module)
    assert result.attempted > 0 and result.failed == 0


def test_schema_names_the_environments_with_tools_exactly() -> None:
    from curation.environments import ENVIRONMENTS

    field = GRPOStage.model_fields["environment"].annotation
    named = [a for arg in typing.get_args(field) for a in typing.get_args(arg)]
    assert sorted(named) == sorted(ENVIRONMENTS)
    stage = GRPOStage.model_validate(grpo("math_verifier", environment="python"))
    assert stage.episode is None
    with pytest.raises(
        ValidationError, match="episode limits apply to a stage with an environment"
    ):
        GRPOStage.model_validate(grpo("math_verifier", episode={"max_turns": 2}))
