"""The build report: what it gathers from a real demo build and a hand-made lake, and its page."""

from __future__ import annotations

import json
import re

import polars as pl
import pytest
from typer.testing import CliRunner

import cli.report  # noqa: F401  (registers `cascade report` until cli.main imports it)
from builders import math_rl_v2
from builders.publish import ManifestMismatchError, gather_report, write_report
from builders.publish.evidence import diff_segments, overlap_segments, token_spans
from builders.runner import build_dataset
from cli.app import app
from cli.console import CascadeError
from curation.decontaminate.tokens import ngram_text
from curation.verify.table import verify_step
from lake import Lake, LakeError, Step
from lake.steps import run_steps


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    lake = Lake(root / "lake")  # manifests inside the lake, as `make demo` writes them
    built = build_dataset(lake, math_rl_v2, profile="demo", manifests_dir=lake.path / "manifests")
    return lake, built


def _marked(segments, mark: str) -> list[str]:
    return [s.text for s in segments if s.mark == mark]


# -- evidence pieces ----------------------------------------------------------------------------


def test_token_spans_map_normalized_tokens_back_to_the_text() -> None:
    text = "At 11:40, Zoë paid $24,\\!000 for \\dfrac{1}{2} of it."
    spans = token_spans(text)
    assert [t.text for t in spans] == ngram_text(text).split()
    assert [text[t.start : t.end] for t in spans] == [
        "At", "11", "40", "Zoë", "paid", "24,\\!000", "for", "frac", "1", "2", "of", "it",
    ]  # fmt: skip


def test_overlap_marks_the_recorded_ngram_and_other_shared_ngrams_in_both_texts() -> None:
    row = "Warm-up. Imagine the dial of a watch at 11:40 sharp; find the angle between the hands."
    item = "Imagine the dial of a watch at 11:40 sharp. Find the angle between the hands!"
    recorded = "imagine the dial of a watch at 11 40"
    row_segments, item_segments, covered = overlap_segments(row, item, recorded)
    assert _marked(row_segments, "ngram") == ["Imagine the dial of a watch at 11:40"]
    assert _marked(item_segments, "ngram") == ["Imagine the dial of a watch at 11:40"]
    # "sharp find the angle between the hands" is a shared 9-gram continuing the match
    assert "".join(s.text for s in row_segments) == row
    assert "find the angle between the hands" in " ".join(_marked(row_segments, "shared"))
    assert "Warm" not in " ".join(_marked(row_segments, "shared") + _marked(row_segments, "ngram"))
    assert covered == len(token_spans(row)) - 2  # all but "warm up"


def test_diff_marks_only_the_words_that_differ() -> None:
    left, right = diff_segments("Find the sum of 3 and 4.", "Find the total of 3 and 5.")
    assert _marked(left, "removed") == ["sum", "4."]
    assert _marked(right, "added") == ["total", "5."]
    assert "".join(s.text for s in left) == "Find the sum of 3 and 4."


# -- the demo build -----------------------------------------------------------------------------


def test_report_gathers_the_demo_builds_funnel_drops_and_evidence(demo) -> None:
    lake, built = demo
    manifest = built.manifest
    data = gather_report(lake, "math_rl_v2@1")
    assert data.manifest is not None and data.manifest.path == built.manifest_path
    given = gather_report(lake, "math_rl_v2@1", manifest, kept_samples=0, dropped_samples=0)
    assert given.manifest.path is None and given.manifest.sha256 == data.manifest.sha256
    assert data.funnel == manifest.funnel and data.input_rows == 671
    by_reason = {(s, r): n for s, r, n in data.drops_by_reason}
    assert by_reason == {(f.step, r): n for f in manifest.funnel for r, n in f.dropped.items()}
    assert data.dropped_total == manifest.drops.rows == 671 - 420

    [bench] = data.contamination
    assert (bench.name, bench.rows) == ("demo_bench", 26)
    assert sum(n for _, n in bench.top_ngrams) <= 26 and bench.top_ngrams
    assert set(data.clusters) == {"exact_dedup", "near_dedup"}
    assert sum(n * (size - 1) for size, n in data.clusters["exact_dedup"].items()) == 52

    groups = {(g.step, g.reason): g for g in data.dropped}
    contaminated = groups[("decontaminate", "contaminated")]
    assert contaminated.total == 26 and len(contaminated.samples) == 12
    for sample in contaminated.samples:
        evidence = sample.evidence
        recorded = sample.detail["ngram"]
        # the recorded n-gram is highlighted in the row and in the benchmark item it matched
        assert recorded in [ngram_text(t) for t in _marked(evidence.row, "ngram")]
        assert recorded in [ngram_text(t) for t in _marked(evidence.other, "ngram")]
        assert evidence.other_title == f"demo_bench item {sample.detail['benchmark_id']}"

    near = groups[("near_dedup", "near_duplicate")]
    sources = pl.from_arrow(lake.read("math_rl_v2_sources", columns=["uid", "problem"]))
    problem = dict(sources.iter_rows())
    for sample in near.samples:
        twin = sample.detail["duplicate_of"]
        assert sample.evidence.other_title == f"kept: {twin}"
        assert "".join(s.text for s in sample.evidence.other) == problem[twin]
        assert "".join(s.text for s in sample.evidence.row) == problem[sample.key]
        assert _marked(sample.evidence.row, "removed") or _marked(sample.evidence.other, "added")
    kept = set(pl.from_arrow(lake.read("math_rl_v2", columns=["uid"]))["uid"])
    assert len(data.kept) == 40 and {s.key for s in data.kept} <= kept


def test_report_page_is_self_contained_and_written_next_to_the_manifest(demo) -> None:
    lake, built = demo
    path = write_report(lake, "math_rl_v2")
    assert path == built.manifest_path.with_suffix(".html")
    html = path.read_text()
    assert not re.search(r"<script[^>]+src=", html)  # plotly.js is inlined, nothing fetched
    assert "cdn.plot.ly" not in html.split("</head>")[1]
    assert 3_000_000 < len(html) < 8_000_000  # plotly.js is most of it
    funnel = re.search(r'Plotly\.newPlot\(\s*"chart-funnel",\s*(\[.*?\]),\s*\{', html, re.S)
    assert funnel, "the funnel chart's script is missing"
    [trace] = json.loads(funnel.group(1))
    assert trace["type"] == "funnel" and trace["x"] == [671, 546, 520, 468, 420, 420, 420, 420, 420]
    assert trace["y"][5:] == [
        "majority_answer (skipped)",
        "weak_pass_rate (skipped)",
        "too_easy (skipped)",
        "disjoint_from_sft (skipped)",
    ]
    assert "(skipped: teacher is none)" in html  # the funnel table says why
    for chart in ("drops", "contamination", "clusters"):
        assert f'id="chart-{chart}"' in html
    assert 'id="chart-pass_rates"' not in html  # no difficulty table in the demo lake
    assert built.manifest.benchmarks[0].content_hash in html
    assert html.count('class="sample"') == 40 + sum(
        min(n, 12) for f in built.manifest.funnel for n in f.dropped.values()
    )


def test_report_cli_writes_the_file_and_bad_refs_get_one_sentence(demo, tmp_path) -> None:
    lake, built = demo
    out = tmp_path / "r.html"
    runner = CliRunner()
    result = runner.invoke(
        app, ["--lake", str(lake.path), "report", "math_rl_v2@1", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 3_000_000 and "wrote" in result.output
    missing = runner.invoke(app, ["--lake", str(lake.path), "report", "math_rl_v2@7"])
    assert isinstance(missing.exception, CascadeError)
    assert str(missing.exception) == "table 'math_rl_v2' has no version 7 (versions 1..1)"
    nowhere = runner.invoke(app, ["--lake", str(tmp_path / "none"), "report", "x"])
    assert isinstance(nowhere.exception, CascadeError)
    assert "no lake at" in str(nowhere.exception)
    assert not (tmp_path / "none").exists()  # reading never creates a lake


def test_a_manifest_of_another_version_is_refused(demo, tmp_path) -> None:
    lake, built = demo
    other = built.manifest.model_copy(update={"output": built.manifest.output.model_copy(
        update={"ref": "math_rl_v2@2"})})  # fmt: skip
    with pytest.raises(
        ManifestMismatchError,
        match=r"describes math_rl_v2@2 \(content_hash \w+\), not math_rl_v2@1",
    ):
        gather_report(lake, "math_rl_v2@1", other)
    with pytest.raises(LakeError, match="no table 'nope'"):
        gather_report(lake, "nope")


# -- what the demo lacks: verification drops, difficulty and generations tables ----------------


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A lake with a verified table (two wrong answers dropped), a difficulty table and a
    generations-shaped table for its prompts, and a difficulty table of other prompts."""
    lake = Lake(tmp_path_factory.mktemp("measured") / "lake")
    responses = pl.DataFrame(
        {
            "id": ["g1", "g2", "g3", "g4"],
            "prompt_id": ["p1", "p1", "p2", "p3"],
            "model": ["teacher"] * 4,
            "problem": ["What is 6+7?", "What is 6+7?", "What is 2*3? <b>x</b>", "Compute 1+1."],
            "response": [
                "<think>6+7</think> The sum is \\boxed{13}.",
                "<think>6+6?</think> \\boxed{12}",
                "It is \\boxed{6}",
                "I am not sure.",
            ],
            "answer": ["13", "13", "6", "2"],
        }
    )
    lake.commit("responses", responses)
    run_steps(
        lake, "responses", [Step("verify", verify_step, {"kind": "math"})],
        out="verified", producer="test",
    )  # fmt: skip
    difficulty = pl.DataFrame(
        {
            "prompt_id": ["g1", "g3", "g1", "g3"],
            "model": ["small", "small", "large", "large"],
            "k": [8, 8, 8, 8],
            "correct": [2, 8, 6, 8],
            "pass_rate": [0.25, 1.0, 0.75, 1.0],
            "mean_tokens": [120.0, 80.0, 300.0, 90.0],
            "max_tokens": [200, 100, 400, 120],
            "truncated_share": [0.0, 0.0, 0.125, 0.0],
        }
    )
    lake.commit("verified_difficulty", difficulty)
    lake.commit("other_difficulty", difficulty.with_columns(pl.lit("zz").alias("prompt_id")))
    return lake


def test_verification_drops_show_the_extracted_answer_and_the_reference(measured) -> None:
    data = gather_report(measured, "verified")
    assert data.manifest is None and "rebuilt from the drops table" in data.funnel_note
    assert [(f.step, f.rows_in, f.rows_out) for f in data.funnel] == [("verify", 4, 2)]
    [group] = data.dropped
    facts = {s.key: s.evidence.facts for s in group.samples}
    assert facts["g2"]["extracted answer"] == "12" and facts["g2"]["reference"] == "13"
    assert facts["g2"]["verdict"] == "answer '12' != reference '13'"
    assert facts["g4"]["extracted answer"] == "(none)" and facts["g4"]["reference"] == "2"
    assert {s.evidence.kind for s in group.samples} == {"verification"}


def test_pass_rates_and_lengths_come_from_tables_about_the_datasets_prompts(measured) -> None:
    data = gather_report(measured, "verified")
    assert data.measured_from == ["verified_difficulty@1"]  # other_difficulty has no overlap
    assert sorted(data.pass_rates) == [
        ("large", 0.75, 1), ("large", 1.0, 1), ("small", 0.25, 1), ("small", 1.0, 1),
    ]  # fmt: skip
    assert data.length_label == "mean response tokens per prompt"
    width = data.length_width
    assert sorted(data.lengths) == sorted(
        [("small", (120 // width) * width, 1), ("small", (80 // width) * width, 1),
         ("large", (300 // width) * width, 1), ("large", (90 // width) * width, 1)]
    )  # fmt: skip
    html = write_report(measured, "verified", measured.path / "r.html").read_text()
    assert 'id="chart-pass_rates"' in html and 'id="chart-lengths"' in html
    assert "No dataset manifest was found" in html
    assert "What is 2*3? &lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html  # escaped
