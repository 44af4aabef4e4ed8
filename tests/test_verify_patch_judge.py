"""SWE RL's semantic reward: the lexical short cuts, then an LLM judge's P("YES") from a
scripted OpenAI-compatible server on 127.0.0.1 with known verdicts (from top log-probs when
asked for them, from the text otherwise), and a `swe_patch_judge` stage through StageRewards.
"""

from __future__ import annotations

import math

import pytest
from scripted_openai import ScriptedServer
from test_grpo_rewards import F_FIX, G_FIX, edits, episodes, rewards_of, stage, swe_prompt

from curation.verify.patch_judge import PatchJudge, logprob_yes, text_verdict, yes_probability
from training.rewards import StageRewards
from training.runner import ManifestError, check_endpoints

# the judge's verdicts: YES for the right fix written another way, NO for the wrong one
OTHER_F = ("    return x\n", "    return 1 + x\n")  # f fixed differently
WRONG_F = ("    return x\n", "    return x - 1\n")  # f broken the other way


def judge_reply(user: str, index: int) -> list:
    """Tokens of the judge's answer: YES (p 0.8 vs NO 0.15) when the candidate writes
    `1 + x`, NO (p 0.9 vs YES 0.1) otherwise; the sampled token is each dict's first key."""
    candidate = user.split("### Candidate patch", 1)[1]
    verdict = (
        {"YES": 0.8, "NO": 0.15, "MAYBE": 0.05} if "1 + x" in candidate else {"NO": 0.9, "YES": 0.1}
    )
    return ["The patches ", "compare. ", "<judgement>", verdict, "</judgement>"]


def judge_stage(url: str, **judge: object):
    return stage(
        "swe_patch_judge",
        overlong_filtering=True,
        patch_judge={"base_url": url, "model": "kimi-dev", **judge},
    )


def test_judge_reward_is_p_yes_from_logprobs_after_the_lexical_short_cuts() -> None:
    with ScriptedServer({"kimi-dev": judge_reply}) as server:
        scorer = StageRewards(judge_stage(server.base_url))
        eps = episodes(
            edits(F_FIX, G_FIX),  # same changes as the gold patch: 1, no judge call
            edits(("    return x\n", "    return x\n")),  # unchanged: 0, no call
            edits(("    return nothing\n", "x\n")),  # unappliable: -1, no call
            edits(OTHER_F, G_FIX),  # equivalent fix: the judge says YES with p 0.8 / 0.95
            edits(WRONG_F, G_FIX),  # the judge says NO: P(YES) 0.1 / 1.0
            edits(OTHER_F, G_FIX),  # the same candidate again: judged once
        )
        scorer.score_group(swe_prompt(), eps)
        asked = [r for r in server.requests if r["model"] == "kimi-dev"]
    assert rewards_of(eps) == pytest.approx([1.0, 0.0, -1.0, 0.8 / 0.95, 0.1, 0.8 / 0.95])
    assert len(asked) == 2
    body = asked[0]
    assert (body["logprobs"], body["top_logprobs"], body["temperature"]) == (True, 5, 0.0)
    question = body["messages"][0]["content"]
    assert "f and g are off by one." in question  # the issue
    assert "+    return y - 1" in question.split("### Candidate patch")[0]  # the gold patch
    assert "<judgement>YES</judgement>" in question


def test_without_logprobs_the_verdict_text_gives_one_or_zero() -> None:
    with ScriptedServer({"kimi-dev": judge_reply}) as server:
        scorer = StageRewards(judge_stage(server.base_url, top_logprobs=0))
        eps = episodes(edits(OTHER_F, G_FIX), edits(WRONG_F, G_FIX))
        scorer.score_group(swe_prompt(), eps)
        assert all("logprobs" not in r for r in server.requests)
    assert rewards_of(eps) == [1.0, 0.0]


def test_a_judge_without_verdict_leaves_the_reward_undecided() -> None:
    with ScriptedServer({"kimi-dev": lambda user, i: "These look similar, I think."}) as server:
        judge = PatchJudge(server.base_url, "kimi-dev")
        rewards = judge.reward(
            ["p"],
            [edits(OTHER_F, G_FIX)],
            **{k: [v] for k, v in swe_prompt().columns.items()},
        )
    assert rewards == [None]


def test_verdict_token_reading() -> None:
    def tok(token: str, **alternatives: float) -> dict:
        top = [{"token": t, "logprob": math.log(p)} for t, p in alternatives.items()]
        return {"token": token, "logprob": top[0]["logprob"] if top else 0.0, "top_logprobs": top}

    plain = [tok("ok "), tok("<judgement>"), tok("YES", YES=0.6, NO=0.3), tok("</judgement>")]
    assert logprob_yes(plain) == pytest.approx(0.6 / 0.9)
    # the tag's end shares a token with the verdict; blank tokens before it are skipped
    split = [tok("<judgement"), tok(">YES", **{">YES": 0.7, ">NO": 0.2, "YES": 0.1})]
    assert logprob_yes(split) == pytest.approx(0.7 / 0.9)
    spaced = [tok("<judgement>"), tok(" "), tok(" Y", **{" Y": 0.5, " N": 0.5}), tok("ES")]
    assert logprob_yes(spaced) == pytest.approx(0.5)
    # an earlier verdict is overruled by the last one; no tag or no YES/NO: not readable
    twice = [tok("<judgement>"), tok("NO", NO=1.0), tok("<judgement>"), tok("YES", YES=1.0)]
    assert logprob_yes(twice) == 1.0
    assert logprob_yes([tok("YES", YES=1.0)]) is None
    assert logprob_yes([tok("<judgement>"), tok("maybe", maybe=1.0)]) is None
    assert yes_probability("<judgement> no </judgement>", None) == 0.0
    assert yes_probability("no verdict", [tok("x")]) is None
    assert text_verdict("<judgement>Yes</judgement>") == "YES"


def test_env_placeholder_is_refused_until_set(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from training.runner import StagePlan

    placeholder = judge_stage("env:TEST_PATCH_JUDGE_URL")
    monkeypatch.delenv("TEST_PATCH_JUDGE_URL", raising=False)
    with pytest.raises(ManifestError) as info:
        check_endpoints([StagePlan(placeholder, tmp_path, None)], tmp_path / "m.json")
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'm.json'}: stages[r].patch_judge.base_url: ")
    assert "$TEST_PATCH_JUDGE_URL, which is not set" in message and "\n" not in message
    with pytest.raises(ValueError, match="TEST_PATCH_JUDGE_URL, which is not set"):
        StageRewards(placeholder)
    with ScriptedServer({"kimi-dev": judge_reply}) as server:
        monkeypatch.setenv("TEST_PATCH_JUDGE_URL", server.base_url)
        check_endpoints([StagePlan(placeholder, tmp_path, None)], tmp_path / "m.json")
        eps = episodes(edits(OTHER_F, G_FIX))
        StageRewards(placeholder).score_group(swe_prompt(), eps)
    assert rewards_of(eps) == pytest.approx([0.8 / 0.95])
