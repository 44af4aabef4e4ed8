"""The text form of tools and tool calls (Qwen3 / Hermes convention, recipe section 2).

Shared by the trainer (which renders them into ChatML) and the curation steps (which read a
teacher's calls back out of its reply), so both agree on one format:

- the available tools: their JSON schemas, one per line inside `<tools>...</tools>`, after a
  short instruction, at the end of the system prompt (`tools_block`); keys sorted, so a schema
  renders the same however it was stored (a JSONL writer that sorts keys, a dict literal that
  does not): SFT data and the RL environment that offers the same tool show the same prompt;
- a call: `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>` (`ToolCall.text`),
  several calls one block each, after the turn's text;
- a tool's result: `<tool_response>\\n...\\n</tool_response>` inside a user turn.

A call's arguments are a JSON object; they are kept as canonical JSON text
(`canonical_arguments`) so a call compares and hashes as a value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TOOLS_OPEN, TOOLS_CLOSE = "<tools>", "</tools>"
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
TOOLS_HEADER = (
    "# Tools\n\nYou may call one or more of these functions to help with the user's request. "
    f"Their signatures are listed inside {TOOLS_OPEN}{TOOLS_CLOSE}:\n{TOOLS_OPEN}"
)
TOOLS_FOOTER = (
    f"\n{TOOLS_CLOSE}\n\nTo call a function, write a JSON object with its name and arguments "
    f"inside {TOOL_CALL_OPEN}{TOOL_CALL_CLOSE} tags, one call per block:\n{TOOL_CALL_OPEN}\n"
    '{"name": <function name>, "arguments": <arguments as a JSON object>}\n' + TOOL_CALL_CLOSE
)
_CALL_BLOCK = re.compile(
    re.escape(TOOL_CALL_OPEN) + r"\s*(.*?)\s*" + re.escape(TOOL_CALL_CLOSE), re.S
)


class ToolCallError(ValueError):
    """A tool call or tool schema is malformed; the message says what is wrong."""


@dataclass(frozen=True)
class ToolCall:
    """One function call: its name and its arguments as canonical JSON object text."""

    name: str
    arguments: str = "{}"

    def text(self) -> str:
        """The call as written in a reply.

        >>> ToolCall("get_weather", '{"city": "Oslo"}').text()
        '<tool_call>\\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\\n</tool_call>'
        """
        name = json.dumps(self.name, ensure_ascii=False)
        return f'{TOOL_CALL_OPEN}\n{{"name": {name}, "arguments": {self.arguments}}}\n{TOOL_CALL_CLOSE}'

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": json.loads(self.arguments)}


def canonical_arguments(arguments: object) -> str:
    """A call's arguments (a dict, or its JSON text) as canonical JSON object text."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ToolCallError(f"arguments are not JSON ({exc.msg})") from None
    if not isinstance(arguments, dict):
        raise ToolCallError(f"arguments must be a JSON object, got {type(arguments).__name__}")
    return json.dumps(arguments, ensure_ascii=False)


def tool_call_from(raw: object) -> ToolCall:
    """A call given as `{"name", "arguments"}` or OpenAI's `{"function": {...}}`."""
    if isinstance(raw, dict) and isinstance(raw.get("function"), dict):
        raw = raw["function"]
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"]:
        raise ToolCallError(f"a tool call needs a string name, got {raw!r}")
    return ToolCall(raw["name"], canonical_arguments(raw.get("arguments", {})))


def tool_name(schema: dict) -> str | None:
    """The function name a tool schema declares (OpenAI `{"function": {...}}` or bare)."""
    inner = schema.get("function") if isinstance(schema.get("function"), dict) else schema
    name = inner.get("name") if isinstance(inner, dict) else None
    return name if isinstance(name, str) and name else None


def function_tool(
    name: str, description: str, properties: dict[str, Any], required: Sequence[str] = ()
) -> dict[str, Any]:
    """A tool's JSON schema in the OpenAI function form environments offer."""
    parameters = {"type": "object", "properties": properties, "required": list(required)}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def parse_tools(raw: object) -> tuple[dict, ...]:
    """Tool schemas from a list (or its JSON text); None or empty means no tools."""
    if raw is None:
        return ()
    if isinstance(raw, str):
        if not raw.strip():
            return ()
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ToolCallError(f"tools are not JSON ({exc.msg})") from None
    if not isinstance(raw, list | tuple):
        raise ToolCallError(f"tools must be a list of JSON schemas, got {type(raw).__name__}")
    for i, schema in enumerate(raw):
        if not isinstance(schema, dict) or tool_name(schema) is None:
            raise ToolCallError(f"tool {i} is not a function schema with a name: {schema!r}")
    return tuple(raw)


def tools_block(tools: Sequence[dict]) -> str:
    """The tools section that closes the system prompt: one schema per line in <tools>."""
    lines = "".join("\n" + json.dumps(tool, ensure_ascii=False, sort_keys=True) for tool in tools)
    return f"{TOOLS_HEADER}{lines}{TOOLS_FOOTER}"


def split_tool_calls(text: str) -> tuple[str, list[ToolCall]]:
    """A reply's text before its first call, and its calls in order.

    >>> split_tool_calls('Let me look.\\n<tool_call>\\n{"name": "f", "arguments": {}}\\n</tool_call>')
    ('Let me look.', [ToolCall(name='f', arguments='{}')])

    Raises ToolCallError when a block is not a JSON call or a tag is unclosed.
    """
    calls = []
    for match in _CALL_BLOCK.finditer(text):
        try:
            payload = json.loads(match.group(1))
        except json.JSONDecodeError as exc:
            raise ToolCallError(f"a <tool_call> block is not JSON ({exc.msg})") from None
        calls.append(tool_call_from(payload))
    rest = _CALL_BLOCK.sub("", text)
    if TOOL_CALL_OPEN in rest or TOOL_CALL_CLOSE in rest:
        raise ToolCallError("a <tool_call> tag is not closed")
    first = text.find(TOOL_CALL_OPEN)
    return (text if first < 0 else text[:first]).strip(), calls


def text_chat(turns: Sequence[dict[str, Any]], tools: Sequence[dict]) -> tuple[dict[str, str], ...]:
    """A conversation with tools as plain role/content turns, for a teacher that reads its
    calls from text (a server without a tool-call parser): the tools at the end of the system
    prompt, earlier assistant turns as text with their calls (no reasoning, as chat APIs take
    earlier turns back), each run of tool results as one user turn of <tool_response> blocks
    (the Qwen3 convention). Calls may be ToolCall values or `{"name", "arguments"}` dicts."""
    system = next((t["content"] for t in turns[:1] if t["role"] == "system"), None)
    chat: list[dict[str, str]] = [
        {"role": "system", "content": (f"{system}\n\n" if system else "") + tools_block(tools)}
    ]
    for turn in turns[1:] if system is not None else turns:
        if turn["role"] == "tool":
            block = f"{TOOL_RESPONSE_OPEN}\n{turn['content']}\n{TOOL_RESPONSE_CLOSE}"
            if chat[-1]["role"] == "user" and chat[-1]["content"].startswith(TOOL_RESPONSE_OPEN):
                chat[-1] = {"role": "user", "content": chat[-1]["content"] + "\n" + block}
            else:
                chat.append({"role": "user", "content": block})
        elif turn["role"] == "assistant":
            text = turn["content"]
            for i, call in enumerate(turn.get("tool_calls") or ()):
                call = call if isinstance(call, ToolCall) else tool_call_from(call)
                text += ("\n" if text or i else "") + call.text()
            chat.append({"role": "assistant", "content": text})
        else:
            chat.append({"role": turn["role"], "content": turn["content"]})
    return tuple(chat)


def openai_chat(turns: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """A conversation with tools in OpenAI's chat form, for a server's native tool-calling API
    (the tools go in the request's `tools`): assistant calls as `tool_calls` with ids, each
    tool result as a `tool` message answering its call's id, earlier reasoning left out."""
    chat: list[dict[str, Any]] = []
    pending: list[str] = []
    for index, turn in enumerate(turns):
        if turn["role"] == "assistant":
            calls = [
                call if isinstance(call, ToolCall) else tool_call_from(call)
                for call in turn.get("tool_calls") or ()
            ]
            pending = [f"call_{index}_{i}" for i in range(len(calls))]
            message: dict[str, Any] = {"role": "assistant", "content": turn["content"] or None}
            if calls:
                message["tool_calls"] = [
                    {
                        "id": i,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for i, c in zip(pending, calls, strict=True)
                ]
            chat.append(message)
        elif turn["role"] == "tool" and pending:
            chat.append(
                {"role": "tool", "tool_call_id": pending.pop(0), "content": turn["content"]}
            )
        elif turn["role"] == "tool":  # answers no call (a malformed one): the user says so
            chat.append({"role": "user", "content": turn["content"]})
        else:
            chat.append({"role": turn["role"], "content": turn["content"]})
    return tuple(chat)
