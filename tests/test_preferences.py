"""Human preference sets in their own shapes (HelpSteer3 signed scores, HelpSteer2 ratings)
built into `preference_pairs`: exact pairs kept, ties and malformed rows dropped with the
field at fault, benchmark copies and duplicate pairs removed, all recorded in the lake."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import polars as pl
import pytest

from builders import preference_pairs
from builders.runner import build_dataset, parse_overrides
from curation.preferences import (
    contexts,
    group_rated_responses,
    math_and_code,
    offtopic,
    pairs_from_ratings,
)
from lake.catalog import Lake
from lake.steps import Rows, Step, run_steps


def turns(*texts: str) -> list[dict[str, str]]:
    return [{"role": ("user", "assistant")[i % 2], "content": t} for i, t in enumerate(texts)]


def write_jsonl(path: Path, rows: list[dict | str]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def ifeval_prompt(shared_data: Path) -> str:
    first = (shared_data / "benchmarks" / "ifeval.jsonl").read_text().splitlines()[0]
    return json.loads(first)["prompt"]


def helpsteer3_rows(benchmark_prompt: str) -> list[dict | str]:
    """HelpSteer3's preference shape (domain, language, context, response1, response2,
    overall_preference, individual_preference), one case per line."""

    def row(context, r1, r2, score, domain="general", **extra):
        return {
            "domain": domain,
            "language": "english",
            "context": context,
            "response1": r1,
            "response2": r2,
            "overall_preference": score,
            "individual_preference": [{"score": score, "reasoning": "annotator note"}],
            **extra,
        }

    return [
        row(turns("Write a haiku about rain."), "Soft rain on the roof", "Rain.", -2),  # 1
        row(turns("How do I reverse a list in Python?"), "Loop.", "Use lst[::-1].", 3, "code"),
        row(turns("Why is the sky blue?"), "Rayleigh scattering.", "Because of Mie.", 0, "stem"),
        row(
            turns("Hi", "Hello! How can I help?", "Tell me a joke about cats."),
            "Cats.",
            "Why did the cat sit on the computer? To keep an eye on the mouse.",
            1,
        ),  # 4: multi-turn
        {k: v for k, v in row(turns("Name a river."), "Nile", "x", -1).items() if k != "response2"},
        row(turns("Name a mountain."), "Everest", "K2", "strong"),  # 6
        row(turns("Name a lake."), "Baikal", "Erie", 5),  # 7: out of range
        row(turns("Hello", "Hi there!"), "A", "B", 2),  # 8: ends with the assistant
        row(turns("Name an ocean."), "Pacific", "Pacific", -1),  # 9: identical responses
        row(turns(benchmark_prompt), "A summary.", "Another summary.", 2),  # 10: in IFEval
        row(turns("Write a haiku about rain."), "Soft rain on the roof", "Rain.", -2),  # 11
        '{"domain": "general", "context": [',  # 12: not JSON
        row(turns("Write a haiku about rain."), "Soft rain on the roof", "Drizzle.", -1),  # 13
    ]


def test_helpsteer3_pairs_exactly(tmp_path: Path, shared_data: Path, lake: Lake) -> None:
    source = write_jsonl(tmp_path / "hs3.jsonl", helpsteer3_rows(ifeval_prompt(shared_data)))
    params = parse_overrides(
        [f"benchmark_dir={shared_data / 'benchmarks'}", "on_error=skip"], preference_pairs.DEFAULTS
    )
    report = build_dataset(
        lake,
        preference_pairs,
        sources=[str(source)],
        overrides=params,
        manifests_dir=tmp_path,
        write_html_report=False,
    )
    assert lake.resolve("preference_pairs").kind == "preference_pairs"
    pairs = pl.from_arrow(lake.read("preference_pairs")).sort("uid")
    assert pairs["uid"].to_list() == ["hs3:1", "hs3:13", "hs3:2", "hs3:4"]
    got = {r["uid"]: r for r in pairs.iter_rows(named=True)}
    assert (got["hs3:1"]["chosen"], got["hs3:1"]["rejected"]) == ("Soft rain on the roof", "Rain.")
    assert (got["hs3:2"]["chosen"], got["hs3:2"]["rejected"]) == ("Use lst[::-1].", "Loop.")
    assert got["hs3:4"]["chosen"].startswith("Why did the cat")
    assert [got[u]["margin"] for u in ("hs3:1", "hs3:13", "hs3:2", "hs3:4")] == [2.0, 1.0, 3.0, 1.0]
    assert got["hs3:2"]["category"] == "code" and got["hs3:1"]["category"] == "general"
    assert got["hs3:4"]["prompt"] == "Tell me a joke about cats."
    assert json.loads(got["hs3:4"]["messages"]) == turns(
        "Hi", "Hello! How can I help?", "Tell me a joke about cats."
    )
    assert got["hs3:1"]["source"] == "hs3" and got["hs3:1"]["source_rows"] == ["hs3:1"]
    assert got["hs3:1"]["method"] == "signed_preference"
    meta = json.loads(got["hs3:1"]["metadata"])
    assert meta["language"] == "english" and meta["chosen_field"] == "response1"
    assert meta["individual_preference"][0]["reasoning"] == "annotator note"
    # A one-turn pair's prompt_id is the prompts id of its text: one hash for one prompt.
    assert got["hs3:1"]["prompt_id"] == got["hs3:13"]["prompt_id"] != got["hs3:2"]["prompt_id"]

    # Unreadable lines are dropped by the ingest into preference_pairs_sources.
    drops = lake.sql(
        "SELECT uid, step, reason, detail FROM drops "
        "WHERE output_table IN ('preference_pairs', 'preference_pairs_sources')"
    ).fetchall()
    why = {uid: (step, reason) for uid, step, reason, _ in drops}
    assert why == {
        "hs3:3": ("signed_preference_pairs", "tie"),
        "hs3:5": ("signed_preference_pairs", "malformed"),
        "hs3:6": ("signed_preference_pairs", "malformed"),
        "hs3:7": ("signed_preference_pairs", "malformed"),
        "hs3:8": ("signed_preference_pairs", "malformed"),
        "hs3:9": ("signed_preference_pairs", "identical_responses"),
        "hs3:10": ("decontaminate", "contaminated"),
        "hs3:11": ("exact_dedup", "exact_duplicate"),
        "hs3:12": ("ingest", "malformed"),
    }
    detail = {uid: json.loads(d) for uid, _, _, d in drops}
    assert {u: detail[u]["field"] for u in ("hs3:5", "hs3:6", "hs3:7", "hs3:8")} == {
        "hs3:5": "response2",
        "hs3:6": "overall_preference",
        "hs3:7": "overall_preference",
        "hs3:8": "context",
    }
    assert "outside -3..3" in detail["hs3:7"]["error"]
    assert "last turn is 'assistant'" in detail["hs3:8"]["error"]
    assert detail["hs3:10"]["benchmark"] == "ifeval"
    assert detail["hs3:11"]["duplicate_of"] == "hs3:1"
    assert [(f.step, f.rows_in, f.rows_out) for f in report.manifest.funnel] == [
        ("ingest", 13, 12),
        ("signed_preference_pairs", 12, 6),
        ("decontaminate", 6, 5),
        ("exact_dedup", 5, 4),
        ("near_dedup", 4, 4),
        ("pair_columns", 4, 4),
    ]
    assert report.manifest.output.rows == 4 and report.manifest_path.exists()


def helpsteer2_rows() -> list[dict]:
    """HelpSteer2's shape: one row per response, 0..4 ratings of five attributes."""

    def row(prompt, response, helpfulness, correctness=3, **extra):
        return {
            "prompt": prompt,
            "response": response,
            "helpfulness": helpfulness,
            "correctness": correctness,
            "coherence": 4,
            "complexity": 1,
            "verbosity": 2,
            **extra,
        }

    multi_turn = "Hi<extra_id_1>Assistant\nHello! What can I do?<extra_id_1>User\nRecommend a book."
    return [
        row("What is a good name for a cat?", "Whiskers.", 4, correctness=1),  # 1
        row("What is a good name for a cat?", "Dog.", 2, correctness=3),  # 2
        row("Describe Paris in one line.", "City of light.", 3),  # 3
        row("Describe Paris in one line.", "A big city in France.", 3),  # 4: tie
        row("Say hi.", "Hi!", 4),  # 5: alone
        row(multi_turn, "Read something.", 1),  # 6
        row(multi_turn, "Try 'Dune' by Frank Herbert.", 3),  # 7
        row("Name a color.", "Blue.", None),  # 8: no rating
        row("Name a color.", "Red.", 2),  # 9: its partner is malformed
        row("Give me a motto.", "Carpe diem.", 4),  # 10
        row("Give me a motto.", "Seize the day.", 4),  # 11
        row("Give me a motto.", "Whatever.", 1),  # 12
        row("Name a fruit.", "Apple.", 7),  # 13: out of range
        row("Name a fruit.", "Pear.", "high"),  # 14: not a number
    ]


def test_helpsteer2_pairs_exactly(tmp_path: Path, shared_data: Path, lake: Lake) -> None:
    source = write_jsonl(tmp_path / "hs2.jsonl", helpsteer2_rows())
    params = parse_overrides(
        [
            "format=helpsteer2",
            "mapping.problem=prompt",
            f"benchmark_dir={shared_data / 'benchmarks'}",
        ],
        preference_pairs.DEFAULTS,
    )
    report = build_dataset(
        lake,
        preference_pairs,
        sources=[str(source)],
        overrides=params,
        manifests_dir=tmp_path,
        out="hs2_pairs",
        write_html_report=False,
    )
    pairs = pl.from_arrow(lake.read("hs2_pairs"))
    got = {r["uid"]: r for r in pairs.iter_rows(named=True)}
    assert set(got) == {"hs2:1>hs2:2", "hs2:10>hs2:12", "hs2:11>hs2:12", "hs2:7>hs2:6"}
    assert (got["hs2:1>hs2:2"]["chosen"], got["hs2:1>hs2:2"]["rejected"]) == ("Whiskers.", "Dog.")
    assert {u: r["margin"] for u, r in got.items()} == {
        "hs2:1>hs2:2": 2.0,
        "hs2:10>hs2:12": 3.0,
        "hs2:11>hs2:12": 3.0,
        "hs2:7>hs2:6": 2.0,
    }
    assert got["hs2:7>hs2:6"]["prompt"] == "Recommend a book."
    assert [t["role"] for t in json.loads(got["hs2:7>hs2:6"]["messages"])] == [
        "user",
        "assistant",
        "user",
    ]
    assert got["hs2:7>hs2:6"]["prompt_uid"] == "hs2:6"
    assert got["hs2:7>hs2:6"]["source_rows"] == ["hs2:7", "hs2:6"]
    assert got["hs2:1>hs2:2"]["method"] == "attribute_rating:helpfulness"
    meta = json.loads(got["hs2:1>hs2:2"]["metadata"])
    assert (
        meta["chosen_ratings"]["correctness"] == 1 and meta["rejected_ratings"]["helpfulness"] == 2
    )

    drops = lake.sql(
        "SELECT uid, step, reason, detail FROM drops WHERE output_table = 'hs2_pairs'"
    ).fetchall()
    why = {uid: (step, reason) for uid, step, reason, _ in drops}
    assert why == {
        "hs2:2": ("group_by_prompt", "grouped"),
        "hs2:4": ("group_by_prompt", "grouped"),
        "hs2:7": ("group_by_prompt", "grouped"),
        "hs2:8": ("group_by_prompt", "malformed"),
        "hs2:11": ("group_by_prompt", "grouped"),
        "hs2:12": ("group_by_prompt", "grouped"),
        "hs2:13": ("group_by_prompt", "malformed"),
        "hs2:14": ("group_by_prompt", "malformed"),
        "hs2:3": ("rating_pairs", "tie"),
        "hs2:5": ("rating_pairs", "single_response"),
        "hs2:9": ("rating_pairs", "single_response"),
    }
    detail = {uid: json.loads(d) for uid, _, _, d in drops}
    assert detail["hs2:12"]["group_uid"] == "hs2:10"
    assert {detail[u]["field"] for u in ("hs2:8", "hs2:13", "hs2:14")} == {"helpfulness"}
    assert "outside 0..4" in detail["hs2:13"]["error"]
    assert "'high'" in detail["hs2:14"]["error"]
    stats = {f.step: f.stats for f in report.manifest.funnel}
    assert stats["rating_pairs"]["tied_pairs"] == 2  # hs2:3~hs2:4 (dropped) and hs2:10~hs2:11
    assert [(f.step, f.rows_in, f.rows_out) for f in report.manifest.funnel][:3] == [
        ("group_by_prompt", 14, 6),
        ("rating_pairs", 6, 4),
        ("decontaminate", 4, 4),
    ]


def test_the_named_rating_attribute_decides(lake: Lake) -> None:
    frame = pl.DataFrame(
        {
            "uid": ["a:1", "a:2"],
            "source": ["a", "a"],
            "source_id": ["1", "2"],
            "problem": ["What is a good name for a cat?"] * 2,
            "metadata": [
                json.dumps({"response": "Whiskers.", "helpfulness": 4, "correctness": 1}),
                json.dumps({"response": "Dog.", "helpfulness": 2, "correctness": 3}),
            ],
        }
    )
    steps = [
        Step("group", group_rated_responses, {"attribute": "correctness"}),
        Step("pairs", pairs_from_ratings, {"attribute": "correctness"}, fan_out=True),
    ]
    rows = Rows(frame, lambda: pl.DataFrame())
    run = run_steps(lake, rows, steps, out="x", kind="generic", producer="test")
    pairs = pl.from_arrow(lake.read(run.output.ref))
    assert pairs.select("uid", "chosen", "margin", "method").row(0) == (
        "a:2>a:1",
        "Dog.",
        2.0,
        "attribute_rating:correctness",
    )


def test_a_file_of_the_other_shape_is_a_clear_error(
    tmp_path: Path, shared_data: Path, lake: Lake
) -> None:
    benchmarks = shared_data / "benchmarks"
    source = write_jsonl(tmp_path / "hs2.jsonl", helpsteer2_rows()[:2])
    with pytest.raises(ValueError, match="no row has field 'response1'"):
        build_dataset(
            lake,
            preference_pairs,
            sources=[str(source)],
            overrides={"mapping": {"problem": "prompt"}, "benchmark_dir": str(benchmarks)},
            manifests_dir=tmp_path,
            write_html_report=False,
        )


def test_docstring_examples_hold() -> None:
    for module in (contexts, math_and_code, offtopic):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
