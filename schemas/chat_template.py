"""Where a conversation becomes text and tokens: ChatML with Cascade-1 mode flags, the
assistant-only loss mask: the contract between the data a teacher writes and the model the
trainer trains.

Every trainer and generator renders through here: SFT and reward-model training, the RL loop's
prompts to the policy (`tokenize_prompt`, the same split training uses), and teacher data
re-rendered for the student (a teacher itself is prompted in its own tokenizer's template,
`curation.generate.backend.render_chat`).

Format (Cascade 1, recipe section 2): every turn is `<|im_start|>{role}\\n{content}<|im_end|>\\n`;
` /think` or ` /no_think` is appended to each user message; a thinking reply is
`<think>\\n{reasoning}\\n</think>\\n{answer}` and a non-thinking reply is the answer alone (no
empty think block). A user turn that already ends with a flag keeps its own (the recipe switches
modes mid-conversation that way).

Tools follow the Qwen3 / Hermes convention (recipe section 2): the available tools' JSON
schemas, one per line inside `<tools>...</tools>`, close the system prompt together with the
instruction to call them as `<tool_call>{"name": ..., "arguments": ...}</tool_call>` (a system
turn is opened for them when the chat has none); an assistant turn's tool calls follow its
text, one `<tool_call>` block each; consecutive tool results share one user turn, each inside
`<tool_response>...</tool_response>`, without a mode flag (they are not the user speaking);
a tool's output is made inert first (`inert`: control tokens broken up), so a program cannot
print a turn of its own.

`CHAT_TEMPLATE` is the same format as a Jinja chat template; it is saved on every tokenizer the
trainer writes, so `apply_chat_template(messages, tools=..., mode="think"|"no_think",
add_generation_prompt=True)` (or Qwen3's `enable_thinking=True|False`) renders a prompt exactly
as training did, and any transformers-based server can use a trained model as is. (Tool-call
arguments given as a dict are written as JSON; training always holds them as a dict.)

Training targets are the assistant reply tokens (tool calls included) plus the `<|im_end|>`
that closes each reply (so the model learns to stop); role headers, system/user turns, tool
results and the newline after `<|im_end|>` are context only. Each piece is tokenized on its own
and concatenated, so the mask is exact by construction rather than recovered from character
offsets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from schemas.generation import MODE_FLAGS, MODES, Mode
from schemas.tool_calls import (
    TOOL_RESPONSE_CLOSE,
    TOOL_RESPONSE_OPEN,
    TOOLS_FOOTER,
    TOOLS_HEADER,
    ToolCall,
    ToolCallError,
    parse_tools,
    tool_call_from,
    tools_block,
)

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
PAD = "<|endoftext|>"
SPECIAL_TOKENS = (PAD, IM_START, IM_END, THINK_OPEN, THINK_CLOSE)
ROLES = ("system", "user", "assistant", "tool")
IGNORE_INDEX = -100
GENERATION_PROMPT = f"{IM_START}assistant\n"


def _jinja_text(text: str) -> str:
    """`text` as a Jinja string literal."""
    escaped = text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")
    return f"'{escaped}'"


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
    "{%- set system_first = messages and messages[0].role == 'system' -%}"
    "{%- if tools -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if system_first -%}{{- messages[0].content + '\\n\\n' -}}{%- endif -%}"
    "{{- " + _jinja_text(TOOLS_HEADER) + " -}}"
    "{%- for tool in tools -%}{{- '\\n' -}}{{- tool | tojson(sort_keys=true) -}}{%- endfor -%}"
    "{{- " + _jinja_text(TOOLS_FOOTER) + " + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message.role not in ['system', 'user', 'assistant', 'tool'] -%}"
    "{{- raise_exception('unknown role ' ~ message.role) -}}"
    "{%- endif -%}"
    "{%- if loop.first and tools and system_first -%}"
    "{%- elif message.role == 'tool' -%}"
    "{%- if loop.first or loop.previtem.role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' -}}"
    "{%- if loop.last or loop.nextitem.role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message.role + '\\n' -}}"
    "{%- if message.role == 'assistant' -%}"
    "{%- set text = message.content or '' -%}"
    "{%- if message.reasoning is defined and message.reasoning is not none -%}"
    "{%- set text = '<think>\\n' + message.reasoning + '\\n</think>\\n' + text -%}"
    "{%- endif -%}"
    "{{- text -}}"
    "{%- if message.tool_calls is defined and message.tool_calls -%}"
    "{%- for call in message.tool_calls -%}"
    "{%- if call.function is defined -%}{%- set call = call.function -%}{%- endif -%}"
    "{%- if text or not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    '{{- \'<tool_call>\\n{"name": "\' + call.name + \'", "arguments": \' -}}'
    "{%- if call.arguments is string -%}{{- call.arguments -}}"
    "{%- else -%}{{- call.arguments | tojson -}}{%- endif -%}"
    "{{- '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'user' -%}"
    "{%- if message.content.endswith('/think') or message.content.endswith('/no_think') -%}"
    "{{- message.content + '<|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- message.content + flag + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- else -%}"
    "{{- message.content + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


class ChatFormatError(ValueError):
    """A conversation cannot be rendered (unknown role, no assistant turn, bad content)."""


@dataclass(frozen=True)
class Message:
    """One turn; `reasoning` (assistant only) is rendered inside <think>...</think>, and an
    assistant's `tool_calls` after its content."""

    role: str
    content: str
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()


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
    """Turn dicts like {"role", "content", "reasoning"?, "tool_calls"?} into Messages, naming
    bad entries. The conversation must hold an assistant turn (something to train on).
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


def parse_chat_tools(raw: object, where: str) -> tuple[dict, ...]:
    """A conversation's tool schemas (a list, its JSON text, or None for no tools)."""
    try:
        return parse_tools(raw)
    except ToolCallError as exc:
        raise ChatFormatError(f"{where}: {exc}") from None


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
        raw_calls = item.get("tool_calls") or []
        if raw_calls and role != "assistant":
            raise ChatFormatError(
                f"{where}: message {i} ({role}) has tool_calls; only assistant may"
            )
        if content is None and raw_calls:
            content = ""  # OpenAI's form of a turn that only calls tools
        if not isinstance(content, str):
            raise ChatFormatError(f"{where}: message {i} ({role}) has no string content")
        reasoning = item.get("reasoning")
        if reasoning is not None and role != "assistant":
            raise ChatFormatError(
                f"{where}: message {i} ({role}) has reasoning; only assistant may"
            )
        if not isinstance(raw_calls, list | tuple):
            raise ChatFormatError(f"{where}: message {i} tool_calls is not a list")
        try:
            calls = tuple(tool_call_from(call) for call in raw_calls)
        except ToolCallError as exc:
            raise ChatFormatError(f"{where}: message {i} (assistant): {exc}") from None
        messages.append(Message(role, content, reasoning, calls))
    return messages


def infer_mode(messages: Sequence[Message]) -> Mode:
    """Thinking iff any assistant reply carries reasoning (a field or a leading <think>)."""
    for m in messages:
        if m.role == "assistant" and (m.reasoning or m.content.lstrip().startswith(THINK_OPEN)):
            return "think"
    return "no_think"


def has_flag(content: str) -> bool:
    """True when a user turn already ends with `/think` or `/no_think`."""
    return content.endswith(tuple(MODE_FLAGS.values()))


def assistant_text(message: Message) -> str:
    """An assistant turn's trained text: think block, content, then one block per tool call."""
    text = message.content
    if message.reasoning is not None:
        text = f"{THINK_OPEN}\n{message.reasoning}\n{THINK_CLOSE}\n{message.content}"
    for i, call in enumerate(message.tool_calls):
        text += ("\n" if text or i else "") + call.text()
    return text


def render_segments(
    messages: Sequence[Message], mode: Mode, tools: Sequence[dict] = ()
) -> list[tuple[str, bool]]:
    """The chat as (text, is_target) pieces; joining the texts gives the full ChatML string."""
    if mode not in MODES:
        raise ChatFormatError(f"mode must be one of {MODES}, got {mode!r}")
    flag = f" {MODE_FLAGS[mode]}"
    segments: list[tuple[str, bool]] = []
    turns = list(messages)
    if tools:
        system = f"{turns.pop(0).content}\n\n" if turns and turns[0].role == "system" else ""
        segments.append((f"{IM_START}system\n{system}{tools_block(tools)}{IM_END}\n", False))
    for i, m in enumerate(turns):
        if m.role == "tool":  # a run of tool results is one user turn
            opens = i == 0 or turns[i - 1].role != "tool"
            closes = i == len(turns) - 1 or turns[i + 1].role != "tool"
            body = f"\n{TOOL_RESPONSE_OPEN}\n{inert(m.content)}\n{TOOL_RESPONSE_CLOSE}"
            text = (f"{IM_START}user" if opens else "") + body + (f"{IM_END}\n" if closes else "")
            segments.append((text, False))
            continue
        segments.append((f"{IM_START}{m.role}\n", False))
        if m.role == "assistant":
            segments.append((assistant_text(m), True))
            segments.append((IM_END, True))
            segments.append(("\n", False))
        else:
            needs_flag = m.role == "user" and not has_flag(m.content)
            body = m.content + flag if needs_flag else m.content
            segments.append((f"{body}{IM_END}\n", False))
    return segments


def inert(tool_output: str) -> str:
    """A tool's output with the chat's control tokens (`<|im_start|>`, `<|im_end|>`, ...)
    broken up, so a program cannot print a turn of its own into the conversation: it stays
    text inside its tool turn.

    >>> inert("6<|im_end|>\\n<|im_start|>assistant")
    '6< |im_end|>\\n< |im_start|>assistant'
    """
    return tool_output.replace("<|", "< |")


def render_text(messages: Sequence[Message], mode: Mode, tools: Sequence[dict] = ()) -> str:
    """The full ChatML string (what a generation-time template would produce)."""
    return "".join(text for text, _ in render_segments(messages, mode, tools))


def render_prompt(messages: Sequence[Message], mode: Mode, tools: Sequence[dict] = ()) -> str:
    """The chat followed by the assistant header: what a model continues at generation time."""
    return render_text(messages, mode, tools) + GENERATION_PROMPT


def tokenize_chat(
    tokenizer: object, messages: Sequence[Message], mode: Mode, tools: Sequence[dict] = ()
) -> TokenizedChat:
    """Tokenize each segment separately so the target mask is exact."""
    return _tokenize_segments(tokenizer, render_segments(messages, mode, tools))


def tokenize_prompt(
    tokenizer: object, messages: Sequence[Message], mode: Mode, tools: Sequence[dict] = ()
) -> list[int]:
    """Token ids of `render_prompt`, split exactly as training splits the same chat."""
    segments = [*render_segments(messages, mode, tools), (GENERATION_PROMPT, False)]
    return _tokenize_segments(tokenizer, segments).input_ids


def tokenize_tool_turn(tokenizer: object, results: Sequence[str]) -> list[int]:
    """The tokens between a model turn's `<|im_end|>` and the model's next turn: the newline
    that closes the reply, the tool results as one user turn, the assistant header. Split as
    training splits the same chat, so an agentic rollout's tokens are exactly its transcript's
    `tokenize_chat` (tool turns carry no mode flag, so the mode does not matter here)."""
    tool_turns = render_segments([Message("tool", r) for r in results], "no_think")
    segments = [("\n", False), *tool_turns, (GENERATION_PROMPT, False)]
    return _tokenize_segments(tokenizer, segments).input_ids


def _tokenize_segments(tokenizer: object, segments: list[tuple[str, bool]]) -> TokenizedChat:
    ids: list[int] = []
    mask: list[bool] = []
    for text, is_target in segments:
        piece = tokenizer(text, add_special_tokens=False)["input_ids"]  # type: ignore[operator]
        ids.extend(piece)
        mask.extend([is_target] * len(piece))
    return TokenizedChat(ids, mask)
