"""Per-stage rewards (recipe 7.3) through `StageRewards`, from the real `curation.verify`
verifiers: math 1/0 with code-switching -1, code all-tests 1 with code-switching 0, IF, the IF +
reward-model mix 1 + sigmoid(z), SWE patch similarity, a reward model that sees only the text
after `</think>`, the RLHF code-switch floor (batch minimum - 10), and overlong handling.
"""

from __future__ import annotations

import math

import pytest

from curation.verify.reward_model_score import rm_answer
from schemas.chat_template import Message
from schemas.training_manifest import GRPOStage
from training.episode import Episode
from training.reward_clients import REWARD_MODEL_HOOKS
from training.rewards import StageRewards
from training.rl_data import Prompt

CHINESE = "答案是"


def stage(reward: str, **extra: object) -> GRPOStage:
    spec = {
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
    if "reward_model" in reward and "reward_model" not in extra:
        spec["reward_model"] = "fake-rm"
    return GRPOStage.model_validate(spec)


def prompt(text: str = "What is 2 + 3?", **columns: object) -> Prompt:
    return Prompt("0:0", (Message("user", text),), dict(columns), "test row 0")


def episodes(*texts: str, truncated: tuple[int, ...] = ()) -> list[Episode]:
    return [
        Episode(
            draw=0,
            sample=i,
            prompt_uid="0:0",
            mode="think",
            prompt_ids=[1],
            response_ids=[2],
            rollout_logprobs=[0.0],
            finish_reason="length" if i in truncated else "stop",
            response_text=text,
        )
        for i, text in enumerate(texts)
    ]


def rewards_of(eps: list[Episode]) -> list[float | None]:
    return [e.reward for e in eps]


def test_math_reward_with_code_switching_and_overlong() -> None:
    scorer = StageRewards(stage("math_verifier", code_switch_reward=-1.0))
    eps = episodes(
        "<think>\n2+3=5\n</think>\n\\boxed{5}",
        "<think>\n2+3=6\n</think>\n\\boxed{6}",
        f"<think>\n2+3=5 {CHINESE}\n</think>\n\\boxed{{5}}",  # right, but code-switched
        "<think>\n2+3=5",  # cut before the answer
        "\\boxed{5}",  # right, but cut at the length cap: overlong filtering off -> 0
        truncated=(3, 4),
    )
    scorer.score_group(prompt(answer="5"), eps)
    assert rewards_of(eps) == [1.0, 0.0, -1.0, 0.0, 0.0]
    assert [e.code_switched for e in eps] == [False, False, True, False, False]
    # with overlong filtering on the capped reply keeps its verdict (the loop skips it)
    on = StageRewards(stage("math_verifier", overlong_filtering=True))
    capped = episodes("\\boxed{5}", truncated=(0,))
    on.score_group(prompt(answer="5"), capped)
    assert rewards_of(capped) == [1.0]


def test_code_reward_all_tests_and_code_switching_zero() -> None:
    scorer = StageRewards(stage("code_tests", code_switch_reward=0.0))
    tests = {"inputs": ["3\n", "4\n"], "outputs": ["9\n", "16\n"]}
    square = "```python\nn = int(input())\nprint(n * n)\n```"
    eps = episodes(
        f"<think>\nsquare it\n</think>\n{square}",
        "```python\nn = int(input())\nprint(n + n)\n```",  # 3 -> 6, not 9: fails
        f"<think>\n{CHINESE}\n</think>\n{square}",  # passes, but code-switched -> 0
    )
    scorer.score_group(prompt("Read n, print n squared.", tests=tests), eps)
    assert rewards_of(eps) == [1.0, 0.0, 0.0]


def test_if_verifier_and_the_reward_model_mix() -> None:
    scores = {"Plain text. No commas.": 2.0, "Also plain.": -1.0, "A, B.": 5.0}

    class FakeRM:
        def score(self, prompts, answers):
            return [scores[a.strip()] for a in answers]

    columns = {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}
    texts = ("<think>\nok, ok\n</think>\nPlain text. No commas.", "Also plain.", "A, B.")
    plain = StageRewards(stage("if_verifier"))
    eps = episodes(*texts)
    plain.score_group(prompt("Answer without commas.", **columns), eps)
    assert rewards_of(eps) == [1.0, 1.0, 0.0]  # the comma inside <think> does not count

    mixed = StageRewards(stage("if_verifier+reward_model"), reward_model=FakeRM())
    eps = episodes(*texts)
    mixed.score_group(prompt("Answer without commas.", **columns), eps)
    rm = [2.0, -1.0, 5.0]
    mean = sum(rm) / 3
    std = math.sqrt(sum((x - mean) ** 2 for x in rm) / 3)
    z = [(x - mean) / (std + 1e-6) for x in rm]
    expected = [1 + 1 / (1 + math.exp(-z[0])), 1 + 1 / (1 + math.exp(-z[1])), 0.0]
    assert rewards_of(eps) == pytest.approx(expected)
    assert all(1 < r < 2 for r in rewards_of(eps)[:2])


def test_swe_patch_similarity() -> None:
    gold = "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n def f(x):\n-    return x\n+    return x + 1\n"
    scorer = StageRewards(stage("swe_patch_similarity"))
    eps = episodes(f"<think>\nfix\n</think>\n```diff\n{gold}```", "I am not sure.", "")
    scorer.score_group(prompt("Fix f.", patch=gold), eps)
    assert rewards_of(eps) == [1.0, -1.0, 0.0]


SWE_FILE = "def f(x):\n    return x\n\n\ndef g(y):\n    return y\n"
SWE_GOLD = (
    "--- a/m.py\n+++ b/m.py\n@@ -1,6 +1,6 @@\n def f(x):\n-    return x\n+    return x + 1\n"
    " \n \n def g(y):\n-    return y\n+    return y - 1\n"
)


def edits(*blocks: tuple[str, str]) -> str:
    """A repair answer in the prompt's format: SEARCH/REPLACE blocks on m.py in <solution>."""
    body = "".join(
        f"### m.py\n<<<<<<< SEARCH\n{old}=======\n{new}>>>>>>> REPLACE\n" for old, new in blocks
    )
    return f"<think>\nfix both\n</think>\n<solution>\n```python\n{body}```\n</solution>"


F_FIX = ("    return x\n", "    return x + 1\n")
G_FIX = ("    return y\n", "    return y - 1\n")


def swe_prompt() -> Prompt:
    """A swe_rl row: the gold patch and the files its prompt showed."""
    return prompt(
        "Fix f and g.",
        patch=SWE_GOLD,
        problem_statement="f and g are off by one.",
        context_files=["m.py"],
        context_contents=[SWE_FILE],
    )


def test_swe_search_replace_answers_through_the_stage_reward() -> None:
    scorer = StageRewards(stage("swe_patch_similarity", overlong_filtering=True))
    eps = episodes(
        edits(F_FIX, G_FIX),  # the gold fix in the format the prompt asks for
        edits(F_FIX),  # half of it
        edits(("    return x\n", "    return x\n")),  # leaves the code unchanged
        edits(("    return z\n", "    return 0\n")),  # SEARCH text not in the file
    )
    scorer.score_group(swe_prompt(), eps)
    assert rewards_of(eps) == [1.0, pytest.approx(2 / 3), 0.0, -1.0]


def test_reward_model_sees_the_answer_after_think_and_code_switch_floor() -> None:
    seen: list[str] = []

    class LengthRM:
        def score(self, prompts, answers):
            seen.extend(answers)
            return [float(len(a)) for a in answers]

    REWARD_MODEL_HOOKS["length-rm"] = LengthRM
    try:
        scorer = StageRewards(
            stage(
                "reward_model",
                reward_model="length-rm",
                code_switch_reward="batch_min_minus_10",
            ),
            reward_model=REWARD_MODEL_HOOKS["length-rm"](),
        )
        eps = episodes(
            "<think>\nlong hidden reasoning\n</think>\nHi!",
            "<think>\nnever finished",
            f"Hello {CHINESE}",
            truncated=(1,),
        )
        scorer.score_group(prompt("Say hello."), eps)
    finally:
        del REWARD_MODEL_HOOKS["length-rm"]
    # the answer after </think> (its leading newline dropped); the whole unfinished output
    assert seen == ["Hi!", "<think>\nnever finished", f"Hello {CHINESE}"]
    assert rewards_of(eps) == [3.0, 22.0, 9.0]  # a reward model keeps capped replies' scores
    scorer.finish_batch(eps)
    assert rewards_of(eps) == [3.0, 22.0, 3.0 - 10]  # code-switched: batch minimum - 10
    assert rm_answer("no think block at all") == "no think block at all"


def test_undecided_reward_is_none_and_a_custom_reward_plugs_in() -> None:
    scorer = StageRewards(stage("math_verifier"))
    eps = episodes("\\boxed{5}")
    scorer.score_group(prompt(answer=""), eps)  # no reference answer: cannot decide
    assert rewards_of(eps) == [None]

    def shout(prompts, completions, **columns):  # TRL-style
        assert columns == {"answer": ["5", "5"]}
        return [float(c.isupper()) for c in completions]

    custom = StageRewards(stage("math_verifier"), override=shout)
    eps = episodes("YES", "no")
    custom.score_group(prompt(answer="5"), eps)
    assert rewards_of(eps) == [1.0, 0.0]


def test_sequence_classifier_reward_model(tmp_path) -> None:
    """A transformers reward model directory (tiny, random) scores through its chat template."""
    import torch
    from transformers import AutoConfig, AutoModelForSequenceClassification

    from training.models import train_bpe_tokenizer
    from training.reward_clients import SequenceClassifierRM

    tokenizer = train_bpe_tokenizer(["Say hello. Hello there! Hi."], 300)
    config = AutoConfig.for_model(
        "qwen2",
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=len(tokenizer),
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    AutoModelForSequenceClassification.from_config(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    rm = SequenceClassifierRM(str(tmp_path), device="cpu", batch_size=2)
    chat = [{"role": "user", "content": "Say hello."}]
    scores = rm.score([chat] * 3, ["Hello there!", "Hi.", "Hello there!"])
    assert len(scores) == 3 and scores[0] == pytest.approx(scores[2], abs=1e-5)
    assert scores[0] != pytest.approx(scores[1], abs=1e-6)
