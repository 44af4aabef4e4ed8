"""The chat template a model is trained with travels with it: the Jinja template saved on the
tokenizer renders exactly what `curation/generate/chat_template.py` renders (flags included), and a
model written by `cascade train` is usable by `cascade generate --backend hf` as is.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_training_sft import gsm8k_chats, tiny_manifest, write_jsonl

from curation.generate.backend import render_chat
from curation.generate.hf import HfBackend
from schemas.chat_template import (
    CHAT_TEMPLATE,
    IGNORE_INDEX,
    ChatFormatError,
    Message,
    parse_chat_tools,
    parse_messages,
    parse_prompt,
    render_prompt,
    render_text,
    tokenize_chat,
)
from schemas.generation import GenerationRequest, SamplingParams
from training.models import train_bpe_tokenizer
from training.runner import run_cascade

torch.set_num_threads(1)

CHATS = [
    [Message("user", "Hi"), Message("assistant", "Hello")],
    [
        Message("system", "Be brief."),
        Message("user", "Compute 17*23."),
        Message("assistant", "391", reasoning="17*23 = 340 + 51."),
        Message("user", "And 2+2?"),
        Message("assistant", "4"),
    ],
    [
        Message("system", "Tools: <tools>[]</tools>"),
        Message("user", "Weather? /no_think"),  # a turn with its own flag keeps it
        Message("assistant", '<tool_call>{"name": "w"}</tool_call>'),
        Message("tool", '{"t": 21}'),
        Message("assistant", "21 C", reasoning=""),
        Message("user", "Thanks /think"),
        Message("assistant", "Welcome"),
    ],
    [
        Message("user", "Ünïcödé and {braces} and a trailing newline\n"),
        Message("assistant", "ok\n"),
    ],
]


def as_dicts(chat: list[Message]) -> list[dict]:
    return [
        {"role": m.role, "content": m.content}
        | ({"reasoning": m.reasoning} if m.reasoning is not None else {})
        for m in chat
    ]


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe_tokenizer(["hello world <think> /think"], 300)


@pytest.mark.parametrize("chat", CHATS)
@pytest.mark.parametrize("mode", ["think", "no_think"])
def test_jinja_template_renders_exactly_what_training_renders(tokenizer, chat, mode) -> None:
    assert tokenizer.chat_template == CHAT_TEMPLATE
    full = tokenizer.apply_chat_template(as_dicts(chat), tokenize=False, mode=mode)
    assert full == render_text(chat, mode)
    prompt = chat[: max(i for i, m in enumerate(chat) if m.role == "user") + 1]
    for kwargs in ({"mode": mode}, {"enable_thinking": mode == "think"}):
        rendered = tokenizer.apply_chat_template(
            as_dicts(prompt), tokenize=False, add_generation_prompt=True, **kwargs
        )
        assert rendered == render_prompt(prompt, mode)
    default = tokenizer.apply_chat_template(as_dicts(chat), tokenize=False)
    assert default == render_text(chat, "think")  # no switch given: thinking, as trained


def test_jinja_template_refuses_other_mode_spellings(tokenizer) -> None:
    from jinja2.exceptions import TemplateError

    with pytest.raises(TemplateError, match="mode must be 'think' or 'no_think'"):
        tokenizer.apply_chat_template(as_dicts(CHATS[0]), tokenize=False, mode="thinking")


def test_a_trained_model_generates_through_the_hf_backend(tmp_path: Path) -> None:
    data = tmp_path / "chat.jsonl"
    sha = write_jsonl(data, gsm8k_chats(16))
    manifest = tiny_manifest(tmp_path, data, sha, "run", max_steps=2)
    (final,) = run_cascade(manifest, say=lambda _: None)
    saved = json.loads((final / "tokenizer_config.json").read_text())
    template = saved.get("chat_template") or (final / "chat_template.jinja").read_text()
    assert template == CHAT_TEMPLATE
    backend = HfBackend(str(final), batch_size=2, device="cpu")
    sampling = SamplingParams(max_new_tokens=8, temperature=0.0, top_p=1.0)
    requests = [
        GenerationRequest(
            key=mode,
            model=str(final),
            messages=({"role": "user", "content": "What is 2 + 3?"},),
            sampling=sampling,
            seed=0,
            template_kwargs={"mode": mode},
        )
        for mode in ("think", "no_think")
    ]
    out = {c.key: c for c in backend.generate(requests)}
    assert set(out) == {"think", "no_think"}
    assert all(c.completion_tokens > 0 for c in out.values())
    for request in requests:  # the backend renders the prompt exactly as training did
        rendered = render_chat(backend.tokenizer, request)
        assert rendered == render_prompt([Message("user", "What is 2 + 3?")], request.key)


# ------------------------------------------------------------------ tool calling ------------

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME = {"name": "get_time", "description": "Local time", "parameters": {"type": "object"}}
TOOL_CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Oslo and Bergen?"},
    {
        "role": "assistant",
        "content": None,  # OpenAI's form of a turn that only calls tools
        "reasoning": "Two cities: two calls.",
        "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
            {"name": "get_weather", "arguments": {"city": "Bergen"}},
        ],
    },
    {"role": "tool", "tool_call_id": "1", "content": '{"c": 3}'},
    {"role": "tool", "tool_call_id": "2", "content": '{"c": 5}'},
    {"role": "assistant", "content": "Oslo 3 C, Bergen 5 C.", "reasoning": "Both read."},
    {"role": "user", "content": "Thanks!"},
    {"role": "assistant", "content": "You're welcome."},
]  # fmt: skip
TOOL_CHAT_TEXT = (
    "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more of these functions "
    "to help with the user's request. Their signatures are listed inside <tools></tools>:\n"
    "<tools>\n"
    '{"function": {"description": "Current weather in a city", "name": "get_weather", '
    '"parameters": {"properties": {"city": {"type": "string"}}, "required": ["city"], '
    '"type": "object"}}, "type": "function"}\n'
    '{"description": "Local time", "name": "get_time", "parameters": {"type": "object"}}\n'
    "</tools>\n\nTo call a function, write a JSON object with its name and arguments inside "
    "<tool_call></tool_call> tags, one call per block:\n<tool_call>\n"
    '{"name": <function name>, "arguments": <arguments as a JSON object>}\n</tool_call>'
    "<|im_end|>\n"
    "<|im_start|>user\nWeather in Oslo and Bergen? /think<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<think>\nTwo cities: two calls.\n</think>\n\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Bergen"}}\n</tool_call>'
    "<|im_end|>\n"
    '<|im_start|>user\n<tool_response>\n{"c": 3}\n</tool_response>\n'
    '<tool_response>\n{"c": 5}\n</tool_response><|im_end|>\n'
    "<|im_start|>assistant\n<think>\nBoth read.\n</think>\nOslo 3 C, Bergen 5 C.<|im_end|>\n"
    "<|im_start|>user\nThanks! /think<|im_end|>\n"
    "<|im_start|>assistant\nYou're welcome.<|im_end|>\n"
)


def test_a_tool_conversation_renders_in_the_qwen3_convention(tokenizer) -> None:
    chat = parse_messages(TOOL_CHAT, "t")
    tools = parse_chat_tools([WEATHER, TIME], "t")
    assert render_text(chat, "think", tools) == TOOL_CHAT_TEXT
    # the saved Jinja template renders the same, from the same dicts and tools
    dicts = [{k: v for k, v in m.items() if k != "tool_call_id"} for m in TOOL_CHAT]
    dicts[2]["tool_calls"] = [{"name": "get_weather", "arguments": {"city": "Oslo"}}] + dicts[2][
        "tool_calls"
    ][1:]
    jinja = tokenizer.apply_chat_template(
        dicts, tools=[WEATHER, TIME], tokenize=False, mode="think"
    )
    assert jinja == TOOL_CHAT_TEXT
    prompt = tokenizer.apply_chat_template(
        dicts[:5], tools=[WEATHER, TIME], tokenize=False, add_generation_prompt=True, mode="think"
    )
    assert prompt == render_prompt(chat[:5], "think", tools)
    # without tools nothing changes: no tools section, no system turn added
    assert "<tools>" not in render_text(chat[1:2] + chat[-1:], "think")


def test_only_assistant_turns_and_their_tool_calls_carry_loss(tokenizer) -> None:
    chat = parse_messages(TOOL_CHAT, "t")
    tokens = tokenize_chat(tokenizer, chat, "think", parse_chat_tools([WEATHER, TIME], "t"))
    assert tokenizer.decode(tokens.input_ids) == TOOL_CHAT_TEXT
    spans, current, context = [], [], []
    for tok, is_target in zip(tokens.input_ids, tokens.target_mask, strict=True):
        (current if is_target else context).append(tok)
        if not is_target and current:
            spans.append(tokenizer.decode(current))
            current = []
    assert spans == [
        "<think>\nTwo cities: two calls.\n</think>\n\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Bergen"}}\n</tool_call>'
        "<|im_end|>",
        "<think>\nBoth read.\n</think>\nOslo 3 C, Bergen 5 C.<|im_end|>",
        "You're welcome.<|im_end|>",
    ]
    untrained = tokenizer.decode(context)
    for text in ("<tools>", "Be brief.", '<tool_response>\n{"c": 3}\n</tool_response>', "Thanks!"):
        assert text in untrained  # system, tools, tool results and users: context only
    labels = tokens.next_token_labels()
    assert [t for t, lab in enumerate(labels) if lab != IGNORE_INDEX] == [
        t - 1 for t in range(1, len(labels)) if tokens.target_mask[t]
    ]
    assert all(labels[t] == tokens.input_ids[t + 1] for t, lab in enumerate(labels) if lab >= 0)


@pytest.mark.parametrize(
    ("edit", "error"),
    [
        (lambda c: c[2]["tool_calls"][0]["function"].update(arguments="{not json"), "not JSON"),
        (lambda c: c[2]["tool_calls"][1].update(arguments=[1]), "must be a JSON object"),
        (lambda c: c[1].update(tool_calls=[{"name": "f"}]), "(user) has tool_calls"),
        (lambda c: c[2]["tool_calls"][1].pop("name"), "needs a string name"),
    ],
)
def test_malformed_tool_calls_name_the_message(edit, error) -> None:
    import copy

    chat = copy.deepcopy(TOOL_CHAT)
    edit(chat)
    with pytest.raises(ChatFormatError, match="^rows.jsonl row 3: message [12]") as info:
        parse_messages(chat, "rows.jsonl row 3")
    assert error in str(info.value)
    with pytest.raises(ChatFormatError, match=r"row 3: tools: tool 0 is not a function schema"):
        parse_chat_tools('[{"description": "no name"}]', "row 3: tools")


def test_the_sft_loader_reads_rows_with_tools_and_tool_calls(tmp_path: Path, tokenizer) -> None:
    """Rows as the sft_tool_calling recipe writes them: `messages` and `tools` as JSON text."""
    import hashlib

    from schemas.training_manifest import DatasetRef, SFTStage
    from training.datasets import load, verify
    from training.sft_data import conversations, tokenize_stage

    rows = [
        {"messages": json.dumps(TOOL_CHAT), "tools": json.dumps([WEATHER, TIME]), "mode": "think"},
        {"messages": json.dumps(TOOL_CHAT[1:2] + TOOL_CHAT[-1:]), "tools": None, "mode": "think"},
    ]
    data = tmp_path / "tools.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sha = hashlib.sha256(data.read_bytes()).hexdigest()
    ref = DatasetRef(ref="tools.jsonl", content_hash=sha, mode_column="mode")
    dataset = load(verify(ref, "x", tmp_path, None))
    with_tools, plain = conversations(dataset)
    assert with_tools.tools == (WEATHER, TIME) and plain.tools == ()
    assert [len(m.tool_calls) for m in with_tools.messages] == [0, 0, 2, 0, 0, 0, 0, 0]
    stage = SFTStage.model_validate(
        {
            "name": "s",
            "type": "sft",
            "datasets": [ref.model_dump()],
            "optimizer": {"learning_rate": 1e-3},
            "batch": {"global_batch_size": 1, "micro_batch_size": 1},
            "max_seq_len": 4096,
            "max_steps": 1,
        }
    )
    data_ = tokenize_stage(stage, [dataset], tokenizer)
    assert len(data_.samples) == 2
    assert tokenizer.decode(data_.samples[0].input_ids) == TOOL_CHAT_TEXT


def test_tool_call_docstring_examples() -> None:
    import doctest

    import schemas.tool_calls

    result = doctest.testmod(schemas.tool_calls)
    assert result.attempted > 0 and result.failed == 0


def test_a_tool_schema_renders_the_same_whatever_its_key_order(tokenizer) -> None:
    """SFT rows store schemas as their writer ordered them (often sorted); the environment
    offering the same tool holds them in another order. The prompt must not differ."""
    shuffled = {"function": dict(reversed(list(WEATHER["function"].items()))), "type": "function"}
    chat = parse_prompt([{"role": "user", "content": "Oslo?"}], "t")
    assert render_prompt(chat, "think", (WEATHER,)) == render_prompt(chat, "think", (shuffled,))
    jinja = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": "Oslo?"}], tools=[t], tokenize=False, mode="think"
        )
        for t in (WEATHER, shuffled)
    ]
    assert jinja[0] == jinja[1]
