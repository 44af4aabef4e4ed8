"""sft_tool_calling end to end against a scripted thinking teacher: OpenAI-style source
conversations (a jsonl file) are read, measured and regenerated turn by turn; the exact
conversations kept (one call, calls one after the other, two at once, a clarifying question,
no suitable tool, a second user turn) and dropped with their reasons; what the teacher was
sent; and rows the SFT trainer renders with their tools. The toy profile runs too."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from builders import sft_tool_calling
from builders.runner import build_dataset
from lake.catalog import Lake
from schemas.chat_template import render_text
from schemas.tool_calls import tools_block
from schemas.training_manifest import DatasetRef
from tests.scripted_openai import ScriptedServer
from training.datasets import LoadedDataset, VerifiedRef
from training.sft_data import conversations


def tool(name: str, *required: str) -> dict:
    properties = {p: {"type": "string"} for p in required}
    parameters = {"type": "object", "properties": properties, "required": list(required)}
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


WEATHER, CONVERT = tool("get_weather", "city"), tool("convert", "amount", "to")
BOOK = tool("book_table", "people", "time")


def call(name: str, **arguments) -> dict:
    return {"id": "x", "type": "function", "function": {"name": name, "arguments": arguments}}


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def calls(*items: dict, content: str | None = None) -> dict:
    return {"role": "assistant", "content": content, "tool_calls": list(items)}


def said(text: str) -> dict:
    return {"role": "assistant", "content": text}


def result(text: str) -> dict:
    return {"role": "tool", "tool_call_id": "x", "content": text}


SOURCES = [  # id, messages, tools
    ("t1", [user("Weather in Oslo?"), calls(call("get_weather", city="Oslo")), result('{"temp": 3}'),
            said("Old answer.")], [WEATHER]),
    ("t2", [{"role": "system", "content": "You help travellers."}, user("Change 100 USD to EUR, then Paris weather."),
            calls(call("convert", amount="100 USD", to="EUR")), result('{"eur": 92}'),
            calls(call("get_weather", city="Paris")), result('{"temp": 11}'), said("Old.")],
     [CONVERT, WEATHER]),
    ("t3", [user("Weather in Rome and Madrid?"),
            calls(call("get_weather", city="Rome"), call("get_weather", city="Madrid")),
            result('{"temp": 20}'), result('{"temp": 25}'), said("Old.")], [WEATHER, BOOK]),
    ("t4", [user("Book a table for me."), said("Old question?"), user("Two people at 7pm."),
            calls(call("book_table", people="2", time="19:00")), result('{"ok": true}'), said("Old.")],
     [BOOK]),
    ("t5", [user("Tell me a joke."), said("Old joke.")], [WEATHER]),
    ("t6", [user("Weather in Turku?"), calls(call("get_weather", city="Turku")), result('{"temp": 1}'),
            said("Old."), user("And in Bergen?"), calls(call("get_weather", city="Bergen")),
            result('{"temp": 4}'), said("Old.")], [WEATHER]),
    ("t7", [user("Weather in Lima?"), calls(call("get_weather", city="Lima")), result("{}"), said("x")],
     [WEATHER]),
    ("t8", [user("Weather in Kyiv?"), calls(call("get_weather", city="Kyiv")), result("{}"), said("x")],
     [WEATHER]),
    ("t9", [user("Weather in Nice?"), calls(call("get_weather", city="Nice")), result("{}"), said("x")],
     [WEATHER]),
    ("t10", [user("Book for 4 at 8pm."), calls(call("book_table", people="4", time="20:00")),
             result("{}"), said("x")], [BOOK]),
    ("t11", [user("Weather in Cork?"), calls(call("get_weather", city="Cork")), result("{}"), said("x")],
     [WEATHER]),
    ("t12", [user("Weather in Pisa?"), calls(call("get_weather", city="Pisa")), result("{}"), said("x")],
     [WEATHER]),
    ("t13", [user("Weather, please."), said("Which city?"), user("Riga."),
             calls(call("get_weather", city="Riga")), result("{}"), said("x")], [WEATHER]),
    ("t14", [user("Two cities?"), calls(call("get_weather", city="A"), call("get_weather", city="B")),
             result("{}"), said("x")], [WEATHER]),  # two calls, one result
    ("t15", [user("Forecast?"), calls(call("get_forecast", city="A")), result("{}"), said("x")],
     [WEATHER]),  # the source calls a tool it does not offer
    ("t16", [user("Hello"), said("Hi")], []),  # no tools
    ("t17", [user("Weather in Oslo?"), calls(call("get_weather", city="Oslo")), result('{"temp": 3}'),
             said("Old answer.")], [WEATHER]),  # a copy of t1
    ("t18", [user("Weather in Baku?"), calls(call("get_weather", city="Baku")), result('{"temp": 30}'),
             said("x")], [WEATHER]),
]  # fmt: skip


def tc(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


REPLIES = {  # the last user turn the teacher sees -> its reply
    "Weather in Oslo?": "<think>I need the weather.</think>\n" + tc("get_weather", city="Oslo"),
    '<tool_response>\n{"temp": 3}\n</tool_response>': "<think>Read it.</think>It is 3 C in Oslo.",
    "Change 100 USD to EUR, then Paris weather.": "<think>First the money.</think>"
    + tc("convert", to="EUR", amount="100 USD"),  # the same arguments, another key order
    '<tool_response>\n{"eur": 92}\n</tool_response>': "<think>Now Paris.</think>"
    + tc("get_weather", city="Paris"),
    '<tool_response>\n{"temp": 11}\n</tool_response>': "<think>Both done.</think>92 EUR; 11 C.",
    "Weather in Rome and Madrid?": "<think>Two calls at once.</think>Checking both.\n"
    + tc("get_weather", city="Madrid")
    + "\n"
    + tc("get_weather", city="Rome"),  # another order: still the source's calls
    '<tool_response>\n{"temp": 20}\n</tool_response>\n<tool_response>\n{"temp": 25}\n'
    "</tool_response>": "<think>Rome 20, Madrid 25.</think>Rome 20 C, Madrid 25 C.",
    "Book a table for me.": "<think>Missing details.</think>How many people, and when?",
    "Two people at 7pm.": "<think>Book it.</think>" + tc("book_table", people="2", time="19:00"),
    '<tool_response>\n{"ok": true}\n</tool_response>': "<think>Booked.</think>Booked for 2 at 7pm.",
    "Tell me a joke.": "<think>No tool tells jokes.</think>Why did the chicken cross the road?",
    "Weather in Turku?": "<think>Turku.</think>" + tc("get_weather", city="Turku"),
    '<tool_response>\n{"temp": 1}\n</tool_response>': "<think>Cold.</think>1 C in Turku.",
    "And in Bergen?": "<think>Bergen now.</think>" + tc("get_weather", city="Bergen"),
    '<tool_response>\n{"temp": 4}\n</tool_response>': "<think>Mild.</think>4 C in Bergen.",
    "Weather in Lima?": "<think>Lima.</think>" + tc("get_weather", city="Lima, Peru"),
    "Weather in Kyiv?": "<think>Kyiv.</think>" + tc("get_forecast", city="Kyiv"),
    "Weather in Nice?": '<think>Nice.</think><tool_call>\n{"name": "get_weather", "arguments": '
    "{city: Nice}}\n</tool_call>",
    "Book for 4 at 8pm.": "<think>Book.</think>" + tc("book_table", people="4"),
    "Weather in Cork?": "<think>Cork is in Ireland and",  # cut off
    "Weather in Pisa?": tc("get_weather", city="Pisa"),  # no reasoning
    "Weather, please.": "<think>Guess a city.</think>It is sunny.",  # asks nothing
    "Weather in Baku?": "<think>Baku.</think>" + tc("get_weather", city="Baku"),
    '<tool_response>\n{"temp": 30}\n</tool_response>': "<think>Hot.</think>" + "very hot " * 40,
}


def teacher(user_text: str, index: int) -> str:
    return REPLIES.get(user_text, f"<think>unexpected</think>{user_text}")


@pytest.fixture
def server():
    with ScriptedServer({"qwen3": teacher}) as s:
        yield s


def write_sources(path: Path) -> Path:
    rows = [{"id": i, "messages": m, "tools": t} for i, m, t in SOURCES]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_sft_tool_calling_end_to_end(lake: Lake, server, tmp_path: Path) -> None:
    overrides = {
        "teacher": {
            "model": "qwen3",
            "backend": "openai",
            "backend_options": {"base_url": server.base_url, "api_key_env": None},
            "mode": "think",
            "k": 1,
            "max_new_tokens": 256,
        },
        "max_conversation_tokens": 60,
    }
    report = build_dataset(
        lake,
        sft_tool_calling,
        sources=[str(write_sources(tmp_path / "tools.jsonl"))],
        overrides=overrides,
        manifests_dir=tmp_path / "m",
        write_html_report=False,
    )
    drops = lake.sql(
        "SELECT uid, step, reason, detail FROM drops WHERE output_table = 'sft_tool_calling'"
    ).fetchall()
    line = {f"t{n}": f"tools:{n}" for n in range(1, 19)}  # ingest's uid: file stem and line
    assert {u: (s, r) for u, s, r, _ in drops} == {
        line["t14"]: ("conversations", "malformed_conversation"),
        line["t15"]: ("conversations", "unknown_tool"),
        line["t16"]: ("conversations", "no_tools"),
        line["t17"]: ("exact_dedup", "exact_duplicate"),
        line["t7"]: ("teacher_turns", "tool_call_mismatch"),
        line["t8"]: ("teacher_turns", "unknown_tool"),
        line["t9"]: ("teacher_turns", "malformed_tool_call"),
        line["t10"]: ("teacher_turns", "missing_arguments"),
        line["t11"]: ("teacher_turns", "truncated"),
        line["t12"]: ("teacher_turns", "no_reasoning"),
        line["t13"]: ("teacher_turns", "no_clarifying_question"),
        line["t18"]: ("conversation_length", "too_long"),
    }
    detail = {u: json.loads(d) for u, _, _, d in drops if d}
    assert detail[line["t14"]]["conversation_error"] == (
        "message 1 makes 2 call(s) but 1 tool result(s) follow"
    )
    assert json.loads(detail[line["t7"]]["turn_detail"]) == {
        "reference": [{"name": "get_weather", "arguments": {"city": "Lima"}}],
        "teacher": [{"name": "get_weather", "arguments": {"city": "Lima, Peru"}}],
    }
    assert detail[line["t10"]]["turn_detail"] == "book_table without ['time']"
    assert [(f.step, f.rows_in, f.rows_out) for f in report.manifest.funnel] == [
        ("conversations", 18, 15),
        ("exact_dedup", 15, 14),
        ("teacher_turns", 14, 7),
        ("conversation_length", 7, 6),
    ]

    rows = {r["uid"]: r for r in pl.from_arrow(lake.read("sft_tool_calling")).to_dicts()}
    assert {u: (r["pattern"], r["multi_turn"]) for u, r in rows.items()} == {
        line["t1"]: ("single_call", False),
        line["t2"]: ("multi_step", False),
        line["t3"]: ("parallel_calls", False),
        line["t4"]: ("clarifying_question", True),
        line["t5"]: ("no_suitable_tool", False),
        line["t6"]: ("single_call", True),
    }
    assert rows[line["t3"]]["tools_offered"] == 2 and rows[line["t2"]]["tool_steps"] == 2
    # The teacher's turns replace the source's, with its reasoning; results stay the source's.
    assert json.loads(rows[line["t2"]]["messages"]) == [
        {"role": "system", "content": "You help travellers."},
        {"role": "user", "content": "Change 100 USD to EUR, then Paris weather."},
        {
            "role": "assistant",
            "content": "",
            "reasoning": "First the money.",
            "tool_calls": [{"name": "convert", "arguments": {"to": "EUR", "amount": "100 USD"}}],
        },
        {"role": "tool", "content": '{"eur": 92}'},
        {
            "role": "assistant",
            "content": "",
            "reasoning": "Now Paris.",
            "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
        },
        {"role": "tool", "content": '{"temp": 11}'},
        {"role": "assistant", "content": "92 EUR; 11 C.", "reasoning": "Both done."},
    ]
    assert json.loads(rows[line["t4"]]["messages"])[1] == {
        "role": "assistant",
        "content": "How many people, and when?",
        "reasoning": "Missing details.",
    }
    # What the teacher saw for t3's last turn: the tools in the system prompt, its own calls
    # as text (no reasoning), both results in one user turn.
    (seen,) = [
        r["messages"]
        for r in server.requests
        if "Rome 20" in teacher(r["messages"][-1]["content"], 0)
    ]
    assert seen == [
        {"role": "system", "content": tools_block([WEATHER, BOOK])},
        {"role": "user", "content": "Weather in Rome and Madrid?"},
        {
            "role": "assistant",
            "content": "Checking both.\n"
            + tc("get_weather", city="Madrid")
            + "\n"
            + tc("get_weather", city="Rome"),
        },
        {
            "role": "user",
            "content": '<tool_response>\n{"temp": 20}\n</tool_response>\n'
            '<tool_response>\n{"temp": 25}\n</tool_response>',
        },
    ]
    # An SFT stage reads the rows as they are, tools rendered into the system prompt.
    ref = DatasetRef(ref="sft_tool_calling@1", content_hash="0" * 64, mode_column="mode")
    dataset = LoadedDataset(VerifiedRef(ref, "x", "lake:sft_tool_calling@1"), list(rows.values()))
    convs = {c.origin: c for c in conversations(dataset)}
    t2 = next(c for c in convs.values() if c.messages[0].role == "system")
    text = render_text(t2.messages, t2.mode, t2.tools)
    assert text.startswith("<|im_start|>system\nYou help travellers.\n\n# Tools")
    assert tc("convert", to="EUR", amount="100 USD") in text and t2.mode == "think"


def test_the_toy_profile_builds_every_pattern_with_a_code_teacher(lake: Lake, tmp_path) -> None:
    report = build_dataset(
        lake, sft_tool_calling, profile="toy", manifests_dir=tmp_path / "m", write_html_report=False
    )
    funnel = {f.step: (f.rows_in, f.rows_out, dict(f.dropped)) for f in report.manifest.funnel}
    assert funnel["conversations"][:2] == (42, 42)
    rows_in, rows_out, dropped = funnel["teacher_turns"]
    assert rows_in == 42 and set(dropped) == {"malformed_tool_call", "tool_call_mismatch"}
    assert rows_out == 42 - sum(dropped.values()) and rows_out >= 30
    kept = pl.from_arrow(lake.read("sft_tool_calling"))
    assert set(kept["pattern"]) == {
        "single_call",
        "parallel_calls",
        "multi_step",
        "clarifying_question",
        "no_suitable_tool",
    }
    assert kept["multi_turn"].sum() >= 8
