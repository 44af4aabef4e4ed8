"""sft_tool_calling: tool-calling SFT conversations for stage 2, from a thinking teacher.

Following the Cascade recipe's tool-calling SFT data (stage 2 only: the Llama-Nemotron
tool-calling set, Qwen3-235B-A22B, 310K conversations and 1.41M user-assistant turns with 4.4
tools per conversation on average; single- and multi-turn, multi-step, clarifying questions,
several tools and the case where no tool fits; thinking only): read each conversation and its
tools, drop exact duplicates, let the teacher write every assistant turn again in thinking
mode with the tools in its system prompt (`<tools>`, the Qwen3 convention the trainer renders),
keep a conversation only when every new turn makes the source's calls there (the tool results
that follow are the source's), and drop conversations over the 32K stage limit.

Sources load in their usual OpenAI-style form (`messages` with assistant `tool_calls` and
`tool` results, plus `tools` as JSON schemas), e.g. the tool-calling split of
`nvidia/Nemotron-Post-Training-Dataset-v1` or `nvidia/Nemotron-Agentic-v1`: the recipe maps
`messages` to the prompt (ingest keeps it as JSON text) and reads `tools` from the row's
metadata. The teacher is served without a tool-call parser (calls stay in the reply text).

One output row per conversation: `messages` (JSON: {role, content, reasoning?, tool_calls?}),
`tools` (JSON) and `mode` (think), for an SFT stage as it is (`messages_column: messages`,
`tools_column: tools`, `mode_column: mode`), plus what each conversation is (`pattern`,
`multi_turn`, counts of turns, calls and tools).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders.runner import Build
from curation.dedup import exact_dedup
from curation.generate.samples import Sampler
from curation.tool_calling.sft import conversation_length, regenerate_tool_turns, tool_conversations
from lake.steps import Step

NAME = "sft_tool_calling"
DOMAIN = "chat"
OUTPUT_KIND = "generic"
DEFAULTS: dict[str, Any] = {
    "mapping": {"problem": "messages"},
    "tools_field": "tools",
    "teacher": {
        "model": "Qwen/Qwen3-235B-A22B",
        "backend": "vllm",
        "mode": "think",
        "mode_switch": "template",
        "k": 1,
        "temperature": 0.6,
        "top_p": 0.95,
        "max_new_tokens": 16384,
    },
    "max_conversation_tokens": 32768,
    "generations_table": "generations",
    "on_error": "raise",
}
"""Sampling settings are Qwen3's recommended thinking ones; the recipe does not report them."""


def steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The recipe, top to bottom."""
    return [
        Step(
            "conversations",
            tool_conversations,
            {"messages_field": "problem", "tools_field": params["tools_field"]},
            scope="rows",
        ),
        Step("exact_dedup", exact_dedup, {"id_column": "uid"}, partition="normalized_text"),
        Step(
            "teacher_turns",
            regenerate_tool_turns,
            {
                "lake": build.lake,
                "sampler": Sampler.from_params(params["teacher"]),
                "table": params["generations_table"],
                "backend_factory": params.get("backend_factory"),
            },
            scope="rows",
        ),
        Step(
            "conversation_length",
            conversation_length,
            {"max_tokens": params["max_conversation_tokens"]},
            scope="rows",
        ),
    ]


def toy_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The toy tool world: generated calculator conversations of every pattern, answered by
    a teacher made of code (no toy model was ever taught to call tools)."""
    from builders.worlds.toy_tools import TOY_TOOL_TEACHER, toy_tool_backend, write_toy_tool_sources

    sources = write_toy_tool_sources(workdir / "toy_tool_conversations.jsonl")
    return [str(sources)], {
        "teacher": {
            "model": TOY_TOOL_TEACHER,
            "backend": "hf",  # never built: backend_factory makes the teacher
            "mode": "think",
            "k": 1,
            "max_new_tokens": 256,
        },
        "backend_factory": toy_tool_backend,
        "max_conversation_tokens": 400,
    }


PROFILES = {"toy": toy_profile}
