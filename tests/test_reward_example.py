"""Adding a reward kind is one module plus its test; this file is both, for a toy kind.

`exact_answer`: 1 when the text after `</think>` is exactly the row's `answer` (stripped),
else 0; undecided without a reference. Its TRL function scores GRPO groups, its table
function backs `cascade verify --kind exact`. Registering it is all the wiring there is; a
manifest could name it once `GRPOStage.reward` lists it (tests/test_reward_registry.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from cli.main import command_app
from cli.verify import verify_rows
from curation.verify.columns import column_values
from curation.verify.result import Verdict, completion_text, final_answer_part
from curation.verify.rewards import REWARDS, Reward, register
from schemas.chat_template import Message
from schemas.training_manifest import GRPOStage
from training.episode import Episode
from training.rewards import StageRewards
from training.rl_data import Prompt

# ------------------------------------------------------------ the kind: one module ---------


def exact_verdict(response: str, answer: str | None) -> Verdict:
    if answer is None:
        return Verdict(None, 0.0, "no reference answer", bad_input="reference")
    said = final_answer_part(response).strip()
    return Verdict(said == answer.strip(), float(said == answer.strip()), f"said {said!r}")


def exact_answer_reward(
    prompts: Sequence[Any], completions: Sequence[Any], answer: Sequence[str | None], **_: Any
) -> list[float | None]:
    return [
        exact_verdict(completion_text(c), a).reward()
        for c, a in zip(completions, answer, strict=True)
    ]


def exact_answer_table(
    df: pl.DataFrame, responses: list[str], fields: dict[str, str]
) -> list[Verdict]:
    answers = column_values(df, fields["reference"])
    return [exact_verdict(r, a) for r, a in zip(responses, answers, strict=True)]


EXACT = Reward(
    "exact_answer",
    exact_answer_reward,
    ("answer",),
    "binary: 1 if the answer after </think> is exactly `answer`, else 0",
    verifier="exact",
    table=exact_answer_table,
)

# ------------------------------------------------------------ its test ---------------------


@pytest.fixture
def exact() -> Iterator[Reward]:
    register(EXACT)
    yield EXACT
    del REWARDS[EXACT.name]


ROWS = [
    {"id": "a", "response": "<think>\nhm\n</think>\n  Paris ", "answer": "Paris"},
    {"id": "b", "response": "<think>\nhm\n</think>\nLyon", "answer": "Paris"},
    {"id": "c", "response": "Paris", "answer": None},
]


def test_cascade_verify_runs_the_registered_kind(exact: Reward, tmp_path: Path) -> None:
    scored = verify_rows(pl.DataFrame(ROWS), "exact").kept
    assert scored.get_column("passed").to_list() == [True, False, None]
    assert scored.get_column("score").to_list() == [1.0, 0.0, 0.0]
    kept = verify_rows(pl.DataFrame(ROWS), "exact", keep="passed")
    assert kept.kept.get_column("id").to_list() == ["a"]
    assert kept.stats == {"rows_in": 3, "passed": 1, "undecided": 1, "kept": 1}
    # the command itself: --kind takes the new verifier name
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "out.jsonl"
    args = ["verify", "--input", str(src), "--kind", "exact", "--out", str(out)]
    result = CliRunner().invoke(command_app(), args)
    assert result.exit_code == 0, result.output
    assert "3 rows (exact): 1 passed, 1 failed, 1 undecided" in result.output
    assert [json.loads(x)["passed"] for x in out.read_text().splitlines()] == [True, False, None]


def test_an_unusable_reference_is_named(exact: Reward) -> None:
    bare = pl.DataFrame({"response": ["x", "y"], "answer": [None, None]}, strict=False)
    with pytest.raises(ValueError, match="field 'answer' cannot be used in any of the 2 rows"):
        verify_rows(bare, "exact")


def test_a_grpo_stage_scores_with_the_registered_kind(exact: Reward) -> None:
    spec = {
        "name": "toy",
        "type": "grpo",
        "datasets": [{"ref": "p.jsonl", "content_hash": "0" * 64, "prompt_column": "problem"}],
        "optimizer": {"learning_rate": 1e-6},
        "batch": {"prompts_per_step": 1, "rollouts_per_prompt": 2},
        "reward": "math_verifier",
        "max_steps": 1,
        "temperature": 1.0,
        "max_response_len": 16,
        "overlong_filtering": False,
        "code_switch_reward": -1.0,
    }
    # the schema lists the built-in kinds only; a plug-in kind is set past validation
    stage = GRPOStage.model_validate(spec).model_copy(update={"reward": "exact_answer"})
    texts = ["<think>\nhm\n</think>\nParis", "Lyon", "Paris", "<think>\n巴黎\n</think>\nParis"]
    episodes = [
        Episode(
            draw=0,
            sample=i,
            prompt_uid="0:0",
            mode="think",
            prompt_ids=[1],
            response_ids=[2],
            rollout_logprobs=[0.0],
            finish_reason="length" if i == 2 else "stop",
            response_text=text,
        )
        for i, text in enumerate(texts)
    ]
    prompt = Prompt("0:0", (Message("user", "Capital of France?"),), {"answer": "Paris"}, "row 0")
    StageRewards(stage).score_group(prompt, episodes)
    # right, wrong, right but cut at the cap (0: post-processing), right but code-switched (-1)
    assert [e.reward for e in episodes] == [1.0, 0.0, 0.0, -1.0]
    assert [e.code_switched for e in episodes] == [False, False, False, True]
