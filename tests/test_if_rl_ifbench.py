"""The if_rl_ifbench recipe (IF-RL sub-stage 2) end to end on a small Tulu-3-SFT-style file:
exact rows kept and dropped at every step, 1-10 IF-RLVR constraints per prompt, no conflicting
pair, every kept row rewarded by the IF verifier; and the toy profiles of both IF recipes."""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from builders import if_rl, if_rl_ifbench
from builders.recipes import recipe_named
from builders.runner import build_dataset, recipe_steps
from builders.worlds.toy_domains import toy_instructions
from curation.instructions import (
    IFTRAIN,
    IFTRAIN_INSTRUCTIONS,
    TAXONOMIES,
    attach_instructions,
    draw_instruction_set,
)
from curation.verify.ifeval import ifeval_reward, taxonomies, verify_ifeval
from lake.catalog import Lake
from tests.test_instructions import frame

IFEVAL_1001 = (
    "I am planning a trip to Japan, and I would like thee to write an itinerary for my journey "
    "in a Shakespearean style. You are not allowed to use any commas in your response."
)
IFBENCH_LIKE = (
    "Describe the water cycle to a curious ten year old who loves the ocean and asks many "
    "questions about clouds."
)  # our tiny stand-in for an IFBench item


def chat(*turns: tuple[str, str]) -> str:
    return json.dumps([{"role": r, "content": c} for r, c in turns])


ROWS = [
    chat(("user", "Write a short story about a robot who learns to paint."), ("assistant", "x")),
    chat(("user", "Plan a day out."), ("assistant", "Sure."), ("user", "Now for two days.")),
    chat(("system", "You are kind."), ("assistant", "Hello!")),
    chat(("user", IFEVAL_1001), ("assistant", "x")),
    chat(("user", IFBENCH_LIKE + " Use simple words."), ("assistant", "x")),
    chat(("user", "write a short story about a ROBOT who learns to paint. "), ("assistant", "x")),
    chat(
        ("user", "Give me three tips for keeping houseplants alive in winter."), ("assistant", "")
    ),
    chat(("user", "Give me three tips for keeping houseplants alive during winter.")),
    chat(("user", "What are good habits for a healthy morning routine?")),
    chat(("user", "Summarize " + "the plot of a long novel " * 7)),
    chat(("system", "Be brief."), ("user", "Explain how a bicycle gear works.")),
    chat(("user", "Describe the smell of rain after a long drought.")),
    chat(("user", "Suggest a name for a small bakery by the sea.")),
]
SFT_PROMPT = "What are good habits for a healthy morning routine?"


def write_sources(tmp_path: Path, shared_data: Path) -> tuple[Path, Path]:
    source = tmp_path / "tulu.jsonl"
    source.write_text("".join(json.dumps({"id": f"t{i}", "messages": m}) + "\n" for i, m in
                              enumerate(ROWS)))  # fmt: skip
    benchmarks = tmp_path / "benchmarks"
    benchmarks.mkdir()
    shutil.copy(shared_data / "benchmarks" / "ifeval.jsonl", benchmarks / "ifeval.jsonl")
    (benchmarks / "ifbench.jsonl").write_text(json.dumps({"key": 7, "prompt": IFBENCH_LIKE}) + "\n")
    return source, benchmarks


def test_if_rl_ifbench_builds_rl_if_ifbench(lake: Lake, shared_data: Path, tmp_path: Path) -> None:
    source, benchmarks = write_sources(tmp_path, shared_data)
    lake.commit("sft_general", pl.DataFrame({"uid": ["s:1"], "problem": [SFT_PROMPT]}))
    report = build_dataset(
        lake,
        recipe_named("if_rl_ifbench"),
        sources=[str(source)],
        overrides={
            "mapping": {"problem": "messages"},
            "benchmark_dir": str(benchmarks),
            "instructions_per_prompt": [1, 10],
            "max_prompt_words": 30,
            "seed": 5,
        },
        manifests_dir=tmp_path / "manifests",
        out="rl_if_ifbench",
        write_html_report=False,
    )
    kept = pl.from_arrow(lake.read("rl_if_ifbench"))
    assert kept["uid"].to_list() == ["tulu:1", "tulu:7", "tulu:11", "tulu:12", "tulu:13"]
    drops = lake.sql(
        "SELECT uid, step, reason, detail FROM drops WHERE output_table = 'rl_if_ifbench'"
    ).fetchall()
    assert {u: (s, r) for u, s, r, _ in drops} == {
        "tulu:2": ("single_turn_prompts", "multi_turn"),
        "tulu:3": ("single_turn_prompts", "no_user_turn"),
        "tulu:4": ("decontaminate", "contaminated"),
        "tulu:5": ("decontaminate", "contaminated"),
        "tulu:6": ("exact_dedup", "exact_duplicate"),
        "tulu:8": ("near_dedup", "near_duplicate"),
        "tulu:9": ("disjoint_from_sft", "in_sft_set"),
        "tulu:10": ("attach_instructions", "too_long"),
    }
    detail = {u: json.loads(d) for u, _, _, d in drops}
    assert detail["tulu:2"]["user_turns"] == 2
    assert detail["tulu:4"]["benchmark"] == "ifeval" and detail["tulu:4"]["benchmark_id"] == "1001"
    assert detail["tulu:5"]["benchmark"] == "ifbench" and detail["tulu:5"]["benchmark_id"] == "7"
    assert detail["tulu:6"]["duplicate_of"] == "tulu:1"
    assert detail["tulu:8"]["duplicate_of"] == "tulu:7"
    assert detail["tulu:10"]["prompt_words"] == 43
    assert [(f.step, f.rows_in, f.rows_out) for f in report.manifest.funnel] == [
        ("single_turn_prompts", 13, 11),
        ("decontaminate", 11, 9),
        ("exact_dedup", 9, 8),
        ("near_dedup", 8, 7),
        ("disjoint_from_sft", 7, 6),
        ("attach_instructions", 6, 5),
        ("policy_pass_rate", 5, 5),  # skipped: no policy model
        ("difficulty", 5, 5),
    ]
    assert kept["base_problem"].to_list()[2] == "Explain how a bicycle gear works."  # system aside
    # Every kept prompt carries 1-10 IF-RLVR constraints, no two conflicting, and is an RL
    # prompt the stage's reward decides: 1 for a witness, 0 for a response that breaks one.
    for row in kept.to_dicts():
        ids, kwargs = row["instruction_id_list"], json.loads(row["kwargs"])
        assert 1 <= len(ids) <= 10 and set(ids) <= set(IFTRAIN_INSTRUCTIONS)
        assert IFTRAIN.conflicting_pairs(ids) == []
        for instruction, args in zip(ids, kwargs, strict=True):
            assert IFTRAIN_INSTRUCTIONS[instruction].describe(args) in row["problem"]
        good = IFTRAIN.witness(ids, kwargs)
        rewards = ifeval_reward(
            [row["problem"]] * 2, [good, ""], [ids] * 2, [row["kwargs"]] * 2, uid=[row["uid"]] * 2
        )
        assert rewards == [1.0, 0.0]
    assert report.manifest.params["taxonomy"] == "iftrain"


def test_iftrain_sets_of_one_to_ten_without_conflicts() -> None:
    """Over many prompts every size 1..10 occurs, no conflicting pair is ever drawn, each set
    has a witness, and every type of the taxonomy is drawn."""
    texts = [f"Write a note number {i} to a neighbour about a lost cat." for i in range(150)]
    result = attach_instructions(frame(texts), per_prompt=(1, 10), seed=3, taxonomy="iftrain")
    assert result.kept.height == 150 and result.dropped.height == 0
    sizes = Counter(len(ids) for ids in result.kept["instruction_id_list"].to_list())
    assert sorted(sizes) == list(range(1, 11))
    seen = set()
    for ids, kwargs in result.kept.select("instruction_id_list", "kwargs").iter_rows():
        assert IFTRAIN.conflicting_pairs(ids) == [] and len(set(ids)) == len(ids)
        witness = IFTRAIN.witness(ids, json.loads(kwargs))
        assert witness is not None and verify_ifeval(witness, ids, json.loads(kwargs)).passed
        seen.update(ids)
    rare = {"copy:copy", "new:copy_span_idx", "copy:copying_simple", "copy:copying_multiple"}
    assert seen | rare == set(IFTRAIN_INSTRUCTIONS)  # the copy types stand alone, so are rare
    for copy in sorted(rare):  # each is drawn, alone, when asked for
        ids, kwargs, prompt, _ = draw_instruction_set(
            random.Random(1),
            texts[0],
            per_prompt=(1, 1),
            instruction_ids=[copy],
            taxonomy="iftrain",
        )
        assert ids == [copy] and kwargs[0]["prompt_to_repeat"] == texts[0]
        assert prompt == texts[0] + "\n" + IFTRAIN_INSTRUCTIONS[copy].describe(kwargs[0])


def test_the_iftrain_conflicts() -> None:
    # the reference registry's, by example
    assert IFTRAIN.conflicts("copy:copy", "punctuation:punctuation_dot")
    assert IFTRAIN.conflicts("paragraphs:paragraphs", "paragraphs:paragraphs2")
    assert IFTRAIN.conflicts("first_word:first_word_sent", "first_word:first_word_answer")
    assert IFTRAIN.conflicts("count:counting_composition", "count:count_unique")
    # ours: a unique-word response cannot start and end with one word ...
    assert IFTRAIN.conflicts("keywords:start_end", "count:count_unique")
    assert not verify_ifeval(
        "Cats nap cats", ["keywords:start_end", "count:count_unique"], [{}, {}]
    ).passed
    # ... and the splitter reads hyphen-joined sentences as one, so each sentence cannot
    # open with a word
    assert IFTRAIN.conflicts("detectable_format:sentence_hyphens", "first_word:first_word_sent")
    both = ["detectable_format:sentence_hyphens", "first_word:first_word_sent"]
    flags = verify_ifeval("Lemon one.-Lemon two.", both, [{}, {"first_word": "lemon"}])
    assert flags.passed and flags.score == 1.0  # one "sentence" to the splitter: a hollow pass
    assert not IFTRAIN.conflicts("punctuation:punctuation_dot", "keywords:palindrome")
    assert IFTRAIN.conflicts("copy:copy", "copy:copy")  # no type twice


def test_taxonomies_are_disjoint_and_complete() -> None:
    found = taxonomies()
    assert {k: len(v) for k, v in found.items()} == {"ifeval": 25, "iftrain": 29, "ifbench": 58}


@pytest.mark.parametrize("recipe", [if_rl, if_rl_ifbench])
def test_toy_profiles_build_from_tiny_prompts_without_a_model(
    recipe, lake: Lake, tmp_path: Path
) -> None:
    report = build_dataset(
        lake, recipe, profile="toy", manifests_dir=tmp_path / "m", write_html_report=False
    )
    kept = pl.from_arrow(lake.read(recipe.NAME))
    assert kept.height == 56  # 4 templates x 14 subjects, none dropped
    assert kept["base_problem"][0].endswith(".") and "the" in kept["base_problem"][0]
    allowed = set(toy_instructions(recipe.DEFAULTS["taxonomy"]))
    for ids, kwargs in kept.select("instruction_id_list", "kwargs").iter_rows():
        assert 1 <= len(ids) <= 2 and set(ids) <= allowed
        taxonomy = TAXONOMIES[recipe.DEFAULTS["taxonomy"]]
        assert taxonomy.witness(ids, json.loads(kwargs)) is not None
    # the toy eval prompts are what the RL prompts are decontaminated against
    assert report.manifest.benchmarks[0].items == 42
    ran = [f.step for f in report.manifest.funnel if not f.skipped]
    assert ran[-1] == "attach_instructions"


def test_if_rl_ifbench_step_list_without_loading_anything() -> None:
    names = [s.name for s in recipe_steps(if_rl_ifbench)]
    assert names == [
        "single_turn_prompts",
        "decontaminate",
        "exact_dedup",
        "near_dedup",
        "disjoint_from_sft",
        "attach_instructions",
        "policy_pass_rate",
        "difficulty",
    ]
    (attach,) = [s for s in recipe_steps(if_rl_ifbench) if s.name == "attach_instructions"]
    assert attach.params["taxonomy"] == "iftrain" and attach.params["per_prompt"] == [1, 5]
    (if_attach,) = [s for s in recipe_steps(if_rl) if s.name == "attach_instructions"]
    assert if_attach.params["per_prompt"] == [1, 10]


def test_a_grpo_stage_fails_on_an_instruction_id_it_cannot_decide() -> None:
    """The stage's reward raises naming the row and the id (it used to give None to every
    rollout, which the trainer skipped: an IF-RLVR stage trained on nothing, silently)."""
    from tests.test_grpo_rewards import episodes, prompt, stage
    from training.rewards import StageRewards

    scorer = StageRewards(stage("if_verifier"))
    ids = ["punctuation:punctuation_dot", "keywords:palindrome"]
    good = prompt("Say hi.", uid="src:3", instruction_id_list=ids, kwargs="[{}, {}]")
    eps = episodes("Wow a kayak", "A kayak.", "Hi")
    scorer.score_group(good, eps)
    assert [e.reward for e in eps] == [1.0, 0.0, 0.0]
    unknown = prompt("Say hi.", uid="src:4", instruction_id_list=["keywords:rhyme"], kwargs="[{}]")
    with pytest.raises(ValueError, match=r"row 0 \(uid 'src:4'\): unknown instruction id 'key"):
        scorer.score_group(unknown, episodes("Hi", "Hello"))
