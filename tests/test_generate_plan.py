"""Response splitting, teacher mode switches, job planning and fingerprints (no model)."""

from __future__ import annotations

import json

import pytest

from curation.generate import (
    SamplingParams,
    Teacher,
    plan_jobs,
    prompts_from_records,
    split_response,
)
from curation.generate.split import prompt_opens_reasoning
from curation.generate.vllm import seed_runs

# -- splitting ------------------------------------------------------------------------------


def test_split_think_block_then_answer() -> None:
    got = split_response("<think>\nLet x = 2.\nSo 4.\n</think>\n\nThe answer is \\boxed{4}.")
    assert got.reasoning == "Let x = 2.\nSo 4."
    assert got.answer == "The answer is \\boxed{4}."
    assert got.reasoning_closed


def test_split_without_reasoning_keeps_everything_as_answer() -> None:
    got = split_response("  Paris is the capital.  ")
    assert got.reasoning is None
    assert got.answer == "Paris is the capital."


def test_split_empty_think_block_is_no_reasoning() -> None:
    got = split_response("<think>\n\n</think>\n\nHello")
    assert got.reasoning is None
    assert got.answer == "Hello"


def test_split_reasoning_opened_in_prompt() -> None:
    # DeepSeek-R1-0528 templates end the prompt with "<think>\n": the reply starts inside it.
    got = split_response("I add them: 5.\n</think>\n5", opened_in_prompt=True)
    assert (got.reasoning, got.answer, got.reasoning_closed) == ("I add them: 5.", "5", True)
    # Even without the hint, a lone closing tag closes a reasoning opened in the prompt.
    assert split_response("work\n</think>\n5").reasoning == "work"


def test_split_truncated_reasoning_has_no_answer() -> None:
    got = split_response("<think>\nstep 1, step 2, st")
    assert got.reasoning == "step 1, step 2, st"
    assert got.answer == ""
    assert not got.reasoning_closed
    cut = split_response("still thinking", opened_in_prompt=True)
    assert (cut.reasoning, cut.answer, cut.reasoning_closed) == ("still thinking", "", False)


def test_split_only_first_close_tag_ends_reasoning() -> None:
    got = split_response("<think>a</think>b</think>c")
    assert got.reasoning == "a"
    assert got.answer == "b</think>c"


def test_split_server_separated_reasoning() -> None:
    got = split_response("  42 ", reasoning="  think hard ")
    assert (got.reasoning, got.answer) == ("think hard", "42")


def test_prompt_opens_reasoning() -> None:
    assert prompt_opens_reasoning("<|im_start|>assistant\n<think>\n")
    assert not prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not prompt_opens_reasoning("<|im_start|>assistant\n")


# -- teachers and jobs ----------------------------------------------------------------------

CHAT = ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"})


def test_flag_switch_marks_every_user_turn() -> None:
    teacher = Teacher("m", mode_switch="flag")
    chat = (*CHAT, {"role": "assistant", "content": "4"}, {"role": "user", "content": "3+3?"})
    sent = teacher.messages_for(chat, "no_think")
    assert [m["content"] for m in sent] == ["Be brief.", "2+2? /no_think", "4", "3+3? /no_think"]
    assert teacher.messages_for(chat, "think")[1]["content"] == "2+2? /think"
    assert teacher.template_kwargs_for("think") == {}


def test_template_and_model_switches() -> None:
    qwen = Teacher("qwen3", mode_switch="template")
    assert qwen.template_kwargs_for("no_think") == {"enable_thinking": False}
    assert qwen.messages_for(CHAT, "no_think") == CHAT
    pair = Teacher("r1", mode_switch="model", no_think_model="v3")
    assert (pair.model_for("think"), pair.model_for("no_think")) == ("r1", "v3")
    with pytest.raises(ValueError, match="non-thinking model"):
        Teacher("r1", mode_switch="model")
    with pytest.raises(ValueError, match="non-thinking model"):
        Teacher("r1", mode_switch="flag", no_think_model="v3")


def test_plan_jobs_seeds_fingerprints_and_parallel_modes() -> None:
    sampling = SamplingParams(max_new_tokens=64, temperature=0.6, top_p=0.95, top_k=20)
    prompts = [("p1", CHAT), ("p2", ({"role": "user", "content": "3+3?"},))]
    jobs = plan_jobs(
        prompts, Teacher("m"), modes=["think", "no_think"], k=3, sampling=sampling, seed=7
    )
    assert len(jobs) == 2 * 2 * 3
    assert [j.request.seed for j in jobs[:3]] == [7, 8, 9]
    assert len({j.request.key for j in jobs}) == len(jobs)
    assert {(j.prompt_id, j.mode) for j in jobs} == {
        (p, m) for p in ("p1", "p2") for m in ("think", "no_think")
    }
    # The stored messages are the chat before any mode flag; keys are stable across plans.
    assert json.loads(jobs[0].messages_json) == list(CHAT)
    again = plan_jobs(
        prompts, Teacher("m"), modes=["think", "no_think"], k=3, sampling=sampling, seed=7
    )
    assert [j.request.key for j in again] == [j.request.key for j in jobs]


@pytest.mark.parametrize(
    "change",
    [
        {"teacher": Teacher("other")},
        {"teacher": Teacher("m", mode_switch="flag")},
        {"sampling": SamplingParams(max_new_tokens=64, temperature=0.7)},
        {"sampling": SamplingParams(max_new_tokens=65, temperature=0.6)},
        {"seed": 1},
        {"prompts": [("p1", ({"role": "user", "content": "2+2 ?"},))]},
    ],
)
def test_fingerprint_changes_with_each_input(change: dict) -> None:
    base = {
        "prompts": [("p1", ({"role": "user", "content": "2+2?"},))],
        "teacher": Teacher("m"),
        "sampling": SamplingParams(max_new_tokens=64, temperature=0.6),
        "seed": 0,
    }

    def key(args: dict) -> str:
        job = plan_jobs(
            args["prompts"],
            args["teacher"],
            modes=["think"],
            k=1,
            sampling=args["sampling"],
            seed=args["seed"],
        )[0]
        return job.request.key

    assert key({**base, **change}) != key(base)


def test_fingerprint_ignores_prompt_id() -> None:
    chat = ({"role": "user", "content": "2+2?"},)
    one = plan_jobs([("a", chat)], Teacher("m"), modes=["think"], k=1, sampling=SamplingParams())
    two = plan_jobs([("b", chat)], Teacher("m"), modes=["think"], k=1, sampling=SamplingParams())
    assert one[0].request.key == two[0].request.key


def test_sampling_rejects_bad_values() -> None:
    for bad in ({"top_p": 0.0}, {"temperature": -1.0}, {"max_new_tokens": 0}, {"top_k": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SamplingParams(**bad)


def test_seed_runs_group_consecutive_seeds_for_vllm() -> None:
    sampling = SamplingParams(max_new_tokens=8)
    jobs = plan_jobs([("p", CHAT)], Teacher("m"), modes=["think"], k=6, sampling=sampling)
    missing = [j.request for j in jobs if j.sample_index not in (2,)]  # sample 2 was cached
    runs = seed_runs(list(reversed(missing)))
    assert sorted([r.seed for r in run] for run in runs) == [[0, 1], [3, 4, 5]]


# -- input rows -----------------------------------------------------------------------------


def test_prompts_from_records_text_messages_and_ids() -> None:
    records = [
        {"id": 5, "problem": "What is 1+1?"},
        {"problem": "What  is 1+1? "},
        {"messages": json.dumps([{"role": "user", "content": "hi"}])},
    ]
    prompts = prompts_from_records(records, origin="in.jsonl", system="Be brief.")
    assert prompts[0][0] == "5"
    assert prompts[0][1] == (
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 1+1?"},
    )
    assert prompts[2][1][-1] == {"role": "user", "content": "hi"}
    single = prompts_from_records(
        [{"problem": "What is 1+1?"}, {"problem": " what  IS 1+1?"}], origin="x"
    )
    assert single[0][0] == single[1][0]  # the id ingest gives: normalized prompt hash


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"question": "2+2?"}, r"in\.jsonl:12: no chat to send: field 'problem'"),
        ({"problem": "   "}, r"in\.jsonl:12: no chat to send"),
        ({"messages": "[not json"}, r"in\.jsonl:12: field 'messages' is not valid JSON"),
        ({"messages": [{"role": "bot", "content": "x"}]}, r"in\.jsonl:12: messages\[0\]"),
        ({"messages": [{"role": "assistant", "content": "x"}]}, "last turn"),
    ],
)
def test_prompts_from_records_names_the_bad_line(record: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        prompts_from_records([{"problem": "ok"}, record], origin="in.jsonl", line_numbers=[3, 12])
