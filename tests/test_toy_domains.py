"""The toy cascade's domains: deterministic, split apart, and checked by the real verifiers.

A right teacher answer passes the verifier its RL stage is rewarded by; a sloppy teacher's
slips fail it at about the slip rate (so a model trained on them is right only part of the
time); the splits share no subject; the repositories get the same commits wherever they are.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from builders.worlds import toy_domains as td
from curation.swe.localization import parse_ranked_files
from curation.verify import code_reward, swe_reward
from curation.verify.ifeval import verify_ifeval


def think(reasoning: str, reply: str) -> str:
    return f"<think>\n{reasoning}\n</think>\n{reply}"


def test_splits_share_no_subject_and_prompts_are_deterministic() -> None:
    seen: set[str] = set()
    for split, subjects in td.SPLIT_SUBJECTS.items():
        assert len(subjects) >= 12 and not seen & set(subjects), split
        seen |= set(subjects)
    assert td.chat_prompts("pairs") == td.chat_prompts("pairs")
    assert {td.subject_of(r["problem"]) for r in td.chat_prompts("pairs")} == set(
        td.SPLIT_SUBJECTS["pairs"]
    )
    with pytest.raises(ValueError, match="no toy if split 'nope'"):
        td.if_prompts("nope")


@pytest.mark.parametrize("taxonomy", ["ifeval", "iftrain"])
def test_if_replies_follow_the_attached_instructions_unless_they_slip(taxonomy: str) -> None:
    rng = random.Random(0)
    rates = {}
    for slip in (0.0, 0.3):
        passed = []
        for row in td.if_prompts("rl"):
            ids, kwargs, prompt = td.draw_toy_instructions(rng, row["problem"], taxonomy)
            assert prompt.startswith(row["problem"]) and set(ids) <= set(
                td.toy_instructions(taxonomy)
            )
            _, reply = td.if_reply(td.subject_of(row["problem"]), ids, kwargs, rng, slip)
            passed.append(bool(verify_ifeval(reply, ids, kwargs).passed))
        rates[slip] = sum(passed) / len(passed)
    assert rates[0.0] == 1.0
    assert 0.3 <= rates[0.3] <= 0.8


def test_chat_pairs_prefer_the_reply_about_the_requested_subject() -> None:
    prompts = td.chat_prompts("pairs")
    for row in td.helpsteer3_rows(prompts, seed=0, tie_share=0.0, per_prompt=2):
        subject = td.subject_of(row["context"][0]["content"])
        better = row["response1"] if row["overall_preference"] < 0 else row["response2"]
        worse = row["response2"] if row["overall_preference"] < 0 else row["response1"]
        assert td.subject_of(better) == subject != td.subject_of(worse)
    rated = td.helpsteer2_rows(prompts[:5], seed=0)
    assert len(rated) == 5 * 4
    top = [r for r in rated if r["helpfulness"] >= 3]
    assert all(td.subject_of(r["response"]) == td.subject_of(r["prompt"]) for r in top)
    judge = td.judge_chat("Talk about the otter.", "Talk about the camel.")
    assert judge["messages"][1]["content"] == "NO"


def test_code_answers_pass_their_tests_unless_they_slip() -> None:
    problems = td.program_problems(30, seed=1)
    assert {json.loads(p["tests"]).__class__ for p in problems} == {dict, list}  # both shapes
    assert all(td.program_of(p).expression == p["expression"] for p in problems)
    for slip, low, high in ((0.0, 1.0, 1.0), (0.4, 0.3, 0.85)):
        chats = td.code_teacher_chats(problems, 0, slip)
        answers = [think(c["messages"][1]["reasoning"], c["messages"][1]["content"]) for c in chats]
        rewards = code_reward([None] * len(answers), answers, tests=[p["tests"] for p in problems])
        assert low <= sum(rewards) / len(rewards) <= high, slip


def test_repositories_are_reproducible_and_repairs_score_by_the_swe_reward(
    tmp_path: Path,
) -> None:
    first = td.repositories(tmp_path / "a", n_repos=2, per_repo=3, seed=0)
    again = td.repositories(tmp_path / "b", n_repos=2, per_repo=3, seed=0)
    assert [i.commit for i in first] == [i.commit for i in again]  # fixed dates and names
    assert len({i.commit for i in first}) == 6
    rng = random.Random(0)
    for slip, expect in ((0.0, {1.0}), (1.0, None)):
        answers = [think(*td.repair_reply(i, rng, slip)) for i in first]
        rewards = swe_reward(
            [None] * len(first),
            answers,
            patch=[i.patch for i in first],
            context_files=[[i.bug_file] for i in first],
            context_contents=[[i.files[i.bug_file]] for i in first],
        )
        if expect is not None:
            assert set(rewards) == expect
        else:
            assert all(r < 1.0 for r in rewards)
    instance = first[0]
    _, ranked = td.localization_reply(instance, rng, 0.0)
    assert parse_ranked_files(think("x", ranked))[0] == instance.bug_file
    prompts = td.swe_prompts(first, tmp_path / "a")
    assert (
        instance.issue in prompts["repair"][0]
        and instance.files[instance.bug_file].strip() in (prompts["repair"][0])
    )
