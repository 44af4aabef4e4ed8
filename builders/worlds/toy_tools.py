"""The toy tool world: calculator conversations of every tool-calling pattern, and a teacher
made of code that answers them.

No toy model was ever taught to call tools, so `sft_tool_calling --profile toy` is answered by
`ToyToolTeacher`, a `Backend` whose replies are computed: it reads the conversation it is sent
(the tools in the system prompt, the user turns, the tool results), works out the next step of
the task and writes it as a thinking reply with `<tool_call>` blocks. It makes two kinds of
mistake on a fixed share of conversations (arguments swapped, a call that is not JSON), so the
recipe's checks have real work to do.

Patterns (`toy_tool_conversations`): one call; two calls at once; two calls one after the other
(multi-step); a clarifying question before the call (multi-turn); a question no offered tool
answers (multiplication: add and subtract only); and a follow-up user turn with a second call.
Every conversation offers add and subtract, some also tools that do not fit (several tools).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import xxhash

from builders.worlds.toy_world import write_jsonl
from schemas.generation import Completion, GenerationRequest
from schemas.tool_calls import TOOL_RESPONSE_OPEN, TOOLS_FOOTER, TOOLS_HEADER, ToolCall, tool_name

TOY_TOOL_TEACHER = "toy-tool-teacher"
KINDS = ("single", "parallel", "multi_step", "clarify", "no_tool", "follow_up")
PER_KIND = 7


def _schema(name: str, description: str, params: Sequence[str]) -> dict:
    properties = {p: {"type": "number"} for p in params}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": list(params)},
        },
    }


ADD = _schema("add", "Add two numbers: a + b", ("a", "b"))
SUBTRACT = _schema("subtract", "Subtract b from a: a - b", ("a", "b"))
DISTRACTORS = [
    {
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
    },
    {
        "type": "function",
        "function": {
            "name": "capital_of",
            "description": "The capital city of a country",
            "parameters": {
                "type": "object",
                "properties": {"country": {"type": "string"}},
                "required": ["country"],
            },
        },
    },
]


@dataclass
class Turn:
    """One assistant turn of a plan: its text and its calls (name, a, b)."""

    content: str = ""
    calls: list[tuple[str, int, int]] = field(default_factory=list)
    reasoning: str = ""


def _call(name: str, a: int, b: int) -> ToolCall:
    return ToolCall(name, json.dumps({"a": a, "b": b}))


def _run(name: str, a: int, b: int) -> int:
    return a + b if name == "add" else a - b


_FIRST = {
    "single": re.compile(r"^Use the calculator: what is (\d+) \+ (\d+)\?$"),
    "parallel": re.compile(r"^Use the calculator for both: (\d+) \+ (\d+) and (\d+) - (\d+)\.$"),
    "multi_step": re.compile(r"^Use the calculator: what is \((\d+) \+ (\d+)\) - (\d+)\?$"),
    "clarify": re.compile(r"^Please add (\d+) to a number for me\.$"),
    "no_tool": re.compile(r"^What is (\d+) times (\d+)\?$"),
    "follow_up": re.compile(r"^Use the calculator: what is (\d+) \+ (\d+), please\?$"),
}


def plan(users: Sequence[str]) -> list[Turn]:
    """The assistant turns that answer a toy task, given its user turns so far."""
    first = users[0]
    found = [(k, m) for k, p in _FIRST.items() if (m := p.match(first))]
    if not found:
        raise ValueError(f"toy teacher: {first!r} is not a toy tool task")
    kind, match = found[0]
    n = [int(x) for x in match.groups()]
    if kind == "single":
        a, b = n
        return [
            Turn(calls=[("add", a, b)], reasoning=f"I add {a} and {b} with the add tool."),
            Turn(f"{a} + {b} = {a + b}.", reasoning="The tool returned the sum."),
        ]
    if kind == "parallel":
        a, b, c, d = n
        return [
            Turn(
                "I will compute both at once.",
                calls=[("add", a, b), ("subtract", c, d)],
                reasoning="Two independent sums: two calls in one turn.",
            ),
            Turn(f"{a} + {b} = {a + b} and {c} - {d} = {c - d}.", reasoning="Both came back."),
        ]
    if kind == "multi_step":
        a, b, c = n
        return [
            Turn(calls=[("add", a, b)], reasoning="First the bracket, then the subtraction."),
            Turn(calls=[("subtract", a + b, c)], reasoning=f"The bracket is {a + b}."),
            Turn(f"({a} + {b}) - {c} = {a + b - c}.", reasoning="Done in two steps."),
        ]
    if kind == "clarify":
        (a,) = n
        ask = Turn(f"Which number should I add to {a}?", reasoning="The second number is missing.")
        if len(users) < 2:
            return [ask]
        b = int(re.sub(r"\D", "", users[1]))
        return [
            ask,
            Turn(calls=[("add", a, b)], reasoning=f"Now I know it is {b}."),
            Turn(f"{a} + {b} = {a + b}.", reasoning="The tool returned the sum."),
        ]
    if kind == "no_tool":
        a, b = n
        return [
            Turn(
                f"None of my tools multiplies, so I work it out myself: {a} x {b} = {a * b}.",
                reasoning="The tools add and subtract; none multiplies.",
            )
        ]
    a, b = n  # follow_up
    turns = [
        Turn(calls=[("add", a, b)], reasoning=f"I add {a} and {b}."),
        Turn(f"{a} + {b} = {a + b}.", reasoning="The tool returned the sum."),
    ]
    if len(users) < 2:
        return turns
    c = int(re.sub(r"\D", "", users[1]))
    return [
        *turns,
        Turn(calls=[("subtract", a + b, c)], reasoning=f"Subtract {c} from {a + b}."),
        Turn(f"{a + b} - {c} = {a + b - c}.", reasoning="The tool returned the difference."),
    ]


def _task(kind: str, rng: random.Random) -> tuple[list[str], list[dict]]:
    """The user turns and the offered tools of one toy conversation."""
    a, b, c, d = (rng.randint(10, 99) for _ in range(4))
    users = {
        "single": [f"Use the calculator: what is {a} + {b}?"],
        "parallel": [f"Use the calculator for both: {a} + {b} and {c} - {d}."],
        "multi_step": [f"Use the calculator: what is ({a} + {b}) - {c}?"],
        "clarify": [f"Please add {a} to a number for me.", f"{b}."],
        "no_tool": [f"What is {a} times {b}?"],
        "follow_up": [f"Use the calculator: what is {a} + {b}, please?", f"Now subtract {c}."],
    }[kind]
    tools = [ADD, SUBTRACT, *rng.sample(DISTRACTORS, rng.randint(0, len(DISTRACTORS)))]
    return users, tools


def toy_tool_conversations(seed: int = 0) -> list[dict]:
    """Source rows in the OpenAI form (`messages` with `tool_calls` and `tool` results,
    `tools`): the reference conversations the teacher's turns are checked against."""
    rng = random.Random(seed)
    rows = []
    for i in range(PER_KIND * len(KINDS)):
        kind = KINDS[i % len(KINDS)]
        users, tools = _task(kind, rng)
        messages: list[dict] = [{"role": "user", "content": users[0]}]
        asked = 1
        for step in plan(users):
            calls = [
                {"id": f"c{j}", "type": "function", "function": _call(*c).as_dict()}
                for j, c in enumerate(step.calls)
            ]
            turn: dict = {"role": "assistant", "content": step.content or None}
            if calls:
                turn["tool_calls"] = calls
            messages.append(turn)
            for j, c in enumerate(step.calls):
                messages.append({"role": "tool", "tool_call_id": f"c{j}", "content": str(_run(*c))})
            if not step.calls and asked < len(users):
                messages.append({"role": "user", "content": users[asked]})
                asked += 1
        rows.append({"id": f"toy-tools-{i}", "messages": messages, "tools": tools})
    return rows


def write_toy_tool_sources(path: Path, seed: int = 0) -> Path:
    """The toy tool conversations as a jsonl source file."""
    write_jsonl(path, toy_tool_conversations(seed))
    return path


class ToyToolTeacher:
    """A teacher made of code: the next turn of the toy task in the conversation it is sent.

    Conversations whose first user turn hashes to 3 (mod 10) get their first call's
    arguments swapped; to 7, a call that is not JSON.
    """

    name = "toy-tools"

    def __init__(self, model: str = TOY_TOOL_TEACHER) -> None:
        self.model = model

    def generate(self, requests: Sequence[GenerationRequest]) -> Iterator[Completion]:
        for request in requests:
            text = self.reply(request.messages)
            prompt_words = sum(len(m["content"].split()) for m in request.messages)
            yield Completion(request.key, text, prompt_words, len(text.split()), "stop")

    def reply(self, messages: Sequence[dict[str, str]]) -> str:
        offered = _offered(messages[0]["content"]) if messages[0]["role"] == "system" else set()
        users = [
            _without_flag(m["content"])
            for m in messages
            if m["role"] == "user" and not m["content"].startswith(TOOL_RESPONSE_OPEN)
        ]
        done = sum(m["role"] == "assistant" for m in messages)
        turn = plan(users)[done]
        flaw = xxhash.xxh3_64_intdigest(users[0].encode()) % 10
        calls = []
        for j, (name, a, b) in enumerate(turn.calls):
            if name not in offered:
                raise ValueError(f"toy teacher: tool {name!r} is not offered ({sorted(offered)})")
            call = _call(name, b, a) if flaw == 3 and j == 0 else _call(name, a, b)
            text = call.text()
            if flaw == 7 and j == 0:
                text = text.replace('"arguments": {', '"arguments": {{', 1)
            calls.append(text)
        body = "\n".join([turn.content, *calls] if turn.content else calls)
        return f"<think>\n{turn.reasoning}\n</think>\n\n{body}"

    def close(self) -> None:
        pass


def toy_tool_backend(model: str) -> ToyToolTeacher:
    """`backend_factory` for the toy profile: the code teacher, whatever the backend says."""
    if model != TOY_TOOL_TEACHER:
        raise ValueError(f"the toy tool world has one teacher, {TOY_TOOL_TEACHER!r}, not {model!r}")
    return ToyToolTeacher(model)


def _offered(system: str) -> set[str]:
    """The tool names listed in a system prompt's tools section."""
    start = system.find(TOOLS_HEADER)
    if start < 0:
        return set()
    start += len(TOOLS_HEADER)
    lines = system[start : system.find(TOOLS_FOOTER, start)].strip().splitlines()
    return {tool_name(json.loads(line)) for line in lines if line.strip()}  # type: ignore[misc]


def _without_flag(text: str) -> str:
    return re.sub(r"\s*/(?:no_)?think$", "", text)
