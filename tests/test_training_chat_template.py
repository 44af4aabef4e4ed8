"""The chat template a model is trained with travels with it: the Jinja template saved on the
tokenizer renders exactly what `training/chat_template.py` renders (flags included), and a
model written by `cascade train` is usable by `cascade generate --backend hf` as is.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from test_training_sft import gsm8k_chats, tiny_manifest, write_jsonl

from curation.generate.backend import GenerationRequest, Sampling
from curation.generate.hf import HfBackend, render_chat
from training.chat_template import CHAT_TEMPLATE, Message, render_prompt, render_text
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
    (final,) = run_cascade(manifest, show_progress=False, say=lambda _: None)
    saved = json.loads((final / "tokenizer_config.json").read_text())
    template = saved.get("chat_template") or (final / "chat_template.jinja").read_text()
    assert template == CHAT_TEMPLATE
    backend = HfBackend(str(final), batch_size=2, device="cpu")
    sampling = Sampling(max_new_tokens=8, temperature=0.0, top_p=1.0)
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
