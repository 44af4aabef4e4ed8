"""sft_science_s1 / s2 end to end against a scripted thinking teacher: exact rows kept and
dropped with their reasons (chat prompts without a user turn, 9-gram benchmark copies,
duplicates, truncated, over the stage limit, no reasoning, walking through the options), S1K
prompts answered several times, and rows the SFT trainer reads as they are."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from builders import sft_science_s1, sft_science_s2
from builders.runner import Build, build_dataset
from curation.prompt_ids import prompt_ids
from curation.science.sft import option_walkthrough, options_discussed
from lake.catalog import Lake
from lake.steps import run_steps
from schemas.training_manifest import DatasetRef
from tests.scripted_openai import ScriptedServer
from training.datasets import LoadedDataset, VerifiedRef
from training.sft_data import conversations

KINETIC = "A ball of mass 2 kg moves at 3 m/s. What is its kinetic energy in joules?"
PLANTS = (
    "Which gas do plants absorb for photosynthesis? "
    "(A) Oxygen (B) Nitrogen (C) Carbon dioxide (D) Helium"
)
PH = "Which of the following has a pH below 7? (A) Soap (B) Lemon juice (C) Bleach (D) Ammonia"
BENCH = "What is the rest energy of an electron expressed in mega electron volts, to three digits?"
PROMPTS = [  # uid, prompt, source
    ("s1K:1", KINETIC, "s1K"),
    ("nem:1", json.dumps([{"role": "user", "content": PLANTS}]), "nemotron_science"),
    ("nem:2", PH, "nemotron_science"),
    ("nem:3", f"Please answer: {BENCH}", "nemotron_science"),  # a benchmark copy
    ("nem:4", PH.lower() + " ", "nemotron_science"),  # a copy of nem:2
    ("nem:5", "Why is the sky blue during the day?", "nemotron_science"),
    ("nem:6", "Describe the structure of DNA.", "nemotron_science"),
    ("nem:7", "What is Avogadro's number used for?", "nemotron_science"),
    ("nem:8", json.dumps([{"role": "system", "content": "detailed thinking on"}]), "nemotron"),
]


def r1(user: str, index: int) -> str:
    if user == KINETIC:
        return f"<think>KE = m v^2 / 2 = 9 (sample {index})</think>\\boxed{{9}} J"
    if user == PLANTS:  # takes up every option instead of solving
        return (
            "<think>Let me go through each option.\nOption A: oxygen is released, not absorbed."
            "\nOption B: nitrogen is not used.\nOption C: carbon dioxide is fixed."
            "\nOption D: helium is inert.</think>The answer is (C)."
        )
    if user == PH:  # solves, names only its answer
        return "<think>Acids have pH below 7; lemon juice holds citric acid.</think>Answer: (B)"
    if "sky blue" in user:
        return "<think>Rayleigh scattering goes as 1/lambda^4 and"  # cut: truncated
    if "DNA" in user:
        return "<think>Recall.</think>" + "helix " * 50  # over the 40-token stage limit
    if "Avogadro" in user:
        return "It counts particles per mole."  # no reasoning: not thinking-format
    return f"<think>unexpected</think>{user}"


def frame() -> pl.DataFrame:
    texts = [p for _, p, _ in PROMPTS]
    return pl.DataFrame(
        {
            "uid": [u for u, _, _ in PROMPTS],
            "id": prompt_ids(pl.Series(texts)),
            "source": [s for _, _, s in PROMPTS],
            "source_id": [u for u, _, _ in PROMPTS],
            "domain": ["science"] * len(PROMPTS),
            "problem": texts,
            "answer": [None] * len(PROMPTS),
            "metadata": ["{}"] * len(PROMPTS),
        },
        schema_overrides={"answer": pl.String},
    )


@pytest.fixture
def server():
    with ScriptedServer({"r1": r1, "r1-0528": r1}) as s:
        yield s


def params(recipe, server: ScriptedServer, benchmark: Path, **changes) -> dict:
    teacher = {
        "model": "r1",
        "backend": "openai",
        "backend_options": {"base_url": server.base_url, "api_key_env": None},
        "mode": "think",
        "k": 1,
        "max_new_tokens": 256,
    }
    return {
        **recipe.DEFAULTS,
        "benchmarks": [str(benchmark)],
        "teacher": teacher,
        "selected_k": 2,
        "selected_sources": ["s1K"],
        "max_response_tokens": 40,
        **changes,
    }


@pytest.fixture
def benchmark(tmp_path: Path) -> Path:
    path = tmp_path / "science_bench.jsonl"
    path.write_text(json.dumps({"id": "b1", "problem": BENCH}) + "\n")
    return path


def test_sft_science_end_to_end(lake: Lake, server, benchmark: Path, tmp_path: Path) -> None:
    lake.commit("sft_science_s1_sources", frame(), kind="prompts")
    build = Build(lake=lake, profile="default", workdir=tmp_path)
    run = run_steps(
        lake,
        "sft_science_s1_sources",
        sft_science_s1.steps(params(sft_science_s1, server, benchmark), build),
        out="sft_science_s1",
        kind="generic",
        producer="test",
    )
    drops = lake.sql(
        "SELECT uid, step, reason FROM drops WHERE output_table = 'sft_science_s1'"
    ).fetchall()
    assert {u: (s, r) for u, s, r in drops} == {
        "nem:8": ("chat_prompts", "no_user_turn"),
        "nem:3": ("decontaminate", "contaminated"),
        "nem:4": ("exact_dedup", "exact_duplicate"),
        "nem:5/think/0": ("response_filters", "truncated"),
        "nem:6/think/0": ("response_filters", "too_long"),
        "nem:7/think/0": ("thinking_only", "no_reasoning"),
        "nem:1/think/0": ("option_walkthrough", "option_walkthrough"),
    }
    assert [(f.step, f.rows_in, f.rows_out) for f in run.funnel] == [
        ("chat_prompts", 9, 8),
        ("decontaminate", 8, 7),
        ("exact_dedup", 7, 6),
        ("near_dedup", 6, 6),
        ("teacher_responses", 6, 7),  # the S1K prompt is answered twice
        ("response_filters", 7, 5),
        ("thinking_only", 5, 4),
        ("option_walkthrough", 4, 3),
    ]
    rows = pl.from_arrow(lake.read("sft_science_s1")).to_dicts()
    assert [r["uid"] for r in rows] == ["s1K:1/think/0", "s1K:1/think/1", "nem:2/think/0"]
    assert [(r["mcq_options"], r["options_discussed"]) for r in rows] == [(0, 0), (0, 0), (4, 1)]
    # the chat prompt reached the teacher as its user turn, not as JSON
    assert any(r["messages"][-1]["content"] == PLANTS for r in server.requests)
    # an SFT stage reads the rows as the manifest says
    ref = DatasetRef(
        ref="sft_science_s1@1",
        content_hash="0" * 64,
        prompt_column="problem",
        reasoning_column="reasoning",
        response_column="final_answer",
        mode="think",
    )
    verified = VerifiedRef(ref, "x", "lake:sft_science_s1@1")
    (first, *_) = conversations(LoadedDataset(verified, rows))
    assert first.mode == "think"
    assert [(m.role, m.content, m.reasoning) for m in first.messages] == [
        ("user", KINETIC, None),
        ("assistant", "\\boxed{9} J", "KE = m v^2 / 2 = 9 (sample 0)"),
    ]


def test_stage_two_is_the_same_recipe_with_the_newer_teacher_and_32k(
    lake: Lake, server, benchmark: Path, tmp_path: Path
) -> None:
    assert sft_science_s2.DEFAULTS["teacher"]["model"] == "deepseek-ai/DeepSeek-R1-0528"
    assert sft_science_s2.DEFAULTS["max_response_tokens"] == 32768
    assert sft_science_s1.DEFAULTS["max_response_tokens"] == 16384
    sources = tmp_path / "s.jsonl"
    sources.write_text(
        "".join(json.dumps({"problem": p, "id": u}) + "\n" for u, p, _ in PROMPTS[:3])
    )
    changes = {
        "teacher": {**params(sft_science_s2, server, benchmark)["teacher"], "model": "r1-0528"}
    }
    report = build_dataset(
        lake,
        sft_science_s2,
        sources=[str(sources)],
        overrides={**params(sft_science_s2, server, benchmark), **changes},
        manifests_dir=tmp_path / "m",
        write_html_report=False,
    )
    assert report.manifest.output.rows == 2  # KINETIC, and PH; PLANTS walks through options
    assert server.requests_for("r1-0528") == 3


def test_option_walkthrough_needs_every_option_of_an_mcq_prompt() -> None:
    df = pl.DataFrame(
        {
            "problem": [PLANTS, PLANTS, KINETIC, "Pick one: (A) x (B) y"],
            "response": [
                "Option A no. Option B no. Option C yes. Option D no.",
                "(A) no, (B) no, (C) yes. So C.",  # D never taken up: solving, not walking
                "Option A, option B, option C",  # not multiple choice
                "(A) no (B) yes",  # two options: under min_options
            ],
        }
    )
    result = option_walkthrough(df, min_options=3)
    assert result.dropped["response"].to_list() == [df["response"][0]]
    assert result.kept["options_discussed"].to_list() == [3, 0, 0]
    assert options_discussed("f(A) and (a) and choice b.\nC) fine\n**D.** no", "ABCD") == [
        "B",
        "C",
        "D",
    ]


def test_docstring_examples() -> None:
    import doctest

    import curation.science.sft

    result = doctest.testmod(curation.science.sft)
    assert result.attempted > 0 and result.failed == 0
