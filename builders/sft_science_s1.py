"""sft_science_s1: science SFT responses for stage 1 (16K), from a thinking teacher.

Following the Cascade recipe's science SFT data (Science S1: S1K + Llama-Nemotron science
prompts, DeepSeek-R1, 226K prompts and 289K samples, several responses only for selected
high-quality prompts; thinking only): prompts stored as chats become their user turn;
decontaminate with the SFT rule (any shared word 9-gram with a benchmark item drops the
sample), remove exact and near duplicates; the teacher answers each prompt in thinking mode
(`k`, and `selected_k` for the selected sources, S1K by default); drop responses cut at the
length cap or over the stage's limit (truncation removal), without reasoning, and
multiple-choice responses that walk through each option instead of solving.

Sources load by their usual hub ids and fields: S1K (`simplescaling/s1K`, the question in
`question`: ingest it with `--map problem=question`) and Llama-Nemotron's science split
(`nvidia/Llama-Nemotron-Post-Training-Dataset`, SFT/science, the prompt chat in `input`:
`--map problem=input`); ingest each into the lake, then pass both tables as `--source`.
Not done here: the rarer synthetic variants of seed questions DeepSeek-R1-0528 wrote, and the
choice of knowledge- or computation-heavy questions (the recipe does not say how).

One output row per response: `problem`, `reasoning`, `final_answer`, `mode` (think), with the
prompt's `uid` as `prompt_uid`, for an SFT stage (`prompt_column: problem`,
`reasoning_column: reasoning`, `response_column: final_answer`, `mode: think`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders.math_sft import prompt_cleaning
from builders.runner import Build
from curation.difficulty import response_filters
from curation.general.conversations import reply_mode_check
from curation.generate.samples import Sampler
from curation.science.sft import chat_prompt_text, option_walkthrough, science_responses
from lake.steps import Step

NAME = "sft_science_s1"
DOMAIN = "science"
OUTPUT_KIND = "generic"
DEFAULTS: dict[str, Any] = {
    "benchmarks": ["gpqa_diamond", "aime24", "aime25", "math500", "olympiadbench"],
    "benchmark_dir": "",
    "ngram": 9,
    "near_dup_threshold": 0.6,
    "teacher": {
        "model": "deepseek-ai/DeepSeek-R1",
        "backend": "vllm",
        "mode": "think",
        "k": 1,
        "temperature": 0.6,
        "top_p": 0.95,
        "max_new_tokens": 16384,
    },
    "selected_k": 4,
    "selected_field": "source",
    "selected_sources": ["s1K", "s1K-1.1", "simplescaling/s1K", "simplescaling/s1K-1.1"],
    "max_response_tokens": 16384,
    "mcq_min_options": 3,
    "generations_table": "generations",
    "on_error": "raise",
}
"""k = 1 with 4 for S1K is our reading of 289K samples from 226K prompts; not reported."""


def steps(params: dict[str, Any], build: Build) -> list[Step]:
    """The recipe, top to bottom."""
    return [
        Step("chat_prompts", chat_prompt_text, scope="rows"),
        *prompt_cleaning(params, build),
        *teacher_responses(params, build),
    ]


def teacher_responses(params: dict[str, Any], build: Build) -> list[Step]:
    """Thinking responses, then the ones an SFT stage may train on."""
    return [
        Step(
            "teacher_responses",
            science_responses,
            {
                "lake": build.lake,
                "sampler": Sampler.from_params(params["teacher"]),
                "selected_k": int(params["selected_k"]),
                "selected_field": params["selected_field"],
                "selected_values": list(params["selected_sources"]),
                "table": params["generations_table"],
                "backend_factory": params.get("backend_factory"),
            },
            scope="rows",
            fan_out=True,
        ),
        Step(
            "response_filters",
            response_filters,
            {"max_tokens": params["max_response_tokens"], "verifier": None},
            scope="rows",
        ),
        Step("thinking_only", reply_mode_check, scope="rows"),
        Step(
            "option_walkthrough",
            option_walkthrough,
            {"min_options": int(params["mcq_min_options"])},
            scope="rows",
        ),
    ]


def toy_profile(workdir: Path) -> tuple[list[str], dict[str, Any]]:
    """The toy world: arithmetic prompts, some as multiple choice, the strong toy model as
    the teacher (it was never taught options, so what it does with them is what it does)."""
    from builders.worlds.toy_profile import toy_setup
    from builders.worlds.toy_world import write_jsonl

    toy = toy_setup(workdir)
    rows = [
        {**row, "problem": science_question(row["problem"], row["answer"], i)}
        for i, row in enumerate(_rows(toy.sft_prompts))
    ]
    prompts = workdir / "toy_science_prompts.jsonl"
    write_jsonl(prompts, rows)
    return [str(prompts)], {
        "benchmarks": [str(toy.eval_file)],
        "teacher": toy.sampler("strong", k=1),
        "selected_k": 2,
        "selected_sources": ["toy_science_prompts"],
        "max_response_tokens": 96,
    }


def science_question(problem: str, answer: str, index: int) -> str:
    """Every other toy prompt becomes multiple choice, the right option in turn A..D."""
    if index % 2:
        return problem
    right = int(answer)
    offset = index // 2 % 4
    options = [right - offset + i for i in range(4)]
    letters = " ".join(f"({'ABCD'[i]}) {v}" for i, v in enumerate(options))
    return f"{problem} {letters}"


def _rows(path: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


PROFILES = {"toy": toy_profile}
