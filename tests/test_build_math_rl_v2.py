"""End to end: `cascade build dataset math_rl_v2 --profile demo` catches every planted case."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from builders import math_rl_v2
from builders.runner import BuildError, build_dataset, parse_overrides
from builders.worlds.demo_corpus import FILTER_CASES
from lake.catalog import Lake


@pytest.fixture(scope="module")
def demo_build(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    lake = Lake(root / "lake")
    report = build_dataset(lake, math_rl_v2, profile="demo", manifests_dir=root / "manifests")
    return lake, report


def _rows(lake: Lake) -> pl.DataFrame:
    """Every source row with its planted label, whether it was kept, and its drop."""
    sources = pl.from_arrow(lake.read("math_rl_v2_sources")).with_columns(
        pl.col("metadata").str.json_path_match("$.demo_case").alias("case"),
        pl.col("metadata").str.json_path_match("$.demo_of").alias("of"),
    )
    kept = pl.from_arrow(lake.read("math_rl_v2", columns=["uid"])).with_columns(
        pl.lit(True).alias("kept")
    )
    drops = pl.from_arrow(
        lake.sql(
            "SELECT uid, step, reason, detail FROM drops "
            "WHERE output_table = 'math_rl_v2' AND output_version = 1"
        ).to_arrow_table()
    )
    return sources.join(kept, on="uid", how="left").join(drops, on="uid", how="left")


def test_every_planted_case_is_caught_and_no_clean_row_dropped(demo_build) -> None:
    lake, _ = demo_build
    rows = _rows(lake)
    assert rows.height == lake.resolve("math_rl_v2_sources").rows  # one drop per row at most
    for case in ("clean", "sibling"):
        part = rows.filter(pl.col("case") == case)
        assert part.height > 0
        assert part["kept"].fill_null(False).all(), part.filter(pl.col("kept").is_null())
    for case in FILTER_CASES:
        part = rows.filter(pl.col("case") == case)
        assert part.height > 0
        assert part["kept"].is_null().all()
        assert set(part["reason"]) == {case}, part.select("problem", "reason").head()
    contaminated = rows.filter(pl.col("case").str.starts_with("contaminated_"))
    assert contaminated.height == 26
    assert set(contaminated["reason"]) == {"contaminated"}
    matched = contaminated["detail"].str.json_path_match("$.benchmark_id")
    assert (matched == contaminated["of"]).all()
    uids = dict(zip(rows["source_id"], rows["uid"], strict=True))
    dups = rows.filter(pl.col("case").is_in(["exact_dup", "near_dup"]))
    assert dups.height == 100
    assert set(dups["reason"]) <= {"exact_duplicate", "near_duplicate"}
    duplicate_of = dups["detail"].str.json_path_match("$.duplicate_of").to_list()
    assert duplicate_of == [uids[o] for o in dups["of"]]  # points at the planted original
    assert (
        lake.resolve("math_rl_v2").rows
        == rows.filter(pl.col("case").is_in(["clean", "sibling"])).height
    )


def test_manifest_records_funnel_hashes_and_benchmarks(demo_build) -> None:
    lake, report = demo_build
    manifest = json.loads(Path(report.manifest_path).read_text())
    assert Path(report.manifest_path).name == f"v{manifest['version']}.json"
    out = lake.resolve(manifest["output"]["ref"])
    assert manifest["output"]["content_hash"] == out.content_hash
    assert manifest["inputs"][0]["ref"] == out.parents[0]
    assert [s["step"] for s in manifest["funnel"]] == [
        "rule_filters",
        "decontaminate",
        "exact_dedup",
        "near_dedup",
        "majority_answer",
        "weak_pass_rate",
        "too_easy",
        "disjoint_from_sft",
    ]
    # the demo has no models and no SFT sets: those steps show as skipped, with why
    assert {s["step"]: s["skipped"] for s in manifest["funnel"][4:]} == {
        "majority_answer": "teacher is none",
        "weak_pass_rate": "weak is none",
        "too_easy": "weak is none",
        "disjoint_from_sft": "sft_datasets is empty",
    }
    assert all(s["skipped"] is None for s in manifest["funnel"][:4])
    (source,) = manifest["sources"]
    on_disk = hashlib.sha256(Path(source["path"]).read_bytes()).hexdigest()
    assert source["content_hash"] == f"sha256:{on_disk}" and source["version"] is None
    for a, b in zip(manifest["funnel"], manifest["funnel"][1:], strict=False):
        assert a["rows_out"] == b["rows_in"]
        assert a["rows_in"] - a["rows_out"] == sum(a["dropped"].values())
    assert manifest["funnel"][-1]["rows_out"] == out.rows
    assert [b["name"] for b in manifest["benchmarks"]] == ["demo_bench"]
    assert len(manifest["benchmarks"][0]["content_hash"]) == 64
    dropped = lake.sql("SELECT count(*) FROM drops").fetchall()[0][0]
    assert dropped == sum(sum(s["dropped"].values()) for s in manifest["funnel"])


def test_one_where_answers_why_a_row_is_not_in_a_version(demo_build) -> None:
    lake, report = demo_build
    dropped = lake.sql(
        "SELECT count(*), count(DISTINCT uid), min(build_id) = max(build_id) FROM drops "
        "WHERE output_table = 'math_rl_v2' AND output_version = 1"
    ).fetchall()[0]
    sources = lake.resolve("math_rl_v2_sources").rows
    assert dropped[0] == dropped[1] == sources - lake.resolve("math_rl_v2").rows
    assert dropped[2] is True
    assert report.manifest.build_id == lake.resolve("math_rl_v2").build_id
    # The output and its drops committed together: one snapshot.
    assert lake.resolve("drops").snapshot_id == lake.resolve("math_rl_v2").snapshot_id


def test_rebuild_is_deterministic_and_a_new_version(tmp_path: Path) -> None:
    lake = Lake(tmp_path / "lake")
    first = build_dataset(lake, math_rl_v2, profile="demo", manifests_dir=tmp_path / "m")
    second = build_dataset(lake, math_rl_v2, profile="demo", manifests_dir=tmp_path / "m")
    assert (first.manifest.version, second.manifest.version) == (1, 2)
    assert first.manifest.output.content_hash == second.manifest.output.content_hash
    assert (tmp_path / "m/datasets/math_rl_v2/v2.json").exists()


def test_the_same_build_in_two_lakes_has_the_same_hashes(tmp_path: Path) -> None:
    builds = [
        build_dataset(
            Lake(tmp_path / d / "lake"),
            math_rl_v2,
            profile="demo",
            manifests_dir=tmp_path / d / "manifests",
        )
        for d in ("here", "elsewhere")
    ]
    here, elsewhere = (b.manifest for b in builds)
    assert here.output.content_hash == elsewhere.output.content_hash
    assert here.inputs[0].content_hash == elsewhere.inputs[0].content_hash
    assert [s.content_hash for s in here.sources] == [s.content_hash for s in elsewhere.sources]
    assert here.sources[0].path != elsewhere.sources[0].path

    # a lake table as the source: the manifest pins the version it read and its hash
    lake = Lake(tmp_path / "here" / "lake")
    sources = lake.resolve("math_rl_v2_sources@1")
    again = build_dataset(
        lake,
        math_rl_v2,
        sources=["math_rl_v2_sources@1"],
        overrides={
            "teacher": None,
            "weak": None,
            "sft_datasets": [],
            "benchmarks": here.params["benchmarks"],
        },
        manifests_dir=tmp_path / "here" / "manifests",
        out="math_rl_v2_again",
    ).manifest
    (pin,) = again.sources
    assert (pin.version, pin.content_hash) == ("math_rl_v2_sources@1", sources.content_hash)
    assert again.output.content_hash == here.output.content_hash


def test_overrides_are_typed_and_checked() -> None:
    defaults = {"ngram": 9, "decontam_rule": "x", "rules": ["a"], "flag": False, "t": 0.7}
    got = parse_overrides(["ngram=13", "rules=a,b", "flag=true", "t=0.8"], defaults)
    assert got == {"ngram": 13, "rules": ["a", "b"], "flag": True, "t": 0.8}
    with pytest.raises(BuildError, match="unknown parameter 'nope'"):
        parse_overrides(["nope=1"], defaults)
    with pytest.raises(BuildError, match="expected a int"):
        parse_overrides(["ngram=nine"], defaults)


def test_cli_build_prints_the_funnel_and_sql_answers(tmp_path: Path) -> None:
    from cli.main import command_app

    app = command_app()
    runner = CliRunner()
    lake = str(tmp_path / "lake")
    args = ["--lake", lake, "build", "dataset", "math_rl_v2", "--profile", "demo"]
    result = runner.invoke(app, [*args, "--manifests", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    for word in ("rule_filters", "decontaminate", "near_dedup", "contaminated", "published"):
        assert word in result.output
    result = runner.invoke(
        app,
        [
            "--lake",
            lake,
            "sql",
            "select reason, count(*) n from drops group by 1",
            "--format",
            "csv",
        ],
    )
    assert result.exit_code == 0, result.output
    counts = dict(line.split(",") for line in result.output.strip().splitlines()[1:])
    assert counts["contaminated"] == "26" and counts["proof"] == "20"
    missing = runner.invoke(app, ["--lake", lake, "build", "dataset", "math_rl_v2"])
    assert missing.exit_code != 0


def test_every_recipe_lists_and_shows_its_steps() -> None:
    from builders.recipes import RECIPES
    from cli.main import command_app

    app = command_app()
    runner = CliRunner()
    listed = runner.invoke(app, ["build", "list"])
    assert listed.exit_code == 0
    for name in RECIPES:
        assert name in listed.output
        shown = runner.invoke(app, ["build", "show", name])
        assert shown.exit_code == 0, (name, shown.output, shown.exception)
        assert "parameters" in shown.output and "1. " in shown.output
