"""ChatML rendering with Cascade-1 mode flags, and the assistant-only loss mask.

Format (Cascade 1, recipe section 2): every turn is `<|im_start|>{role}\\n{content}<|im_end|>\\n`;
` /think` or ` /no_think` is appended to each user message; a thinking reply is
`<think>\\n{reasoning}\\n</think>\\n{answer}` and a non-thinking reply is the answer alone (no
empty think block). A user turn that already ends with a flag keeps its own (the recipe switches
modes mid-conversation that way).

`CHAT_TEMPLATE` is the same format as a Jinja chat template; it is saved on every tokenizer the
trainer writes, so `apply_chat_template(messages, mode="think"|"no_think",
add_generation_prompt=True)` (or Qwen3's `enable_thinking=True|False`) renders a prompt exactly
as training did, and any transformers-based server can use a trained model as is.

Training targets are the assistant reply tokens plus the `<|im_end|>` that closes each reply
(so the model learns to stop); role headers, system/user/tool turns and the newline after
`<|im_end|>` are context only. Each piece is tokenized on its own and concatenated, so the mask
is exact by construction rather than recovered from character offsets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
PAD = "<|endoftext|>"
SPECIAL_TOKENS = (PAD, IM_START, IM_END, THINK_OPEN, THINK_CLOSE)
ROLES = ("system", "user", "assistant", "tool")
IGNORE_INDEX = -100
GENERATION_PROMPT = f"{IM_START}assistant\n"

Mode = Literal["think", "no_think"]
MODES: tuple[Mode, ...] = ("think", "no_think")
FLAGS: dict[Mode, str] = {"think": "/think", "no_think": "/no_think"}

CHAT_TEMPLATE = (
    "{%- set think = true -%}"
    "{%- if mode is defined -%}"
    "{%- if mode not in ['think', 'no_think'] -%}"
    "{{- raise_exception(\"mode must be 'think' or 'no_think', got \" ~ mode) -}}"
    "{%- endif -%}"
    "{%- set think = mode == 'think' -%}"
    "{%- elif enable_thinking is defined -%}"
    "{%- set think = enable_thinking -%}"
    "{%- endif -%}"
    "{%- set flag = ' /think' if think else ' /no_think' -%}"
    "{%- for message in messages -%}"
    "{%- if message.role not in ['system', 'user', 'assistant', 'tool'] -%}"
    "{{- raise_exception('unknown role ' ~ message.role) -}}"
    "{%- endif -%}"
    "{{- '<|im_start|>' + message.role + '\\n' -}}"
    "{%- if message.role == 'assistant' -%}"
    "{%- if message.reasoning is defined and message.reasoning is not none -%}"
    "{{- '<think>\\n' + message.reasoning + '\\n</think>\\n' -}}"
    "{%- endif -%}"
    "{{- message.content + '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'user' -%}"
    "{%- if message.content.endswith('/think') or message.content.endswith('/no_think') -%}"
    "{{- message.content + '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- message.content + flag + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- else -%}"
    "{{- message.content + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


class ChatFormatError(ValueError):
    """A conversation cannot be rendered (unknown role, no assistant turn, bad content)."""


@dataclass(frozen=True)
class Message:
    """One turn; `reasoning` (assistant only) is rendered inside <think>...</think>."""

    role: str
    content: str
    reasoning: str | None = None


@dataclass(frozen=True)
class TokenizedChat:
    """Token ids of a rendered chat and, per token, whether it is a training target."""

    input_ids: list[int]
    target_mask: list[bool]

    def next_token_labels(self) -> list[int]:
        """labels[t] = the token to predict at position t (masked with IGNORE_INDEX).

        Shifting here, per sample, means packed samples never predict across a boundary.
        """
        ids, mask = self.input_ids, self.target_mask
        labels = [ids[t + 1] if mask[t + 1] else IGNORE_INDEX for t in range(len(ids) - 1)]
        return [*labels, IGNORE_INDEX]


def parse_messages(raw: Sequence[object], where: str) -> list[Message]:
    """Turn dicts like {"role", "content", "reasoning"?} into Messages, naming bad entries.

    The conversation must hold an assistant turn (something to train on).
    """
    messages = _parse(raw, where)
    if not any(m.role == "assistant" for m in messages):
        raise ChatFormatError(f"{where}: conversation has no assistant turn to train on")
    return messages


def parse_prompt(raw: object, where: str) -> list[Message]:
    """An RL prompt: a conversation that ends with a user (or tool) turn, awaiting the reply."""
    if not isinstance(raw, list | tuple) or not raw:
        raise ChatFormatError(f"{where}: prompt is not a non-empty list of messages")
    messages = _parse(raw, where)
    if messages[-1].role not in ("user", "tool"):
        raise ChatFormatError(
            f"{where}: prompt ends with a {messages[-1].role} turn; it must end with the user's"
        )
    return messages


def _parse(raw: Sequence[object], where: str) -> list[Message]:
    messages = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ChatFormatError(f"{where}: message {i} is {type(item).__name__}, not an object")
        role, content = item.get("role"), item.get("content")
        if role not in ROLES:
            raise ChatFormatError(
                f"{where}: message {i} has role {role!r}; expected one of {ROLES}"
            )
        if not isinstance(content, str):
            raise ChatFormatError(f"{where}: message {i} ({role}) has no string content")
        reasoning = item.get("reasoning")
        if reasoning is not None and role != "assistant":
            raise ChatFormatError(
                f"{where}: message {i} ({role}) has reasoning; only assistant may"
            )
        messages.append(Message(role, content, reasoning))
    return messages


def infer_mode(messages: Sequence[Message]) -> Mode:
    """Thinking iff any assistant reply carries reasoning (a field or a leading <think>)."""
    for m in messages:
        if m.role == "assistant" and (m.reasoning or m.content.lstrip().startswith(THINK_OPEN)):
            return "think"
    return "no_think"


def has_flag(content: str) -> bool:
    """True when a user turn already ends with `/think` or `/no_think`."""
    return content.endswith(tuple(FLAGS.values()))


def render_segments(messages: Sequence[Message], mode: Mode) -> list[tuple[str, bool]]:
    """The chat as (text, is_target) pieces; joining the texts gives the full ChatML string."""
    if mode not in MODES:
        raise ChatFormatError(f"mode must be one of {MODES}, got {mode!r}")
    flag = f" {FLAGS[mode]}"
    segments: list[tuple[str, bool]] = []
    for m in messages:
        segments.append((f"{IM_START}{m.role}\n", False))
        if m.role == "assistant":
            reply = m.content
            if m.reasoning is not None:
                reply = f"{THINK_OPEN}\n{m.reasoning}\n{THINK_CLOSE}\n{m.content}"
            segments.append((reply, True))
            segments.append((IM_END, True))
            segments.append(("\n", False))
        else:
            needs_flag = m.role == "user" and not has_flag(m.content)
            body = m.content + flag if needs_flag else m.content
            segments.append((f"{body}{IM_END}\n", False))
    return segments


def render_text(messages: Sequence[Message], mode: Mode) -> str:
    """The full ChatML string (what a generation-time template would produce)."""
    return "".join(text for text, _ in render_segments(messages, mode))


def render_prompt(messages: Sequence[Message], mode: Mode) -> str:
    """The chat followed by the assistant header: what a model continues at generation time."""
    return render_text(messages, mode) + GENERATION_PROMPT


def tokenize_chat(tokenizer: object, messages: Sequence[Message], mode: Mode) -> TokenizedChat:
    """Tokenize each segment separately so the target mask is exact."""
    return _tokenize_segments(tokenizer, render_segments(messages, mode))


def tokenize_prompt(tokenizer: object, messages: Sequence[Message], mode: Mode) -> list[int]:
    """Token ids of `render_prompt`, split exactly as training splits the same chat."""
    segments = [*render_segments(messages, mode), (GENERATION_PROMPT, False)]
    return _tokenize_segments(tokenizer, segments).input_ids


def _tokenize_segments(tokenizer: object, segments: list[tuple[str, bool]]) -> TokenizedChat:
    ids: list[int] = []
    mask: list[bool] = []
    for text, is_target in segments:
        piece = tokenizer(text, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
        ids.extend(piece)
        mask.extend([is_target] * len(piece))
    return TokenizedChat(ids, mask)
