"""sft_general end to end against scripted thinking and non-thinking teachers: exact rows kept
and dropped, both modes for every kept prompt, second turns that follow their first, and rows
the SFT trainer reads as they are."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from builders import sft_general
from builders.runner import Build, BuildError, recipe_steps
from curation.general.conversations import concatenate_conversations
from curation.general.ground_truth import chosen_letter, ground_truth_check, stated_answer
from curation.prompt_ids import prompt_ids
from curation.verify.math import MathVerifier
from lake.catalog import Lake
from lake.steps import run_steps
from schemas.chat_template import render_text
from schemas.training_manifest import DatasetRef
from tests.scripted_openai import ScriptedServer
from training.datasets import LoadedDataset, VerifiedRef
from training.sft_data import conversations

POEM = "Rewrite your previous answer as a poem."
FORMAL = "Rewrite your previous answer in a more formal tone."
PROMPTS = [  # uid, prompt, reference, category
    ("g:1", "Write a short poem about the sea.", None, "creative_writing"),
    ("g:2", "Which planet is the Red Planet? A) Venus B) Mars C) Jupiter", "B", "knowledge"),
    ("g:3", "Compute 12 times 12.", "144", "math"),
    ("g:4", "How can I sleep better?", None, "chat"),
    ("g:5", "Say this in all lowercase: The Cat Sat.", None, "instruction_following"),
    ("g:6", "Tell me a fun fact about octopuses.", None, "chat"),
    ("g:7", "compute 12 times 12. ", "144", "math"),  # a copy of g:3
    ("g:8", "Which gas do plants absorb? (A) Oxygen (B) Carbon dioxide", "(B)", "knowledge"),
    ("g:9", "Suggest a name for a coffee shop.", None, "chat"),
    ("g:10", "Write a haiku about autumn leaves.", None, "creative_writing"),
]


def r1(user: str, index: int) -> str:
    """The thinking teacher."""
    if user == POEM:
        return "<think>I will write a poem and"  # cut before it answers
    if user.startswith("Rewrite your previous answer"):
        return f"<think>rewrite it</think>R1 rewrite: {user}"
    if "Red Planet" in user:
        return "<think>Mars looks red.</think>The answer is B."
    if "12 times 12" in user:
        return "<think>12*12=144</think>\\boxed{144}"
    if "sleep" in user:
        return "<think>Sleep hygiene matters and"  # cut: truncated
    if "lowercase" in user and index == 1:
        return "<think>long</think>" + "word " * 60  # over the 40-token limit
    if "absorb" in user:
        return "<think>photosynthesis</think>Plants take in carbon dioxide.\n**B**"
    return f"<think>about {user[:12]}</think>R1 answer {index}: {user}"


def v3(user: str, index: int) -> str:
    """The non-thinking teacher."""
    if user.startswith("Rewrite your previous answer"):
        return f"V3 rewrite: {user}"
    if "Red Planet" in user:
        return "Answer: C"  # wrong option
    if "12 times 12" in user:
        return "The answer is 144."
    if "octopuses" in user:
        return "<think>hmm</think>Octopuses have three hearts."  # reasoning in no_think
    if "absorb" in user:
        return "I think B) Carbon dioxide is right. Final answer: B"
    return f"V3 answer {index}: {user}"


def frame() -> pl.DataFrame:
    texts = [p for _, p, _, _ in PROMPTS]
    return pl.DataFrame(
        {
            "uid": [u for u, _, _, _ in PROMPTS],
            "id": prompt_ids(pl.Series(texts)),
            "source": ["general"] * len(PROMPTS),
            "source_id": [u for u, _, _, _ in PROMPTS],
            "domain": ["chat"] * len(PROMPTS),
            "problem": texts,
            "answer": [a for _, _, a, _ in PROMPTS],
            "metadata": [json.dumps({"category": c}) for _, _, _, c in PROMPTS],
        },
        schema_overrides={"answer": pl.String},
    )


def teacher(server: ScriptedServer, model: str, mode: str) -> dict:
    return {
        "model": model,
        "backend": "openai",
        "backend_options": {"base_url": server.base_url, "api_key_env": None},
        "mode": mode,
        "k": 1,
        "max_new_tokens": 256,
    }


@pytest.fixture
def server():
    with ScriptedServer({"r1": r1, "v3": v3}) as s:
        yield s


def params(server: ScriptedServer, **changes) -> dict:
    return {
        **sft_general.DEFAULTS,
        "think_teacher": teacher(server, "r1", "think"),
        "no_think_teacher": teacher(server, "v3", "no_think"),
        "max_response_tokens": 40,
        "rewrite_share": 1.0,
        "rewrite_requirements": [POEM, FORMAL],
        "concat_share": 1.0,
        **changes,
    }


# The reply rows that survive filtering and pairing, in order.
REPLIES = [
    *[f"g:1/{m}/{i}" for m in ("think", "no_think") for i in range(3)],
    "g:3/think/0",
    "g:3/no_think/0",
    "g:5/think/0",
    "g:5/think/2",
    *[f"g:5/no_think/{i}" for i in range(3)],
    "g:8/think/0",
    "g:8/no_think/0",
    "g:9/think/0",
    "g:9/no_think/0",
    *[f"g:10/{m}/{i}" for m in ("think", "no_think") for i in range(3)],
]


def first_turns(uid: str) -> list[dict]:
    """The conversation a reply row starts as: the prompt and the scripted reply."""
    prompt_uid, mode, index = uid.rsplit("/", 2)
    prompt = next(p for u, p, _, _ in PROMPTS if u == prompt_uid)
    raw = (r1 if mode == "think" else v3)(prompt, int(index))
    if mode == "think":
        reasoning, answer = raw.removeprefix("<think>").split("</think>")
        reply = {"role": "assistant", "content": answer.strip(), "reasoning": reasoning.strip()}
    else:
        reply = {"role": "assistant", "content": raw}
    return [{"role": "user", "content": prompt}, reply]


def test_sft_general_end_to_end(lake: Lake, server: ScriptedServer, tmp_path: Path) -> None:
    lake.commit("sft_general_sources", frame(), kind="prompts")
    build = Build(lake=lake, profile="default", workdir=tmp_path)
    run = run_steps(
        lake,
        "sft_general_sources",
        sft_general.steps(params(server), build),
        out="sft_general",
        kind="generic",
        producer="test",
    )
    rows = pl.from_arrow(lake.read("sft_general")).to_dicts()
    drops = lake.sql(
        "SELECT uid, step, reason, detail FROM drops WHERE output_table = 'sft_general'"
    ).fetchall()
    before_concat = {u: (s, r) for u, s, r, _ in drops if r != "concatenated"}
    assert before_concat == {
        "g:7": ("exact_dedup", "exact_duplicate"),
        "g:4/think/0": ("response_filters", "truncated"),
        "g:5/think/1": ("response_filters", "too_long"),
        "g:6/no_think/0": ("reply_mode", "unexpected_reasoning"),
        "g:2/no_think/0": ("ground_truth", "ground_truth_mismatch"),
        "g:2/think/0": ("parallel_pairs", "unpaired"),
        "g:4/no_think/0": ("parallel_pairs", "unpaired"),
        "g:6/think/0": ("parallel_pairs", "unpaired"),
    }
    funnel = [(f.step, f.rows_in, f.rows_out) for f in run.funnel]
    assert funnel[:8] == [
        ("exact_dedup", 10, 9),
        ("parallel_responses", 9, 30),  # scarce g:1, g:5, g:10 get 3 replies per mode
        ("response_filters", 30, 28),
        ("reply_mode", 28, 27),
        ("ground_truth", 27, 26),
        ("parallel_pairs", 26, 23),
        ("conversations", 23, 23),
        ("rewrite_turns", 23, 23),
    ]
    concatenated = {
        u: json.loads(d)["concatenated_into"] for u, _, r, d in drops if r == "concatenated"
    }
    assert funnel[8] == ("concatenate", 23, 23 - len(concatenated))

    # Every surviving reply is in exactly one conversation; nothing lost or repeated.
    parts = [uid for row in rows for uid in row["turn_uids"]]
    assert sorted(parts) == sorted(REPLIES)
    # Both modes for every kept prompt.
    modes: dict[str, set[str]] = {}
    for uid in parts:
        prompt_uid, mode, _ = uid.rsplit("/", 2)
        modes.setdefault(prompt_uid, set()).add(mode)
    assert modes == {p: {"think", "no_think"} for p in ("g:1", "g:3", "g:5", "g:8", "g:9", "g:10")}

    # Every conversation, turn by turn, and every second turn after its own first.
    rewrites = 0
    for row in rows:
        messages = json.loads(row["messages"])
        expected = []
        for uid in row["turn_uids"]:
            expected += first_turns(uid)
        if row["rewrite_status"] == "added":
            rewrites += 1
            assert row["turns"] == 2 and len(row["turn_uids"]) == 1
            ask = row["rewrite_requirement"]
            answer = f"R1 rewrite: {ask}" if row["mode"] == "think" else f"V3 rewrite: {ask}"
            expected += [{"role": "user", "content": ask}, {"role": "assistant", "content": answer}]
            if row["mode"] == "think":
                expected[-1]["reasoning"] = "rewrite it"
            # The teacher of the row's mode saw exactly this row's first turn before the ask.
            history = [expected[0], {"role": "assistant", "content": expected[1]["content"]}]
            sent = [r["model"] for r in server.requests if r["messages"] == [*history, expected[2]]]
            assert sent == ["r1" if row["mode"] == "think" else "v3"]
        assert messages == expected
        assert row["turns"] == len(messages) // 2
        assert {uid.rsplit("/", 2)[1] for uid in row["turn_uids"]} == {row["mode"]}
    creative = [r for r in rows if r["uid"].startswith(("g:1/", "g:10/"))]
    assert creative and all(r["rewrite_requirement"] in (POEM, FORMAL) for r in creative)
    assert all(r["rewrite_requirement"] is None for r in rows if r not in creative)
    chosen = creative
    poems = [r for r in chosen if r["rewrite_requirement"] == POEM and r["mode"] == "think"]
    assert all(r["rewrite_status"] == "truncated" for r in poems)
    assert rewrites == sum(1 for r in chosen if r["rewrite_status"] == "added") > 0
    assert len(concatenated) > 0
    for part, into in concatenated.items():
        joined = next(r for r in rows if r["uid"] == into)
        assert part in joined["turn_uids"] and joined["turn_uids"][0] == into
        assert len({u.rsplit("/", 2)[0] for u in joined["turn_uids"]}) == len(joined["turn_uids"])

    # The SFT trainer reads the rows as they are, in their own modes.
    ref = DatasetRef(ref="sft_general@1", content_hash="0" * 64, mode_column="mode")
    dataset = LoadedDataset(VerifiedRef(ref, "test", "lake:sft_general@1"), rows)
    for conversation, row in zip(conversations(dataset), rows, strict=True):
        assert conversation.mode == row["mode"]
        text = render_text(conversation.messages, conversation.mode)
        assert ("<think>" in text) == (row["mode"] == "think")

    # A second build asks the teachers nothing new.
    asked = len(server.requests)
    run_steps(
        lake,
        "sft_general_sources",
        sft_general.steps(params(server), build),
        out="sft_general",
        kind="generic",
        producer="test",
    )
    assert len(server.requests) == asked
    assert lake.resolve("sft_general@2").content_hash == lake.resolve("sft_general@1").content_hash


def test_ground_truth_reads_options_and_math_answers() -> None:
    letters = "ABCDEFGHIJ"
    assert chosen_letter("<think>maybe A</think>The answer is (C).", letters) == "C"
    assert chosen_letter("Answer: d", letters) == "D"
    assert chosen_letter("So we get \\boxed{\\text{B}}", letters) == "B"
    assert chosen_letter("Carbon dioxide.\n**B**", letters) == "B"
    assert chosen_letter("<think>The answer is A</think>I am not sure.", letters) is None
    assert stated_answer("\\boxed{\\frac{1}{2}} and more") == "\\frac{1}{2}"
    assert stated_answer("So the final answer is $0.5$.") == "0.5"
    frame = pl.DataFrame(
        {
            "uid": [f"r{i}" for i in range(7)],
            "answer": ["B", "(b)", "1/2", "1/2", "1/2", None, "  "],
            "response": [
                "The answer is B.",
                "Answer: A",
                "<think>half</think>The answer is $0.5$.",
                "\\boxed{0.4}",
                "It is about a half.",
                "Any text",
                "Any text",
            ],
        }
    )
    # A generous deadline: the first comparison also pays math-verify's import in the worker.
    verifier = MathVerifier(workers=1, timeout_s=120)
    try:
        result = ground_truth_check(frame, verifier=verifier)
    finally:
        verifier.close()
    assert result.kept["uid"].to_list() == ["r0", "r2", "r5", "r6"]
    assert result.kept["ground_truth_match"].to_list() == [True, True, None, None]
    assert result.kept["reference_kind"].to_list() == ["mcq", "math", None, None]
    dropped = {r["uid"]: r["ground_truth_detail"] for r in result.dropped.to_dicts()}
    assert dropped["r1"] == "chose A, reference B"
    assert dropped["r4"] == "no answer stated"
    assert set(dropped) == {"r1", "r3", "r4"}
    assert set(result.dropped["reason"]) == {"ground_truth_mismatch"}


def conversation_rows(uids: list[str]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "uid": uids,
            "prompt_uid": [u.rsplit("/", 2)[0] for u in uids],
            "mode": [u.rsplit("/", 2)[1] for u in uids],
            "messages": [json.dumps(first_turns_of(u)) for u in uids],
            "turns": [1] * len(uids),
            "turn_uids": [[u] for u in uids],
        }
    )


def first_turns_of(uid: str) -> list[dict]:
    return [{"role": "user", "content": f"q {uid}"}, {"role": "assistant", "content": f"a {uid}"}]


def test_concatenation_joins_unrelated_samples_of_one_mode() -> None:
    uids = [f"p{p}/{m}/{i}" for p in range(4) for m in ("think", "no_think") for i in range(2)]
    rows = conversation_rows(uids)
    assert concatenate_conversations(rows, share=0.0, size=2).kept.equals(rows)
    result = concatenate_conversations(rows, share=1.0, size=2, seed=3)
    # 8 samples per mode from 4 prompts: 4 conversations of 2 per mode.
    assert result.kept.height == 8 and result.dropped.height == 8
    for row in result.kept.to_dicts():
        parts = row["turn_uids"]
        assert len(parts) == 2 and row["turns"] == 2 and parts[0] == row["uid"]
        assert len({p.rsplit("/", 2)[0] for p in parts}) == 2  # unrelated prompts
        assert {p.rsplit("/", 2)[1] for p in parts} == {row["mode"]}
        assert json.loads(row["messages"]) == [t for p in parts for t in first_turns_of(p)]
    into = dict(result.dropped.select("uid", "concatenated_into").iter_rows())
    assert all(into[u] in result.kept["uid"].to_list() for u in into)
    # Replies to one prompt only: nothing unrelated to join them with.
    same = conversation_rows(["p0/think/0", "p0/think/1", "p0/think/2"])
    assert concatenate_conversations(same, share=1.0, size=2).kept.height == 3
    with pytest.raises(ValueError, match="at least 2"):
        concatenate_conversations(rows, share=1.0, size=1)


def test_sft_general_step_list_and_teacher_modes(server: ScriptedServer) -> None:
    assert [s.name for s in recipe_steps(sft_general)] == [
        "exact_dedup",
        "parallel_responses",
        "response_filters",
        "reply_mode",
        "ground_truth",
        "parallel_pairs",
        "conversations",
        "rewrite_turns",
        "concatenate",
    ]
    settings = {"rewrite_share": 0.0, "concat_share": 0.0}
    assert [s.name for s in recipe_steps(sft_general, settings)][-1] == "conversations"
    swapped = {"think_teacher": teacher(server, "v3", "no_think")}
    with pytest.raises(BuildError, match="think_teacher must sample in mode 'think'"):
        recipe_steps(sft_general, swapped)
    with pytest.raises(BuildError, match="no_think_teacher is required"):
        recipe_steps(sft_general, {"no_think_teacher": None})
